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

// seeds returns the seeds to run and whether they were asked for (strict: every failure fails).
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

// openFindings are the faults of the engines this workload has found that main does not fix
// yet, by the failure key they show as (invariant/kind), each with its entry in the findings
// (S1..., /work/notes/soak-findings.md; their reproductions in Reproductions). On the CI seeds
// alone a failure of one of these keys is reported (t.Log) and does not fail the test; every
// other failure does, and -seed, -seeds, CREM_SOAK_SEEDS and -repro fail on every failure.
// Remove an entry when its fix is on main: the CI seeds then check it like everything else.
var openFindings = map[string]string{
	"expected-received/B->A":            "S1: the requester's PSNs between READ responses counted expected",
	"breaker/clean-path":                "S1, S2: a breaker window of lossless intervals is bad: their reports are",
	"expected-received/A->B":            "S2: a READ beyond the CRF's window counted expected",
	"progress/":                         "S3: ordered delivery stalls a go-back-N QP after S2",
	"close/idle-CSF":                    "S3: the stalled QP's flow closes as idle",
	"repair-live-config/unknown-config": "S4: REPAIR of a released configuration dropped",
	"coded-rounds/":                     "S5: three coded rounds for a block",
	"engine-counters/crf-icrc-mismatch": "S7: decoding with a re-sent READ response",
	"engine-counters/":                  "S7: restored packets whose ICRC failed, at the end of the run",
	"breaker/not-tripped":               "S9: LOSS_REPORT does not see loss the transport repairs",
	"repair-live-config/refused":        "S10: the CRF refuses INFO of contract 2 (k up to 255)",
}

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
		report(t, r, true, fmt.Sprintf("go test ./soak -run TestWorkload -repro %s -v", *flagRepro))
		return
	}
	list, strict := seeds()
	if !strict {
		t.Logf("CI seeds %v: failures of the open findings are reported, not failed (openFindings)", list)
	}
	if testing.Short() && !strict {
		list = list[:1]
	}
	start := time.Now()
	// The heap is the process's: its bound applies only to a run that has it alone.
	alone := len(list) == 1 || flag.Lookup("test.parallel").Value.String() == "1"
	for _, seed := range list {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			r := Run(NewScenario(seed), Options{CheckHeap: alone})
			report(t, r, strict, fmt.Sprintf("go test ./soak -run TestWorkload -seed %d -v", seed))
		})
	}
	t.Cleanup(func() { t.Logf("%d seeds in %v", len(list), time.Since(start).Round(time.Millisecond)) })
}

// report logs what a run did and fails the test on what it found (see openFindings); replay is
// the command that runs it again.
func report(t *testing.T, r *Result, strict bool, replay string) {
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
		if why, ok := openFindings[f.Invariant+"/"+f.Kind]; ok && !strict {
			t.Logf("    open finding %s: %s", why, f.String())
			continue
		}
		fails = append(fails, f.String())
	}
	if len(fails) > 0 {
		t.Errorf("seed %d:\n  %s\nreplay: %s", r.Seed, strings.Join(fails, "\n  "), replay)
	}
}
