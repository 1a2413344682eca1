package model

import (
	"math"
	"testing"
	"time"
)

// The numeric mean agrees with Monte Carlo and with closed forms at the edges.
func TestMeanAgreesWithMonteCarlo(t *testing.T) {
	cases := []SR{
		{N: 256, TInj: 82 * time.Nanosecond, RTO: 75 * time.Millisecond, RTT: 25 * time.Millisecond, P: 1e-2},
		{N: 16384, TInj: 82 * time.Nanosecond, RTO: 75 * time.Millisecond, RTT: 25 * time.Millisecond, P: 1e-3},
		{N: 262144, TInj: 82 * time.Nanosecond, RTO: 75 * time.Millisecond, RTT: 25 * time.Millisecond, P: 1e-4},
		{N: 262144, TInj: 82 * time.Nanosecond, RTO: 75 * time.Millisecond, RTT: 25 * time.Millisecond, P: 1e-2},
	}
	for _, m := range cases {
		mean, err := m.Mean()
		if err != nil {
			t.Fatal(err)
		}
		s, err := m.Sample(4000, 1)
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		for _, d := range s {
			sum += d.Seconds()
		}
		mc := sum / float64(len(s))
		if rel := math.Abs(mc-mean.Seconds()) / mean.Seconds(); rel > 0.02 {
			t.Errorf("%+v: numeric mean %v, Monte Carlo %v (%.1f%% apart)", m, mean, time.Duration(mc*1e9), rel*100)
		}
		t.Logf("N=%d p=%v: mean %v (%.3fx ideal), MC %v", m.N, m.P, mean, mean.Seconds()/m.Ideal().Seconds(), time.Duration(mc*1e9))
	}
}

// Without loss the model is the ideal; with one certain round the closed form holds.
func TestEdges(t *testing.T) {
	m := SR{N: 1000, TInj: time.Microsecond, RTO: time.Millisecond, RTT: 2 * time.Millisecond}
	got, err := m.Mean()
	if err != nil || got != m.Ideal() {
		t.Fatalf("lossless mean %v (%v), want %v", got, err, m.Ideal())
	}
	// One packet, p: E[Y-1] = p/(1-p) rounds.
	one := SR{N: 1, TInj: time.Microsecond, RTO: time.Millisecond, RTT: 0, P: 0.5}
	got, _ = one.Mean()
	want := 1e-6 + (1e-3+1e-6)*0.5/0.5
	if math.Abs(got.Seconds()-want)/want > 0.01 {
		t.Fatalf("one packet at p=0.5: %v, want %v s", got, want)
	}
	if _, err := (SR{}).Mean(); err == nil {
		t.Fatal("zero parameters accepted")
	}
}

// Fixed erasure coding: parity stretches the injection by (K+M)/K; blocks fail by the binomial
// tail.
func TestEC(t *testing.T) {
	m := EC{N: 1024, K: 32, M: 8, TInj: time.Microsecond, RTT: time.Millisecond}
	if got, want := m.Completion(), 1280*time.Microsecond+time.Millisecond; got != want {
		t.Fatalf("completion %v, want %v", got, want)
	}
	if f := m.BlockFailure(1e-4); f > 1e-15 || f < 0 {
		t.Fatalf("failure at 1e-4: %g", f)
	}
	if f := m.BlockFailure(0.2); f < 0.99 {
		t.Fatalf("failure at 0.2: %g", f)
	}
}
