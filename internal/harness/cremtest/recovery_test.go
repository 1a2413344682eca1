package cremtest

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// TestRecoveryTenPercent checks that at 10 percent independent loss with k = 16, m = 2 nearly
// every lost packet is restored by CREM in both delivery modes, and nothing wrong is delivered.
func TestRecoveryTenPercent(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		p, _ := NewPair(Config{Seed: 1,
			Sender:   []csf.Option{csf.WithConfig(wire.SchemeCauchy, 16, 2, 0), csf.WithLimits(testLimits())},
			Receiver: []crf.Option{crf.WithLimits(testLimits())},
			Settings: crf.Settings{Ordered: ordered}})
		establish(t, p)
		p.Send(p.Synth.Next(100))
		rng := rand.New(rand.NewPCG(1, 9))
		p.Link.Filter = func(pk *Packet) Fate { return Fate{Drop: rng.Float64() < 0.1} }
		for range 1000 {
			p.Send(p.Synth.Next(1000))
			p.RunFor(10 * time.Microsecond)
		}
		p.Link.Filter = nil
		p.Send(p.Synth.Next(100))
		p.RunFor(3 * time.Second)
		checkOutcomes(t, p)
		st := p.Receiver.Stats().Flows
		lost := st.Expected - st.Sources
		if st.Restored < lost*9/10 || st.ICRCMismatch != 0 {
			t.Fatalf("ordered=%v: %d lost, %d restored, %d abandoned", ordered, lost, st.Restored, st.Abandoned)
		}
	}
}

// TestMessagePolicyRecovery: blocks the message policy closes at a k below the configuration's
// are accepted by the CRF without a PARAM_UPDATE (C7 c) and restored from their extra repair.
func TestMessagePolicyRecovery(t *testing.T) {
	p, err := NewPair(Config{Seed: 2,
		Sender: []csf.Option{csf.WithConfig(wire.SchemeCauchy, 32, 0, 0), csf.WithLimits(testLimits()),
			csf.WithAdaptation(false), csf.WithRepairFraction(1),
			csf.WithMessagePolicy(func(packets int, _ float64) (int, int) { return 8, 2 })},
		Receiver: []crf.Option{crf.WithLimits(testLimits())}})
	if err != nil {
		t.Fatal(err)
	}
	establish(t, p)
	p.Send(p.Synth.Next(100))
	first := roce.Packet{BTH: roce.BTH{OpCode: roce.OpWriteFirst, PKey: 0xffff, DestQP: p.Synth.Desc.DestQP, PSN: p.Synth.PSN},
		RETH: roce.RETH{VA: 0x1000, RKey: 7, DMALength: 800 * 1024}, Payload: make([]byte, 1024)}
	b, err := first.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Synth.Desc.LogicalHeader().Seal(b); err != nil {
		t.Fatal(err)
	}
	p.Send(b)
	p.Synth.PSN = p.Synth.PSN.Add(1)
	rng := rand.New(rand.NewPCG(2, 9))
	p.Link.Filter = func(pk *Packet) Fate { return Fate{Drop: pk.Kind == RDMA && rng.Float64() < 0.05} }
	for range 799 {
		p.Send(p.Synth.Next(1024))
		p.RunFor(10 * time.Microsecond)
	}
	p.Link.Filter = nil
	p.RunFor(3 * time.Second)
	checkOutcomes(t, p)
	st, sst := p.Receiver.Stats().Flows, p.Sender.Stats()
	if st.Restored == 0 || st.ICRCMismatch != 0 || st.RepairBadK != 0 || sst.MessagePolicyBlocks != sst.BlocksOpened || sst.ParamUpdateSent != 1 {
		t.Fatalf("receiver %+v\nsender %+v", st, sst)
	}
}
