package sim

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/policy"
)

// comparisonGrid runs crem+tcaeth and the alternatives on one path's cells.
func comparisonGrid(t *testing.T, rate int64, rtt time.Duration, loss LossKind, sizes []int64, drops []float64, trials int) []Comparison {
	t.Helper()
	sc, _ := LookupScenario("sdr-casestudy")
	sc.Rate, sc.RTT, sc.Loss, sc.Sizes, sc.DropRates, sc.Extra, sc.Trials = rate, rtt, loss, sizes, drops, nil, trials
	if loss == LossBursty {
		sc.BurstLen = 4
	}
	schemes, err := ParseSchemes(strings.Join(append([]string{CompareScheme}, CompareAgainst...), ","))
	if err != nil {
		t.Fatal(err)
	}
	sw := Sweep{Scenario: sc, Schemes: schemes, Seed: 11}
	res, err := sw.Run()
	if err != nil {
		t.Fatal(err)
	}
	return CompareBest(res)
}

// A reduced grid of the comparison (P10): on the three paths, small and long messages at 1e-3
// and 1e-2, Bernoulli and bursty loss, crem+tcaeth's mean and p99 stay within 1.02x of the best
// of tcaeth, ec, sr-rto, sr-nack and crem-draft+tcaeth in every cell.
func TestCremTCAETHWithinBoundOfBestAlternative(t *testing.T) {
	if testing.Short() {
		t.Skip("a grid of simulations")
	}
	for _, c := range []struct {
		rate  int64
		rtt   time.Duration
		loss  LossKind
		sizes []int64
	}{
		{500e6, 20 * time.Millisecond, LossBernoulli, []int64{256 * kib, 4 * mib}},
		{400e9, 25 * time.Millisecond, LossBernoulli, []int64{64 * kib, 16 * mib}},
		{100e9, time.Millisecond, LossBernoulli, []int64{64 * kib, 16 * mib}},
		{500e6, 20 * time.Millisecond, LossBursty, []int64{4 * mib}},
		{400e9, 25 * time.Millisecond, LossBursty, []int64{16 * mib}},
	} {
		cs := comparisonGrid(t, c.rate, c.rtt, c.loss, c.sizes, []float64{1e-3, 1e-2}, 5)
		if len(cs) != 2*len(c.sizes) {
			t.Fatalf("%d bit/s, %v: %d cells compared", c.rate, c.rtt, len(cs))
		}
		for _, x := range cs {
			t.Logf("%d bit/s %v %s drop %g size %d: mean %.4f (%s) p99 %.4f (%s)", c.rate, c.rtt, c.loss, x.DropRate, x.MessageBytes,
				x.MeanRatio, x.BestMean, x.P99Ratio, x.BestP99)
			if x.Above(CompareBound) {
				t.Errorf("%d bit/s, %v, %s loss, drop %g, %d octets: crem+tcaeth %.4fx (mean) and %.4fx (p99) of the best",
					c.rate, c.rtt, c.loss, x.DropRate, x.MessageBytes, x.MeanRatio, x.P99Ratio)
			}
		}
	}
}

// CompareBest picks, per cell and per statistic, the fastest alternative, ignores schemes that
// are not alternatives, and reports the cells above the bound.
func TestCompareBestPicksTheFastestAlternative(t *testing.T) {
	res := []Result{
		{Scheme: "crem+tcaeth", DropRate: 1e-3, MessageBytes: 1, MeanS: 1.03, P99S: 1.0},
		{Scheme: "tcaeth", DropRate: 1e-3, MessageBytes: 1, MeanS: 1.0, P99S: 2.0},
		{Scheme: "crem-draft+tcaeth", DropRate: 1e-3, MessageBytes: 1, MeanS: 1.1, P99S: 1.1},
		{Scheme: "gbn", DropRate: 1e-3, MessageBytes: 1, MeanS: 0.5, P99S: 0.5}, // not an alternative
		{Scheme: "crem+tcaeth", DropRate: 1e-2, MessageBytes: 1, MeanS: 1, P99S: 1},
		{Scheme: "ec", DropRate: 1e-2, MessageBytes: 1, MeanS: 1, P99S: 1},
		{Scheme: "tcaeth", DropRate: 1e-4, MessageBytes: 1, MeanS: 1, P99S: 1}, // no crem+tcaeth
	}
	cs := CompareBest(res)
	if len(cs) != 2 {
		t.Fatalf("%d cells, want 2: %+v", len(cs), cs)
	}
	a := cs[0]
	if a.BestMean != "tcaeth" || a.BestP99 != "crem-draft+tcaeth" || math.Abs(a.MeanRatio-1.03) > 1e-12 ||
		math.Abs(a.P99Ratio-1/1.1) > 1e-12 || !a.Above(CompareBound) || cs[1].Above(CompareBound) {
		t.Fatalf("comparison %+v, %+v", a, cs[1])
	}
	var b strings.Builder
	if err := WriteComparison(&b, cs, CompareBound, true); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "1 of 2 cells above 1.02x; worst 1.030x") || strings.Count(out, "\n") != 3 {
		t.Fatalf("output:\n%s", out)
	}
}

// The cost model's expected completion (P5, P9) against the simulator's mean for crem+tcaeth on
// the lab's path: the ideal, plus the plan's cost (its repair and the chance of a round times what
// the round adds), plus the retransmitted octets of the lost packets (the same for every choice,
// left out of the comparison of choices), within one percent of the ideal.
func TestCostModelPredictsSimulatedCompletion(t *testing.T) {
	for _, c := range []struct {
		size int64
		drop float64
	}{{4 * mib, 1e-3}, {4 * mib, 1e-2}, {64 * mib, 1e-2}, {256 * kib, 1e-2}} {
		sc, _ := LookupScenario("sdr-casestudy")
		sc.Rate, sc.RTT, sc.Sizes, sc.DropRates, sc.Extra, sc.Trials = 500e6, 20*time.Millisecond, []int64{c.size}, []float64{c.drop}, nil, 10
		s, _ := LookupScheme(CompareScheme)
		sw := Sweep{Scenario: sc, Schemes: []Scheme{s}, Seed: 3}
		res, err := sw.Run()
		if err != nil {
			t.Fatal(err)
		}
		p := sw.params(Cell{Scheme: s, DropRate: c.drop, Size: c.size}, 0)
		pk, _ := writeShape(c.size, p.MTU)
		path := CostPath(&p)
		pl := policy.PlanMessage(int(pk), path)
		ideal := res[0].IdealS
		model := ideal + pl.Cost + c.drop*float64(pk)*path.Symbol.Seconds()
		t.Logf("%d octets at %g: plan %+v; model %.3fx, simulated %.3fx of the ideal", c.size, c.drop, pl, model/ideal, res[0].MeanS/ideal)
		if math.Abs(model-res[0].MeanS) > 0.01*ideal {
			t.Errorf("%d octets at %g: model %.4f s, simulated %.4f s (ideal %.4f s)", c.size, c.drop, model, res[0].MeanS, ideal)
		}
	}
}

// Under the cost rule congestion loss never raises m (C6 c): on the congested scenario's path
// the CSF of crem+tcaeth proposes no m above the one it started with.
func TestCostRuleCongestionKeepsM(t *testing.T) {
	for _, size := range []int64{16 << 20, 128 << 20} {
		p := casestudy(scheme(t, "crem+tcaeth"), size, 1e-2, 3)
		p.Loss = LossQueue
		o, err := Run(p)
		if err != nil {
			t.Fatal(err)
		}
		start := o.KM[0].M
		if o.ForwardDataLost == 0 {
			t.Fatalf("%d MiB: the queue lost nothing", size>>20)
		}
		if slices.ContainsFunc(append(slices.Clone(o.Proposed), o.KM...), func(k KM) bool { return k.M > start }) {
			t.Fatalf("%d MiB: m rose from %d under congestion: proposed %v, used %v", size>>20, start, o.Proposed, o.KM)
		}
	}
}
