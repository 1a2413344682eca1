package policy

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The lower bound matches the chi-square quantiles of the exact Poisson interval
// (lambda_L = chi2(alpha; 2x) / 2), and the tail at it is alpha.
func TestPoissonLowerBoundMatchesTheExactInterval(t *testing.T) {
	for _, c := range []struct {
		x     uint64
		alpha float64
		want  float64
	}{
		{1, 0.05, 0.05129}, {2, 0.05, 0.3554}, {5, 0.05, 1.970}, {10, 0.05, 5.425},
		{1, 0.001, 0.0010005}, {3, 0.001, 0.1905}, {10, 0.001, 2.9605},
	} {
		got := PoissonLowerBound(c.x, c.alpha)
		if math.Abs(got-c.want) > 2e-3*c.want {
			t.Errorf("x %d, alpha %g: %g, want %g", c.x, c.alpha, got, c.want)
		}
		if tail := poissonAtLeast(c.x, got); math.Abs(tail-c.alpha) > 1e-6 {
			t.Errorf("x %d, alpha %g: the tail at the bound is %g", c.x, c.alpha, tail)
		}
	}
	if PoissonLowerBound(0, 0.001) != 0 {
		t.Error("no loss bounds the rate by something")
	}
}

// On a steady path the bound stays below the true rate almost always (it is a lower bound at
// 99 percent over seven windows); after a step it exceeds the old rate within a few intervals.
func TestLossEvidenceBoundsASteadyRateAndSeesAStep(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 1))
	draw := func(n uint32, p float64) uint32 {
		var l uint32
		for range n {
			if rng.Float64() < p {
				l++
			}
		}
		return l
	}
	for _, p := range []float64{1e-4, 1e-3, 1e-2} {
		var e LossEvidence
		above := 0
		const intervals = 3000
		for range intervals {
			e.Add(draw(312, p), 312)
			if e.LowerBound() > p {
				above++
			}
		}
		// Seven windows at 1 percent each, correlated: fewer than 10 percent of intervals.
		if above > intervals/10 {
			t.Errorf("steady at %g: the bound exceeded the rate in %d of %d intervals", p, above, intervals)
		}
	}
	var e LossEvidence
	for range 100 {
		e.Add(draw(312, 1e-4), 312)
	}
	for i := 1; ; i++ {
		e.Add(draw(312, 1e-2), 312)
		if e.LowerBound() > 1e-3 {
			t.Logf("a step from 1e-4 to 1e-2 bounds the rate above 1e-3 after %d intervals", i)
			break
		}
		if i == 4 {
			t.Fatalf("a step from 1e-4 to 1e-2: the bound %g after 4 intervals", e.LowerBound())
		}
	}
}

// Above the counts it sums exactly, the bound is the closed form, within half a percent of the
// exact one where both apply, and finite and below the count however large the count.
func TestPoissonLowerBoundLargeCounts(t *testing.T) {
	for _, alpha := range []float64{0.01, 0.001} {
		for x := uint64(40); x <= exactBoundMax; x++ {
			exact := PoissonLowerBound(x, alpha)
			v := float64(x)
			z := -normalQuantile(alpha)
			c := 1 - 1/(9*v) - z/(3*math.Sqrt(v))
			if wh := v * c * c * c; math.Abs(wh-exact) > 0.005*exact {
				t.Errorf("x %d, alpha %g: closed form %g, exact %g", x, alpha, wh, exact)
			}
		}
		prev := 0.0
		for _, x := range []uint64{exactBoundMax + 1, 1000, 1e5, 1e7} {
			b := PoissonLowerBound(x, alpha)
			if math.IsNaN(b) || b <= prev || b >= float64(x) || b < float64(x)-4*math.Sqrt(float64(x)) {
				t.Errorf("x %d, alpha %g: bound %g", x, alpha, b)
			}
			prev = b
		}
	}
}

// PoissonUpperBound (P15): the chance of x or fewer at the bound is alpha, within a few percent
// of alpha from x = 0 (where the exact bound is -ln alpha) to counts in the hundreds.
func TestPoissonUpperBound(t *testing.T) {
	for _, alpha := range []float64{0.01, 0.05} {
		for _, x := range []uint64{0, 1, 2, 5, 10, 50, 200} {
			ub := PoissonUpperBound(x, alpha)
			if head := 1 - poissonAtLeast(x+1, ub); math.Abs(head-alpha) > 0.05*alpha {
				t.Errorf("x %d, alpha %g: bound %g, P[<= x] there %g", x, alpha, ub, head)
			}
		}
	}
	if ub := PoissonUpperBound(0, 0.01); math.Abs(ub+math.Log(0.01)) > 0.01 {
		t.Errorf("no loss: %g, want -ln 0.01", ub)
	}
}
