package cremtest

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// TestForgedFirstRepairEveryBlock (crf E66-E68): an on-path forger sends, from the CSF's bound
// address with the flow's Flow ID and Config ID, a REPAIR ahead of every block's first one that
// defines the block another way, each block in turn: half its k, a present position cleared, or
// the next block's with half its k before that block's sources. The real CSF and CRF restore at
// least 90 % of what they restore without the forger over the same losses, and deliver no octet
// that differs from what was sent. CREM_FORGE_SEED fixes the seed.
func TestForgedFirstRepairEveryBlock(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("CREM_FORGE_SEED"), 10, 64); err == nil {
		seed = s
	}
	type run struct {
		lost, restored, wrong, forged int
		st                            crf.FlowStats
	}
	do := func(forge bool) run {
		p, err := NewPair(Config{Seed: seed, Sender: []csf.Option{csf.WithConfig(wire.SchemeCauchy, 16, 3, 0), csf.WithAdaptation(false)}})
		if err != nil {
			t.Fatal(err)
		}
		p.Start()
		p.RunFor(20 * time.Millisecond)
		loss, forger := rand.New(rand.NewPCG(seed, 1)), rand.New(rand.NewPCG(seed, 2))
		var out run
		seen := map[psn.PSN]bool{}
		injecting := false
		p.Link.Filter = func(pk *Packet) Fate {
			switch {
			case pk.Dir != Forward || injecting:
				return Fate{}
			case pk.Kind == RDMA:
				return Fate{Drop: loss.Float64() < 0.04}
			case !forge || pk.Data[0]&0x0f != byte(wire.TypeRepair):
				return Fate{}
			}
			m, err := wire.ParseRepair(pk.Data)
			if err != nil || m.Info || m.Retx || seen[m.BlockStartPSN] {
				return Fate{}
			}
			seen[m.BlockStartPSN] = true
			switch len(seen) % 3 {
			case 0:
				m.K /= 2
				m.Present = m.Present.And(psn.FirstK(int(m.K)))
			case 1:
				m.Present.Clear(forger.IntN(int(m.K)))
			case 2:
				m.BlockStartPSN = m.BlockStartPSN.Add(int(m.K))
				m.K /= 2
				m.Present = m.Present.And(psn.FirstK(int(m.K)))
			}
			m.Symbol = make([]byte, len(m.Symbol)) // not the CSF's: ParseRepair's aliases the datagram
			for i := range m.Symbol {
				m.Symbol[i] = byte(forger.Uint32())
			}
			if b, err := m.Append(nil); err == nil && m.K > 0 {
				out.forged++
				injecting = true
				p.Inject(Forward, p.CSFAddr, b)
				injecting = false
			}
			return Fate{}
		}
		for range 4000 {
			p.Send(p.Synth.Next(400))
			p.RunFor(10 * time.Microsecond)
		}
		p.RunFor(300 * time.Millisecond)
		for q := range p.Sent {
			o := p.Outcomes[q]
			if o == nil || o.Received == 0 {
				out.lost++
				if o != nil && o.Restored > 0 {
					out.restored++
				}
			}
			if o != nil {
				out.wrong += o.Wrong
			}
		}
		out.st = p.Receiver.Stats().Flows
		return out
	}
	clean, got := do(false), do(true)
	ratio := float64(got.restored) / float64(max(clean.restored, 1))
	t.Logf("seed %d: clean %d of %d lost restored; %d forged first REPAIRs: %d of %d restored, ratio %.3f, %d wrong deliveries; "+
		"definitions conflicting %d, kept %d, confirmed %d, condemned %d, contradicted %d, refused %d",
		seed, clean.restored, clean.lost, got.forged, got.restored, got.lost, ratio, got.wrong,
		got.st.DefinitionConflicts, got.st.DefinitionsKept, got.st.DefinitionsConfirmed, got.st.DefinitionsCondemned,
		got.st.DefinitionsContradicted, got.st.DefinitionsRefused)
	if clean.wrong != 0 || got.wrong != 0 || got.forged == 0 || got.lost != clean.lost || clean.restored == 0 || ratio < 0.9 {
		t.Fatalf("seed %d (CREM_FORGE_SEED replays it): clean %d of %d restored, forged %d: %d of %d, %d wrong\n%+v",
			seed, clean.restored, clean.lost, got.forged, got.restored, got.lost, got.wrong, got.st)
	}
}
