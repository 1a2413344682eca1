package kdrop

import "time"

// QueueStats is a reading of a device's root queue discipline: what it holds now and what it
// has sent since it was made.
type QueueStats struct {
	Backlog uint32 // octets queued
	Packets uint32 // packets queued
	Sent    uint64 // octets dequeued and sent, ever
	// Rate is the discipline's configured rate in octets per second where it has one (a root
	// tbf), else 0.
	Rate uint64
}

// QueueEstimator turns readings of one device's root queue discipline into its queueing delay
// (PR19): the octets queued over the rate the queue drains at: the discipline's configured
// rate where the reading has one (a token bucket), else the rate measured. That is the highest
// seen over an interval of at least MinInterval throughout which the queue held something (a
// queue that never empties sends at the rate of its bottleneck; one that did empty says
// nothing of it). Until such an interval has been seen the delay is unknown.
type QueueEstimator struct {
	// MinInterval is the shortest interval whose octets sent measure the rate (default 5 ms:
	// shorter ones are dominated by the sender's and the kernel's batching).
	MinInterval time.Duration

	base     QueueStats
	baseAt   time.Duration
	haveBase bool
	busy     bool    // the queue held something at every reading since base
	rate     float64 // octets per second, the highest measured
}

// Add takes a reading at now and returns the queueing delay a packet queued now meets, false
// while the drain rate is unknown.
func (q *QueueEstimator) Add(now time.Duration, s QueueStats) (time.Duration, bool) {
	min := q.MinInterval
	if min <= 0 {
		min = 5 * time.Millisecond
	}
	switch {
	case !q.haveBase || s.Sent < q.base.Sent || s.Backlog == 0:
		// The first reading, a queue discipline made again (its counter started over), or an
		// empty queue: a new interval begins.
		q.base, q.baseAt, q.haveBase, q.busy = s, now, true, s.Backlog > 0
	case now-q.baseAt >= min:
		if q.busy {
			r := float64(s.Sent-q.base.Sent) / (now - q.baseAt).Seconds()
			q.rate = max(q.rate, r)
		}
		q.base, q.baseAt, q.busy = s, now, true
	}
	rate := q.rate
	if s.Rate > 0 {
		rate = float64(s.Rate)
	}
	if rate <= 0 {
		return 0, false
	}
	return time.Duration(float64(s.Backlog) / rate * float64(time.Second)), true
}

// Rate returns the drain rate measured, in octets per second (0: not yet).
func (q *QueueEstimator) Rate() float64 { return q.rate }
