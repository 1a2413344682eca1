// Package altmark measures the protected flows crossing a measurement domain with Alternate
// Marking, the single-marking method of RFC 9341, and turns each settled marking period into
// the hop entries of a PATH_REPORT with method 1 (draft, Path Reports; RULINGS C10).
//
// Time is cut into marking periods of length T; a packet gets the number of the period in
// which it enters the domain (its color, in RFC 9341 terms: even and odd periods alternate)
// and keeps it up to the domain's egress. CREM itself never marks or modifies packets (draft,
// Path Reports): the mark lives in the metadata the domain keeps for the packet, added at the
// ingress and gone at the egress, as an operator's marking in IPv6 options would be added and
// removed at the edges of the domain (RFC 9343).
//
// Two measurement points count, per flow and per period, the packets that pass: MP1 where a
// packet enters the measured segment (Enter), MP2 where it leaves it (Leave). MP2 also sums the
// packets' delays across the segment (the entry time travels with the mark in the packet's
// metadata), so the mean delay of a period is exact even when packets were lost. As RFC 9341
// prescribes, a period's counters are read only once they are stable: Settle after the period
// ends (at least T/2, the middle of the next period), which must exceed the longest time a
// packet spends in the segment; a packet that leaves after its period was read is counted as
// Late (and was counted lost). A read period gives Lost Count = MP1 - MP2 and Queue Delay
// Change = its mean delay minus the mean delay of the flow's previous period with a delivered
// packet.
//
// Like the CREM engines it never touches a socket or a clock: time is an argument.
package altmark

import (
	"errors"
	"math"
	"slices"
	"time"

	"github.com/crem-project/crem/reporter"
	"github.com/crem-project/crem/wire"
)

// Defaults for the zero fields of Config.
const (
	DefaultDelayThreshold = time.Millisecond
	DefaultMaxFlows       = 4096
	DefaultIdlePeriods    = 4
)

// Config sets up a measurement.
type Config struct {
	// Period is the marking period T (required).
	Period time.Duration
	// Settle is how long after a period's end its counters are read; it must exceed the
	// longest time a packet takes from MP1 to MP2. 0 or less than T/2 means T/2 (RFC 9341: the
	// middle of the next period).
	Settle time.Duration
	// DelayThreshold: a period without loss is reported when its Queue Delay Change is at
	// least this large (either sign). 0 means DefaultDelayThreshold; negative: periods without
	// loss are never reported.
	DelayThreshold time.Duration
	// MaxFlows bounds the flows measured at once; packets of further flows are not measured
	// (counted in Stats.FlowsOverflow). 0 means DefaultMaxFlows.
	MaxFlows int
	// IdlePeriods: a flow with nothing to read and no packet at MP1 for this many periods is
	// forgotten. 0 means DefaultIdlePeriods.
	IdlePeriods int
}

// Stats counts every outcome.
type Stats struct {
	Entered uint64 `json:"entered"` // packets counted at MP1
	Left    uint64 `json:"left"`    // packets counted at MP2 in time
	// Late counts packets that reached MP2 after their period had been read (they were
	// counted lost there): Settle is shorter than the segment's delay.
	Late uint64 `json:"late"`
	// FlowsOverflow counts packets not measured because MaxFlows flows were.
	FlowsOverflow uint64 `json:"flows_overflow"`
	Flows         int    `json:"flows"` // measured now
	FlowsExpired  uint64 `json:"flows_expired"`
	// Periods counts flow periods read, PeriodsWithLoss those with a Lost Count, Lost the sum
	// of the Lost Counts, Reported the periods handed out for a report (Drain).
	Periods         uint64 `json:"periods"`
	PeriodsWithLoss uint64 `json:"periods_with_loss"`
	Lost            uint64 `json:"lost"`
	Reported        uint64 `json:"reported"`
	// Excess counts periods in which MP2 counted more packets than MP1 (cannot happen when a
	// packet keeps its mark; counted, Lost Count 0).
	Excess uint64 `json:"excess"`
}

// Measurement is one flow's settled marking period.
type Measurement struct {
	Key    reporter.FlowKey
	Period uint32 // the Marking Period Number
	// Entered and Left are the packets counted at MP1 and MP2; Lost is Entered - Left.
	Entered, Left uint64
	Lost          uint32
	// MeanDelay is the mean MP1-to-MP2 delay of the packets that left (0 when none did);
	// DelayChange its change against the flow's previous period with a delivered packet
	// (0 when there is none: HasChange false).
	MeanDelay   time.Duration
	DelayChange time.Duration
	HasChange   bool
}

// Hops returns the hop entries of the measurement for PATH_REPORT method 1: one per
// measurement point, with the given Node IDs (MP1, MP2). MP1 is the reference point: Lost
// Count and Queue Delay Change 0. Cause is unknown: marking tells that packets were lost, not
// why. No dropped PSNs are listed.
func (m Measurement) Hops(nodeIDs [2]uint32) []wire.HopEntry {
	return []wire.HopEntry{
		{NodeID: nodeIDs[0], MarkingPeriodNumber: m.Period, Cause: wire.CauseUnknown},
		{NodeID: nodeIDs[1], MarkingPeriodNumber: m.Period, LostCount: m.Lost,
			QueueDelayChangeUS: wire.QueueDelayChange(m.DelayChange), Cause: wire.CauseUnknown},
	}
}

// slot holds one period's counters of a flow.
type slot struct {
	period   uint64
	used     bool
	n1, n2   uint64
	delaySum time.Duration
}

type flow struct {
	slots    []slot // ring, indexed by period modulo its length
	prevMean time.Duration
	havePrev bool
	last     uint64 // the last period with a packet at MP1
}

// Engine is one measured segment (MP1 to MP2). It is not safe for concurrent use.
type Engine struct {
	cfg   Config
	ring  int
	flows map[reporter.FlowKey]*flow
	next  time.Duration // the earliest read or expiry due; valid when haveNext
	have  bool
	out   []Measurement
	stats Stats
}

// New returns an engine for cfg.
func New(cfg Config) (*Engine, error) {
	if cfg.Period <= 0 {
		return nil, errors.New("altmark: the marking period must be positive")
	}
	if cfg.Settle < 0 || cfg.MaxFlows < 0 || cfg.IdlePeriods < 0 {
		return nil, errors.New("altmark: negative settle time, flow limit or idle periods")
	}
	cfg.Settle = max(cfg.Settle, cfg.Period/2)
	if cfg.DelayThreshold == 0 {
		cfg.DelayThreshold = DefaultDelayThreshold
	}
	if cfg.MaxFlows == 0 {
		cfg.MaxFlows = DefaultMaxFlows
	}
	if cfg.IdlePeriods == 0 {
		cfg.IdlePeriods = DefaultIdlePeriods
	}
	if cfg.Settle/cfg.Period > 1<<16 {
		return nil, errors.New("altmark: the settle time is more than 65536 periods")
	}
	// Periods whose counters may be live at once: the current one and those not yet read.
	ring := int(cfg.Settle/cfg.Period) + 2
	return &Engine{cfg: cfg, ring: ring, flows: map[reporter.FlowKey]*flow{}}, nil
}

// Config returns the configuration with its defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// Stats returns the counters.
func (e *Engine) Stats() Stats {
	s := e.stats
	s.Flows = len(e.flows)
	return s
}

// Mark returns the number of the marking period at now.
func (e *Engine) Mark(now time.Duration) uint64 { return uint64(max(now, 0) / e.cfg.Period) }

// Enter counts, at MP1, a packet of flow key entering the segment now, and returns the mark it
// carries to MP2. ok is false when the packet is not measured (MaxFlows flows are); then the
// driver must not call Leave for it.
func (e *Engine) Enter(now time.Duration, key reporter.FlowKey) (mark uint64, ok bool) {
	mark = e.Mark(now)
	f, ok := e.flows[key]
	if !ok {
		if len(e.flows) >= e.cfg.MaxFlows {
			e.stats.FlowsOverflow++
			return mark, false
		}
		f = &flow{slots: make([]slot, e.ring)}
		e.flows[key] = f
	}
	s := &f.slots[mark%uint64(e.ring)]
	if s.used && s.period != mark {
		// The driver did not Tick in time: that period is long settled, read it now.
		e.read(key, f, s)
	}
	if !s.used {
		*s = slot{period: mark, used: true}
		e.wake(e.readAt(mark))
	}
	s.n1++
	f.last = mark
	e.stats.Entered++
	return mark, true
}

// Leave counts, at MP2, a packet of flow key that entered at entered with mark and leaves the
// segment now.
func (e *Engine) Leave(now time.Duration, key reporter.FlowKey, mark uint64, entered time.Duration) {
	f, ok := e.flows[key]
	if !ok {
		e.stats.Late++
		return
	}
	s := &f.slots[mark%uint64(e.ring)]
	if !s.used || s.period != mark {
		e.stats.Late++
		return
	}
	s.n2++
	s.delaySum += max(now-entered, 0)
	e.stats.Left++
}

// readAt is when period p's counters are read.
func (e *Engine) readAt(p uint64) time.Duration {
	end := float64(p+1) * float64(e.cfg.Period)
	if end+float64(e.cfg.Settle) >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(p+1)*e.cfg.Period + e.cfg.Settle
}

func (e *Engine) wake(at time.Duration) {
	if !e.have || at < e.next {
		e.next, e.have = at, true
	}
}

// NextDeadline returns when Tick is next needed: the next period to read or flow to forget.
func (e *Engine) NextDeadline() (time.Duration, bool) { return e.next, e.have }

// Tick reads the periods that have settled by now and forgets idle flows.
func (e *Engine) Tick(now time.Duration) { e.tick(now, false) }

// Flush reads every period now, settled or not: for when nothing is in the segment any more
// (the driver stops after delivering everything in flight).
func (e *Engine) Flush(now time.Duration) { e.tick(now, true) }

func (e *Engine) tick(now time.Duration, all bool) {
	e.have = false
	cur := e.Mark(now)
	idle := uint64(e.cfg.IdlePeriods)
	for key, f := range e.flows {
		waiting := false
		for _, i := range e.order(f) {
			s := &f.slots[i]
			if at := e.readAt(s.period); all || at <= now {
				e.read(key, f, s)
			} else {
				e.wake(at)
				waiting = true
			}
		}
		if waiting {
			continue
		}
		if all || cur >= f.last+1+idle {
			delete(e.flows, key)
			e.stats.FlowsExpired++
			continue
		}
		e.wake(time.Duration(f.last+1+idle) * e.cfg.Period)
	}
}

// order returns the indexes of a flow's used slots, oldest period first.
func (e *Engine) order(f *flow) []int {
	var idx [8]int
	is := idx[:0]
	for i := range f.slots {
		if f.slots[i].used {
			is = append(is, i)
		}
	}
	slices.SortFunc(is, func(a, b int) int {
		pa, pb := f.slots[a].period, f.slots[b].period
		switch {
		case pa < pb:
			return -1
		case pa > pb:
			return 1
		}
		return 0
	})
	return is
}

// read turns a slot into a measurement and frees it.
func (e *Engine) read(key reporter.FlowKey, f *flow, s *slot) {
	m := Measurement{Key: key, Period: uint32(s.period), Entered: s.n1, Left: s.n2}
	e.stats.Periods++
	if s.n2 > s.n1 {
		e.stats.Excess++
	} else if lost := s.n1 - s.n2; lost > 0 {
		m.Lost = uint32(min(lost, math.MaxUint32))
		e.stats.PeriodsWithLoss++
		e.stats.Lost += lost
	}
	if s.n2 > 0 {
		m.MeanDelay = s.delaySum / time.Duration(s.n2)
		if f.havePrev {
			m.DelayChange, m.HasChange = m.MeanDelay-f.prevMean, true
		}
		f.prevMean, f.havePrev = m.MeanDelay, true
	}
	*s = slot{}
	change := m.DelayChange
	if change < 0 {
		change = -change
	}
	if m.Lost > 0 || m.HasChange && e.cfg.DelayThreshold >= 0 && change >= e.cfg.DelayThreshold {
		e.stats.Reported++
		e.out = append(e.out, m)
	}
}

// Drain hands over the measurements to report, in the order they were read.
func (e *Engine) Drain(out func(Measurement)) {
	for _, m := range e.out {
		out(m)
	}
	clear(e.out)
	e.out = e.out[:0]
}
