package soak

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	flagSeeds = flag.Int("seeds", 0, "run this many seeds from -first (default: the CI seeds; also CREM_SOAK_SEEDS)")
	flagFirst = flag.Uint64("first", 1, "the first seed of -seeds")
	flagSeed  = flag.Uint64("seed", 0, "replay this seed only")
	flagRepro = flag.String("repro", "", "run this reproduction (soak.Reproductions) instead of seeds")
)

// seeds returns the seeds to run and whether they were asked for (rather than the CI seeds).
func seeds() ([]uint64, bool) {
	if *flagSeed != 0 {
		return []uint64{*flagSeed}, true
	}
	n := *flagSeeds
	if n == 0 {
		if v, err := strconv.Atoi(os.Getenv("CREM_SOAK_SEEDS")); err == nil && v > 0 {
			n = v
		}
	}
	if n > 0 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = *flagFirst + uint64(i)
		}
		return out, true
	}
	return ciSeeds, false
}

// ciSeeds run in every `go test ./...`.
var ciSeeds = []uint64{1, 2, 3}

// TestWorkload runs the randomized workload (protocol notes K1-K9) over the CI seeds, or over the
// seeds -seeds, -first and -seed (or CREM_SOAK_SEEDS) ask for, two at a time on two cores, and
// fails with the seed, the phase and the command that replays it.
func TestWorkload(t *testing.T) {
	if *flagRepro != "" {
		mk := Reproductions[*flagRepro]
		if mk == nil {
			t.Fatalf("no reproduction %q", *flagRepro)
		}
		r := Run(mk(), Options{CheckHeap: true})
		report(t, r, fmt.Sprintf("go test ./internal/harness/soak -run TestWorkload -repro %s -v", *flagRepro))
		return
	}
	list, asked := seeds()
	if testing.Short() && !asked {
		list = list[:1]
	}
	start := time.Now()
	// The heap is the process's: its bound applies only to a run that has it alone.
	alone := len(list) == 1 || flag.Lookup("test.parallel").Value.String() == "1"
	for _, seed := range list {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			r := Run(NewScenario(seed), Options{CheckHeap: alone})
			report(t, r, fmt.Sprintf("go test ./internal/harness/soak -run TestWorkload -seed %d -v", seed))
		})
	}
	t.Cleanup(func() { t.Logf("%d seeds in %v", len(list), time.Since(start).Round(time.Millisecond)) })
}

// report logs what a run did and fails the test on what it found; replay is the command that
// runs it again.
func report(t *testing.T, r *Result, replay string) {
	t.Helper()
	t.Log(r.Summary())
	for _, l := range r.PhaseLog {
		t.Log("   ", l)
	}
	t.Logf("    requests %v; LOSS_REPORTs %d (%d judged lossless); breaker trips %d, CLOSE reason 4 %d, restarts %d; restored %d, coded retransmission symbols %d; forced changes %d, refusals %d; own-ACK checks %d; heap %d MiB; %d events",
		r.ByOp, r.LossReports, r.Judged, r.Trips, r.Closes4, r.Restarts, r.Restored, r.CodedRetx, r.Forced, r.Refusals, r.OwnAckChecks, r.PeakHeap>>20, r.Events)
	if r.Err != nil {
		t.Errorf("seed %d: %v\nreplay: %s", r.Seed, r.Err, replay)
	}
	var fails []string
	for _, f := range r.Failures {
		fails = append(fails, f.String())
	}
	if len(fails) > 0 {
		t.Errorf("seed %d:\n  %s\nreplay: %s", r.Seed, strings.Join(fails, "\n  "), replay)
	}
}

// TestReproductions runs every scripted reproduction of a fault the workload found:
// each must pass every invariant.
func TestReproductions(t *testing.T) {
	for name, mk := range Reproductions {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			report(t, Run(mk(), Options{}), fmt.Sprintf("go test ./internal/harness/soak -run TestWorkload -repro %s -v", name))
		})
	}
}
