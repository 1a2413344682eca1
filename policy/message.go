package policy

import (
	"math"
	"time"
)

// Message describes a message the sender knows the length of (the RETH's DMA Length, a SEND's
// packet count; C16) on its path, for MessageCode.
type Message struct {
	Packets   int           // the message's packets
	Injection time.Duration // injection time of the whole message at the source rate
	RTT       time.Duration
	Loss      float64 // the loss estimate per packet
	Burst     float64 // mean length of a loss burst; 1 (or less) for independent loss
	MaxM      int     // the largest m the receiver declared
}

// Code is a choice of block size and repair: M is the draft's m for K (what the flow's
// configuration carries), Extra the ordinary repair per block sent for this message only.
type Code struct {
	K, M, Extra int
}

// messageKs are the block sizes MessageCode considers, in order of preference on a tie.
var messageKs = [...]int{32, 64, 128, 16}

// MessageRho is the share of messages MessageCode lets need a second round trip (C16: the whole
// message should rarely need one).
const MessageRho = 1e-3

// MessageCode is the project's policy for a message of known length (C6, C16). Over k in
// {32, 64, 128, 16} (no larger than the message needs: a block of a short message is the message)
// and per-block repair m' from the draft's m for that k up to min(MaxM, k/2) (inside C11 b's
// budget of half the source rate), it takes the code with the fewest repair symbols for the whole
// message among those that leave at most MessageRho of messages a block losing more than m'
// (ties: the shorter expected completion), so that repair is spent where it buys the message its
// single round trip and not on tails already rarer than that. Where no code meets MessageRho it
// takes the shortest expected completion
//
//	I (1 + R/N) + RTT + 1.5 RTT P[some block of the message loses more than m']
//
// with I the message's injection time and R the repair symbols of its N packets. A block of
// b + m' symbols survives while the loss bursts starting in it (each packet starts one with
// probability Loss/Burst) lose at most m' packets. M stays the draft's choice for the chosen k;
// the rest is Extra. Without loss it chooses the draft's k = 32, m = 0 and nothing extra.
func MessageCode(msg Message) Code {
	est := max(msg.Loss, 0)
	burst := max(msg.Burst, 1)
	n := max(msg.Packets, 1)
	inj := msg.Injection.Seconds()
	rtt := msg.RTT.Seconds()
	type cand struct {
		code   Code
		repair int
		cost   float64
	}
	var fit, any cand
	haveFit, haveAny := false, false
	for _, k := range messageKs {
		if k > 16 && k/2 >= n {
			continue // the message fits a smaller block
		}
		base := ChooseM(k, est, DefaultEpsilon, DefaultRho, msg.MaxM)
		full, tail := n/k, n%k
		blocks := full
		if tail > 0 {
			blocks++
		}
		for m := base; m <= min(msg.MaxM, 255-k, k/2); m++ {
			// The message fails when some block loses more than m: full blocks of k and a
			// tail block of the rest.
			survive := 0.0 // log of the chance that every block survives
			if est > 0 {
				survive = float64(full) * math.Log1p(-min(TailAbove(k+m, int(float64(m)/burst), est/burst), 1-1e-16))
				if tail > 0 {
					survive += math.Log1p(-min(TailAbove(tail+m, int(float64(m)/burst), est/burst), 1-1e-16))
				}
			}
			fail := -math.Expm1(survive)
			repair := m * blocks
			c := cand{Code{K: k, M: base, Extra: m - base}, repair,
				inj*(1+float64(repair)/float64(n)) + rtt + fail*1.5*rtt}
			if fail <= MessageRho && (!haveFit || c.repair < fit.repair || c.repair == fit.repair && c.cost < fit.cost-1e-12) {
				fit, haveFit = c, true
			}
			if !haveAny || c.cost < any.cost-1e-12 {
				any, haveAny = c, true
			}
		}
	}
	if haveFit {
		return fit.code
	}
	return any.code
}
