package policy

import (
	"math"
	"testing"
	"time"
)

// With repair that costs nothing (Symbol 0: a path limited by round trips) the cost rule is the
// draft's binomial rule, m for m, over k, loss and Max m (P6).
func TestCostRuleReducesToDraftRuleWhenRepairIsFree(t *testing.T) {
	for _, k := range []int{8, 16, 32, 64, 128, 250} {
		for _, p := range []float64{0, 1e-6, 1e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.05, 0.2} {
			for _, maxM := range []int{0, 1, 6, 16, 64} {
				path := Path{Loss: p, Burst: 1, Round: 25 * time.Millisecond, MaxM: maxM}
				if got, want := CostM(k, path), ChooseM(k, p, DefaultEpsilon, DefaultRho, maxM); got != want {
					t.Errorf("k %d, loss %g, max m %d: cost rule %d, draft %d", k, p, maxM, got, want)
				}
			}
		}
	}
	// A message of one block: the plan's repair is the draft's m for that block.
	for _, p := range []float64{1e-5, 1e-3, 0.01} {
		pl := PlanMessage(32, Path{Loss: p, Burst: 1, Round: 25 * time.Millisecond, MaxM: 16, MaxK: 32})
		if want := ChooseM(32, p, DefaultEpsilon, DefaultRho, 16); pl.K != 32 || pl.TailM != want || pl.TailPackets != 32 {
			t.Errorf("one block at %g: %+v, want k 32 and the draft's m %d", p, pl, want)
		}
	}
}

// The cost rule's m is the argmin of m S + R [P(k, m) - tau(m)]+ (P8), found by brute force
// here; it falls as one symbol grows dearer against a round, and is never above the draft's m.
func TestCostMMinimisesExpectedBlockTime(t *testing.T) {
	round := RoundCost(20 * time.Millisecond)
	prev := math.MaxInt
	for _, sym := range []time.Duration{0, time.Microsecond, 10 * time.Microsecond, 70 * time.Microsecond, 300 * time.Microsecond, 3 * time.Millisecond, 30 * time.Millisecond} {
		path := Path{Loss: 0.01, Burst: 1, Round: round, Symbol: sym, MaxM: 16}
		m := CostM(32, path)
		for alt := 0; alt <= 16; alt++ {
			if BlockCost(32, alt, path) < BlockCost(32, m, path)-1e-15 {
				t.Errorf("symbol %v: m %d costs %g, m %d only %g", sym, m, BlockCost(32, m, path), alt, BlockCost(32, alt, path))
			}
		}
		// The formula itself, for the chosen m.
		fail := TailAbove(32+m, m, 0.01)
		tol := DefaultEpsilon
		if m == 0 && (fail < DefaultRho || sym > 0) {
			tol = DefaultRho
		}
		want := float64(m)*sym.Seconds() + round.Seconds()*max(fail-tol, 0)
		if got := BlockCost(32, m, path); math.Abs(got-want) > 1e-12 {
			t.Errorf("symbol %v: BlockCost(32, %d) = %g, want %g", sym, m, got, want)
		}
		if m > prev || m > ChooseM(32, 0.01, DefaultEpsilon, DefaultRho, 16) {
			t.Errorf("symbol %v: m %d after %d, draft %d", sym, m, prev, ChooseM(32, 0.01, DefaultEpsilon, DefaultRho, 16))
		}
		prev = m
	}
	if prev != 0 {
		t.Errorf("a symbol dearer than a round still buys repair: m %d", prev)
	}
}

// On a bandwidth-limited path a long message's repair goes only to the blocks whose loss would
// delay its end, those within one round of it (P9); the rest carry none. A message shorter than a
// round is critical as a whole. Where repair pays, bursts get more than independent loss of the
// same mean.
func TestPlanMessageRepairsOnlyTheCriticalTail(t *testing.T) {
	round := RoundCost(20 * time.Millisecond)
	sym := SymbolTime(4096+64, 500e6, true)
	w := int(round / sym) // packets within one round
	for _, p := range []float64{1e-3, 1e-2} {
		path := Path{Loss: p, Burst: 1, Round: round, Symbol: sym, MaxM: 64}
		pl := PlanMessage(16384, path) // 64 MiB
		if pl.TailM == 0 || pl.TailPackets < w || pl.TailPackets > w+pl.K {
			t.Errorf("64 MiB at %g: %+v, want repair on the last %d..%d packets", p, pl, w, w+pl.K)
		}
		if pl.Fail > 0.01 {
			t.Errorf("64 MiB at %g: the tail fails with probability %g", p, pl.Fail)
		}
		short := PlanMessage(64, path) // 256 KiB: well within a round
		if short.TailPackets != 64 || short.TailM == 0 {
			t.Errorf("256 KiB at %g: %+v, want the whole message protected", p, short)
		}
		if p < 1e-2 {
			continue
		}
		// Where repair pays, bursts of the same mean loss get more of it.
		b := path
		b.Burst = 4
		if pb := PlanMessage(16384, b); float64(pb.TailM)/float64(pb.K) <= float64(pl.TailM)/float64(pl.K) {
			t.Errorf("bursts of 4 at %g get %+v, no more than independent loss %+v", p, pb, pl)
		}
	}
	// Without loss nothing is spent.
	if pl := PlanMessage(16384, Path{Round: round, Symbol: sym, MaxM: 64}); pl.TailM != 0 || pl.Cost != 0 {
		t.Errorf("lossless: %+v", pl)
	}
	// Repair is never above half the block (C11 b's budget) nor Max m.
	if pl := PlanMessage(262144, Path{Loss: 0.05, Burst: 8, Round: 25 * time.Millisecond, Symbol: 82 * time.Nanosecond, MaxM: 12}); pl.TailM > 12 || pl.TailM > pl.K/2 {
		t.Errorf("heavy bursts: %+v beyond Max m 12 or k/2", pl)
	}
}

// BlockFail with bursts of geometric length (P7): the draft's binomial tail for burst 1, exact
// against a direct sum over the burst count and the lengths' negative binomial for burst 4, and
// more than bursts of exactly 4 packets would lose (some bursts are longer than the mean).
func TestBlockFailGeometricBursts(t *testing.T) {
	for _, c := range []struct {
		n, m int
		p    float64
	}{{32, 0, 1e-3}, {32, 2, 1e-2}, {32, 8, 1e-2}, {16, 4, 0.05}} {
		if got, want := BlockFail(c.n, c.m, c.p, 1), exactTail(c.n+c.m, c.m, c.p); math.Abs(got-want) > 1e-12+1e-9*want {
			t.Errorf("burst 1, %+v: %g, want the binomial tail %g", c, got, want)
		}
		// Direct: N bursts ~ Binomial(n+m, p/4); j bursts lose more than m with probability
		// P[Binomial(m, 1/4) < j] (negative binomial), 1 for j > m.
		q := c.p / 4
		want := exactTail(c.n+c.m, c.m, q) // more than m bursts lose more than m packets
		for j := 1; j <= c.m; j++ {
			pj := exactTail(c.n+c.m, j-1, q) - exactTail(c.n+c.m, j, q)
			want += pj * (1 - exactTail(c.m, j-1, 0.25))
		}
		got := BlockFail(c.n, c.m, c.p, 4)
		if math.Abs(got-want) > 1e-9+1e-6*want {
			t.Errorf("burst 4, %+v: %g, want %g", c, got, want)
		}
		if c.m >= 4 && got <= exactTail(c.n+c.m, c.m/4, q) {
			t.Errorf("burst 4, %+v: %g, no more than bursts of exactly 4 would lose", c, got)
		}
	}
}

func TestParseRule(t *testing.T) {
	for in, want := range map[string]Rule{"": RuleCost, "cost": RuleCost, " Draft ": RuleDraft} {
		if got, err := ParseRule(in); err != nil || got != want {
			t.Errorf("ParseRule(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseRule("binomial"); err == nil {
		t.Error("ParseRule accepted an unknown rule")
	}
}
