package policy

import "math"

// EvidenceIntervals is how many of the latest LOSS_REPORT intervals a LossEvidence keeps.
const EvidenceIntervals = 128

// EvidenceConfidence is the one-sided confidence of LossEvidence's lower bound: a steady path's
// chance fluctuations stay under it, a step of the loss clears it within a few intervals (P12).
const EvidenceConfidence = 0.99

// LossEvidence keeps the transmission loss of the latest intervals, for the lowest loss rate they
// show with confidence: what the cost rule raises m for (P12). The zero value is empty.
type LossEvidence struct {
	lost, expected [EvidenceIntervals]uint32
	at, n          int
}

// Add records one interval: lost of expected source packets lost to transmission.
func (e *LossEvidence) Add(lost, expected uint32) {
	e.lost[e.at], e.expected[e.at] = min(lost, expected), expected
	e.at = (e.at + 1) % EvidenceIntervals
	e.n = min(e.n+1, EvidenceIntervals)
}

// LowerBound is the highest, over the latest 2, 4, 8, ... EvidenceIntervals intervals (or all
// there are), of the loss rate's lower confidence bound at EvidenceConfidence: the losses are
// taken as a Poisson count, so one loss, or two in a few hundred packets, bound the rate by
// almost nothing, while a handful in two intervals or a steady rate over many do. The recent
// windows let a step show within a few intervals; the long ones let a low steady rate show at
// all. A single interval is no window: one burst of chance would then be enough.
func (e *LossEvidence) LowerBound() float64 {
	var best float64
	var lost, expected uint64
	next := 2
	for i := 1; i <= e.n; i++ {
		j := (e.at - i + EvidenceIntervals) % EvidenceIntervals
		lost += uint64(e.lost[j])
		expected += uint64(e.expected[j])
		if i != next && i != e.n {
			continue
		}
		next *= 2
		if expected > 0 && lost > 0 {
			best = max(best, PoissonLowerBound(lost, 1-EvidenceConfidence)/float64(expected))
		}
	}
	return min(best, 1)
}

// PoissonLowerBound is the lambda at which a Poisson count reaches x or more with probability
// alpha: the one-sided lower confidence bound of the mean at 1 - alpha, for x >= 1 (0 for
// x = 0). Found by bisection on the upper tail, which rises with lambda.
func PoissonLowerBound(x uint64, alpha float64) float64 {
	if x == 0 {
		return 0
	}
	if x > exactBoundMax {
		// Wilson-Hilferty: the chi-square quantile in closed form, within a fraction of a
		// percent from here on; the sum below would take x terms per step and underflow
		// (e^-lambda) for counts in the hundreds.
		z := -normalQuantile(alpha)
		v := float64(x)
		c := 1 - 1/(9*v) - z/(3*math.Sqrt(v))
		return v * c * c * c
	}
	lo, hi := 0.0, float64(x)
	for range 60 {
		mid := (lo + hi) / 2
		if poissonAtLeast(x, mid) < alpha {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// PoissonUpperBound is the lambda at which a Poisson count reaches at most x with probability
// alpha: the one-sided upper confidence bound of the mean at 1 - alpha. Wilson-Hilferty's
// closed form of the chi-square quantile (2x + 2 degrees of freedom), within half a percent of
// the exact bound from x = 0 on (4.61 against -ln 0.01 = 4.605 at 99 percent): what the draft's
// rule lowers m for (P15).
func PoissonUpperBound(x uint64, alpha float64) float64 {
	z := -normalQuantile(alpha)
	v := float64(x) + 1
	c := 1 - 1/(9*v) + z/(3*math.Sqrt(v))
	return v * c * c * c
}

// exactBoundMax is the largest count whose bound PoissonLowerBound finds from the exact tail.
const exactBoundMax = 64

// normalQuantile is the standard normal quantile of p in (0, 1).
func normalQuantile(p float64) float64 { return -math.Sqrt2 * math.Erfcinv(2*p) }

// poissonAtLeast is P[Poisson(lambda) >= x], as one minus the head, summed in log space.
func poissonAtLeast(x uint64, lambda float64) float64 {
	if lambda <= 0 {
		return 0
	}
	head, term := 0.0, math.Exp(-lambda)
	for k := uint64(0); k < x; k++ {
		if k > 0 {
			term *= lambda / float64(k)
		}
		head += term
	}
	return max(1-head, 0)
}
