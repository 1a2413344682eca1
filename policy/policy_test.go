package policy

import (
	"math"
	"math/big"
	"testing"
	"time"
)

// exactTail computes P[Binomial(n, p) > m] with exact rationals, independently of TailAbove.
func exactTail(n, m int, p float64) float64 {
	pr := new(big.Rat).SetFloat64(p)
	q := new(big.Rat).Sub(big.NewRat(1, 1), pr)
	sum := new(big.Rat)
	for i := m + 1; i <= n; i++ {
		c := new(big.Rat).SetInt(new(big.Int).Binomial(int64(n), int64(i)))
		for j := 0; j < i; j++ {
			c.Mul(c, pr)
		}
		for j := 0; j < n-i; j++ {
			c.Mul(c, q)
		}
		sum.Add(sum, c)
	}
	f, _ := sum.Float64()
	return f
}

func TestTailAboveMatchesExact(t *testing.T) {
	for _, n := range []int{5, 33, 40, 64} {
		for _, m := range []int{0, 1, 2, 4, 8} {
			for _, p := range []float64{1e-6, 1e-4, 1e-3, 0.01, 0.05, 0.3} {
				got, want := TailAbove(n, m, p), exactTail(n, m, p)
				if math.Abs(got-want) > 1e-12+1e-9*want {
					t.Errorf("TailAbove(%d,%d,%g) = %g, want %g", n, m, p, got, want)
				}
			}
		}
	}
}

// TestChooseMBinomialC6 checks the RECOMMENDED policy of the draft's Redundancy section as
// RULINGS C6 states it: m = 0 when 1-(1-p)^k < rho, else the smallest m with
// P[Binomial(k+m, p) > m] < epsilon.
func TestChooseMBinomialC6(t *testing.T) {
	cases := []struct {
		k    int
		p    float64
		want int
	}{
		{32, 0, 0},
		{32, 1e-5, 0}, // 1-(1-p)^32 = 3.2e-4 < 0.01
		{32, 1e-4, 0}, // 3.2e-3 < 0.01
		{32, 1e-3, 2}, // 3.1e-2 >= rho; m=1 gives 5.2e-4, m=2 gives 5.9e-6
		{32, 0.01, 4}, // m=3 gives 3.8e-4, m=4 gives 2.9e-5
		{32, 0.05, 9},
		{8, 1e-3, 0}, // 8e-3 < rho
	}
	for _, c := range cases {
		got := ChooseM(c.k, c.p, DefaultEpsilon, DefaultRho, 64)
		if got != c.want {
			t.Errorf("ChooseM(k=%d, p=%g) = %d, want %d", c.k, c.p, got, c.want)
		}
		if got > 0 {
			if exactTail(c.k+got, got, c.p) >= DefaultEpsilon {
				t.Errorf("k=%d p=%g: m=%d misses epsilon", c.k, c.p, got)
			}
			if got > 1 && exactTail(c.k+got-1, got-1, c.p) < DefaultEpsilon {
				t.Errorf("k=%d p=%g: m=%d is not the smallest", c.k, c.p, got)
			}
		}
	}
}

// TestChooseMLimitsC6a: m never exceeds Max m nor 255 - k.
func TestChooseMLimitsC6a(t *testing.T) {
	if got := ChooseM(32, 0.3, DefaultEpsilon, DefaultRho, 6); got != 6 {
		t.Errorf("capped by max m: %d", got)
	}
	if got := ChooseM(250, 0.3, DefaultEpsilon, DefaultRho, 64); got != 5 {
		t.Errorf("capped by 255-k: %d", got)
	}
}

// TestHysteresisC6e: m moves only after two consecutive intervals choose the same new value,
// except an immediate raise when one interval's loss exceeds twice the estimate.
func TestHysteresisC6e(t *testing.T) {
	s := NewMSelector(2)
	if m, ch := s.Offer(4, 0.011, 0.01, false); ch || m != 2 {
		t.Fatalf("first offer moved m to %d", m)
	}
	if m, ch := s.Offer(4, 0.011, 0.01, false); !ch || m != 4 {
		t.Fatalf("second offer: m=%d changed=%v", m, ch)
	}
	if m, ch := s.Offer(2, 0, 0.001, false); ch || m != 4 {
		t.Fatalf("lowering after one interval: %d", m)
	}
	if m, ch := s.Offer(3, 0, 0.001, false); ch || m != 4 {
		t.Fatalf("a different value restarts the count: %d", m)
	}
	if m, ch := s.Offer(3, 0, 0.001, false); !ch || m != 3 {
		t.Fatalf("two intervals of 3: %d", m)
	}
	if m, ch := s.Offer(8, 0.05, 0.01, false); !ch || m != 8 {
		t.Fatalf("immediate raise above twice the estimate: %d", m)
	}
}

// TestCongestionNeverRaisesMC6c: an interval classified as congestion never raises m.
func TestCongestionNeverRaisesMC6c(t *testing.T) {
	s := NewMSelector(1)
	for i := 0; i < 5; i++ {
		if m, _ := s.Offer(6, 0.2, 0.01, true); m != 1 {
			t.Fatalf("congested interval raised m to %d", m)
		}
	}
	if m, _ := s.Offer(0, 0, 0, true); m != 1 {
		t.Fatal("one congested interval lowered m without hysteresis")
	}
	iv := Interval{Expected: 1000, Received: 950, CEMarked: 100}
	if !iv.Congested(0.05) || iv.TransmissionLoss(0.05) != 0 {
		t.Fatalf("CE-marked interval not taken as congestion: %v", iv.TransmissionLoss(0.05))
	}
	iv = Interval{Expected: 1000, Received: 950, CongestionDrops: 30}
	if got := iv.TransmissionLoss(0.05); math.Abs(got-0.02) > 1e-12 {
		t.Fatalf("path-reported congestion drops not subtracted: %v", got)
	}
	iv = Interval{Expected: 1000, Received: 990, QueueDelayRising: true}
	if !iv.Congested(0.05) || iv.TransmissionLoss(0.05) != 0 {
		t.Fatal("loss with rising queue delay not taken as congestion")
	}
	iv = Interval{Expected: 1000, Received: 990}
	if iv.Congested(0.05) || math.Abs(iv.TransmissionLoss(0.05)-0.01) > 1e-12 {
		t.Fatal("clean transmission loss misclassified")
	}
}

// TestEstimatorEWMA: weight 1/8 over intervals with Expected > 0.
func TestEstimatorEWMA(t *testing.T) {
	e := NewEstimator(0.05)
	if e.Update(Interval{}) {
		t.Fatal("an interval with Expected = 0 was used")
	}
	e.Update(Interval{Expected: 100, Received: 92})
	if math.Abs(e.P()-0.08) > 1e-12 {
		t.Fatalf("first sample %v", e.P())
	}
	e.Update(Interval{Expected: 100, Received: 100})
	if want := 0.08 - 0.08/8; math.Abs(e.P()-want) > 1e-12 {
		t.Fatalf("EWMA %v want %v", e.P(), want)
	}
	e.Update(Interval{Expected: 10, Received: 12}) // duplicates: no negative loss
	if e.LastSample() != 0 {
		t.Fatalf("negative loss sample %v", e.LastSample())
	}
}

// TestBudgetC11: all repair passes a token bucket filled at a fraction of the source rate
// with a burst of one block; CE on REPAIR halves the fraction, which grows back per SRTT.
func TestBudgetC11(t *testing.T) {
	b := NewBudget(0.5, 4000)
	if !b.Take(4000) || b.Take(1) {
		t.Fatal("burst of one block")
	}
	b.ObserveSource(1000)
	if b.Available() != 500 || !b.Take(500) || b.Take(1) {
		t.Fatalf("fill at half the source octets: %d", b.Available())
	}
	b.ObserveSource(1 << 20)
	if b.Available() != 4000 {
		t.Fatalf("capped at the burst: %d", b.Available())
	}
	srtt := 10 * time.Millisecond
	b.OnRepairCE(time.Second, srtt, 3)
	if b.Fraction() != 0.25 {
		t.Fatalf("halving: %v", b.Fraction())
	}
	b.OnRepairCE(time.Second+5*time.Millisecond, srtt, 0)
	if b.Fraction() != 0.25 {
		t.Fatal("grew back before an SRTT passed")
	}
	b.OnRepairCE(time.Second+srtt, srtt, 0)
	if math.Abs(b.Fraction()-(0.25+0.5/8)) > 1e-12 {
		t.Fatalf("additive growth: %v", b.Fraction())
	}
	for i := 0; i < 100; i++ {
		b.OnRepairCE(2*time.Second+time.Duration(i)*srtt, srtt, 0)
	}
	if b.Fraction() != 0.5 {
		t.Fatalf("never above the configured fraction: %v", b.Fraction())
	}
	if b.Denied() != 2 || b.Halvings() != 1 {
		t.Fatalf("counters denied=%d halvings=%d", b.Denied(), b.Halvings())
	}
}

// TestCircuitBreakerC11f: loss above ten percent or CE above fifty percent over one second
// opens the breaker; ten seconds clear close it; more than a minute asks for CLOSE reason 4.
func TestCircuitBreakerC11f(t *testing.T) {
	var b Breaker
	step := 100 * time.Millisecond
	now := time.Duration(0)
	report := func(exp, recv, ce uint32) BreakerState {
		now += step
		return b.Report(now, step, exp, recv, ce)
	}
	// 10 percent exactly is not above the threshold.
	for i := 0; i < 10; i++ {
		if s := report(100, 90, 0); s != BreakerClosed {
			t.Fatalf("opened at exactly 10 percent")
		}
	}
	// A short burst of heavy loss inside a clean second does not open it.
	report(100, 50, 0)
	for i := 0; i < 9; i++ {
		report(100, 100, 0)
	}
	if b.State() != BreakerClosed {
		t.Fatal("opened on a window averaging 5 percent")
	}
	for i := 0; i < 10; i++ {
		report(100, 85, 0)
	}
	if b.State() != BreakerOpen || b.Trips() != 1 {
		t.Fatalf("not open after a second at 15 percent: %v", b.State())
	}
	// Clean for 9.9 s: still open; at 10 s: closed.
	for i := 0; i < 99; i++ {
		report(100, 100, 0)
	}
	if b.State() != BreakerOpen {
		t.Fatal("closed before ten seconds clear")
	}
	report(100, 100, 0)
	if b.State() != BreakerClosed {
		t.Fatalf("still %v after ten seconds clear", b.State())
	}
	// CE above half opens it too; persisting past a minute asks for CLOSE.
	for i := 0; i < 10; i++ {
		report(100, 100, 60)
	}
	if b.State() != BreakerOpen {
		t.Fatal("CE above 50 percent did not open it")
	}
	for i := 0; i < 590; i++ {
		report(100, 100, 60)
	}
	if b.State() != BreakerOpen {
		t.Fatalf("asked for CLOSE at exactly one minute: %v", b.State())
	}
	for i := 0; i < 10; i++ {
		report(100, 100, 60)
	}
	if b.State() != BreakerCloseFlow {
		t.Fatalf("condition held over a minute: %v", b.State())
	}
}

// TestEstimatorSeed: a seeded estimator starts at the warm value and smooths the first interval
// into it (weight 1/8) instead of replacing it.
func TestEstimatorSeed(t *testing.T) {
	e := NewEstimator(0.05)
	e.Seed(0.01)
	if e.P() != 0.01 || e.LastSample() != 0.01 {
		t.Fatalf("seeded at %g (last %g)", e.P(), e.LastSample())
	}
	e.Update(Interval{Expected: 1000, Received: 910})
	if want := 0.01 + (0.09-0.01)/8; math.Abs(e.P()-want) > 1e-12 {
		t.Fatalf("after one interval %g, want %g", e.P(), want)
	}
	e.Seed(2)
	if e.P() != 1 {
		t.Fatalf("seed 2 gave %g, want clipped to 1", e.P())
	}
}
