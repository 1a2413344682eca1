package udpproxy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crem-project/crem/internal/harness/altmark"
	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/reporter"
	"github.com/crem-project/crem/wire"
)

// ReportConfig makes the proxy a CREM Path Reporter for the RoCEv2 flows it carries (draft,
// Path Reports). The emulated path is the measurement domain; engine port 0 is the forward
// direction, 1 the reverse one.
type ReportConfig struct {
	// Reporter configures the engine: NodeID, Port (the domain's CREM port, required: there is
	// no default, RULINGS C14), Routes (source prefix -> CSF), limits.
	Reporter reporter.Config
	// Listen is the reporter's own UDP socket, the source of every report; the zero value means
	// the unspecified address of the forward address's family, port 0.
	Listen netip.AddrPort
	// Drops: method 3, report the RoCEv2 datagrams the links drop, with their PSNs (queue
	// overflow: Cause congestion; the loss model: Cause corruption).
	Drops bool
	// Marking is the Alternate Marking period T of method 1 (RFC 9341 single marking, see
	// package altmark); 0 turns marking off.
	Marking time.Duration
	// MarkingNodeIDs are the Node IDs of method 1's two measurement points, where a datagram
	// enters the emulated link and where it leaves it. Zero means Reporter.NodeID and
	// Reporter.NodeID + 1.
	MarkingNodeIDs [2]uint32
	// MarkingSettle is how long after a period's end its counters are read (altmark.Config);
	// 0 means the longest time a datagram can spend in the link (delay, jitter, reordering
	// and a full queue drained at the rate; a jumbo frame per queued datagram when the queue
	// is bounded in datagrams), at least half a period. With an unbounded queue, a datagram
	// that waits longer than that is counted late (and lost for its period).
	MarkingSettle time.Duration
	// MarkingDelayThreshold: a period without loss is reported when its Queue Delay Change is
	// at least this large; 0 means altmark.DefaultDelayThreshold, negative never.
	MarkingDelayThreshold time.Duration
	// MarkingMaxFlows bounds the flows each direction measures (0: altmark.DefaultMaxFlows).
	MarkingMaxFlows int
	// Merge: a PATH_REPORT from a downstream reporter that the proxy carries (either
	// direction) joins the report this node is gathering for the same flow and method, if
	// there is one and the entries fit 16, and is not forwarded itself (draft: when
	// reverse-path capacity is scarce). Reporter.Merge is set to it. See the package
	// documentation.
	Merge bool
	// MergeFrom are the downstream reporters whose PATH_REPORTs may merge (required with
	// Merge): a merged entry reaches the CSF from this node's address, which the CSF trusts
	// (C14), so a report from anywhere else is never merged (counted Untrusted and passed on
	// unchanged, for the CSF to judge by its own source address).
	MergeFrom []netip.Prefix
}

// ReportStats counts the reporter's work.
type ReportStats struct {
	// Reporter is the engine's counters (drops fed, reports sent, truncated, deferred...).
	Reporter reporter.Stats
	// Marking is the Alternate Marking counters of both directions together.
	Marking altmark.Stats
	// Sent counts PATH_REPORT datagrams written to the socket, SendErrors those the socket
	// refused.
	Sent, SendErrors uint64
	// EventsLost counts drops, delays and measurements the reporter's loop had no room for
	// (the links never wait for it).
	EventsLost uint64
	// NotRoCE counts dropped datagrams not reported because they are not RoCEv2.
	NotRoCE uint64
	// Unsent counts the reports still held back (by the rate limits) when the reporter
	// stopped, a second after the links.
	Unsent uint64
	// With Merge: Offered counts the datagrams carried (either direction) that looked like a
	// PATH_REPORT (CREM version 1, type 8); each is either Merged into a report of this node
	// (and not forwarded) or PassedOn, forwarded unchanged through its direction's link.
	// Offered = Merged + PassedOn. Of those passed on, Malformed did not parse as a
	// PATH_REPORT, OtherCSF were addressed to another CSF than the one this node reports the
	// flow to, Untrusted came from an address outside MergeFrom; the rest found no pending
	// report of their flow and method, or no room for their entries (Reporter.PassedOn).
	Offered, Merged, PassedOn, Malformed, OtherCSF, Untrusted uint64
}

// Engine ports.
const (
	portForward = 0
	portReverse = 1
)

type eventKind uint8

const (
	evDrop eventKind = iota
	evDelay
	evMeasure
)

// event is what a direction's loop tells the reporter's loop.
type event struct {
	kind  eventKind
	now   time.Duration
	port  int
	key   reporter.FlowKey
	psn   psn.PSN
	cause wire.Cause
	delay time.Duration
	hops  [2]wire.HopEntry
}

// reportLoop drives the reporter engine and owns the reporter's socket; the directions hand it
// events. The engine is behind engMu, which the loop takes for each round of work and a
// direction only to offer a carried PATH_REPORT for merging (ReportConfig.Merge): whoever
// holds it first applies the events waiting in the queue, in order, so a report offered after
// a drop always finds the drop applied. The socket is written outside the lock.
type reportLoop struct {
	p      *Proxy
	cfg    ReportConfig
	routes []reporter.Route
	conn   *net.UDPConn
	events chan event
	wake   chan struct{} // one token: events are waiting
	quit   chan struct{} // closed once the directions have stopped
	done   chan struct{}
	out    []reporter.Datagram // the loop's: reports to write once the lock is released

	engMu sync.Mutex
	eng   *reporter.Reporter

	sent, sendErrors, eventsLost, notRoCE, unsent             atomic.Uint64
	offered, merged, passedOn, malformed, otherCSF, untrusted atomic.Uint64
}

// eventQueue is how many events wait for the reporter's loop at most.
const eventQueue = 8192

func newReportLoop(p *Proxy, cfg ReportConfig) (*reportLoop, error) {
	if !cfg.Drops && cfg.Marking == 0 {
		return nil, errors.New("report: neither drops (method 3) nor marking (method 1) asked for")
	}
	if cfg.Marking < 0 || cfg.MarkingSettle < 0 || cfg.MarkingMaxFlows < 0 {
		return nil, errors.New("report: negative marking period, settle time or flow limit")
	}
	if cfg.Merge && len(cfg.MergeFrom) == 0 {
		return nil, errors.New("report: merging needs the downstream reporters' addresses (MergeFrom): a merged entry reaches the CSF from this node's address, which the CSF trusts (C14)")
	}
	for _, pf := range cfg.MergeFrom {
		if !pf.IsValid() {
			return nil, fmt.Errorf("report: merge source %v is not a prefix", pf)
		}
	}
	cfg.Reporter.Merge = cfg.Merge
	eng, err := reporter.New(cfg.Reporter)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	if cfg.MarkingNodeIDs == [2]uint32{} {
		cfg.MarkingNodeIDs = [2]uint32{cfg.Reporter.NodeID, cfg.Reporter.NodeID + 1}
	}
	la := cfg.Listen
	network := "udp4"
	if !la.IsValid() {
		u := netip.IPv4Unspecified()
		if p.fwdAddr.Addr().Is6() {
			u, network = netip.IPv6Unspecified(), "udp6"
		}
		la = netip.AddrPortFrom(u, 0)
	} else if la.Addr().Is6() && !la.Addr().Is4In6() {
		network = "udp6"
	}
	conn, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(la))
	if err != nil {
		return nil, fmt.Errorf("report: socket on %v: %w", la, err)
	}
	return &reportLoop{p: p, cfg: cfg, routes: cfg.Reporter.Routes, eng: eng, conn: conn,
		events: make(chan event, eventQueue), wake: make(chan struct{}, 1), quit: make(chan struct{}),
		done: make(chan struct{})}, nil
}

// addr is the reporter socket's address.
func (r *reportLoop) addr() netip.AddrPort {
	a := r.conn.LocalAddr().(*net.UDPAddr).AddrPort()
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

// post hands an event over without waiting; with wait it waits (only when the loop is sure to
// run on, as while a direction stops).
func (r *reportLoop) post(ev event, wait bool) {
	if wait {
		r.events <- ev
	} else {
		select {
		case r.events <- ev:
		default:
			r.eventsLost.Add(1)
			return
		}
	}
	select {
	case r.wake <- struct{}{}:
	default: // a token is already there
	}
}

// applyEvents hands the events waiting in the queue to the engine, in order; engMu must be
// held. It takes at most the queue's capacity, so it ends even while directions post, and
// still takes every event posted before it began.
func (r *reportLoop) applyEvents() {
	for range cap(r.events) {
		select {
		case ev := <-r.events:
			r.handle(ev)
		default:
			return
		}
	}
}

// reportDrainLimit bounds how long the loop goes on sending reports still pending once the
// directions have stopped.
const reportDrainLimit = time.Second

// run is the reporter's loop: the only code that ticks the engine and writes the socket.
func (r *reportLoop) run() {
	defer close(r.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	quit := r.quit
	stopping := false
	var stopAt time.Duration
	for {
		select {
		case <-r.wake:
		case <-quit:
			quit, stopping = nil, true
			stopAt = r.p.now() + reportDrainLimit
		case <-timer.C:
		}
		r.engMu.Lock()
		r.applyEvents()
		now := r.p.now()
		r.eng.Tick(now)
		r.eng.Drain(r.collect)
		next, ok := r.eng.NextDeadline()
		pending := r.eng.Pending()
		r.engMu.Unlock()
		for i, d := range r.out {
			r.write(d)
			r.out[i] = reporter.Datagram{}
		}
		r.out = r.out[:0]
		if stopping && (!ok || now >= stopAt) {
			r.unsent.Store(uint64(pending))
			r.conn.Close()
			return
		}
		if ok {
			if stopping {
				next = min(next, stopAt)
			}
			timer.Reset(max(next-r.p.now(), 0))
		} else if stopping {
			timer.Reset(max(stopAt-r.p.now(), 0))
		} else {
			timer.Stop()
		}
	}
}

func (r *reportLoop) handle(ev event) {
	switch ev.kind {
	case evDrop:
		r.eng.QueueDelay(ev.now, ev.port, ev.delay)
		r.eng.Drop(ev.now, ev.key, ev.port, ev.psn, ev.cause)
	case evDelay:
		r.eng.QueueDelay(ev.now, ev.port, ev.delay)
	case evMeasure:
		r.eng.Report(ev.now, ev.key, ev.port, wire.MethodAltMark, ev.hops[:])
	}
}

func (r *reportLoop) collect(d reporter.Datagram) { r.out = append(r.out, d) }

func (r *reportLoop) write(d reporter.Datagram) {
	if _, err := r.conn.WriteToUDPAddrPort(d.Payload, d.To); err != nil {
		r.sendErrors.Add(1)
		r.p.logger.Debug("sending PATH_REPORT", "to", d.To, "err", err)
		return
	}
	r.sent.Add(1)
}

// looksLikePathReport reports whether a carried datagram claims to be a PATH_REPORT: its first
// octet is CREM version 1, type 8. No RoCEv2 datagram does (0x18 is no BTH opcode).
func looksLikePathReport(b []byte) bool {
	return len(b) > 0 && b[0] == wire.Version<<4|uint8(wire.TypePathReport)
}

// offer is ReportConfig.Merge for a datagram a direction carries toward dst that looks like a
// PATH_REPORT: it reports whether the datagram was merged into a report of this node, in which
// case the direction does not forward it. A direction calls it from its loop; it holds engMu
// only to apply the waiting events and to merge.
func (r *reportLoop) offer(now time.Duration, msg []byte, src, dst netip.AddrPort) bool {
	r.offered.Add(1)
	if !r.trusted(src.Addr()) {
		r.untrusted.Add(1)
		r.passedOn.Add(1)
		return false
	}
	rep, err := wire.ParsePathReport(msg)
	if err != nil {
		r.malformed.Add(1)
		r.passedOn.Add(1)
		return false
	}
	// Only a report for the CSF this node reports the flow to ("for the same CSF"): a merged
	// report goes where this node's reports of the flow go.
	if csfFor(r.routes, rep.Source, r.cfg.Reporter.Port) != unmapAP(dst) {
		r.otherCSF.Add(1)
		r.passedOn.Add(1)
		return false
	}
	r.engMu.Lock()
	r.applyEvents()
	merged := r.eng.Forward(now, msg)
	r.engMu.Unlock()
	if merged {
		r.merged.Add(1)
	} else {
		r.passedOn.Add(1)
	}
	return merged
}

// trusted reports whether a carried PATH_REPORT from a may merge (ReportConfig.MergeFrom).
func (r *reportLoop) trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, pf := range r.cfg.MergeFrom {
		if pf.Contains(a) {
			return true
		}
	}
	return false
}

// csfFor is where the engine sends the reports of flows from src: the CREM port of the CSF
// routed for the longest prefix holding src, or of src itself (package reporter's rule).
func csfFor(routes []reporter.Route, src netip.Addr, port uint16) netip.AddrPort {
	best := -1
	to := src
	for _, rt := range routes {
		if rt.Prefix.Contains(src) && rt.Prefix.Bits() > best {
			best, to = rt.Prefix.Bits(), rt.CSF
		}
	}
	return netip.AddrPortFrom(to.Unmap(), port)
}

func unmapAP(a netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) }

func (r *reportLoop) stats() ReportStats {
	r.engMu.Lock()
	s := ReportStats{Reporter: r.eng.Stats()}
	r.engMu.Unlock()
	s.Sent = r.sent.Load()
	s.SendErrors = r.sendErrors.Load()
	s.EventsLost = r.eventsLost.Load()
	s.NotRoCE = r.notRoCE.Load()
	s.Unsent = r.unsent.Load()
	s.Offered = r.offered.Load()
	s.Merged = r.merged.Load()
	s.PassedOn = r.passedOn.Load()
	s.Malformed = r.malformed.Load()
	s.OtherCSF = r.otherCSF.Load()
	s.Untrusted = r.untrusted.Load()
	return s
}

// marking is a direction's Alternate Marking: the engine, owned by the direction's loop, and a
// copy of its counters for Stats.
type marking struct {
	eng  *altmark.Engine
	ids  [2]uint32
	mu   sync.Mutex
	snap altmark.Stats
}

func newMarking(cfg ReportConfig, link netem.Config) (*marking, error) {
	settle := cfg.MarkingSettle
	if settle == 0 {
		settle = linkMaxDelay(link)
	}
	eng, err := altmark.New(altmark.Config{Period: cfg.Marking, Settle: settle,
		DelayThreshold: cfg.MarkingDelayThreshold, MaxFlows: cfg.MarkingMaxFlows})
	if err != nil {
		return nil, fmt.Errorf("report: marking: %w", err)
	}
	return &marking{eng: eng, ids: cfg.MarkingNodeIDs}, nil
}

// jumboFrame is the size assumed of each datagram of a queue bounded in datagrams.
const jumboFrame = 9216

// linkMaxDelay is the longest a datagram can spend in a link with cfg, as far as its
// configuration bounds it.
func linkMaxDelay(cfg netem.Config) time.Duration {
	d := cfg.Delay + cfg.ReorderDelay
	if cfg.JitterDist == netem.JitterNormal {
		d += 4 * cfg.Jitter
	} else {
		d += cfg.Jitter
	}
	if cfg.Rate > 0 {
		octets := int64(cfg.QueueBytes)
		if octets == 0 {
			octets = int64(cfg.QueuePackets) * jumboFrame
		}
		d += time.Duration(float64(octets) * 8 / float64(cfg.Rate) * float64(time.Second))
	}
	// The loop's own scheduling: a little slack.
	return d + time.Millisecond
}

func (m *marking) publish() {
	s := m.eng.Stats()
	m.mu.Lock()
	m.snap = s
	m.mu.Unlock()
}

func (m *marking) stats() altmark.Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.snap
}

// addMarking sums b into a.
func addMarking(a, b altmark.Stats) altmark.Stats {
	a.Entered += b.Entered
	a.Left += b.Left
	a.Late += b.Late
	a.FlowsOverflow += b.FlowsOverflow
	a.Flows += b.Flows
	a.FlowsExpired += b.FlowsExpired
	a.Periods += b.Periods
	a.PeriodsWithLoss += b.PeriodsWithLoss
	a.Lost += b.Lost
	a.Reported += b.Reported
	a.Excess += b.Excess
	return a
}

// flowKey names the flow of a datagram as the path sees it: forward, the client's address to
// the forward address; reverse, the other way. Mixed families are both written as IPv6.
func (d *direction) flowKey(pk *pkt, qp uint32) reporter.FlowKey {
	c, f := pk.cl.addr.Addr().Unmap(), pk.cl.fwd.Addr()
	if c.Is4() != f.Is4() {
		c, f = netip.AddrFrom16(c.As16()), netip.AddrFrom16(f.As16())
	}
	if d == d.p.fwd {
		return reporter.FlowKey{Src: c, Dst: f, FlowLabel: qp}
	}
	return reporter.FlowKey{Src: f, Dst: c, FlowLabel: qp}
}

// port is the direction's engine port.
func (d *direction) port() int {
	if d == d.p.fwd {
		return portForward
	}
	return portReverse
}

// delayEvery is how often, at most, a direction tells the reporter its queueing delay while
// traffic flows.
const delayEvery = time.Millisecond

// reportIn is the reporter's part of handing a datagram to the link: MP1 of the marking,
// before Send.
func (d *direction) reportIn(now time.Duration, pk *pkt) {
	if d.mark == nil {
		return
	}
	h, ok := RoCE(pk.data)
	if !ok {
		return
	}
	pk.key = d.flowKey(pk, h.DestQP)
	pk.mark, pk.measured = d.mark.eng.Enter(now, pk.key)
	pk.entered = now
}

// reportVerdict is the reporter's part of the link's verdict on a datagram.
func (d *direction) reportVerdict(now time.Duration, pk *pkt, v netem.Verdict) {
	r := d.p.rep
	if r == nil || !r.cfg.Drops {
		return
	}
	if v == netem.Queued {
		if now-d.lastDelay >= delayEvery || !d.delayTold {
			d.lastDelay, d.delayTold = now, true
			r.post(event{kind: evDelay, now: now, port: d.port(), delay: d.link.QueueDelay(now)}, false)
		}
		return
	}
	h, ok := RoCE(pk.data)
	if !ok {
		r.notRoCE.Add(1)
		return
	}
	cause := wire.CauseCorruption
	if v == netem.DroppedOverflow {
		cause = wire.CauseCongestion
	}
	d.lastDelay, d.delayTold = now, true
	r.post(event{kind: evDrop, now: now, port: d.port(), key: d.flowKey(pk, h.DestQP), psn: h.PSN,
		cause: cause, delay: d.link.QueueDelay(now)}, false)
}

// reportOut is MP2 of the marking: a datagram leaves the link.
func (d *direction) reportOut(now time.Duration, pk *pkt) {
	if pk.measured {
		d.mark.eng.Leave(now, pk.key, pk.mark, pk.entered)
		pk.measured = false
	}
}

// markTick reads the settled marking periods (all of them with flush) and passes the
// measurements worth a report to the reporter.
func (d *direction) markTick(now time.Duration, flush bool) {
	m := d.mark
	if m == nil {
		return
	}
	if flush {
		m.eng.Flush(now)
	} else if next, ok := m.eng.NextDeadline(); ok && next <= now {
		m.eng.Tick(now)
	}
	m.eng.Drain(func(ms altmark.Measurement) {
		h := ms.Hops(m.ids)
		d.p.rep.post(event{kind: evMeasure, now: now, port: d.port(), key: ms.Key, hops: [2]wire.HopEntry{h[0], h[1]}}, flush)
	})
	m.publish()
}
