// Package netem models an impaired network path: loss (Bernoulli, Gilbert-Elliott bursts,
// exactly n of every N, scripted), serialization at a rate, propagation delay with jitter, a FIFO
// bottleneck queue with tail drop and ECN marking, and reordering. The simulator builds its links
// from it and `crem netem` and `crem lab` drive the same models on real sockets, so a loss
// specification means the same thing everywhere.
//
// Everything here is pure: no sockets, no goroutines, no wall clock, no global random source.
// Each model draws from its own PCG generator seeded explicitly, so a seed fixes every decision.
// Like the protocol engines, a Link is driven from outside: the caller passes the current time
// to Send, asks NextDeadline when it next has something to deliver, and calls Deliver (or Pop)
// at that time. Times are durations since an arbitrary origin chosen by the caller and must not
// go backwards.
//
// # Loss specifications
//
// ParseLossSpec and ParseLossModel read the text users give on command lines:
//
//	none                          no loss
//	0.01, 1%                      Bernoulli: each packet lost independently with that probability
//	bernoulli:0.01                the same (also bernoulli:p=0.01)
//	gilbert:p=0.001,r=0.25        Gilbert-Elliott; optional h (loss in the bad state, default 1)
//	                              and k (loss in the good state, default 0)
//	gilbert-burst:rate=0.01,burst=4
//	                              Gilbert-Elliott with h=1, k=0 given by its mean loss rate and
//	                              mean burst length: r = 1/burst, p = rate/(burst*(1-rate))
//	every:n=1,of=1000             exactly n losses in every window of N packets, at positions
//	                              drawn from the seed (reproducible benchmarks)
//	script:3,17,18                exactly those packet indices (0-based) are lost
//
// The Gilbert-Elliott chain is a two-state Markov chain advanced once per packet: the packet is
// lost with probability k in the good state and h in the bad state, and then the chain moves from
// good to bad with probability p and from bad to good with probability r. The chain starts in its
// stationary distribution (bad with probability p/(p+r)), so the mean loss (h*p + k*r)/(p+r)
// holds from the first packet, not only in the long run. With h=1 and k=0 a loss burst is a stay
// in the bad state, geometric with mean 1/r.
//
// # The link
//
// A Link carries packets one way. A packet entering the link joins the bottleneck queue, is
// serialized at Rate, then propagates for Delay plus jitter and is delivered. The queue counts a
// packet from its arrival until its last bit is serialized; a packet that would exceed QueuePackets
// or QueueBytes is dropped at the tail, and an ECN-capable packet that arrives to find
// ECNThreshold or more packets ahead of it is marked CE (non-ECT packets are never dropped early:
// there is no RED). With Rate 0 serialization takes no time, so the queue never holds anything.
//
// Loss applies by default after the queue (LossOnWire): a lost packet has consumed its place in
// the queue and its serialization time, as on a lossy long-distance segment behind the bottleneck.
// LossAtInput drops it before the queue instead, as a lossy access link in front of it would.
//
// Jitter adds to Delay a uniform offset in [-Jitter, +Jitter] or a normal one with standard
// deviation Jitter, and the total propagation time is never negative. Jitter never reorders: a
// packet is never delivered before the packet sent just before it (it waits for it), as on a real
// serial path. When packets follow each other more closely than the jitter, this makes most of
// them wait for the slowest before them, so the mean delay rises toward Delay + Jitter.
// Reordering happens only when ReorderProb is set: each packet, with that probability,
// is held back ReorderDelay beyond the time it would otherwise be delivered, and later packets
// overtake it.
package netem
