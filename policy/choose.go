package policy

import "math"

// Defaults of the RECOMMENDED policy (RULINGS C6).
const (
	DefaultEpsilon = 1e-4 // target probability that a block loses more than m packets
	DefaultRho     = 0.01 // retransmission budget: blocks with any loss that may need a round trip
	DefaultK       = 32
)

// BlockLossProbability returns the probability that a block of k packets loses at least one
// packet under independent loss with rate p: 1 - (1-p)^k.
func BlockLossProbability(k int, p float64) float64 {
	return -math.Expm1(float64(k) * math.Log1p(-p))
}

// TailAbove returns P[Binomial(n, p) > m], computed in log space so it stays exact for tiny p.
func TailAbove(n, m int, p float64) float64 {
	if m >= n {
		return 0
	}
	if p <= 0 {
		return 0
	}
	if p >= 1 {
		return 1
	}
	// Sum the upper tail directly; the terms fall quickly for the small p CREM sees.
	lp, lq := math.Log(p), math.Log1p(-p)
	lgN, _ := math.Lgamma(float64(n + 1))
	sum := 0.0
	for i := m + 1; i <= n; i++ {
		lgI, _ := math.Lgamma(float64(i + 1))
		lgNI, _ := math.Lgamma(float64(n - i + 1))
		term := math.Exp(lgN - lgI - lgNI + float64(i)*lp + float64(n-i)*lq)
		sum += term
		if term < sum*1e-17 && float64(i) > float64(n)*p {
			break
		}
	}
	return math.Min(sum, 1)
}

// ChooseM returns the RECOMMENDED repair count for a block of k sources at loss rate p:
// 0 when coded retransmission alone meets the retransmission budget rho, else the smallest m
// with P[Binomial(k+m, p) > m] < epsilon. The result never exceeds maxM nor 255 - k (C6 a).
func ChooseM(k int, p, epsilon, rho float64, maxM int) int {
	if limit := 255 - k; maxM > limit {
		maxM = limit
	}
	if maxM <= 0 || p <= 0 {
		return 0
	}
	if BlockLossProbability(k, p) < rho {
		return 0
	}
	for m := 1; m < maxM; m++ {
		if TailAbove(k+m, m, p) < epsilon {
			return m
		}
	}
	return maxM
}
