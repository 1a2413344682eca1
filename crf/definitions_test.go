package crf_test

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/internal/harness/cremtest"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// forgery is how a forger at the CSF's address redefines a block (E66).
type forgery int

const (
	forgeNone         forgery = iota
	forgeKHalved              // just ahead of the block's first REPAIR: half its k
	forgeCleared              // just ahead of the block's first REPAIR: a present position cleared
	forgeAfterSources         // once the block's sources passed, its genuine REPAIRs held up on the path: half its k
	forgeAhead                // before the block's sources (E60): the next block's, half its k
	forgeLater                // just after the block's first REPAIR: half its k
)

var forgeries = [...]string{"none", "k-halved", "position-cleared", "after-sources", "ahead", "genuine-first"}

func (f forgery) String() string { return forgeries[f] }

// forgeRun is the outcome of one run of forgeRunWith.
type forgeRun struct {
	lost, restored, abandoned, wrong, forged int
	st                                       crf.FlowStats
}

// forgeRunWith sends n sources of a k, m flow through a pair whose link drops each source with
// probability loss (its own random stream of seed, so that a clean run and a forged one lose the
// same sources) while a forger redefines every block's first REPAIR as kind says. hold delays
// the CSF's REPAIRs on the path.
func forgeRunWith(t *testing.T, seed uint64, kind forgery, hold time.Duration, k, m, n int, loss float64) forgeRun {
	t.Helper()
	p, err := cremtest.NewPair(cremtest.Config{Seed: seed,
		Sender: []csf.Option{csf.WithConfig(wire.SchemeCauchy, k, m, 0), csf.WithAdaptation(false)}})
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	p.RunFor(20 * time.Millisecond)
	if _, ok := p.Sender.Config(); !ok {
		t.Fatal("not established")
	}
	lossRng := rand.New(rand.NewPCG(seed, 11))
	forgeRng := rand.New(rand.NewPCG(seed, 12))
	var run forgeRun
	seen := map[psn.PSN]bool{}
	injecting := false
	var late time.Duration
	forge := func(g wire.Repair, start psn.PSN, delay time.Duration) {
		f := g
		f.BlockStartPSN = start
		switch kind {
		case forgeCleared:
			var pos []int
			f.Present.Each(func(j int) { pos = append(pos, j) })
			f.Present.Clear(pos[forgeRng.IntN(len(pos))])
		default:
			if f.K < 2 {
				return
			}
			f.K /= 2
			f.Present = f.Present.And(psn.FirstK(int(f.K)))
		}
		f.Symbol = make([]byte, len(g.Symbol))
		for i := range f.Symbol {
			f.Symbol[i] = byte(forgeRng.Uint32())
		}
		b, err := f.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		run.forged++
		injecting, late = true, delay
		p.Inject(cremtest.Forward, p.CSFAddr, b)
		injecting, late = false, 0
	}
	p.Link.Filter = func(pk *cremtest.Packet) cremtest.Fate {
		if pk.Dir != cremtest.Forward {
			return cremtest.Fate{}
		}
		if injecting {
			return cremtest.Fate{Delay: late}
		}
		if pk.Kind == cremtest.RDMA {
			if lossRng.Float64() < loss {
				return cremtest.Fate{Drop: true}
			}
			return cremtest.Fate{}
		}
		if pk.Data[0]&0x0f != byte(wire.TypeRepair) {
			return cremtest.Fate{}
		}
		g, err := wire.ParseRepair(pk.Data)
		if err != nil || g.Info || g.Retx {
			return cremtest.Fate{}
		}
		if kind == forgeNone || seen[g.BlockStartPSN] {
			return cremtest.Fate{Delay: hold}
		}
		seen[g.BlockStartPSN] = true
		switch kind {
		case forgeKHalved, forgeCleared, forgeAfterSources:
			forge(g, g.BlockStartPSN, 0)
		case forgeAhead:
			forge(g, g.BlockStartPSN.Add(int(g.K)), 0)
		case forgeLater:
			forge(g, g.BlockStartPSN, 100*time.Microsecond)
		}
		return cremtest.Fate{Delay: hold}
	}
	for range n {
		p.Send(p.Synth.Next(300))
		p.RunFor(10 * time.Microsecond)
	}
	p.RunFor(300 * time.Millisecond)
	for q, sent := range p.Sent {
		o := p.Outcomes[q]
		if o == nil || o.Received == 0 {
			run.lost++
			if o != nil && o.Restored > 0 {
				run.restored++
			}
		}
		if o != nil {
			run.abandoned += o.Abandoned
			run.wrong += o.Wrong
		}
		_ = sent
	}
	run.st = p.Receiver.Stats().Flows
	return run
}

// TestForgedDefinitionsMeasure prints the restorations under each forgery against a clean run:
// CREM_FORGE_SEEDS=n runs n seeds (default 1).
func TestForgedDefinitionsMeasure(t *testing.T) {
	seeds := 1
	if s, err := strconv.Atoi(os.Getenv("CREM_FORGE_SEEDS")); err == nil && s > 0 {
		seeds = s
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		for kind := forgeKHalved; kind <= forgeLater; kind++ {
			hold := holdFor(kind)
			clean := forgeRunWith(t, seed, forgeNone, hold, 16, 2, 3000, lossRate())
			got := forgeRunWith(t, seed, kind, hold, 16, 2, 3000, lossRate())
			t.Logf("seed %d %v: clean %d/%d restored, forged %d: %d/%d restored (%.2f), %d wrong; %+v",
				seed, kind, clean.restored, clean.lost, got.forged, got.restored, got.lost,
				float64(got.restored)/float64(max(clean.restored, 1)), got.wrong, got.st)
		}
	}
}

// holdFor is how long the path holds up the CSF's REPAIRs in a run of kind (and its clean run):
// the forger's REPAIR sent after the sources is then alone at the CRF for a while.
func holdFor(kind forgery) time.Duration {
	if kind == forgeAfterSources {
		return 300 * time.Microsecond
	}
	return 0
}

func lossRate() float64 {
	if v, err := strconv.ParseFloat(os.Getenv("CREM_FORGE_LOSS"), 64); err == nil {
		return v
	}
	return 0.02
}
