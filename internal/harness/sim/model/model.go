// Package model is the analytical model of message completion time under selective repeat
// with per-packet retransmission timeouts, as SDR-RDMA (arXiv 2505.05366) states it: packet i of
// N is injected at i T_inj; a lost transmission is repeated RTO + T_inj later, so packet i's
// last transmission leaves at
//
//	X_i = i T_inj + (RTO + T_inj)(Y_i - 1)
//
// with Y_i the geometric number of transmissions it needs (success probability 1 - p), and the
// message completes at max_i X_i + RTT. Mean computes E[max X_i] + RTT numerically from the
// exact distribution of the maximum; Sample draws completion times by Monte Carlo. The
// simulator's sr-rto scheme is validated against it.
package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// SR is the model's parameters.
type SR struct {
	N    int           // packets in the message
	TInj time.Duration // injection time of one packet
	RTO  time.Duration // retransmission timeout
	RTT  time.Duration
	P    float64 // per-transmission loss probability
}

func (m SR) validate() error {
	if m.N <= 0 || m.TInj <= 0 || m.RTO < 0 || m.RTT < 0 || m.P < 0 || m.P >= 1 {
		return fmt.Errorf("model: invalid parameters %+v", m)
	}
	return nil
}

// Ideal is the lossless completion time N T_inj + RTT.
func (m SR) Ideal() time.Duration { return time.Duration(m.N)*m.TInj + m.RTT }

// cdf returns P(max_i X_i <= t), t in seconds, for i = 1..N.
//
// Packet i meets the bound when Y_i <= 1 + floor((t - i T)/c), c = RTO + T, which has
// probability 1 - p^(1 + floor(...)). The packets sharing a value of the floor form a contiguous
// range of i, so the product takes one term per round count.
func (m SR) cdf(t float64) float64 {
	T := m.TInj.Seconds()
	c := m.RTO.Seconds() + T
	n := float64(m.N)
	if t < n*T {
		return 0
	}
	if m.P == 0 {
		return 1
	}
	logF := 0.0
	lp := math.Log(m.P)
	for y := 0.0; ; y++ {
		// i with floor((t - iT)/c) == y: t - (y+1)c < iT <= t - yc.
		hi := math.Min(n, math.Floor((t-y*c)/T))
		lo := math.Max(0, math.Floor((t-(y+1)*c)/T)) // i > lo
		if hi > lo {
			q := math.Exp(lp * (y + 1))
			logF += (hi - lo) * math.Log1p(-q)
		}
		if lo <= 0 {
			break
		}
	}
	return math.Exp(logF)
}

// Mean returns the expected completion time E[max_i X_i] + RTT.
func (m SR) Mean() (time.Duration, error) {
	if err := m.validate(); err != nil {
		return 0, err
	}
	T := m.TInj.Seconds()
	c := m.RTO.Seconds() + T
	start := float64(m.N) * T
	// E[max] = start + integral over [start, inf) of 1 - F(t). F is a step function; integrate
	// with steps small against the round c until the tail is negligible.
	h := c / 4096
	sum := 0.0
	for k := 0; ; k++ {
		t := start + (float64(k)+0.5)*h
		tail := 1 - m.cdf(t)
		sum += tail * h
		if tail < 1e-12 || k > 4096*200 {
			break
		}
	}
	return time.Duration((start+sum)*float64(time.Second)) + m.RTT, nil
}

// Sample returns trials Monte Carlo draws of the completion time with the given seed.
func (m SR) Sample(trials int, seed uint64) ([]time.Duration, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(seed, 0x5d))
	T, c := m.TInj, m.RTO+m.TInj
	out := make([]time.Duration, trials)
	for k := range out {
		worst := time.Duration(m.N) * T
		if m.P > 0 {
			// Visit the packets whose first transmission is lost by geometric skips.
			lq := math.Log1p(-m.P)
			for i := 0; ; {
				i += 1 + int(math.Floor(math.Log(1-r.Float64())/lq))
				if i > m.N || i <= 0 {
					break
				}
				y := 2
				for r.Float64() < m.P {
					y++
				}
				if x := time.Duration(i)*T + c*time.Duration(y-1); x > worst {
					worst = x
				}
			}
		}
		out[k] = worst + m.RTT
	}
	return out, nil
}
