package crf_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/crem-project/crem/internal/harness/cremtest"
	"github.com/crem-project/crem/wire"
)

// TestForgedRepairAhead (C7 c, C7 g, C12): a forged REPAIR from the CSF's address for
// the block after one it has seen (Block Start PSN + k, the same Config ID, Repair Index and
// Present Bitmap, a random symbol), arriving before any source of that block, does not make the
// CRF take the block for real: the genuine REPAIRs of the blocks before it still restore their
// losses.
func TestForgedRepairAhead(t *testing.T) {
	for _, attack := range []bool{false, true} {
		p := establishedPair(t, 5, 8, 2)
		rng := rand.New(rand.NewPCG(7, 8))
		forged, seen, injecting := 0, 0, false
		p.Link.Filter = func(pk *cremtest.Packet) cremtest.Fate {
			if pk.Dir != cremtest.Forward {
				return cremtest.Fate{}
			}
			if pk.Kind == cremtest.RDMA && rng.IntN(20) == 0 {
				return cremtest.Fate{Drop: true}
			}
			if !attack || injecting || pk.Kind != cremtest.CREM || pk.Data[0]&0x0f != byte(wire.TypeRepair) {
				return cremtest.Fate{}
			}
			m, err := wire.ParseRepair(pk.Data)
			if err != nil || m.Info || m.Retx {
				return cremtest.Fate{}
			}
			if seen++; seen%4 != 0 {
				return cremtest.Fate{}
			}
			m.BlockStartPSN = m.BlockStartPSN.Add(int(m.K)) // the next block's, before its sources
			for i := range m.Symbol {
				m.Symbol[i] = byte(rng.Uint32())
			}
			fb, err := m.Append(nil)
			if err != nil {
				t.Fatal(err)
			}
			forged++
			injecting = true
			p.Inject(cremtest.Forward, p.CSFAddr, fb)
			injecting = false
			return cremtest.Fate{}
		}
		for range 800 {
			p.Send(p.Synth.Next(500))
			p.RunFor(20 * time.Microsecond)
		}
		p.RunFor(200 * time.Millisecond)
		lost, restored, abandoned, wrong := 0, 0, 0, 0
		for q := range p.Sent {
			o := p.Outcomes[q]
			if o == nil || o.Received == 0 {
				lost++
				if o != nil && o.Restored > 0 {
					restored++
				}
			}
			if o != nil {
				abandoned += o.Abandoned
				wrong += o.Wrong
			}
		}
		st := p.Receiver.Stats().Flows
		t.Logf("attack %v: %d forged; %d sources lost, %d restored, %d abandoned", attack, forged, lost, restored, abandoned)
		if lost == 0 || restored != lost || abandoned != 0 || wrong != 0 {
			t.Fatalf("attack %v: %d forged; %d sources lost, %d restored, %d abandoned, %d wrong\n%+v",
				attack, forged, lost, restored, abandoned, wrong, st)
		}
		if attack && (st.RepairAside != uint64(forged) || st.RepairAsideDropped != 0) {
			t.Fatalf("%d forged, %d kept aside, %d dropped", forged, st.RepairAside, st.RepairAsideDropped)
		}
	}
}
