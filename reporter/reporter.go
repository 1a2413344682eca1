// Package reporter is the CREM path reporter: an engine for a node on the path that knows which
// packets of a protected flow it dropped (node-local drop accounting, PATH_REPORT method 3) and
// tells the flow's CSF, so that the CSF can send extra repair before the receiver even notices
// the loss (RULINGS C10, C16). It follows the draft's rules for reporters: reports go to the CREM
// port of the CSF configured for the flow's source prefix (by default the flow's source address),
// fit the path MTU (dropped-PSN lists are cut and the Truncated flag set), are rate-limited per
// flow and per port, and may merge the hop entries of downstream reporters, up to 16, within an
// aggregation interval.
//
// Measurements made elsewhere on the node (Alternate Marking, method 1, see package altmark)
// come in through Report and go out through the same limits and routing, in reports of their
// own method.
//
// Like the CREM engines it never touches a socket or a clock: drops and downstream reports come
// in with the current time, datagrams and the next deadline go out.
package reporter

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// FlowKey names a protected flow as PATH_REPORT does: addresses and Flow Label (for RoCEv2 the
// destination QP in its low 24 bits).
type FlowKey struct {
	Src, Dst  netip.Addr
	FlowLabel uint32
}

// Route sends the reports of flows whose source lies in Prefix to the CSF at CSF.
type Route struct {
	Prefix netip.Prefix
	CSF    netip.Addr
}

// Datagram is a PATH_REPORT the driver is to send.
type Datagram struct {
	To      netip.AddrPort
	Payload []byte
}

// Config sets up a reporter. Port is required: CREM has no default port (C14).
type Config struct {
	NodeID uint32
	Port   uint16 // the domain's CREM port
	// PathMTU is the IP MTU toward the CSFs (default 1500); a report never exceeds it.
	PathMTU int
	// Aggregation is how long drops (and downstream reports) gather before a report goes out
	// (default 50 us, the draft's RECOMMENDED interval).
	Aggregation time.Duration
	// FlowInterval is the least time between two reports of one flow (default 1 ms).
	FlowInterval time.Duration
	// PortRate and PortBurst bound the reports sent for drops on one port of the node
	// (default 2000 per second, burst 16).
	PortRate  float64
	PortBurst int
	// Routes map source prefixes to CSF addresses; a flow outside every prefix reports to its
	// own source address.
	Routes []Route
	// Merge lets downstream PATH_REPORTs for a flow with a pending report join it (draft: when
	// reverse-path capacity is scarce).
	Merge bool
	// MaxFlows bounds the flows with a pending report (default 4096).
	MaxFlows int
}

func (c *Config) defaults() error {
	if c.Port == 0 {
		return errors.New("reporter: the CREM port is required (there is no default port)")
	}
	if c.PathMTU == 0 {
		c.PathMTU = 1500
	}
	if c.PathMTU < 576 {
		return fmt.Errorf("reporter: path MTU %d is below 576", c.PathMTU)
	}
	if c.Aggregation == 0 {
		c.Aggregation = 50 * time.Microsecond
	}
	if c.FlowInterval == 0 {
		c.FlowInterval = time.Millisecond
	}
	if c.PortRate == 0 {
		c.PortRate = 2000
	}
	if c.PortBurst == 0 {
		c.PortBurst = 16
	}
	if c.MaxFlows == 0 {
		c.MaxFlows = 4096
	}
	if c.Aggregation < 0 || c.FlowInterval < 0 || c.PortRate < 0 || c.PortBurst < 1 || c.MaxFlows < 1 {
		return errors.New("reporter: negative interval, rate or size")
	}
	for _, r := range c.Routes {
		if !r.Prefix.IsValid() || !r.CSF.IsValid() {
			return fmt.Errorf("reporter: route %v -> %v is incomplete", r.Prefix, r.CSF)
		}
	}
	return nil
}

// Stats counts every outcome.
type Stats struct {
	Drops           uint64 `json:"drops"`            // drops reported to the reporter
	Reports         uint64 `json:"reports"`          // PATH_REPORTs sent, every method
	Truncated       uint64 `json:"truncated"`        // reports whose dropped-PSN lists were cut to fit
	PSNsCut         uint64 `json:"psns_cut"`         // PSNs left out of reports (counted in Lost Count all the same)
	DeferredFlow    uint64 `json:"deferred_flow"`    // reports delayed by the per-flow limit
	DeferredPort    uint64 `json:"deferred_port"`    // reports delayed by the per-port limit
	Merged          uint64 `json:"merged"`           // downstream reports merged into a pending one
	PassedOn        uint64 `json:"passed_on"`        // downstream reports left for the driver to forward unchanged
	MalformedInput  uint64 `json:"malformed_input"`  // downstream datagrams that were not a valid PATH_REPORT
	FlowsOverflow   uint64 `json:"flows_overflow"`   // drops and measurements not reported because MaxFlows reports were pending
	EntriesOverflow uint64 `json:"entries_overflow"` // drops folded into an existing entry because 16 entries were used
	EncodeErrors    uint64 `json:"encode_errors"`
	// Measurements counts the hop-entry sets handed to Report (one per measured period);
	// MeasurementReports the reports sent that carry them (several may share one report);
	// HopsOverflow the hop entries given to Report that found no room (16 entries pending).
	Measurements       uint64 `json:"measurements"`
	MeasurementReports uint64 `json:"measurement_reports"`
	HopsOverflow       uint64 `json:"hops_overflow"`
}

// pending is the report a flow is gathering, one per flow and method (a PATH_REPORT carries
// one method).
type pending struct {
	key    FlowKey
	method wire.Method
	port   int
	due    time.Duration
	trunc  bool
	hops   []wire.HopEntry // own entries (one per cause) first, then merged ones
	own    int             // how many of hops are this node's drop entries
	period uint32
	// measured: hops came from Report.
	measured bool
}

type bucket struct {
	tokens float64
	last   time.Duration
	// delay is the port's queueing delay as last told (QueueDelay), least the smallest seen.
	delay, least time.Duration
	haveDelay    bool
}

// sent is what the reporter remembers of a flow's last report.
type sent struct {
	at    time.Duration
	delay time.Duration // the port's queueing delay then
	has   bool          // delay was known
	// period numbers the flow's reports (Marking Period Number of method 3).
	period uint32
}

// pendingKey names a pending report: the flow and the report's method.
type pendingKey struct {
	FlowKey
	method wire.Method
}

// Reporter is the engine. It is not safe for concurrent use.
type Reporter struct {
	cfg      Config
	flows    map[pendingKey]*pending
	lastSent map[FlowKey]sent
	ports    map[int]*bucket
	out      []Datagram
	stats    Stats
}

// New returns a reporter for cfg.
func New(cfg Config) (*Reporter, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Reporter{cfg: cfg, flows: map[pendingKey]*pending{}, lastSent: map[FlowKey]sent{}, ports: map[int]*bucket{}}, nil
}

// Stats returns the counters.
func (r *Reporter) Stats() Stats { return r.stats }

// Drop records that this node dropped the packet with PSN p of flow key on its port, for cause.
func (r *Reporter) Drop(now time.Duration, key FlowKey, port int, p psn.PSN, cause wire.Cause) {
	r.stats.Drops++
	pd := r.pendingFor(now, key, wire.MethodNodeDrops, port)
	if pd == nil {
		r.stats.FlowsOverflow++
		return
	}
	e := r.ownEntry(pd, cause)
	e.LostCount++
	if len(e.DroppedPSNs) < 255 {
		e.DroppedPSNs = append(e.DroppedPSNs, p)
	} else {
		pd.trunc = true
		r.stats.PSNsCut++
	}
}

// DropUnnamed records that this node dropped n packets of flow key on its port, for cause,
// whose PSNs it does not know (the later segments of a GSO packet, drops its source could not
// pass on in time). Lost Count counts them; the report says Truncated, since its PSN list is not
// the whole of Lost Count.
func (r *Reporter) DropUnnamed(now time.Duration, key FlowKey, port int, n uint32, cause wire.Cause) {
	if n == 0 {
		return
	}
	r.stats.Drops += uint64(n)
	pd := r.pendingFor(now, key, wire.MethodNodeDrops, port)
	if pd == nil {
		r.stats.FlowsOverflow += uint64(n)
		return
	}
	e := r.ownEntry(pd, cause)
	e.LostCount += n
	pd.trunc = true
	r.stats.PSNsCut += uint64(n)
}

func (r *Reporter) pendingFor(now time.Duration, key FlowKey, method wire.Method, port int) *pending {
	pk := pendingKey{key, method}
	if pd, ok := r.flows[pk]; ok {
		return pd
	}
	if len(r.flows) >= r.cfg.MaxFlows {
		return nil
	}
	due := now + r.cfg.Aggregation
	if last, ok := r.lastSent[key]; ok && last.at+r.cfg.FlowInterval > due {
		due = last.at + r.cfg.FlowInterval
		r.stats.DeferredFlow++
	}
	pd := &pending{key: key, method: method, port: port, due: due}
	r.flows[pk] = pd
	return pd
}

// Report sends hop entries that a measurement on this node produced (for example one period of
// Alternate Marking, method 1) for flow key, seen on port, through the same aggregation, rate
// limits per flow and per port, routing and MTU rule as the node's own drops. The entries are
// sent as given (their Node IDs, Marking Period Numbers and Queue Delay Changes are the
// measurement's). Entries of one method for one flow gather in one report, up to 16; entries
// that find no room are counted (HopsOverflow) and Report returns false. method must not be
// MethodNodeDrops, whose entries Drop builds.
func (r *Reporter) Report(now time.Duration, key FlowKey, port int, method wire.Method, hops []wire.HopEntry) bool {
	r.stats.Measurements++
	if method == wire.MethodNodeDrops || len(hops) == 0 || len(hops) > wire.MaxHopEntries {
		r.stats.HopsOverflow += uint64(len(hops))
		return false
	}
	pd := r.pendingFor(now, key, method, port)
	if pd == nil {
		r.stats.FlowsOverflow++
		return false
	}
	if len(pd.hops)+len(hops) > wire.MaxHopEntries {
		r.stats.HopsOverflow += uint64(len(hops))
		return false
	}
	for _, h := range hops {
		if len(h.DroppedPSNs) > 255 {
			h.DroppedPSNs = h.DroppedPSNs[:255]
			pd.trunc = true
		}
		h.DroppedPSNs = append([]psn.PSN(nil), h.DroppedPSNs...)
		pd.hops = append(pd.hops, h)
	}
	pd.measured = true
	return true
}

// ownEntry returns this node's entry for cause, creating it (one entry per cause).
func (r *Reporter) ownEntry(pd *pending, cause wire.Cause) *wire.HopEntry {
	for i := 0; i < pd.own; i++ {
		if pd.hops[i].Cause == cause {
			return &pd.hops[i]
		}
	}
	if len(pd.hops) >= wire.MaxHopEntries {
		// No room for another entry: the drop joins this node's first entry.
		r.stats.EntriesOverflow++
		return &pd.hops[0]
	}
	pd.hops = append(pd.hops, wire.HopEntry{})
	copy(pd.hops[pd.own+1:], pd.hops[pd.own:])
	pd.hops[pd.own] = wire.HopEntry{NodeID: r.cfg.NodeID, Cause: cause}
	pd.own++
	return &pd.hops[pd.own-1]
}

// Forward offers a PATH_REPORT from a downstream reporter that passes this node. It returns
// true when the report was merged into one this node is gathering for the same flow (the
// driver then drops the original); false when the driver is to forward it unchanged.
func (r *Reporter) Forward(now time.Duration, msg []byte) bool {
	rep, err := wire.ParsePathReport(msg)
	if err != nil {
		r.stats.MalformedInput++
		return false
	}
	if !r.cfg.Merge {
		r.stats.PassedOn++
		return false
	}
	key := pendingKey{FlowKey{Src: rep.Source, Dst: rep.Destination, FlowLabel: rep.FlowLabel}, rep.Method}
	pd, ok := r.flows[key]
	if !ok || len(pd.hops)+len(rep.Hops) > wire.MaxHopEntries {
		r.stats.PassedOn++
		return false
	}
	for _, h := range rep.Hops {
		h.DroppedPSNs = append([]psn.PSN(nil), h.DroppedPSNs...)
		pd.hops = append(pd.hops, h)
	}
	pd.trunc = pd.trunc || rep.Truncated
	r.stats.Merged++
	return true
}

// Pending returns the number of reports being gathered or held back by the limits.
func (r *Reporter) Pending() int { return len(r.flows) }

// NextDeadline returns when Tick is next needed.
func (r *Reporter) NextDeadline() (time.Duration, bool) {
	var next time.Duration
	found := false
	for _, pd := range r.flows {
		if !found || pd.due < next {
			next, found = pd.due, true
		}
	}
	return next, found
}

// Tick sends the reports that are due and allowed by the per-port limit.
func (r *Reporter) Tick(now time.Duration) {
	for key, pd := range r.flows {
		if pd.due > now {
			continue
		}
		if wait := r.takePortToken(now, pd.port); wait > 0 {
			pd.due = now + wait
			r.stats.DeferredPort++
			continue
		}
		r.send(now, pd)
		delete(r.flows, key)
	}
	// Forget flows whose last report is older than the per-flow interval: bounded memory.
	if len(r.lastSent) > r.cfg.MaxFlows {
		for key, t := range r.lastSent {
			if now-t.at >= r.cfg.FlowInterval {
				delete(r.lastSent, key)
			}
		}
	}
}

// QueueDelay tells the reporter the queueing delay a packet meets on port now (the sojourn time
// of the packet just dequeued, or the backlog over the drain rate). Reports then carry, in Queue
// Delay Change, the change of the port's delay since the flow's previous report; a flow's first
// report compares with the least delay the port has shown (its standing queue). Without it,
// Queue Delay Change is 0.
func (r *Reporter) QueueDelay(now time.Duration, port int, d time.Duration) {
	b := r.bucketFor(now, port)
	b.delay = d
	if !b.haveDelay || d < b.least {
		b.least = d
	}
	b.haveDelay = true
}

func (r *Reporter) bucketFor(now time.Duration, port int) *bucket {
	b, ok := r.ports[port]
	if !ok {
		if len(r.ports) >= maxPorts {
			// A node has few ports; beyond the bound, ports share the last bucket.
			port = -1
			if b, ok = r.ports[port]; ok {
				return b
			}
		}
		b = &bucket{tokens: float64(r.cfg.PortBurst), last: now}
		r.ports[port] = b
	}
	return b
}

// portBucket returns the bucket port uses, or nil.
func (r *Reporter) portBucket(port int) *bucket {
	if b, ok := r.ports[port]; ok {
		return b
	}
	return r.ports[-1]
}

// maxPorts bounds the port buckets.
const maxPorts = 1024

// takePortToken spends one report of the port's budget, or says how long until one is there.
func (r *Reporter) takePortToken(now time.Duration, port int) time.Duration {
	b := r.bucketFor(now, port)
	b.tokens += now.Seconds()*r.cfg.PortRate - b.last.Seconds()*r.cfg.PortRate
	if b.tokens > float64(r.cfg.PortBurst) {
		b.tokens = float64(r.cfg.PortBurst)
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return time.Duration((1 - b.tokens) / r.cfg.PortRate * float64(time.Second))
}

// csfFor returns where a flow's reports go.
func (r *Reporter) csfFor(src netip.Addr) netip.AddrPort {
	best := -1
	to := src
	for _, rt := range r.cfg.Routes {
		if rt.Prefix.Contains(src) && rt.Prefix.Bits() > best {
			best, to = rt.Prefix.Bits(), rt.CSF
		}
	}
	return netip.AddrPortFrom(to, r.cfg.Port)
}

// maxPayload is the largest UDP payload that fits the path MTU toward the CSF.
func (r *Reporter) maxPayload(to netip.Addr) int {
	ip := 20
	if to.Is6() && !to.Is4In6() {
		ip = 40
	}
	return r.cfg.PathMTU - ip - 8
}

func (r *Reporter) send(now time.Duration, pd *pending) {
	if pd.method != wire.MethodNodeDrops {
		// A measurement's entries carry their own numbers; only the time counts for the
		// per-flow limit.
		last := r.lastSent[pd.key]
		last.at = now
		r.lastSent[pd.key] = last
		r.emit(pd, wire.PathReport{Truncated: pd.trunc, Method: pd.method, Source: pd.key.Src,
			Destination: pd.key.Dst, FlowLabel: pd.key.FlowLabel, Hops: pd.hops})
		return
	}
	var change int32
	last, hadLast := r.lastSent[pd.key]
	this := sent{at: now, period: last.period + 1}
	period := this.period
	if b := r.portBucket(pd.port); b != nil && b.haveDelay {
		this.delay, this.has = b.delay, true
		base := b.least
		if hadLast && last.has {
			base = last.delay
		}
		change = wire.QueueDelayChange(b.delay - base)
	}
	r.lastSent[pd.key] = this
	for i := 0; i < pd.own; i++ {
		pd.hops[i].MarkingPeriodNumber = period
		pd.hops[i].QueueDelayChangeUS = change
	}
	r.emit(pd, wire.PathReport{Truncated: pd.trunc, Method: wire.MethodNodeDrops, Source: pd.key.Src,
		Destination: pd.key.Dst, FlowLabel: pd.key.FlowLabel, Hops: pd.hops})
}

// emit fits msg into the path MTU toward the flow's CSF, encodes it and queues it.
func (r *Reporter) emit(pd *pending, msg wire.PathReport) {
	to := r.csfFor(pd.key.Src)
	limit := r.maxPayload(to.Addr())
	// Cut the longest dropped-PSN list until the report fits; Lost Count keeps the true number.
	for msg.Length() > limit {
		longest := -1
		for i := range msg.Hops {
			if longest < 0 || len(msg.Hops[i].DroppedPSNs) > len(msg.Hops[longest].DroppedPSNs) {
				longest = i
			}
		}
		h := &msg.Hops[longest]
		if len(h.DroppedPSNs) == 0 {
			break // only hop entries left; 16 of them always fit a 576-octet MTU
		}
		over := (msg.Length() - limit + 3) / 4
		if over > len(h.DroppedPSNs) {
			over = len(h.DroppedPSNs)
		}
		h.DroppedPSNs = h.DroppedPSNs[:len(h.DroppedPSNs)-over]
		r.stats.PSNsCut += uint64(over)
		msg.Truncated = true
	}
	b, err := msg.Append(nil)
	if err != nil {
		r.stats.EncodeErrors++
		return
	}
	if msg.Truncated {
		r.stats.Truncated++
	}
	r.stats.Reports++
	if pd.measured {
		r.stats.MeasurementReports++
	}
	r.out = append(r.out, Datagram{To: to, Payload: b})
}

// Drain hands over the reports to send.
func (r *Reporter) Drain(out func(Datagram)) {
	for _, d := range r.out {
		out(d)
	}
	r.out = r.out[:0]
}
