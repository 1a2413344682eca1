package kdrop

import (
	"testing"
	"time"
)

// TestQueueEstimatorPR19: the drain rate is the highest measured over an interval of at least
// MinInterval throughout which the queue held something; the delay is the backlog over it.
// Intervals with an empty reading, and a counter that started over (the discipline made
// again), measure nothing.
func TestQueueEstimatorPR19(t *testing.T) {
	ms := time.Millisecond
	var q QueueEstimator
	// 12.5 MB/s (100 Mbit/s), the queue busy: 62,500 octets every 5 ms.
	if _, ok := q.Add(0, QueueStats{Backlog: 10000, Sent: 1000}); ok {
		t.Fatal("a delay before any rate")
	}
	if _, ok := q.Add(2*ms, QueueStats{Backlog: 12000, Sent: 26000}); ok {
		t.Fatal("a rate from 2 ms, under MinInterval")
	}
	d, ok := q.Add(5*ms, QueueStats{Backlog: 25000, Sent: 63500})
	if !ok || d != 2*ms || q.Rate() != 12.5e6 {
		t.Fatalf("delay %v (%v), rate %v: want 2 ms at 12.5e6", d, ok, q.Rate())
	}
	// The queue empties: the next interval (half the rate) measures nothing, so the rate stays.
	q.Add(10*ms, QueueStats{Backlog: 0, Sent: 90000})
	d, _ = q.Add(15*ms, QueueStats{Backlog: 12500, Sent: 121250})
	if q.Rate() != 12.5e6 || d != ms {
		t.Fatalf("after an idle interval: rate %v, delay %v; want 12.5e6 and 1 ms", q.Rate(), d)
	}
	// A faster busy interval raises it; a slower one does not lower it.
	q.Add(20*ms, QueueStats{Backlog: 5000, Sent: 121250 + 125000})
	if q.Rate() != 25e6 {
		t.Fatalf("rate %v, want 25e6", q.Rate())
	}
	q.Add(25*ms, QueueStats{Backlog: 5000, Sent: 121250 + 125000 + 10000})
	if q.Rate() != 25e6 {
		t.Fatalf("rate %v, want 25e6 kept", q.Rate())
	}
	// The counter starts over: a new base, nothing measured from it.
	if d, _ := q.Add(30*ms, QueueStats{Backlog: 25000, Sent: 100}); d != ms || q.Rate() != 25e6 {
		t.Fatalf("after a reset: delay %v, rate %v", d, q.Rate())
	}
}

// TestQueueEstimatorConfiguredRatePR19: a reading with the discipline's configured rate (a
// token bucket) gives the delay at once, at that rate, whatever was measured.
func TestQueueEstimatorConfiguredRatePR19(t *testing.T) {
	var q QueueEstimator
	d, ok := q.Add(0, QueueStats{Backlog: 25000, Sent: 1, Rate: 25e6})
	if !ok || d != time.Millisecond {
		t.Fatalf("delay %v (%v), want 1 ms at the configured 25e6 octets/s", d, ok)
	}
}
