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

// MessageCode is the project's policy for a message of known length (C6, C16): over k in
// {32, 64, 128, 16} and total repair per block m' from the draft's m for that k up to
// min(MaxM, k/2) (inside C11 b's budget of half the source rate), it minimizes the expected
// completion time
//
//	I (1 + m'/k) + RTT + 1.5 RTT P[some block of the message loses more than m']
//
// with I the message's injection time. A block of k + m' symbols survives while the loss bursts starting in it
// (each packet starts one with probability Loss/Burst) lose at most m' packets. M stays the
// draft's choice for the chosen k, so short messages are treated as the draft treats them; the
// rest is Extra. Without loss it chooses the draft's k and m and nothing extra.
func MessageCode(msg Message) Code {
	est := max(msg.Loss, 0)
	burst := max(msg.Burst, 1)
	n := float64(max(msg.Packets, 1))
	inj := msg.Injection.Seconds()
	rtt := msg.RTT.Seconds()
	best, bestCost := Code{K: DefaultK}, math.Inf(1)
	for _, k := range messageKs {
		base := ChooseM(k, est, DefaultEpsilon, DefaultRho, msg.MaxM)
		blocks := math.Ceil(n / float64(k))
		for m := base; m <= min(msg.MaxM, 255-k, k/2); m++ {
			q := 0.0
			if est > 0 {
				q = TailAbove(k+m, int(float64(m)/burst), est/burst)
			}
			fail := -math.Expm1(blocks * math.Log1p(-min(q, 1-1e-16)))
			cost := inj*(1+float64(m)/float64(k)) + rtt + fail*1.5*rtt
			if cost < bestCost-1e-12 {
				best, bestCost = Code{K: k, M: base, Extra: m - base}, cost
			}
		}
	}
	return best
}
