package lab

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
)

// A soak (Options.Duration) keeps one configuration's gateways, path and queue pairs for the
// whole duration and repeats transfers over them until it ends; every Options.StatsInterval it
// takes an Interval, and at the end it judges the run against the bounds below.
//
// The bounds are judged on the interval taken when the duration ends against the first one
// (taken one interval in, once every buffer pool and table has had time to fill):
const (
	// SoakHeapGrowth bounds the live heap (and its objects): the last interval's within this
	// factor of the first's.
	SoakHeapGrowth = 1.5
	// SoakGoroutineSlack bounds the goroutines: the last interval's at most this many more than
	// the first's (timers and the like come and go; a leak per flow or per message does not).
	SoakGoroutineSlack = 8
)

// Interval is one report of a soak: the figures since its start, taken every
// Options.StatsInterval and when the duration ends; the JSON names are `crem lab --json`'s.
type Interval struct {
	ElapsedS float64 `json:"elapsed_s"`
	// Messages completed and verified so far, and their octets; Bad those that failed their
	// check; Posted those posted (the rest are in flight).
	Messages int   `json:"messages"`
	Bytes    int64 `json:"bytes"`
	Bad      int   `json:"bad"`
	Posted   int   `json:"posted"`
	// HeapBytes and HeapObjects are the live heap after a collection, Goroutines the process's.
	HeapBytes   uint64 `json:"heap_bytes"`
	HeapObjects uint64 `json:"heap_objects"`
	Goroutines  int    `json:"goroutines"`
	// Flows counts the flows open at both gateways (with a CSF), FlowsOpened the flows the
	// CRFs opened since the start (a flow's session started anew opens it again).
	Flows       int    `json:"flows"`
	FlowsOpened uint64 `json:"flows_opened"`
	// Closes counts the CLOSE messages the engines of both gateways sent or received.
	Closes uint64 `json:"closes"`
	// Lost counts the datagrams the path dropped, Restored the packets the CRFs restored,
	// RDMARetx the packets the queue pairs retransmitted.
	Lost     uint64 `json:"lost"`
	Restored uint64 `json:"restored"`
	RDMARetx uint64 `json:"rdma_retx"`
	// MaxStallMS is the longest a 10 ms ticker of the lab was late in the interval: how long the
	// machine kept the process from running at a stretch (a QP gives up after seven timeouts
	// without progress, some 0.45 s at the lab's 20 ms).
	MaxStallMS float64 `json:"max_stall_ms"`
}

// stallMeter measures how late a 10 ms ticker runs: the process's longest stall.
type stallMeter struct {
	worst atomic.Int64 // ns, since the last take
}

const stallTick = 10 * time.Millisecond

// run starts the ticker; the returned func stops it.
func (m *stallMeter) run() (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(stallTick)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				m.tick(now.Sub(last))
				last = now
			}
		}
	}()
	return func() { close(done); <-finished }
}

// tick records the gap between two ticks: a late tick arrives late and the ticks missed
// meanwhile are dropped, so what the gap exceeds the tick by is the stall.
func (m *stallMeter) tick(gap time.Duration) {
	if late := gap - stallTick; late > time.Duration(m.worst.Load()) {
		m.worst.Store(int64(late))
	}
}

// take returns the longest stall since the last take.
func (m *stallMeter) take() time.Duration { return time.Duration(m.worst.Swap(0)) }

// SoakVerdict is a soak's outcome against the bounds (SoakHeapGrowth, SoakGoroutineSlack;
// open flows must not grow at all; every byte verified; no CLOSE before the end).
type SoakVerdict struct {
	Pass     bool     `json:"pass"`
	Failures []string `json:"failures,omitempty"`
	// Closes counts the CLOSEs sent or received until the last transfer ended, before the
	// gateways stopped.
	Closes uint64 `json:"closes"`
	// Interrupted says that the soak was cancelled (SIGINT, SIGTERM) before its duration
	// ended: it is not judged on its duration, heap, goroutines or flows (Pass is false), and
	// Failures holds only what went wrong before the cancel (a message that failed or failed
	// its check, a CLOSE).
	Interrupted bool `json:"interrupted,omitempty"`
}

// String is the verdict in one line.
func (v SoakVerdict) String() string {
	if v.Pass {
		return "pass"
	}
	s := "FAIL"
	if v.Interrupted {
		if len(v.Failures) == 0 {
			return "interrupted, not judged (the soak did not run its duration)"
		}
		s = "interrupted; FAIL before the cancel"
	}
	for i, f := range v.Failures {
		if i == 0 {
			s += ": "
		} else {
			s += "; "
		}
		s += f
	}
	return s
}

// Line is the interval in one line for people.
func (iv Interval) Line() string {
	return fmt.Sprintf("%v: %d messages verified (%.1f MiB), %d bad, %d in flight; heap %.1f MiB (%d objects), %d goroutines, %d flows (%d opened), %d CLOSE; path lost %d, restored %d, RDMA retx %d; longest stall %.0f ms",
		time.Duration(iv.ElapsedS*float64(time.Second)).Round(time.Second), iv.Messages, float64(iv.Bytes)/(1<<20), iv.Bad,
		iv.Posted-iv.Messages-iv.Bad, float64(iv.HeapBytes)/(1<<20), iv.HeapObjects, iv.Goroutines, iv.Flows, iv.FlowsOpened,
		iv.Closes, iv.Lost, iv.Restored, iv.RDMARetx, iv.MaxStallMS)
}

// judgeSoak judges a soak run: its transfers (r.Verified), whether it ran its whole duration,
// the CLOSEs until its end, and the first and last intervals against the bounds.
func judgeSoak(r *Run, ivs []Interval, closes uint64, endedEarly string) SoakVerdict {
	v := SoakVerdict{Closes: closes}
	fail := func(format string, a ...any) { v.Failures = append(v.Failures, fmt.Sprintf(format, a...)) }
	if r.Interrupted {
		// Cut short from outside: the messages in flight were cancelled, not lost; only what
		// failed before the cancel is a failure, and the bounds are not judged.
		v.Interrupted = true
		if r.Error != "" {
			fail("a message failed or was corrupted before the cancel: %s", r.Error)
		}
		if closes > 0 {
			fail("%d CLOSE before the end", closes)
		}
		return v
	}
	if !r.Verified {
		fail("bytes lost or corrupted: %s", r.Error)
	}
	if endedEarly != "" {
		fail("ended before its duration: %s", endedEarly)
	}
	if closes > 0 {
		fail("%d CLOSE before the end", closes)
	}
	if len(ivs) < 2 {
		fail("%d intervals: at least two are needed to judge heap, goroutines and flows (a stats interval of at most half the duration)", len(ivs))
	} else {
		first, last := ivs[0], ivs[len(ivs)-1]
		if float64(last.HeapBytes) > SoakHeapGrowth*float64(first.HeapBytes) {
			fail("heap grew from %.1f MiB to %.1f MiB (bound %.1fx the first interval's)", float64(first.HeapBytes)/(1<<20),
				float64(last.HeapBytes)/(1<<20), SoakHeapGrowth)
		}
		if float64(last.HeapObjects) > SoakHeapGrowth*float64(first.HeapObjects) {
			fail("heap objects grew from %d to %d (bound %.1fx the first interval's)", first.HeapObjects, last.HeapObjects, SoakHeapGrowth)
		}
		if last.Goroutines > first.Goroutines+SoakGoroutineSlack {
			fail("goroutines grew from %d to %d (bound the first interval's + %d)", first.Goroutines, last.Goroutines, SoakGoroutineSlack)
		}
		if last.Flows > first.Flows {
			fail("open flows grew from %d to %d (bound: no growth)", first.Flows, last.Flows)
		}
	}
	v.Pass = len(v.Failures) == 0
	return v
}

// memory is the live heap after a collection, and the goroutines.
func memory() (heap, objects uint64, goroutines int) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.HeapObjects, runtime.NumGoroutine()
}
