package sim

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
)

// A sweep cut short (RunContext's context cancelled) is no error: each cell summarises the
// trials that completed, marked interrupted with the trials it planned and those cancelled in
// flight; a cell no trial of which completed has no figures and says it was not run.
func TestSweepCancelledReportsInterruptedCells(t *testing.T) {
	sc, err := LookupScenario("metro")
	if err != nil {
		t.Fatal(err)
	}
	sc.DropRates, sc.Sizes, sc.Extra, sc.Trials = []float64{1e-3}, []int64{mib, 2 * mib}, nil, 20
	schemes, err := ParseSchemes("tcaeth")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done atomic.Int32
	sw := Sweep{Scenario: sc, Schemes: schemes, Seed: 1, Workers: 1, Progress: func(d, total int) {
		if done.Add(1) == 3 {
			cancel() // after 3 of the first cell's 20 trials
		}
	}}
	res, err := sw.RunContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("%d cells", len(res))
	}
	first, second := res[0], res[1]
	if !first.Interrupted || first.Trials != 3 || first.TrialsPlanned != 20 || first.MeanS <= 0 || first.IdealS <= 0 {
		t.Errorf("first cell: %+v", first)
	}
	if !second.Interrupted || second.Trials != 0 || second.TrialsPlanned != 20 || second.TrialsCancelled != 0 {
		t.Errorf("second cell: %+v", second)
	}
	var b strings.Builder
	if err := WriteTable(&b, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "3 of 20, interrupted (0 cancelled)") || !strings.Contains(b.String(), "0 of 20, not run") ||
		strings.Contains(b.String(), "NaN") || strings.Contains(b.String(), "Inf") {
		t.Errorf("table:\n%s", b.String())
	}
	// Uncancelled, the same sweep is complete and not marked.
	sw.Progress = nil
	res, err = sw.RunContext(context.Background())
	if err != nil || res[0].Interrupted || res[0].Trials != 20 || res[0].TrialsPlanned != 0 {
		t.Fatalf("%v %+v", err, res)
	}
}

// A trial whose Stop becomes true ends with ErrCancelled and no outcome.
func TestTrialStopCancels(t *testing.T) {
	sc, err := LookupScenario("metro")
	if err != nil {
		t.Fatal(err)
	}
	schemes, err := ParseSchemes("tcaeth")
	if err != nil {
		t.Fatal(err)
	}
	sw := Sweep{Scenario: sc, Schemes: schemes, Seed: 1}
	p := sw.params(Cell{Scheme: schemes[0], DropRate: 1e-3, Size: 64 * mib}, 0)
	var stop atomic.Bool
	stop.Store(true)
	p.Stop = &stop
	if _, err := Run(p); err != ErrCancelled {
		t.Fatalf("Run: %v, want ErrCancelled", err)
	}
}
