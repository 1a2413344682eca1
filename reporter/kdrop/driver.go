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
	Engine     reporter.Stats
	Kernel     Counters
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
	buf := make([]psn.PSN, 0, MaxPSNs)
	nextLost := every
	var runErr error
	for ctx.Err() == nil {
		wake := nextLost
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
