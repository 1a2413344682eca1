package cremtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
	"pgregory.net/rapid"
)

// fataler is what the workload builders need of a test (testing.TB and rapid.T).
type fataler interface {
	Helper()
	Fatal(args ...any)
}

// wpkt is one packet of a workload and the PSNs it consumes.
type wpkt struct {
	pkt  []byte
	psns int
}

// requestWorkload is the requester's direction: WRITE, SEND and READ requests mixed, READs of 1
// octet to maxRead octets (log-uniform), n packets from PSN start, MTU 1024. The whole run spans
// fewer than 2^22 PSNs: an RC requester never has more than 2^23 outstanding, and a PSN the
// receiver misses stays unacknowledged, so no real flow runs half the PSN space past one.
func requestWorkload(t fataler, rng *rand.Rand, s *Synth, start psn.PSN, n int, maxRead uint32) []wpkt {
	t.Helper()
	var out []wpkt
	p := start
	for len(out) < n {
		var w wpkt
		var err error
		switch rng.IntN(10) {
		case 0:
			dma := uint32(math.Exp(rng.Float64() * math.Log(float64(maxRead))))
			if left := 1<<22 - start.Forward(p) - uint32(n); roce.OpReadRequest.PSNs(dma, 1024) > left {
				dma = max(1, left) * 1024 / 4
			}
			w.pkt, err = s.Read(p, dma)
			w.psns = int(roce.OpReadRequest.PSNs(dma, 1024))
		case 1, 2:
			w.pkt, err = s.Packet(roce.OpSendOnly, p, 1+rng.IntN(1024))
			w.psns = 1
		default:
			w.pkt, err = s.Write(p, 1024)
			w.psns = 1
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, w)
		p = p.Add(w.psns)
	}
	return out
}

// responseWorkload is the responder's direction: READ responses in runs of 1 to 40, between
// which the requester's own PSNs (1 to 300 of them) are absent in this direction (C13).
func responseWorkload(t fataler, rng *rand.Rand, s *Synth, start psn.PSN, n int) []wpkt {
	t.Helper()
	var out []wpkt
	p := start
	for len(out) < n {
		run := 1 + rng.IntN(40)
		for i := range run {
			op := roce.OpReadResponseMiddle
			switch {
			case run == 1:
				op = roce.OpReadResponseOnly
			case i == 0:
				op = roce.OpReadResponseFirst
			case i == run-1:
				op = roce.OpReadResponseLast
			}
			size := 1024
			if op == roce.OpReadResponseLast || op == roce.OpReadResponseOnly {
				size = 1 + rng.IntN(1024)
			}
			pkt, err := s.Packet(op, p, size)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, wpkt{pkt, 1})
			p = p.Add(1)
		}
		p = p.Add(1 + rng.IntN(300))
	}
	return out
}

// reportLog records every LOSS_REPORT as it reaches the CSF.
type reportLog struct {
	reports []wire.LossReport
	at      []time.Duration
}

func (l *reportLog) trace(next func(time.Duration, Packet)) func(time.Duration, Packet) {
	return func(now time.Duration, pk Packet) {
		if pk.Dir == Backward && pk.Kind == CREM {
			if m, err := wire.ParseLossReport(pk.Data); err == nil {
				l.reports = append(l.reports, m)
				l.at = append(l.at, now)
			}
		}
		if next != nil {
			next(now, pk)
		}
	}
}

// sums adds up the reports from time from on.
func (l *reportLog) sums(from time.Duration) (e, r uint64) {
	for i, m := range l.reports {
		if l.at[i] >= from {
			e += uint64(m.Expected)
			r += uint64(m.Received)
		}
	}
	return e, r
}

// play sends the workload at one packet per gap, running the engines in between.
func play(p *Pair, w []wpkt, gap time.Duration) {
	for _, x := range w {
		p.Send(x.pkt)
		p.RunFor(gap)
	}
}

// TestLosslessReportsEqual: over lossless traffic of either direction (requests:
// WRITE, SEND and READs of up to 1 GiB; responses: runs of READ responses with the requester's
// PSNs absent between and inside blocks), with m = 0, m = 2 and the policy adapting m, every
// LOSS_REPORT says Expected = Received (E42), nothing is abandoned, and the only requests are
// for PSNs that carry no source here, settled by INFO (contract 2).
func TestLosslessReportsEqual(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		for _, dir := range []string{"request", "response"} {
			for _, m := range []int{0, 2, -1} {
				name := fmt.Sprintf("seed %d, %s direction, m %d", seed, dir, m)
				rng := rand.New(rand.NewPCG(seed, 10))
				sopts := []csf.Option{csf.WithConfig(wire.SchemeCauchy, 16, max(m, 2), 0), csf.WithAdaptation(m < 0)}
				p, err := NewPair(Config{Seed: seed, Sender: sopts, Settings: crf.Settings{Ordered: rng.IntN(2) == 0}})
				if err != nil {
					t.Fatal(err)
				}
				var log reportLog
				p.Trace = log.trace(nil)
				establish(t, p)
				start := psn.PSN(rng.Uint32() & psn.Mask)
				w := requestWorkload(t, rng, &p.Synth, start, 1500, 1<<30)
				if dir == "response" {
					w = responseWorkload(t, rng, &p.Synth, start, 1500)
				}
				play(p, w, 20*time.Microsecond)
				p.RunFor(time.Second)
				checkOutcomes(t, p)
				for i, lr := range log.reports {
					if lr.Expected != lr.Received {
						t.Fatalf("%s: LOSS_REPORT %d at %v: Expected %d, Received %d", name, i, log.at[i], lr.Expected, lr.Received)
					}
				}
				st, sst := p.Receiver.Stats().Flows, p.Sender.Stats()
				if e, r := log.sums(0); e != uint64(len(w)) || r != e || st.Abandoned != 0 || st.Requests != 0 || sst.BreakerTrips != 0 {
					t.Fatalf("%s: %d expected, %d received of %d sent: %+v", name, e, r, len(w), st)
				}
				if dir == "request" && st.RangeRequests != 0 {
					t.Fatalf("%s: %d range requests", name, st.RangeRequests)
				}
			}
		}
	}
}

// TestBigReadsC13: READs of 8 MiB to 2^31 octets among WRITEs over a path with 3 percent
// loss, with the default window and a small one: the READs' PSNs are never counted, asked for
// or abandoned, LOSS_REPORT shows the path's loss (not the 100 percent that trips the circuit
// breaker and closes the flow), every lost packet is restored or left to the RDMA transport.
func TestBigReadsC13(t *testing.T) {
	small := flow.DefaultLimits()
	small.MaxOpenBlocks, small.MaxK = 16, 32
	for _, lim := range []flow.Limits{flow.DefaultLimits(), small} {
		name := fmt.Sprintf("window %d x %d", lim.MaxOpenBlocks, lim.MaxK)
		p, err := NewPair(Config{Seed: 7,
			Sender:   []csf.Option{csf.WithConfig(wire.SchemeCauchy, 32, 2, 0), csf.WithLimits(lim)},
			Receiver: []crf.Option{crf.WithLimits(lim)}})
		if err != nil {
			t.Fatal(err)
		}
		var log reportLog
		p.Trace = log.trace(nil)
		establish(t, p)
		rng := rand.New(rand.NewPCG(7, 1))
		p.Link.Filter = func(pk *Packet) Fate { return Fate{Drop: pk.Dir == Forward && pk.Kind == RDMA && rng.Float64() < 0.03} }
		absent := 0
		for _, dma := range []uint32{8 << 20, 1 << 30, 1 << 31, 100 << 20, 1<<31 - 1} {
			for range 200 {
				p.Send(p.Synth.Next(1024))
				p.RunFor(20 * time.Microsecond)
			}
			read, err := p.Synth.Read(p.Synth.PSN, dma)
			if err != nil {
				t.Fatal(err)
			}
			p.Send(read)
			n := int(roce.OpReadRequest.PSNs(dma, 1024))
			absent += n - 1
			p.Synth.PSN = p.Synth.PSN.Add(n)
			p.RunFor(20 * time.Microsecond)
		}
		p.Link.Filter = nil
		p.Send(p.Synth.Next(1024))
		p.RunFor(2 * time.Second)
		checkOutcomes(t, p)
		st, sst := p.Receiver.Stats().Flows, p.Sender.Stats()
		e, r := log.sums(0)
		if sst.BreakerTrips != 0 || sst.CloseSent != 0 || p.Sender.State() != csf.StateEstablished || e > r+r/10 {
			t.Fatalf("%s: breaker trips %d, CLOSE %d, LOSS_REPORTs %d expected and %d received", name, sst.BreakerTrips, sst.CloseSent, e, r)
		}
		if e > 2000 || st.ReadAbsent != uint64(absent) || st.Restored == 0 || st.WindowJumps != 0 {
			t.Fatalf("%s: %d expected, %d READ PSNs absent of %d: %+v", name, e, st.ReadAbsent, absent, st)
		}
		t.Logf("%s: LOSS_REPORTs %d expected, %d received; %d restored, %d abandoned, %d range requests, %d READ PSNs absent",
			name, e, r, st.Restored, st.Abandoned, st.RangeRequests, st.ReadAbsent)
	}
}

// TestBreakerSeesPathLoss: at 15 percent loss, with an RDMA transport that sends every
// lost packet again two round trips later, LOSS_REPORT still shows the path's loss (E42: a PSN
// filled after the CRF asked for it, and the original of a restored packet, are not received),
// so the circuit breaker trips (C11 f) and stays open while the loss lasts, the unanswered
// requests counted lost within a few SRTT: it trips once, it does not oscillate.
func TestBreakerSeesPathLoss(t *testing.T) {
	p, err := NewPair(Config{Seed: 3, Sender: []csf.Option{csf.WithConfig(wire.SchemeCauchy, 16, 2, 0)}})
	if err != nil {
		t.Fatal(err)
	}
	var log reportLog
	p.Trace = log.trace(nil)
	establish(t, p)
	rng := rand.New(rand.NewPCG(3, 1))
	type resend struct {
		at  time.Duration
		pkt []byte
	}
	var queue []resend
	bad := true
	p.Link.Filter = func(pk *Packet) Fate {
		if bad && pk.Dir == Forward && pk.Kind == RDMA && rng.Float64() < 0.15 {
			queue = append(queue, resend{p.Clock.Now() + 4*time.Millisecond, pk.Data})
			return Fate{Drop: true}
		}
		return Fate{}
	}
	start := p.Clock.Now()
	var tripped time.Duration
	for p.Clock.Now() < start+4*time.Second {
		if p.Clock.Now() >= start+3*time.Second {
			bad = false
		}
		p.Send(p.Synth.Next(1024))
		for len(queue) > 0 && queue[0].at <= p.Clock.Now() {
			x := queue[0]
			queue = queue[1:]
			p.Send(x.pkt)
		}
		p.RunFor(100 * time.Microsecond)
		if tripped == 0 && p.Sender.Stats().BreakerTrips > 0 {
			tripped = p.Clock.Now() - start
		}
	}
	p.RunFor(time.Second)
	checkOutcomes(t, p)
	e, r := log.sums(start + tripped)
	var eBad, rBad uint64
	for i, m := range log.reports {
		if at := log.at[i] - start; at >= tripped && at < 3*time.Second {
			eBad, rBad = eBad+uint64(m.Expected), rBad+uint64(m.Received)
		}
	}
	st, sst := p.Receiver.Stats().Flows, p.Sender.Stats()
	t.Logf("tripped after %v; while open LOSS_REPORTs say %.1f percent lost; after: %d expected, %d received; %d given up, %d filled late",
		tripped, 100*float64(eBad-rBad)/float64(eBad), e, r, st.GivenUp, st.LateFilled)
	if tripped == 0 || tripped > 2500*time.Millisecond || sst.BreakerTrips != 1 {
		t.Fatalf("breaker tripped %d times, first after %v", sst.BreakerTrips, tripped)
	}
	if float64(eBad-rBad) < 0.1*float64(eBad) {
		t.Fatalf("while the breaker was open LOSS_REPORTs said %d expected, %d received: below its threshold", eBad, rBad)
	}
}

// TestConfigChangesRepair: a coded retransmission of a block of the configuration before
// a change is decoded (E44): after a change away from m = 0, when the CRF never saw a REPAIR of
// the old configuration and the newer one's REPAIRs come first; and after a change to m = 0,
// when the old block's REPAIRs were lost and its answer comes after the newer configuration's
// first coded retransmission.
func TestConfigChangesRepair(t *testing.T) {
	for _, c := range []struct {
		name   string
		m1, m2 int
	}{{"away from m = 0", 0, 2}, {"to m = 0", 2, 0}} {
		p, err := NewPair(Config{Seed: 5, Sender: []csf.Option{csf.WithConfig(wire.SchemeCauchy, 8, c.m1, 0), csf.WithAdaptation(false)},
			Settings: crf.Settings{Reorder: time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		establish(t, p)
		first := p.Synth.PSN.Add(2) // lost, in a block of the first configuration
		var second psn.PSN
		haveSecond := false
		answers := 0 // answers for the first block dropped so far
		p.Link.Filter = func(pk *Packet) Fate {
			if pk.Dir != Forward {
				return Fate{}
			}
			if pk.Kind == RDMA {
				q := psn.PSN(uint32(pk.Data[9])<<16 | uint32(pk.Data[10])<<8 | uint32(pk.Data[11]))
				return Fate{Drop: q == first || haveSecond && q == second}
			}
			m, err := wire.ParseRepair(pk.Data)
			if err != nil || m.ConfigID != 1 || m.Info {
				return Fate{}
			}
			if !m.Retx && m.Scheme != wire.SchemeSourceCopy {
				return Fate{Drop: true} // the old block's ordinary REPAIRs are lost
			}
			if answers < 2 {
				answers++ // its first two answers too: the third, FALLBACK, comes after the change
				return Fate{Drop: true}
			}
			return Fate{}
		}
		for range 8 {
			p.Send(p.Synth.Next(500))
		}
		cfg, _ := p.Sender.Config()
		cfg.M = c.m2
		if err := p.Sender.Reconfigure(p.Clock.Now(), cfg); err != nil {
			t.Fatal(err)
		}
		for range 400 {
			p.Send(p.Synth.Next(500))
			p.RunFor(10 * time.Microsecond)
			if cur, _ := p.Sender.Config(); !haveSecond && cur.ID == 2 {
				second, haveSecond = p.Synth.PSN.Add(3), true // lost, in a block of the second
			}
		}
		p.RunFor(time.Second)
		checkOutcomes(t, p)
		st := p.Receiver.Stats().Flows
		if o, o2 := p.Outcomes[first], p.Outcomes[second]; !haveSecond || o == nil || o.Restored != 1 || o2 == nil || o2.Restored != 1 || st.RepairUnknownConfig != 0 {
			t.Fatalf("%s: first %+v, second %+v: %+v", c.name, o, o2, st)
		}
	}
}

// TestTwoCodedRoundsC9: a block whose losses were first asked for in the PSN-range form
// (m = 0) gets one more coded round after that answer, then FALLBACK (C9: two coded rounds, the
// range round counted), not two more.
func TestTwoCodedRoundsC9(t *testing.T) {
	p, err := NewPair(Config{Seed: 6, Sender: []csf.Option{csf.WithConfig(wire.SchemeCauchy, 8, 0, 0), csf.WithAdaptation(false)},
		Settings: crf.Settings{Reorder: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	establish(t, p)
	lost := map[psn.PSN]bool{p.Synth.PSN.Add(2): true, p.Synth.PSN.Add(3): true}
	retx := 0
	coded, fallbacks := 0, 0
	p.Trace = func(_ time.Duration, pk Packet) {
		if pk.Dir == Backward && pk.Kind == CREM {
			if q, err := wire.ParseRepairRequest(pk.Data); err == nil && !q.RangeForm {
				if q.Fallback {
					fallbacks++
				} else {
					coded++
				}
			}
		}
	}
	p.Link.Filter = func(pk *Packet) Fate {
		if pk.Dir != Forward {
			return Fate{}
		}
		if pk.Kind == RDMA {
			return Fate{Drop: lost[psn.PSN(uint32(pk.Data[9])<<16|uint32(pk.Data[10])<<8|uint32(pk.Data[11]))]}
		}
		if m, err := wire.ParseRepair(pk.Data); err == nil && m.Retx {
			retx++
			return Fate{Drop: retx != 2} // of every coded retransmission only one symbol arrives
		}
		return Fate{}
	}
	for range 16 {
		p.Send(p.Synth.Next(500))
		p.RunFor(10 * time.Microsecond)
	}
	p.RunFor(time.Second)
	checkOutcomes(t, p)
	st := p.Receiver.Stats().Flows
	if coded != 1 || fallbacks != 1 || st.RangeRequests != 1 || st.Restored != 2 || st.RestoredSourceCopy != 1 {
		t.Fatalf("%d coded and %d FALLBACK block requests after %d range requests (want 1, 1, 1): %+v", coded, fallbacks, st.RangeRequests, st)
	}
}

// TestAnyStartPSN: both engines protect a flow wherever its PSNs start in the 24-bit space
// and across the wrap, with the CSF started before the flow's first packet: the first
// configuration is in force for the first packet (item 2), losses are restored, a READ of 64 MiB
// crossing the wrap is absent, never asked for.
func TestAnyStartPSN(t *testing.T) {
	for _, start := range []psn.PSN{0x000000, 0x7fffff, 0x800000, 0x900000, 0xfffff0, 0xfdfff0} {
		for _, ordered := range []bool{false, true} {
			name := fmt.Sprintf("start %v, ordered %v", start, ordered)
			p, err := NewPair(Config{Seed: uint64(start) + 1, Sender: []csf.Option{csf.WithConfig(wire.SchemeCauchy, 16, 2, 0)},
				Settings: crf.Settings{Ordered: ordered}})
			if err != nil {
				t.Fatal(err)
			}
			p.Start()
			p.RunFor(2500 * time.Microsecond) // the first packet comes between PARAM_UPDATE and PARAM_ACK
			p.Synth.PSN = start
			rng := rand.New(rand.NewPCG(uint64(start), 2))
			p.Link.Filter = func(pk *Packet) Fate { return Fate{Drop: pk.Kind == RDMA && pk.Dir == Forward && rng.Float64() < 0.03} }
			for i := range 600 {
				if i == 300 {
					read, err := p.Synth.Read(p.Synth.PSN, 64<<20)
					if err != nil {
						t.Fatal(err)
					}
					p.Send(read)
					p.Synth.PSN = p.Synth.PSN.Add(64 << 10)
				} else {
					p.Send(p.Synth.Next(800))
				}
				p.RunFor(20 * time.Microsecond)
			}
			p.Link.Filter = nil
			p.Send(p.Synth.Next(100))
			p.RunFor(time.Second)
			checkOutcomes(t, p)
			st, sst := p.Receiver.Stats().Flows, p.Sender.Stats()
			// Unprotected: the packets the CSF saw before the PARAM_ACK came, some 1.5 ms of them.
			if sst.SourcesUnprotected > 100 || st.Restored == 0 || st.Restored < (st.Expected-st.Received)*8/10 || st.ReadAbsent != 64<<10-1 {
				t.Fatalf("%s: %d unprotected, %d restored of %d lost: %+v", name, sst.SourcesUnprotected, st.Restored, st.Expected-st.Received, st)
			}
		}
	}
}

// TestPropertyReadsAndGaps runs both engines over random traffic of either direction
// (READs of 1 octet to 2^31, READ responses with the requester's PSNs absent), random loss both
// ways, reordering and duplication, two windows, any initial PSN, both delivery modes: no wrong
// packet is ever delivered, nothing is delivered for a PSN never sent (a READ's, a requester's;
// only abandoned, after three requests lost on the way or unanswered), every source is received,
// restored or abandoned (but one lost in the middle of a gap longer than 2 x Max k, which keeps
// no position, E40, and whose block's REPAIRs were lost too: the RDMA transport's), and over a
// clean run nothing is abandoned and Expected = Received in every LOSS_REPORT.
func TestPropertyReadsAndGaps(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		clean := rapid.Bool().Draw(rt, "clean")
		var lossF, lossB, reorder, dup float64
		if !clean {
			lossF = rapid.Float64Range(0, 0.2).Draw(rt, "lossForward")
			lossB = rapid.Float64Range(0, 0.2).Draw(rt, "lossBackward")
			reorder = rapid.Float64Range(0, 0.1).Draw(rt, "reorder")
			dup = rapid.Float64Range(0, 0.05).Draw(rt, "duplicate")
		}
		k := rapid.SampledFrom([]int{4, 8, 16, 32}).Draw(rt, "k")
		m := rapid.IntRange(0, 3).Draw(rt, "m")
		small := rapid.Bool().Draw(rt, "smallWindow")
		response := rapid.Bool().Draw(rt, "responseDirection")
		ordered := rapid.Bool().Draw(rt, "ordered")
		n := rapid.IntRange(20, 400).Draw(rt, "packets")
		maxRead := uint32(rapid.SampledFrom([]int{1 << 12, 1 << 20, 1 << 31}).Draw(rt, "maxRead"))
		seed := rapid.Uint64().Draw(rt, "seed")
		lim := flow.DefaultLimits()
		if small {
			// A window of 2,048 positions: a few round trips of this traffic (E14: sized for
			// the path), far less than the workload's READs.
			lim.MaxOpenBlocks, lim.MaxK = 64, 32
		}
		p, err := NewPair(Config{Seed: seed,
			Sender:   []csf.Option{csf.WithConfig(wire.SchemeCauchy, k, m, 0), csf.WithLimits(lim)},
			Receiver: []crf.Option{crf.WithLimits(lim)}, Settings: crf.Settings{Ordered: ordered}})
		if err != nil {
			rt.Fatalf("%v", err)
		}
		var log reportLog
		arrived := map[psn.PSN]bool{}
		p.Trace = log.trace(func(_ time.Duration, pk Packet) {
			if pk.Dir == Forward && pk.Kind == RDMA {
				arrived[psn.PSN(uint32(pk.Data[9])<<16|uint32(pk.Data[10])<<8|uint32(pk.Data[11]))] = true
			}
		})
		establish(rt, p)
		rng := rand.New(rand.NewPCG(seed, 11))
		start := psn.PSN(rng.Uint32() & psn.Mask)
		var w []wpkt
		if response {
			w = responseWorkload(rt, rng, &p.Synth, start, n)
		} else {
			w = requestWorkload(rt, rng, &p.Synth, start, n, maxRead)
		}
		// A clean tail lets the CRF see every earlier gap (with m = 0 nothing else does).
		last := w[len(w)-1]
		next := psnOfPkt(last.pkt).Add(last.psns)
		for i := range 2 {
			op := roce.OpWriteMiddle
			if response {
				op = roce.OpReadResponseOnly
			}
			pk, err := p.Synth.Packet(op, next.Add(i), 100)
			if err != nil {
				rt.Fatalf("%v", err)
			}
			w = append(w, wpkt{pk, 1})
		}
		// The first packet goes through clean (E8), then the impairment, then the clean tail.
		p.Send(w[0].pkt)
		p.RunFor(20 * time.Microsecond)
		p.Link.Filter = func(pk *Packet) Fate {
			loss := lossF
			if pk.Dir == Backward {
				loss = lossB
			}
			f := Fate{Drop: rng.Float64() < loss}
			if rng.Float64() < reorder {
				f.Delay = time.Duration(rng.IntN(3000)) * time.Microsecond
			}
			if rng.Float64() < dup {
				f.Duplicate = 1
			}
			return f
		}
		play(p, w[1:len(w)-2], 20*time.Microsecond)
		p.Link.Filter = nil
		play(p, w[len(w)-2:], 20*time.Microsecond)
		p.RunFor(3 * time.Second)
		// Sources lost in the middle of a long gap, where the window keeps no position (E40),
		// are left to the RDMA transport unannounced when their block's REPAIRs were lost too
		// (or came too far ahead): those more than Max k from the first PSN of every packet
		// that arrived, on both sides.
		var got []psn.PSN
		for _, x := range w {
			if q := psnOfPkt(x.pkt); arrived[q] {
				got = append(got, q)
			}
		}
		untracked := 0
		for j, x := range w {
			q := psnOfPkt(x.pkt)
			if o := p.Outcomes[q]; o != nil || arrived[q] || j == 0 {
				continue
			}
			below, above := uint32(math.MaxUint32), uint32(math.MaxUint32)
			for _, a := range got {
				switch {
				case a.Before(q):
					below = min(below, a.Forward(q))
				case q.Before(a):
					above = min(above, q.Forward(a))
				}
			}
			if below > uint32(lim.MaxK) && above > uint32(lim.MaxK) {
				delete(p.Sent, q)
				untracked++
			}
		}
		// A PSN that carries nothing here, asked for three times in vain (requests or answers
		// lost), is given up like a source (E42): abandoned, never delivered.
		givenUp := 0
		for q, o := range p.Outcomes {
			if _, sent := p.Sent[q]; !sent && o.Received == 0 && o.Restored == 0 {
				delete(p.Outcomes, q)
				givenUp++
			}
		}
		checkOutcomes(rt, p)
		if clean && givenUp > 0 {
			rt.Fatalf("clean run: %d PSNs that carry nothing abandoned", givenUp)
		}
		if clean {
			for i, lr := range log.reports {
				if lr.Expected != lr.Received {
					rt.Fatalf("LOSS_REPORT %d at %v of a clean run: Expected %d, Received %d", i, log.at[i], lr.Expected, lr.Received)
				}
			}
			if st := p.Receiver.Stats().Flows; st.Abandoned != 0 || untracked != 0 {
				rt.Fatalf("clean run: %d abandoned, %d untracked", st.Abandoned, untracked)
			}
		}
	})
}

// psnOfPkt reads a RoCEv2 packet's PSN.
func psnOfPkt(b []byte) psn.PSN { return psn.PSN(uint32(b[9])<<16 | uint32(b[10])<<8 | uint32(b[11])) }
