package cremtest

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
	"pgregory.net/rapid"
)

// TestWrongBytesNeverDeliveredC12: REPAIR messages whose symbol bytes are corrupted in flight
// (right header), and REPAIR messages blindly injected from the CSF's address with the right
// Flow ID and Config ID, never produce a delivered packet: the restored packet's ICRC fails,
// the CRF counts it, and the block falls back. Both delivery modes, random loss besides.
func TestWrongBytesNeverDeliveredC12(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		seed := rapid.Uint64().Draw(rt, "seed")
		corrupt := rapid.Float64Range(0.05, 0.5).Draw(rt, "corrupt")
		inject := rapid.IntRange(0, 20).Draw(rt, "inject")
		ordered := rapid.Bool().Draw(rt, "ordered")
		p, err := NewPair(Config{Seed: seed,
			Sender:   []csf.Option{csf.WithConfig(wire.SchemeCauchy, 8, 2, 0), csf.WithLimits(testLimits()), csf.WithAdaptation(false)},
			Receiver: []crf.Option{crf.WithLimits(testLimits())},
			Settings: crf.Settings{Ordered: ordered}})
		if err != nil {
			rt.Fatalf("%v", err)
		}
		establish(rt, p)
		p.Send(p.Synth.Next(100))
		rng := rand.New(rand.NewPCG(seed, 3))
		p.Link.Filter = func(pk *Packet) Fate {
			if pk.Kind == RDMA {
				return Fate{Drop: rng.Float64() < 0.1}
			}
			if pk.Dir == Forward && len(pk.Data) > 100 && pk.Data[0]&0x0f == byte(wire.TypeRepair) && rng.Float64() < corrupt {
				i := len(pk.Data) - 1 - rng.IntN(len(pk.Data)-60)
				pk.Data[i] ^= byte(1 + rng.IntN(255))
			}
			return Fate{}
		}
		for i := range 200 {
			p.Send(p.Synth.Next(200 + rng.IntN(700)))
			if i%10 == 0 && inject > 0 {
				inject--
				start := psn.PSN(uint32(p.Synth.PSN) &^ 7)
				sym := make([]byte, 1062)
				for j := range sym {
					sym[j] = byte(rng.Uint32())
				}
				m := wire.Repair{FlowID: p.FlowID(), ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, RepairIndex: uint8(rng.IntN(8)),
					BlockStartPSN: start, Present: psn.FirstK(8), Symbol: sym}
				b, _ := m.Append(nil)
				p.Inject(Forward, p.CSFAddr, b)
			}
			p.RunFor(10 * time.Microsecond)
		}
		p.Link.Filter = nil
		p.Send(p.Synth.Next(100))
		p.RunFor(2 * time.Second)
		for q, o := range p.Outcomes {
			if o.Wrong > 0 {
				rt.Fatalf("PSN %v: wrong packet delivered", q)
			}
		}
	})
}

// TestCorruptedRepairCounted: symbols corrupted on the link (here every REPAIR, the coded
// retransmissions and the Source Copy included) are counted as ICRC mismatches; the block asks
// for others (protocol notes E56) and, none arriving intact, is abandoned to the RDMA transport,
// with nothing wrong delivered.
func TestCorruptedRepairCounted(t *testing.T) {
	p, err := NewPair(Config{Sender: []csf.Option{csf.WithConfig(wire.SchemeCauchy, 4, 1, 0), csf.WithAdaptation(false)}})
	if err != nil {
		t.Fatal(err)
	}
	establish(t, p)
	p.Link.Filter = func(pk *Packet) Fate {
		if pk.Kind == RDMA && pk.N == 1 {
			return Fate{Drop: true}
		}
		if pk.Kind == CREM && pk.Dir == Forward && pk.Data[0]&0x0f == byte(wire.TypeRepair) {
			pk.Data[len(pk.Data)-300] ^= 0x10
		}
		return Fate{}
	}
	for range 4 {
		p.Send(p.Synth.Next(500))
	}
	p.RunFor(100 * time.Millisecond)
	st := p.Receiver.Stats().Flows
	o := p.Outcomes[1]
	if st.ICRCMismatch == 0 || st.BlocksMismatchAbandoned != 1 || st.Restored != 0 || o == nil || o.Abandoned != 1 || o.Wrong != 0 {
		t.Fatalf("mismatch %d restored %d outcome %+v", st.ICRCMismatch, st.Restored, o)
	}
}
