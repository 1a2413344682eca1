package csf

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// stepPath plays a flow and its CRF on a virtual clock for the cost rule: sources at a gap, one
// LOSS_REPORT per SRTT with the interval's loss drawn from a seeded binomial, PARAM_ACK for every
// PARAM_UPDATE. It records the m in force after each interval.
type stepPath struct {
	t    *testing.T
	s    *Sender
	now  time.Duration
	next psn.PSN
	rng  *rand.Rand
	seed uint64
	srtt time.Duration
}

func newStepPath(t *testing.T, seed uint64, opts ...Option) *stepPath {
	srtt := 20 * time.Millisecond
	s := newSender(t, append([]Option{WithRule(policy.RuleCost), WithInitialRTT(srtt), WithConfig(wire.SchemeCauchy, 32, 0, 0)}, opts...)...)
	now := establishRTT(t, s, srtt, 3)
	drain(s)
	return &stepPath{t: t, s: s, now: now, next: 0x100, rng: rand.New(rand.NewPCG(seed, 1)), seed: seed, srtt: srtt}
}

// interval sends an SRTT of sources at gap and answers with a LOSS_REPORT at loss.
func (p *stepPath) interval(gap time.Duration, loss float64) int {
	end := p.now + p.srtt
	var n uint32
	for ; p.now < end; p.now += gap {
		p.s.Observe(p.now, packet(p.next, 64))
		p.next = p.next.Add(1)
		n++
	}
	lost := uint32(0)
	for range n {
		if p.rng.Float64() < loss {
			lost++
		}
	}
	b, _ := (&wire.LossReport{FlowID: 3, IntervalUS: uint32(p.srtt / time.Microsecond), Expected: n, Received: n - lost}).Append(nil)
	p.s.Handle(p.now, testCRF, b)
	for _, m := range drain(p.s) {
		if pu, ok := m.(*wire.ParamUpdate); ok {
			b, _ := (&wire.ParamAck{FlowID: 3, ConfigID: pu.ConfigID}).Append(nil)
			p.s.Handle(p.now, testCRF, b)
		}
	}
	p.s.Observe(p.now, packet(p.next, 64)) // a block opens under the configuration acknowledged
	p.next = p.next.Add(1)
	drain(p.s)
	return p.s.M()
}

// run plays intervals at (gap, loss) and returns the m after each.
func (p *stepPath) run(intervals int, gap time.Duration, loss float64) []int {
	ms := make([]int, intervals)
	for i := range ms {
		ms[i] = p.interval(gap, loss)
	}
	return ms
}

// settles returns the first interval from which m stays at want to the end, or -1.
func settles(ms []int, want int) int {
	at := -1
	for i, m := range ms {
		switch {
		case m != want:
			at = -1
		case at < 0:
			at = i
		}
	}
	return at
}

// The cost rule follows a step of the loss (1e-4 to 1e-2 and back) and of the rate in the middle
// of a flow (P12): m comes within one of its new choice in a few SRTT when the loss or the rate
// rises (as far as the latest intervals show the loss with confidence), falls once the rule has
// wanted less for lowerHold, and then holds at the rule's choice for the estimate; on a steady
// path the PARAM_UPDATEs per minute stay at most 2 with a few hundred packets per SRTT, where the
// draft's rule sends 34 to 236 (one loss then moves its estimate across several choices).
func TestCostRuleFollowsLossAndRateStepsWithoutChurn(t *testing.T) {
	const seed = 42
	slow, fast := 64*time.Microsecond, 640*time.Nanosecond // one symbol at ~500 Mbit/s and ~50 Gbit/s
	round := policy.RoundCost(20 * time.Millisecond)
	want := func(loss float64, gap time.Duration) int {
		return policy.CostM(32, policy.Path{Loss: loss, Burst: 1, Round: round, Symbol: gap, MaxM: 16})
	}
	if want(1e-3, slow) >= want(1e-3, fast) || want(1e-2, slow) == 0 || want(1e-4, slow) != 0 {
		t.Fatalf("the steps change nothing: m %d at 1e-3 and 500 Mbit/s, %d at 50 Gbit/s, %d at 1e-2, %d at 1e-4",
			want(1e-3, slow), want(1e-3, fast), want(1e-2, slow), want(1e-4, slow))
	}
	p := newStepPath(t, seed)
	p.run(50, slow, 1e-4)
	for _, st := range []struct {
		name   string
		n      int
		gap    time.Duration
		loss   float64
		within int // SRTTs to come within one of the new choice
	}{
		{"step to 1e-2", 50, slow, 1e-2, 8},
		{"back to 1e-4", 140, slow, 1e-4, 40 + int(lowerHold(p.srtt)/p.srtt)},
		{"1e-3 at 500 Mbit/s", 200, slow, 1e-3, 200},
		{"rate step to 50 Gbit/s", 30, fast, 1e-3, 6},
	} {
		before := p.s.Stats().ParamUpdateSent
		ms := p.run(st.n, st.gap, st.loss)
		w := want(st.loss, st.gap)
		reach := slices.IndexFunc(ms, func(m int) bool { return m >= w-1 && m <= w+1 })
		ups := p.s.Stats().ParamUpdateSent - before
		path := p.s.CostPath()
		last := ms[len(ms)-1]
		// The m in force saves less than costGain against the rule's m at the estimate.
		best := policy.CostM(32, path)
		lo, hi := best, best
		if cur, b := policy.BlockCost(32, last, path), policy.BlockCost(32, best, path); cur-b < costGain*cur {
			lo, hi = min(best, last), max(best, last)
		}
		t.Logf("%s: m %v (the rule's m at %g: %d), within one after %d SRTT, %d PARAM_UPDATEs, estimate %.3g, confident bound %.3g", st.name, ms, st.loss, w,
			reach+1, ups, p.s.est.P(), p.s.evidence.LowerBound())
		if reach < 0 || reach >= st.within {
			t.Fatalf("seed %d: %s: m not within one of %d after %d SRTT: %v", seed, st.name, w, st.within, ms)
		}
		// Above the rule's choice only while a fall waits out its hold.
		if last > hi && p.s.lowering && p.now-p.s.lowerSince < lowerHold(p.srtt) {
			hi = last
		}
		if last < lo || last > hi {
			t.Fatalf("seed %d: %s: m %v does not hold at the rule's choice for the estimate (%d..%d)", seed, st.name, ms, lo, hi)
		}
		if ups > uint64(max(4, st.n/10)) {
			t.Fatalf("seed %d: %s: %d PARAM_UPDATEs", seed, st.name, ups)
		}
	}

	// A steady path for one virtual minute: PARAM_UPDATEs per minute, against the draft's rule.
	for _, c := range []struct {
		gap  time.Duration
		loss float64
	}{{slow, 1e-2}, {slow, 1e-3}, {slow, 1e-4}, {10 * fast, 1e-3}} {
		count := func(r policy.Rule) uint64 {
			q := newStepPath(t, seed, WithRule(r))
			q.run(50, c.gap, c.loss) // settle
			before := q.s.Stats().ParamUpdateSent
			q.run(int(time.Minute/q.srtt), c.gap, c.loss)
			return q.s.Stats().ParamUpdateSent - before
		}
		cost, draft := count(policy.RuleCost), uint64(0)
		if c.gap == slow {
			draft = count(policy.RuleDraft)
		}
		t.Logf("steady at %g, gap %v: %d PARAM_UPDATEs in a minute (the draft's rule: %d)", c.loss, c.gap, cost, draft)
		if cost > 2 {
			t.Errorf("seed %d: steady at %g, gap %v: %d PARAM_UPDATEs in a minute (draft %d)", seed, c.loss, c.gap, cost, draft)
		}
	}
}

// Under the cost rule a WRITE whose RETH gives its length gets the plan of P9: the message's blocks
// at the plan's k, repair only on the blocks that end within its critical tail (the last R/S
// packets), none on the others; the timeline records the configuration and the plan (P11).
func TestCostRuleRepairsOnlyTheMessageTail(t *testing.T) {
	s := newSender(t, WithRule(policy.RuleCost), WithConfig(wire.SchemeCauchy, 32, 0, 0), WithInitialRTT(20*time.Millisecond),
		WithPathRate(500e6, true), WithInitialLoss(0.01))
	now := establishRTT(t, s, 20*time.Millisecond, 3)
	drain(s)
	const n = 4096 // 4 MiB at the RDMA MTU of 1024
	pl := policy.PlanMessage(n, s.CostPath())
	if pl.TailM == 0 || pl.TailPackets >= n/2 || pl.K != 32 {
		t.Fatalf("plan %+v: want repair on a tail shorter than half the message, k 32", pl)
	}
	now += time.Millisecond
	start := now
	s.Observe(now, writeFirst(0x100, n*1024))
	for i := 1; i < n; i++ {
		now += 17 * time.Microsecond
		s.Observe(now, packet(psn.PSN(0x100+i), 1024))
	}
	now += time.Millisecond
	s.Tick(now)
	tail := psn.PSN(0x100 + n - pl.TailPackets)
	per := map[psn.PSN]int{}
	for _, r := range repairs(drain(s)) {
		per[r.BlockStartPSN]++
	}
	for b := psn.PSN(0x100); b.Before(psn.PSN(0x100 + n)); b = b.Add(32) {
		want := 0
		if !b.Add(31).Before(tail) {
			want = pl.TailM
		}
		if per[b] != want {
			t.Fatalf("block %v (tail from %v): %d repair symbols, want %d (plan %+v)", b, tail, per[b], want, pl)
		}
	}
	if st := s.Stats(); st.MessagesPlanned != 1 || st.ParamUpdateSent != 1 {
		t.Fatalf("stats %+v", st)
	}
	km := s.KMTimeline()
	if len(km) != 2 || km[0].K != 32 || km[0].M != 0 || km[0].TailM != 0 || km[1].MessageK != pl.K || km[1].TailM != pl.TailM || km[1].AtS != start.Seconds() {
		t.Fatalf("timeline %+v, want the configuration and then the plan %+v", km, pl)
	}
}
