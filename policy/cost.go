package policy

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Rule names how the CSF chooses k and m.
type Rule string

// The rules a CSF may follow (protocol notes P5-P9).
const (
	// RuleCost chooses k and m that minimise the expected completion time (P5).
	RuleCost Rule = "cost"
	// RuleDraft is the draft's binomial target alone (C6): the smallest m with
	// P[block loses more than m] < epsilon, or m = 0 when coded retransmission meets rho.
	RuleDraft Rule = "draft"
)

// ParseRule reads a rule name; "" is the default, RuleCost.
func ParseRule(s string) (Rule, error) {
	switch Rule(strings.ToLower(strings.TrimSpace(s))) {
	case "", RuleCost:
		return RuleCost, nil
	case RuleDraft:
		return RuleDraft, nil
	}
	return "", fmt.Errorf("policy: rule %q: want cost or draft", s)
}

// Path is what the cost rule knows of a flow: its loss, what a recovery round costs and what one
// repair symbol costs.
type Path struct {
	Loss  float64 // the transmission-loss estimate per packet
	Burst float64 // mean length of a loss burst; 1 (or less) for independent loss
	// Round is what one recovery round adds to a completion it delays: RoundCost(SRTT).
	Round time.Duration
	// Symbol is the time one more symbol of the flow takes at the bottleneck: the symbol's
	// octets at the flow's sending rate when repair competes with the sources for it; 0 when
	// repair costs nothing (a path limited by round trips, P6).
	Symbol time.Duration
	MaxM   int // the largest m the receiver declared
	MaxK   int // the largest k the policy may choose for a message (0: 128)
	// Epsilon and Rho are the draft's targets (C6; 0: the defaults): a unit of completion whose
	// chance of a recovery round is below them (Rho with no repair, Epsilon with some) counts as
	// needing none.
	Epsilon, Rho float64
}

// RoundCost is what a recovery round costs on a path of the given SRTT (P5): the round trip,
// the T/C AETH responder's ACK batching (T6: max(100 us, RTT/64)) and the CRF's reorder
// allowance before it asks for coded retransmission (max(1 ms, SRTT/8)).
func RoundCost(srtt time.Duration) time.Duration {
	return srtt + max(100*time.Microsecond, srtt/64) + max(time.Millisecond, srtt/8)
}

// SymbolTime is the time one symbol of octets takes at rate bit/s when repair competes for the
// bottleneck, and 0 when it does not (or the rate is unknown: nothing to weigh, P6).
func SymbolTime(octets int, rateBits float64, competes bool) time.Duration {
	if !competes || rateBits <= 0 || octets <= 0 {
		return 0
	}
	return time.Duration(float64(octets) * 8 / rateBits * float64(time.Second))
}

func (p Path) targets() (eps, rho float64) {
	eps, rho = p.Epsilon, p.Rho
	if eps <= 0 {
		eps = DefaultEpsilon
	}
	if rho <= 0 {
		rho = DefaultRho
	}
	return eps, rho
}

// BlockFail is the chance that a block of size sources with m ordinary repair symbols loses
// more than m (P7). Each of its size + m packets starts a loss burst with probability loss/burst,
// and a burst's length is geometric with mean burst (Gilbert-Elliott): with N bursts in the block
// and S_j the packets j bursts lose,
//
//	P = P[N > m] + sum_{j=1..m} P[N = j] P[S_j > m],  P[S_j > m] = P[Binomial(m, 1/burst) < j]
//
// (j geometric lengths exceed m exactly when fewer than j of m trials with probability
// 1/burst succeed). With burst 1 it is the draft's P[Binomial(size+m, loss) > m].
func BlockFail(size, m int, loss, burst float64) float64 {
	burst = max(burst, 1)
	if loss <= 0 {
		return 0
	}
	n, q := size+m, min(loss/burst, 1)
	fail := binomialAbove(n, m, q)
	if burst > 1 {
		for j := 1; j <= min(m, n); j++ {
			fail += binomialPMF(n, j, q) * binomialAtMost(m, j-1, 1/burst)
		}
	}
	return min(fail, 1)
}

// binomialAbove is P[Binomial(n, q) > m], by the upper tail below the mean and by one minus the
// head beyond it (monotone in m where the tail is near 1).
func binomialAbove(n, m int, q float64) float64 {
	if m >= n || q <= 0 {
		return 0
	}
	if float64(n)*q <= float64(m) {
		return TailAbove(n, m, q)
	}
	return max(1-binomialAtMost(n, m, q), 0)
}

// binomialAtMost is P[Binomial(n, q) <= m].
func binomialAtMost(n, m int, q float64) float64 {
	if m < 0 {
		return 0
	}
	if m >= n || q <= 0 {
		return 1
	}
	sum := 0.0
	for i := 0; i <= m; i++ {
		sum += binomialPMF(n, i, q)
	}
	return min(sum, 1)
}

// binomialPMF is P[Binomial(n, q) = i], in log space.
func binomialPMF(n, i int, q float64) float64 {
	switch {
	case i < 0 || i > n:
		return 0
	case q <= 0:
		if i == 0 {
			return 1
		}
		return 0
	case q >= 1:
		if i == n {
			return 1
		}
		return 0
	}
	lgN, _ := math.Lgamma(float64(n + 1))
	lgI, _ := math.Lgamma(float64(i + 1))
	lgNI, _ := math.Lgamma(float64(n - i + 1))
	return math.Exp(lgN - lgI - lgNI + float64(i)*math.Log(q) + float64(n-i)*math.Log1p(-q))
}

// tolerated clips a unit's chance of a round at the draft's target (P6): below it the unit
// counts as needing none, above it only the excess counts.
func tolerated(fail, tol float64) float64 {
	if fail <= tol {
		return 0
	}
	return (fail - tol) / fail
}

// BlockCost is the expected time a block of k sources with m ordinary repair symbols adds to the
// completion it belongs to when the block is its own unit of completion (the CSF does not know
// where messages end, P8):
//
//	E(k, m) = m S + R [P(k, m) - tau(m)]+
//
// with S the symbol time, R the round cost, P(k, m) = BlockFail(k, m) and tau the draft's target
// for the choice: epsilon for m > 0, rho for m = 0 (coded retransmission alone: the retransmission
// budget). With S = 0 tau(0) is rho only while P(k, 0) < rho, and epsilon beyond, which is the
// draft's rule exactly (P6); with S > 0 it stays rho, so that E is continuous in the loss (P12).
func BlockCost(k, m int, p Path) float64 {
	eps, rho := p.targets()
	fail := BlockFail(k, m, p.Loss, p.Burst)
	tol := eps
	if m == 0 && (fail < rho || p.Symbol > 0) {
		tol = rho
	}
	return float64(m)*p.Symbol.Seconds() + p.Round.Seconds()*fail*tolerated(fail, tol)
}

// CostM is the cost rule's m for blocks of k sources of a flow whose messages the CSF does not
// know (P8): the m in 0..min(MaxM, 255-k) with the least BlockCost, the smaller on a tie (the
// larger while the cost is above zero when repair is free: it then never costs more). With
// Symbol 0 it is ChooseM(k, Loss, Epsilon, Rho, MaxM) for independent loss (P6).
func CostM(k int, p Path) int {
	maxM := min(p.MaxM, 255-k)
	if maxM <= 0 || p.Loss <= 0 {
		return 0
	}
	best, bestCost := 0, BlockCost(k, 0, p)
	for m := 1; m <= maxM && bestCost > 0; m++ {
		c := BlockCost(k, m, p)
		if c < bestCost-1e-15 || p.Symbol <= 0 && bestCost > 0 && c <= bestCost {
			best, bestCost = m, c
		}
	}
	return best
}

// Plan is the cost rule's code for a message of known length (P9): blocks of at most K
// positions; the blocks that end within the message's last TailPackets packets carry TailM
// ordinary repair symbols, the others none beyond the flow's m.
type Plan struct {
	K           int
	TailPackets int
	TailM       int
	// Cost is the plan's expected added time (repair octets and recovery rounds), in seconds.
	Cost float64
	// Fail is the chance that some block of the tail loses more than TailM.
	Fail float64
}

// planKs are the block sizes PlanMessage considers, in order of preference on a tie.
var planKs = [...]int{32, 64, 128, 16}

// maxGroups bounds the critical blocks PlanMessage weighs one by one; beyond it, runs of equal
// blocks are weighed together.
const maxGroups = 1024

// PlanMessage is the cost rule for a message of n packets (P9). A block's loss beyond its repair
// delays the message's completion only if its recovery ends after the message's last packet
// arrives: a block whose last packet is d packets before the message's end delays it by
// (R - d S)+. Blocks with d S >= R are recovered while the message is still being sent (their
// coded or RDMA retransmission costs the lost packets' octets whatever the choice), so repair
// goes to the critical blocks only. Over k in {32, 64, 128, 16} (no larger than MaxK, nor than a
// short message needs) and TailM in 0..min(MaxM, 255-k, k/2) (C11 b: the budget is half the
// source rate) it minimises
//
//	E(k, m) = S m c + [P_msg - tau]+/P_msg * sum_j prod_{i<j} (1 - P_i) P_j (R - d_j S)+
//
// over the c critical blocks j counted from the message's end (P_j = BlockFail of block j,
// P_msg = 1 - prod_j (1 - P_j), tau = rho for m = 0 when P_msg < rho and epsilon otherwise); ties go to fewer
// repair symbols, then to the earlier k of the list. With S = 0 every block is critical and the
// choice is the draft's target applied to the whole message (P6).
func PlanMessage(n int, p Path) Plan {
	n = max(n, 1)
	maxK := p.MaxK
	if maxK <= 0 {
		maxK = 128
	}
	eps, rho := p.targets()
	sym, round := p.Symbol.Seconds(), p.Round.Seconds()
	var best Plan
	bestRepair := -1
	for _, k := range planKs {
		if k > maxK || k > 16 && k/2 >= n {
			continue
		}
		nb := (n + k - 1) / k
		last := n - (nb-1)*k // the last block's size
		// Critical blocks: j = 0 is the last; block j >= 1 ends last + (j-1) k packets before
		// the end.
		c := nb
		if sym > 0 {
			w := round / sym // packets sent within one round
			if w > float64(last) {
				c = min(nb, 1+int(math.Min(math.Ceil((w-float64(last))/float64(k)), float64(nb))))
			} else {
				c = 1
			}
		}
		tail := min(n, last+(c-1)*k)
		g := max(1, (c-1+maxGroups-1)/maxGroups) // full blocks weighed per group
		for m := 0; m <= min(p.MaxM, 255-k, k/2); m++ {
			pl := BlockFail(last, m, p.Loss, p.Burst)
			pf := BlockFail(k, m, p.Loss, p.Burst)
			pg := -math.Expm1(float64(g) * math.Log1p(-min(pf, 1-1e-16)))
			// Expected delay of the worst failing block, from the end backwards.
			surv := 1 - pl
			delay := pl * round
			logSurv := math.Log1p(-min(pl, 1-1e-16))
			for j := 1; j < c; j += g {
				d := float64(last + (j-1)*k)
				q := pg
				if j+g > c {
					q = -math.Expm1(float64(c-j) * math.Log1p(-min(pf, 1-1e-16)))
				}
				delay += surv * q * max(round-d*sym, 0)
				surv *= 1 - q
				logSurv += math.Log1p(-min(q, 1-1e-16))
			}
			fail := -math.Expm1(logSurv)
			tol := eps
			if m == 0 && fail < rho {
				tol = rho
			}
			repair := m * c
			cost := sym*float64(repair) + delay*tolerated(fail, tol)
			if bestRepair < 0 || cost < best.Cost-1e-12 || math.Abs(cost-best.Cost) <= 1e-12 && repair < bestRepair {
				best = Plan{K: k, TailPackets: tail, TailM: m, Cost: cost, Fail: fail}
				bestRepair = repair
			}
		}
	}
	if bestRepair < 0 {
		return Plan{K: DefaultK, TailPackets: n}
	}
	return best
}
