package sim

import (
	"errors"
	"strings"
	"testing"
)

// A trial that fails once it runs (here gbn's WRITE completes with retries exhausted at half
// the packets lost) fails the sweep with a *TrialError naming the cell and the trial, the same
// one when run again (the sweep is deterministic); a cell whose parameters no trial can take
// fails before any trial runs, with an error that is not a TrialError.
func TestSweepTrialErrorS14(t *testing.T) {
	sc, err := LookupScenario("metro")
	if err != nil {
		t.Fatal(err)
	}
	sc.DropRates, sc.Sizes, sc.Trials = []float64{0.5}, []int64{256 * kib}, 2
	// At 1 Gbit/s the trial's time limit (200 ideal completions) outlasts the QP's backed-off
	// timeouts (191 RTOs before retry exceeded, protocol notes R34), so that the trial fails
	// rather than ends incomplete.
	sc.Rate = 1e9
	schemes, err := ParseSchemes("gbn")
	if err != nil {
		t.Fatal(err)
	}
	sw := Sweep{Scenario: sc, Schemes: schemes, Seed: 1, Workers: 1}
	var first *TrialError
	for range 2 {
		_, err := sw.Run()
		var te *TrialError
		if !errors.As(err, &te) {
			t.Fatalf("want a TrialError, got %v", err)
		}
		if te.Cell.Scheme.Name != "gbn" || te.Cell.DropRate != 0.5 || te.Cell.Size != 256*kib ||
			!strings.Contains(err.Error(), "retry exceeded") {
			t.Fatalf("trial error %+v: %v", te, err)
		}
		if first != nil && (first.Trial != te.Trial || first.Err.Error() != te.Err.Error()) {
			t.Fatalf("not deterministic: %v then %v", first, te)
		}
		first = te
	}

	bad := sw
	bad.Scenario.MTU = 1000
	bad.Scenario.DropRates = []float64{1e-3}
	ran := 0
	bad.Progress = func(int, int) { ran++ }
	_, err = bad.Run()
	var te *TrialError
	if err == nil || errors.As(err, &te) || !strings.Contains(err.Error(), "MTU 1000") || ran != 0 {
		t.Fatalf("MTU 1000: %v (a TrialError: %v), %d trials ran", err, te != nil, ran)
	}
}

// A trial stopped at its limit is a result (a lower bound, counted in incomplete), not an
// error.
func TestSweepIncompleteIsNoErrorS7(t *testing.T) {
	sc, err := LookupScenario("sdr-casestudy")
	if err != nil {
		t.Fatal(err)
	}
	sc.DropRates, sc.Sizes, sc.Extra, sc.Trials = []float64{0.05}, []int64{16 * mib}, nil, 1
	schemes, err := ParseSchemes("gbn")
	if err != nil {
		t.Fatal(err)
	}
	sw := Sweep{Scenario: sc, Schemes: schemes, Seed: 1, Workers: 1}
	res, err := sw.Run()
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Incomplete != 1 || res[0].MeanS <= 10*res[0].IdealS {
		t.Fatalf("%+v", res)
	}
}
