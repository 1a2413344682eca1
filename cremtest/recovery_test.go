package cremtest

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/csf"
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
