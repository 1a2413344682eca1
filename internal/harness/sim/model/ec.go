package model

import (
	"math"
	"time"
)

// EC is fixed erasure coding as SDR-RDMA models it: every block of K data packets carries M
// parity packets on the same link, so the message takes N (K+M)/K injection times; when no block
// loses more than M of its K+M packets, it completes one RTT after the last is injected.
type EC struct {
	N, K, M int
	TInj    time.Duration // injection time of one packet (data or parity)
	RTT     time.Duration
}

// Completion returns the completion time when no block fails.
func (m EC) Completion() time.Duration {
	return time.Duration(float64(m.N)*float64(m.K+m.M)/float64(m.K)*float64(m.TInj)) + m.RTT
}

// BlockFailure returns the probability that some block of the message loses more than M of its
// K+M packets at independent loss p.
func (m EC) BlockFailure(p float64) float64 {
	n := m.K + m.M
	var tail float64 // P[Binomial(n, p) > M]
	for j := m.M + 1; j <= n; j++ {
		lc, _ := math.Lgamma(float64(n + 1))
		a, _ := math.Lgamma(float64(j + 1))
		b, _ := math.Lgamma(float64(n - j + 1))
		tail += math.Exp(lc - a - b + float64(j)*math.Log(p) + float64(n-j)*math.Log1p(-p))
	}
	blocks := math.Ceil(float64(m.N) / float64(m.K))
	return -math.Expm1(blocks * math.Log1p(-math.Min(tail, 1)))
}
