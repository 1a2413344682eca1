package altmark

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/reporter"
	"github.com/crem-project/crem/wire"
)

var flowA = reporter.FlowKey{Src: netip.MustParseAddr("10.0.1.5"), Dst: netip.MustParseAddr("10.0.9.7"), FlowLabel: 0x123}

const ms = time.Millisecond

func newEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// segment runs packets through a measured segment in virtual time: packet i enters at
// i*gap and leaves delay(i) later unless lost(i); the engine is ticked at every event and at
// its deadlines, so what comes out is what a driver would see.
type segment struct {
	t    *testing.T
	e    *Engine
	got  []Measurement
	now  time.Duration
	pend []leaving
}

type leaving struct {
	at, entered time.Duration
	mark        uint64
	key         reporter.FlowKey
}

func (s *segment) advance(to time.Duration) {
	for {
		// The next event: a leaving packet or the engine's deadline, whichever is first.
		next, ok := s.e.NextDeadline()
		li := -1
		for i, l := range s.pend {
			if l.at <= to && (li < 0 || l.at < s.pend[li].at) {
				li = i
			}
		}
		switch {
		case li >= 0 && (!ok || s.pend[li].at <= next):
			l := s.pend[li]
			s.pend = append(s.pend[:li], s.pend[li+1:]...)
			s.now = l.at
			s.e.Leave(l.at, l.key, l.mark, l.entered)
		case ok && next <= to:
			s.now = next
			s.e.Tick(next)
		default:
			s.now = to
			s.e.Drain(func(m Measurement) { s.got = append(s.got, m) })
			return
		}
		s.e.Drain(func(m Measurement) { s.got = append(s.got, m) })
	}
}

func (s *segment) send(at time.Duration, key reporter.FlowKey, delay time.Duration, lost bool) {
	s.advance(at)
	mark, ok := s.e.Enter(at, key)
	if !ok {
		return
	}
	if !lost {
		s.pend = append(s.pend, leaving{at: at + delay, entered: at, mark: mark, key: key})
	}
}

// TestLostCountPerPeriodRFC9341: with scripted loss, each settled period reports exactly the
// packets lost in it (MP1 - MP2), as method 1 hop entries: MP1 with Lost Count 0, MP2 with the
// count, both with the period's number; periods without loss or delay change stay quiet.
func TestLostCountPerPeriodRFC9341(t *testing.T) {
	s := &segment{t: t, e: newEngine(t, Config{Period: 10 * ms})}
	lost := map[int]bool{3: true, 15: true, 16: true, 17: true, 45: true}
	for i := range 60 {
		s.send(time.Duration(i)*ms, flowA, 2*ms, lost[i])
	}
	s.advance(time.Second)
	want := map[uint32]uint32{0: 1, 1: 3, 4: 1}
	if len(s.got) != len(want) {
		t.Fatalf("%d measurements reported, want %d: %+v", len(s.got), len(want), s.got)
	}
	for _, m := range s.got {
		if want[m.Period] != m.Lost || m.Entered != 10 || m.Left != 10-uint64(m.Lost) {
			t.Errorf("period %d: lost %d of %d (left %d), want %d", m.Period, m.Lost, m.Entered, m.Left, want[m.Period])
		}
		if m.MeanDelay != 2*ms || m.HasChange && m.DelayChange != 0 {
			t.Errorf("period %d: mean delay %v change %v", m.Period, m.MeanDelay, m.DelayChange)
		}
		h := m.Hops([2]uint32{7, 8})
		if len(h) != 2 || h[0].NodeID != 7 || h[0].LostCount != 0 || h[1].NodeID != 8 || h[1].LostCount != m.Lost ||
			h[0].MarkingPeriodNumber != m.Period || h[1].MarkingPeriodNumber != m.Period || len(h[1].DroppedPSNs) != 0 ||
			h[1].Cause != wire.CauseUnknown {
			t.Errorf("hop entries %+v", h)
		}
	}
	st := s.e.Stats()
	if st.Periods != 6 || st.PeriodsWithLoss != 3 || st.Lost != 5 || st.Reported != 3 || st.Entered != 60 || st.Left != 55 || st.Late != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestReadInTheMiddleOfTheNextPeriodRFC9341: a period is read only once it is stable, T/2
// after its end by default (Settle when longer), never earlier.
func TestReadInTheMiddleOfTheNextPeriodRFC9341(t *testing.T) {
	e := newEngine(t, Config{Period: 10 * ms})
	e.Enter(3*ms, flowA)
	if d, ok := e.NextDeadline(); !ok || d != 15*ms {
		t.Fatalf("first read due at %v (%v), want 15ms", d, ok)
	}
	e = newEngine(t, Config{Period: 10 * ms, Settle: 25 * ms})
	e.Enter(3*ms, flowA)
	e.Tick(34 * ms)
	if e.Stats().Periods != 0 {
		t.Fatal("period read before it settled")
	}
	if d, _ := e.NextDeadline(); d != 35*ms {
		t.Fatalf("read due at %v, want 35ms", d)
	}
	e.Tick(35 * ms)
	var got []Measurement
	e.Drain(func(m Measurement) { got = append(got, m) })
	if e.Stats().Periods != 1 || len(got) != 1 || got[0].Lost != 1 {
		t.Fatalf("after settling: %+v, %+v", e.Stats(), got)
	}
	// A packet that leaves after its period was read is late (and was counted lost).
	e.Leave(36*ms, flowA, 0, 3*ms)
	if e.Stats().Late != 1 {
		t.Fatalf("late packet not counted: %+v", e.Stats())
	}
}

// TestDelayChangeSignC10: Queue Delay Change is the mean delay of the period against the
// previous one: positive while a queue builds, negative when it drains; periods whose change is
// below the threshold are not reported.
func TestDelayChangeSignC10(t *testing.T) {
	s := &segment{t: t, e: newEngine(t, Config{Period: 10 * ms, Settle: 20 * ms})}
	delays := []time.Duration{ms, ms, 3 * ms, 6 * ms, 6*ms + 200*time.Microsecond, ms}
	for p, d := range delays {
		for i := range 10 {
			s.send(time.Duration(p*10+i)*ms, flowA, d, false)
		}
	}
	s.advance(time.Second)
	want := map[uint32]int32{2: 2000, 3: 3000, 5: -5200}
	if len(s.got) != len(want) {
		t.Fatalf("reported %+v, want periods 2, 3 and 5", s.got)
	}
	for _, m := range s.got {
		h := m.Hops([2]uint32{1, 2})
		if h[1].QueueDelayChangeUS != want[m.Period] || h[1].LostCount != 0 || h[0].QueueDelayChangeUS != 0 {
			t.Errorf("period %d: change %d us, want %d", m.Period, h[1].QueueDelayChangeUS, want[m.Period])
		}
	}
	// With a negative threshold, only loss is reported.
	s = &segment{t: t, e: newEngine(t, Config{Period: 10 * ms, Settle: 20 * ms, DelayThreshold: -1})}
	for p, d := range delays {
		for i := range 10 {
			s.send(time.Duration(p*10+i)*ms, flowA, d, false)
		}
	}
	s.advance(time.Second)
	if len(s.got) != 0 {
		t.Fatalf("reported %+v without loss", s.got)
	}
}

// TestFlowsExpire: a flow quiet for IdlePeriods periods is forgotten; a new packet starts it
// afresh (no delay change against its old life).
func TestFlowsExpire(t *testing.T) {
	e := newEngine(t, Config{Period: 10 * ms, IdlePeriods: 3})
	m, _ := e.Enter(0, flowA)
	e.Leave(ms, flowA, m, 0)
	e.Tick(15 * ms)
	if st := e.Stats(); st.Flows != 1 || st.Periods != 1 {
		t.Fatalf("stats %+v", st)
	}
	if d, ok := e.NextDeadline(); !ok || d != 40*ms {
		t.Fatalf("expiry due at %v (%v), want 40ms", d, ok)
	}
	e.Tick(39 * ms)
	if e.Stats().Flows != 1 {
		t.Fatal("expired early")
	}
	e.Tick(40 * ms)
	if st := e.Stats(); st.Flows != 0 || st.FlowsExpired != 1 {
		t.Fatalf("not expired: %+v", st)
	}
	if _, ok := e.NextDeadline(); ok {
		t.Fatal("a deadline with nothing to do")
	}
}

// TestFlowFloodBounded: a flood of new flows leaves memory bounded: at most MaxFlows are
// measured, the rest counted; once the measured ones expire, new flows are measured again.
func TestFlowFloodBounded(t *testing.T) {
	e := newEngine(t, Config{Period: 10 * ms, MaxFlows: 64})
	for i := range 100000 {
		k := flowA
		k.FlowLabel = uint32(i)
		k.Src = netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		e.Enter(time.Duration(i)*time.Nanosecond, k)
	}
	if st := e.Stats(); st.Flows != 64 || st.FlowsOverflow != 100000-64 || st.Entered != 64 || len(e.flows) != 64 {
		t.Fatalf("stats %+v, %d flows held", st, len(e.flows))
	}
	for now := time.Duration(0); now <= time.Second; now += 5 * ms {
		e.Tick(now)
	}
	if st := e.Stats(); st.Flows != 0 || st.FlowsExpired != 64 || st.Lost != 64 {
		t.Fatalf("after the flood: %+v", st)
	}
	if _, ok := e.Enter(time.Second, flowA); !ok {
		t.Fatal("a new flow refused once the table emptied")
	}
}

// TestFlushReadsEverything: Flush reads every period at once (nothing is left in the segment
// when a driver stops) and forgets every flow.
func TestFlushReadsEverything(t *testing.T) {
	e := newEngine(t, Config{Period: 10 * ms})
	m, _ := e.Enter(0, flowA)
	e.Leave(ms, flowA, m, 0)
	e.Enter(12*ms, flowA)
	e.Flush(13 * ms)
	var got []Measurement
	e.Drain(func(m Measurement) { got = append(got, m) })
	if st := e.Stats(); st.Periods != 2 || st.Flows != 0 || len(got) != 1 || got[0].Period != 1 || got[0].Lost != 1 {
		t.Fatalf("stats %+v, reported %+v", st, got)
	}
}

// TestConfigErrors: a period is required; negative bounds are refused.
func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{{}, {Period: -ms}, {Period: ms, Settle: -1}, {Period: ms, MaxFlows: -1}, {Period: time.Nanosecond, Settle: time.Second}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}

// TestLostCountsExactUnderRandomTrafficRFC9341: for random traffic (several flows, random
// gaps, delays up to the settle time, reordering within it, random loss), every period of
// every flow reports exactly the packets lost in it, and nothing is late.
func TestLostCountsExactUnderRandomTrafficRFC9341(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 99))
		period := time.Duration(1+rng.IntN(20)) * ms
		settle := period/2 + time.Duration(rng.IntN(int(3*period)))
		s := &segment{t: t, e: newEngine(t, Config{Period: period, Settle: settle, DelayThreshold: -1})}
		type pk struct {
			key  reporter.FlowKey
			mark uint64
		}
		want := map[pk]uint32{}
		now := time.Duration(0)
		for range 2000 {
			now += time.Duration(rng.IntN(int(period / 4)))
			k := flowA
			k.FlowLabel = uint32(rng.IntN(3))
			lost := rng.Float64() < 0.05
			if lost {
				want[pk{k, s.e.Mark(now)}]++
			}
			s.send(now, k, time.Duration(rng.Int64N(int64(settle))), lost)
		}
		s.advance(now + 10*settle + 10*period)
		got := map[pk]uint32{}
		for _, m := range s.got {
			got[pk{m.Key, uint64(m.Period)}] += m.Lost
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("seed %d (T %v, settle %v): lost per flow and period %v, want %v", seed, period, settle, got, want)
		}
		if st := s.e.Stats(); st.Late != 0 || st.Excess != 0 || st.Flows != 0 {
			t.Fatalf("seed %d: %+v", seed, st)
		}
	}
}

// TestDelayChangeRisesWhenAQueueBuildsC10: driven by an emulated bottleneck (package netem, in
// virtual time), Queue Delay Change is positive in the periods in which the sender overruns the
// rate and the queue builds, and negative once the queue drains.
func TestDelayChangeRisesWhenAQueueBuildsC10(t *testing.T) {
	link, err := netem.NewLink(netem.Config{Rate: 10_000_000}) // 0.8 ms per 1000-octet packet
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, Config{Period: 10 * ms, Settle: 60 * ms, DelayThreshold: -1})
	type meta struct {
		mark    uint64
		entered time.Duration
	}
	var got []Measurement
	step := func(now time.Duration) {
		link.Deliver(now, func(p netem.Packet) {
			m := p.Tag.(meta)
			e.Leave(now, flowA, m.mark, m.entered)
		})
		e.Tick(now)
		e.Drain(func(m Measurement) { got = append(got, m) })
	}
	// Periods 0-1: a packet every 2 ms (no queue); 2-3: every 0.4 ms (twice the rate, the
	// queue builds); 4-5: every 4 ms (the first of these still wait behind the backlog; by
	// period 5 it has drained).
	gap := func(now time.Duration) time.Duration {
		switch {
		case now < 20*ms:
			return 2 * ms
		case now < 40*ms:
			return 400 * time.Microsecond
		}
		return 4 * ms
	}
	next := time.Duration(0)
	for now := time.Duration(0); now < 200*ms; now += 100 * time.Microsecond {
		step(now)
		if now >= next && now < 60*ms {
			mark, _ := e.Enter(now, flowA)
			link.Send(now, netem.Packet{Size: 1000, Tag: meta{mark, now}})
			next = now + gap(now)
		}
	}
	// With a negative threshold only loss is reported, and nothing was lost: read the periods
	// from a second run that reports every change.
	if len(got) != 0 {
		t.Fatalf("reported %+v without loss", got)
	}
	link, _ = netem.NewLink(netem.Config{Rate: 10_000_000})
	e = newEngine(t, Config{Period: 10 * ms, Settle: 60 * ms, DelayThreshold: time.Nanosecond})
	next = 0
	for now := time.Duration(0); now < 200*ms; now += 100 * time.Microsecond {
		step(now)
		if now >= next && now < 60*ms {
			mark, _ := e.Enter(now, flowA)
			link.Send(now, netem.Packet{Size: 1000, Tag: meta{mark, now}})
			next = now + gap(now)
		}
	}
	sign := map[uint32]int{}
	for _, m := range got {
		switch {
		case m.DelayChange > 0:
			sign[m.Period] = 1
		case m.DelayChange < 0:
			sign[m.Period] = -1
		}
	}
	if sign[1] != 0 || sign[2] != 1 || sign[3] != 1 || sign[5] != -1 {
		t.Fatalf("delay change signs per period %v (measurements %+v), want none in period 1, + in 2 and 3, - in 5", sign, got)
	}
	if st := e.Stats(); st.Late != 0 || st.Lost != 0 {
		t.Fatalf("stats %+v", st)
	}
}
