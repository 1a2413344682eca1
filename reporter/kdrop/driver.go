package kdrop

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/reporter"
	"github.com/crem-project/crem/wire"
)

// DropKey names the drops of one reason on one device (its engine port, Device.Port).
type DropKey struct {
	Reason uint32
	Port   int
}

// DriverStats counts what the driver did.
type DriverStats struct {
	// Drops counts dropped datagrams (segments) by reason and device, as the program passed
	// them on, the ring buffer's refusals included.
	Drops map[DropKey]uint64
	// PSNs counts the PSNs named to the engine; Unnamed the datagrams given to it by count
	// only (GSO segments beyond the linear part or MaxPSNs, drops the full ring buffer refused).
	PSNs, Unnamed uint64
	// SendErrors counts reports the socket refused.
	SendErrors uint64
	// QueueReads counts readings of the devices' queue disciplines, QueueReadErrors the
	// failed ones; QueueDelay is each engine port's queueing delay as last estimated (PR19),
	// absent while unknown.
	QueueReads, QueueReadErrors uint64
	QueueDelay                  map[int]time.Duration
	Engine                      reporter.Stats
	Kernel                      Counters
}

// Driver feeds the drops of a Source to the reporter engine and sends its reports. The engine
// is its own: only Run touches it.
type Driver struct {
	Src *Source
	Eng *reporter.Reporter
	// Causes maps a drop reason to a hop entry's Cause (absent: congestion).
	Causes map[uint32]wire.Cause
	// Send sends a report.
	Send func(reporter.Datagram) error
	// LostInterval is how often the ring buffer's refusals are read (default 10 ms).
	LostInterval time.Duration
	// Queues, when set, reads the devices' root queue disciplines every QueueInterval (default
	// 1 ms); QueueDevices[i] is the ifindex of engine port i. Each port's queueing delay goes to
	// the engine (Reporter.QueueDelay), so that reports carry Queue Delay Change (PR19).
	Queues        *QueueReader
	QueueDevices  []int
	QueueInterval time.Duration
	estimators    []QueueEstimator

	mu    sync.Mutex
	stats DriverStats
}

// Stats returns a copy of the counters; safe while Run runs.
func (d *Driver) Stats() DriverStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.stats
	s.Drops = make(map[DropKey]uint64, len(d.stats.Drops))
	for k, v := range d.stats.Drops {
		s.Drops[k] = v
	}
	s.QueueDelay = make(map[int]time.Duration, len(d.stats.QueueDelay))
	for k, v := range d.stats.QueueDelay {
		s.QueueDelay[k] = v
	}
	return s
}

func (d *Driver) cause(reason uint32) wire.Cause {
	if c, ok := d.Causes[reason]; ok {
		return c
	}
	return wire.CauseCongestion
}

// Run takes drops until ctx ends, then sends what is pending and returns. The engine's time
// is the time since Run began.
func (d *Driver) Run(ctx context.Context) error {
	start := time.Now()
	now := func() time.Duration { return time.Since(start) }
	every := d.LostInterval
	if every <= 0 {
		every = 10 * time.Millisecond
	}
	d.mu.Lock()
	if d.stats.Drops == nil {
		d.stats.Drops = map[DropKey]uint64{}
	}
	d.mu.Unlock()
	qevery := d.QueueInterval
	if qevery <= 0 {
		qevery = time.Millisecond
	}
	buf := make([]psn.PSN, 0, MaxPSNs)
	nextLost, nextQueue := every, time.Duration(0)
	if d.Queues == nil {
		nextQueue = 1<<63 - 1
	}
	var runErr error
	for ctx.Err() == nil {
		if t := now(); t >= nextQueue {
			d.readQueues(t)
			nextQueue = t + qevery
		}
		wake := min(nextLost, nextQueue)
		if next, ok := d.Eng.NextDeadline(); ok && next < wake {
			wake = next
		}
		d.Src.SetDeadline(start.Add(wake))
		e, err := d.Src.Next(buf)
		switch {
		case err == nil:
			d.drop(now(), e)
		case errors.Is(err, os.ErrDeadlineExceeded):
		default:
			runErr = err
		}
		t := now()
		if t >= nextLost || runErr != nil {
			d.readLost(t)
			nextLost = t + every
		}
		d.flush(t)
		if runErr != nil {
			return runErr
		}
	}
	// Stopping: what the ring buffer still holds, the refusals, then the pending reports
	// (up to a second of the limits' time, so a burst of pending flows is not cut).
	d.Src.SetDeadline(time.Now())
	for {
		e, err := d.Src.Next(buf)
		if err != nil {
			break
		}
		d.drop(now(), e)
	}
	t := now()
	d.readLost(t)
	for end := t + time.Second; t <= end && d.Eng.Pending() > 0; t += time.Millisecond {
		d.flush(t)
	}
	d.flush(t)
	return nil
}

func (d *Driver) drop(t time.Duration, e Event) {
	key := reporter.FlowKey{Src: e.Src, Dst: e.Dst, FlowLabel: e.DestQP}
	c := d.cause(e.Reason)
	for _, p := range e.PSNs {
		d.Eng.Drop(t, key, e.Port, p, c)
	}
	unnamed := e.Segments - len(e.PSNs)
	if unnamed > 0 {
		d.Eng.DropUnnamed(t, key, e.Port, uint32(unnamed), c)
	}
	d.mu.Lock()
	d.stats.Drops[DropKey{e.Reason, e.Port}] += uint64(max(e.Segments, len(e.PSNs)))
	d.stats.PSNs += uint64(len(e.PSNs))
	if unnamed > 0 {
		d.stats.Unnamed += uint64(unnamed)
	}
	d.mu.Unlock()
}

// readQueues reads the devices' queue disciplines and tells the engine each port's queueing
// delay (PR19).
func (d *Driver) readQueues(t time.Duration) {
	got, err := d.Queues.Read(d.QueueDevices)
	if len(d.estimators) != len(d.QueueDevices) {
		d.estimators = make([]QueueEstimator, len(d.QueueDevices))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stats.QueueReads++
	if err != nil {
		d.stats.QueueReadErrors++
		return
	}
	if d.stats.QueueDelay == nil {
		d.stats.QueueDelay = map[int]time.Duration{}
	}
	for port, ifi := range d.QueueDevices {
		s, ok := got[ifi]
		if !ok {
			continue
		}
		if delay, ok := d.estimators[port].Add(t, s); ok {
			d.Eng.QueueDelay(t, port, delay)
			d.stats.QueueDelay[port] = delay
		}
	}
}

func (d *Driver) readLost(t time.Duration) {
	lost, _ := d.Src.Lost()
	for _, l := range lost {
		key := reporter.FlowKey{Src: l.Src, Dst: l.Dst, FlowLabel: l.DestQP}
		d.Eng.DropUnnamed(t, key, l.Port, uint32(min(l.Count, 1<<31)), d.cause(l.Reason))
	}
	kc, kerr := d.Src.Counters()
	d.mu.Lock()
	for _, l := range lost {
		d.stats.Drops[DropKey{l.Reason, l.Port}] += l.Count
		d.stats.Unnamed += l.Count
	}
	if kerr == nil {
		d.stats.Kernel = kc
	}
	d.mu.Unlock()
}

func (d *Driver) flush(t time.Duration) {
	d.Eng.Tick(t)
	var failed uint64
	d.Eng.Drain(func(dg reporter.Datagram) {
		if err := d.Send(dg); err != nil {
			failed++
		}
	})
	d.mu.Lock()
	d.stats.SendErrors += failed
	d.stats.Engine = d.Eng.Stats()
	d.mu.Unlock()
}
