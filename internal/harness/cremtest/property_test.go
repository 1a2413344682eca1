package cremtest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/wire"
	"pgregory.net/rapid"
)

// testLimits keep the windows small so that property runs stay fast.
func testLimits() flow.Limits {
	l := flow.DefaultLimits()
	l.MaxK, l.MaxOpenBlocks = 32, 16
	return l
}

// establish runs the session over a clean link until the first configuration is in force.
func establish(t interface {
	Fatalf(string, ...any)
}, p *Pair) {
	p.Start()
	p.RunFor(20 * time.Millisecond)
	if _, ok := p.Sender.Config(); !ok {
		t.Fatalf("no configuration after 20 ms: state %v, stats %+v", p.Sender.State(), p.Sender.Stats())
	}
}

// TestPropertyRandomImpairment runs both engines over a link with random loss up to 30 percent
// in both directions, reordering and duplication, in both delivery modes: no wrong packet is
// ever delivered; every source packet is received, restored, or explicitly abandoned to the
// RDMA transport; the counters add up.
func TestPropertyRandomImpairment(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		lossF := rapid.Float64Range(0, 0.3).Draw(rt, "lossForward")
		lossB := rapid.Float64Range(0, 0.3).Draw(rt, "lossBackward")
		reorder := rapid.Float64Range(0, 0.2).Draw(rt, "reorder")
		dup := rapid.Float64Range(0, 0.1).Draw(rt, "duplicate")
		k := rapid.SampledFrom([]int{4, 8, 16, 32}).Draw(rt, "k")
		m := rapid.IntRange(0, 4).Draw(rt, "m")
		n := rapid.IntRange(20, 300).Draw(rt, "packets")
		ordered := rapid.Bool().Draw(rt, "ordered")
		seed := rapid.Uint64().Draw(rt, "seed")
		gap := time.Duration(rapid.IntRange(1, 50).Draw(rt, "gapUS")) * time.Microsecond

		p, err := NewPair(Config{Seed: seed,
			Sender:   []csf.Option{csf.WithConfig(wire.SchemeCauchy, k, m, 0), csf.WithLimits(testLimits())},
			Receiver: []crf.Option{crf.WithLimits(testLimits())},
			Settings: crf.Settings{Ordered: ordered}})
		if err != nil {
			rt.Fatalf("%v", err)
		}
		p.Trace = dbgTrace
		establish(rt, p)
		// The flow's first packet goes through clean: with m = 0 nothing else tells the CRF
		// where the flow starts (E8).
		p.Send(p.Synth.Next(100))
		p.RunFor(gap)
		rng := rand.New(rand.NewPCG(seed, 9))
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
		for range n {
			p.Send(p.Synth.Next(64 + rng.IntN(900)))
			p.RunFor(gap)
		}
		// A clean tail lets the CRF see every earlier gap.
		p.Link.Filter = nil
		for range 2 {
			p.Send(p.Synth.Next(100))
			p.RunFor(gap)
		}
		p.RunFor(3 * time.Second)
		checkOutcomes(rt, p)
	})
}

var dbgTrace func(time.Duration, Packet)

// checkOutcomes asserts the harness's invariants.
func checkOutcomes(t interface {
	Fatalf(string, ...any)
}, p *Pair) {
	var restored, abandoned, distinct uint64
	for q := range p.Sent {
		o := p.Outcomes[q]
		if o == nil || o.Received+o.Restored+o.Abandoned == 0 {
			if dbgTrace != nil {
				fmt.Printf("%+v\n%+v\n", p.Receiver.Stats(), p.Sender.Stats())
			}
			t.Fatalf("PSN %v: neither received, restored nor abandoned", q)
		}
		if o.Wrong > 0 {
			t.Fatalf("PSN %v: %d wrong deliveries", q, o.Wrong)
		}
		if o.Restored > 1 {
			t.Fatalf("PSN %v restored %d times", q, o.Restored)
		}
		restored += uint64(o.Restored)
		if o.Abandoned > 0 {
			abandoned++
		}
		if o.Received > 0 {
			distinct++
		}
	}
	for q := range p.Outcomes {
		if _, ok := p.Sent[q]; !ok {
			t.Fatalf("delivery for PSN %v that was never sent", q)
		}
	}
	st := p.Receiver.Stats().Flows
	if st.Restored != restored || st.ICRCMismatch != 0 {
		t.Fatalf("restored: counter %d, deliveries %d; mismatches %d", st.Restored, restored, st.ICRCMismatch)
	}
	if st.Abandoned < abandoned {
		t.Fatalf("abandoned: counter %d, PSNs %d", st.Abandoned, abandoned)
	}
	// Every PSN whose original arrived is counted once; a superseded original (its restored
	// copy went out instead) is delivered only if a duplicate of it comes later.
	if st.Sources < distinct || st.Sources > distinct+st.Superseded {
		t.Fatalf("received: counter %d, distinct PSNs delivered %d", st.Sources, distinct)
	}
}

// TestPropertyWithinRedundancy: when no block loses more sources than it has ordinary repair
// symbols and nothing else is lost, every lost source is restored by the ordinary symbols alone,
// without a single REPAIR_REQUEST, in both delivery modes.
func TestPropertyWithinRedundancy(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		k := rapid.SampledFrom([]int{4, 8, 16, 32}).Draw(rt, "k")
		m := rapid.IntRange(1, 4).Draw(rt, "m")
		blocks := rapid.IntRange(1, 12).Draw(rt, "blocks")
		ordered := rapid.Bool().Draw(rt, "ordered")
		lost := map[int]bool{}
		for b := range blocks {
			n := rapid.IntRange(0, m).Draw(rt, "lossesInBlock")
			for range n {
				lost[b*k+rapid.IntRange(0, k-1).Draw(rt, "position")] = true
			}
		}
		p, err := NewPair(Config{
			Sender:   []csf.Option{csf.WithConfig(wire.SchemeCauchy, k, m, 0), csf.WithAdaptation(false), csf.WithRepairFraction(4)},
			Settings: crf.Settings{Ordered: ordered}})
		if err != nil {
			rt.Fatalf("%v", err)
		}
		establish(rt, p)
		p.Link.Filter = func(pk *Packet) Fate { return Fate{Drop: pk.Kind == RDMA && lost[pk.N]} }
		for range blocks * k {
			p.Send(p.Synth.Next(500))
			p.RunFor(5 * time.Microsecond)
		}
		p.RunFor(100 * time.Millisecond)
		checkOutcomes(rt, p)
		st := p.Receiver.Stats().Flows
		want := len(lost) // leading losses included: the Present Bitmap tells the CRF (E8)
		if int(st.Restored) != want || st.Abandoned != 0 || st.Requests+st.RangeRequests != 0 {
			rt.Fatalf("lost %d, restored %d, abandoned %d, requests %d+%d", want, st.Restored, st.Abandoned, st.Requests, st.RangeRequests)
		}
	})
}
