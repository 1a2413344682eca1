package pairing

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// Limits are the Learner's numbers and the bounds of its tables (protocol notes G16-G22 say
// why these defaults).
type Limits struct {
	// MTU is the RDMA MTU a READ request's PSNs are counted with (the CSF's, C13).
	MTU int
	// Window is the recently sent range a response PSN must lie in: the last Window PSNs a
	// flow sent, and always the whole of its latest READ.
	Window uint32
	// Confirm is how many consistent observations pair a reverse QP by correlation.
	Confirm int
	// Strikes is how many contradictions block a reverse QP that is not paired, for BlockFor.
	Strikes  int
	BlockFor time.Duration
	// Unpair is how many responses in a row outside its flow's range unpair a learned QP.
	Unpair int
	// Reorder is how far a candidate's response may fall behind its last one (reordering on
	// the path) before it counts as a contradiction.
	Reorder uint32
	// Stale: a learned pairing with no consistent response for this long may be replaced by
	// a reverse QP that confirms against the same flow.
	Stale time.Duration
	// Table bounds: forward flows tracked, reverse QPs with one observation (the oldest are
	// evicted first), reverse QPs with more (refused beyond), CM REQs waiting for their REP,
	// reverse QPs blocked (beyond, a QP struck out is forgotten instead: it starts on
	// probation again, so a flood of stray QPs cannot grow the table for BlockFor).
	MaxFlows, MaxProbation, MaxCandidates, MaxPending, MaxBlocked int
	// Expiry: a flow with no request for FlowIdle, a candidate with no evidence for
	// CandidateIdle, a REQ with no REP for PendingIdle. Sweep is how often Expire runs.
	FlowIdle, CandidateIdle, PendingIdle, Sweep time.Duration
}

// DefaultLimits returns the numbers of protocol notes G17-G20.
func DefaultLimits() Limits {
	return Limits{MTU: 4096, Window: 1 << 20, Confirm: 8, Strikes: 4, BlockFor: 10 * time.Second, Unpair: 4, Reorder: 64,
		Stale: 5 * time.Second, MaxFlows: 1 << 16, MaxProbation: 4096, MaxCandidates: 1024, MaxPending: 4096, MaxBlocked: 4096,
		FlowIdle: 60 * time.Second, CandidateIdle: 10 * time.Second, PendingIdle: 30 * time.Second, Sweep: time.Second}
}

func (l Limits) validate() error {
	switch {
	case l.MTU < 256 || l.MTU > 4096:
		return fmt.Errorf("pairing: MTU %d: want 256 to 4096", l.MTU)
	case l.Window < 1 || l.Window > psn.Modulus/4:
		return fmt.Errorf("pairing: Window %d: want 1 to 2^22", l.Window)
	case l.Confirm < 1 || l.Strikes < 1 || l.Unpair < 1:
		return errors.New("pairing: Confirm, Strikes and Unpair must be at least 1")
	case l.MaxFlows < 1 || l.MaxProbation < 1 || l.MaxCandidates < 1 || l.MaxPending < 1 || l.MaxBlocked < 1:
		return errors.New("pairing: every table bound must be at least 1")
	case l.BlockFor <= 0 || l.Stale <= 0 || l.FlowIdle <= 0 || l.CandidateIdle <= 0 || l.PendingIdle <= 0 || l.Sweep <= 0:
		return errors.New("pairing: every duration must be positive")
	}
	return nil
}

// By says how a pairing was learned.
type By uint8

// How a pairing is known.
const (
	ByConfig      By = iota // the operator's
	ByCM                    // an RDMA CM REQ and its REP
	ByCorrelation           // PSN correlation, confirmed
)

func (b By) String() string {
	return [...]string{"config", "cm", "correlation"}[min(b, ByCorrelation)]
}

// Reason says why a pairing ended.
type Reason uint8

// Why a pairing ends.
const (
	ReasonContradiction Reason = iota // the reverse QP's PSNs left the flow's range, Unpair times in a row
	ReasonRestart                     // the flow's PSNs jumped out of their space: a new connection
	ReasonExpired                     // the flow sent nothing for FlowIdle
	ReasonReplaced                    // another reverse QP (CM, or confirmed while this one was stale)
)

func (r Reason) String() string {
	return [...]string{"contradiction", "restart", "expired", "replaced"}[min(r, ReasonReplaced)]
}

// EventKind is what an Event reports.
type EventKind uint8

// The events.
const (
	Paired   EventKind = iota // Flow's reverse QP is now ReverseQP
	Unpaired                  // Flow has no reverse QP any more (it was ReverseQP)
)

// Event is a pairing learned or ended.
type Event struct {
	Kind      EventKind
	Flow      flow.Key
	ReverseQP uint32
	By        By     // Paired: how
	Reason    Reason // Unpaired: why
}

// Stats counts every outcome.
type Stats struct {
	// Leaving toward the peer.
	ForwardRequests uint64 // RC requests of flows leaving (their PSNs make the flows' ranges)
	ForwardOther    uint64 // anything else leaving: responses to the peer's flows, UC, UD, CNP
	ForwardShort    uint64 // shorter than a BTH, or a READ request without its RETH
	FlowsTracked    uint64 // flows entered in the table
	FlowsRefused    uint64 // not entered: the table was full
	FlowsExpired    uint64 // no request for FlowIdle
	Restarts        uint64 // a flow's PSN jumped out of its space: a new connection on the QP

	// Passing back.
	ReverseResponses uint64 // ACKs, ATOMIC ACKNOWLEDGEs and READ responses
	ReverseOther     uint64 // anything else passing back (requests of the peer's flows)
	ReverseShort     uint64 // shorter than a BTH
	ReversePaired    uint64 // offered to the flow their QP is paired with
	ReversePinned    uint64 // of those, to a configured pairing
	Contradictions   uint64 // a paired QP's PSN outside its flow's range: offered to nobody
	Evidence         uint64 // a PSN in one unpaired flow's range only, later than its QP's last
	Ambiguous        uint64 // in the range of two or more unpaired flows: counts for none
	Unmatched        uint64 // in no flow's range
	Duplicates       uint64 // the QP's last PSN again: counts for nothing
	Backward         uint64 // before the QP's last counted PSN: nothing within Reorder, a strike beyond
	Strikes          uint64 // a candidate contradicted (another flow's range, or none)
	Blocked          uint64 // reverse QPs blocked after Strikes strikes
	BlockedForgotten uint64 // reverse QPs struck out while MaxBlocked were blocked: forgotten, not blocked
	BlockedDropped   uint64 // packets of a blocked QP
	ProbationEvicted uint64 // one-observation candidates evicted for newer ones
	CandidatesFull   uint64 // a candidate not promoted: the table was full
	CandidatesIdle   uint64 // candidates expired without evidence for CandidateIdle

	// Outcomes.
	Configured            uint64
	PairedByCM            uint64
	PairedByCorrelation   uint64
	UnpairedContradiction uint64
	UnpairedRestart       uint64
	UnpairedExpired       uint64
	UnpairedReplaced      uint64
	PinnedIgnored         uint64 // a CM pairing for a flow whose reverse QP is configured
	EventsDropped         uint64 // events not drained in time (the queue is bounded)

	// RDMA CM on QP 1.
	CMRequests     uint64 // ConnectRequests of RC connections
	CMReplies      uint64 // ConnectReplies
	CMOther        uint64 // other CM messages (RTU, REJ, DREQ, ...), and MADs of other classes
	CMNotRC        uint64 // REQs of UC, RD or XRC: no ACKs to pair
	CMMalformed    uint64 // MADs to QP 1 that do not parse
	CMUnmatched    uint64 // a REP whose REQ was not seen (or expired)
	CMPendingFull  uint64 // a REQ not kept: the table was full
	CMPendingIdle  uint64 // REQs expired with no REP
	CMFlowsRefused uint64 // a CM pairing for a flow the full table could not hold
}

// hostPair is the direction of forward flows: from src to dst.
type hostPair struct{ src, dst netip.Addr }

// revKey names a reverse QP: the packets passing back from src to dst addressed to qp.
type revKey struct {
	src, dst netip.Addr
	qp       uint32
}

type fwd struct {
	key   flow.Key
	idx   int // in its group
	group *group
	dead  bool
	epoch uint32 // bumped on a restart: candidates of an older epoch count for nothing

	first, next, end psn.PSN // the space seen: [first, next); responses may reach end (READs)
	readStart        psn.PSN
	haveRead         bool
	last             time.Duration // the last request (or the CM pairing)

	rev    *rev // the paired reverse QP
	pinned bool
}

type group struct{ flows []*fwd }

type revState uint8

const (
	probation revState = iota // one observation
	candidate                 // two or more
	paired
	blocked
)

type rev struct {
	key     revKey
	state   revState
	cand    *fwd
	epoch   uint32
	count   int
	last    psn.PSN
	strikes int
	contra  int
	by      By
	seen    time.Duration // the last evidence or consistent response
	until   time.Duration // blocked until
	gen     uint32        // probation ring
}

type pendKey struct {
	req, resp netip.Addr
	commID    uint32
}

type pending struct {
	qpn uint32
	psn psn.PSN
	at  time.Duration
}

type ringItem struct {
	key revKey
	gen uint32
}

// Learner learns reverse QPs; see the package documentation.
type Learner struct {
	l       Limits
	flows   map[flow.Key]*fwd
	groups  map[hostPair]*group
	revs    map[revKey]*rev
	pend    map[pendKey]pending
	ring    []ringItem // probation entries, oldest first from head
	head    int
	nring   int
	gen     uint32
	ncand   int // reverse entries in state candidate
	nblock  int // reverse entries in state blocked
	events  []Event
	stats   Stats
	sweepAt time.Duration
	swept   bool
}

// New returns a Learner.
func New(l Limits) (*Learner, error) {
	if err := l.validate(); err != nil {
		return nil, err
	}
	return &Learner{l: l, flows: map[flow.Key]*fwd{}, groups: map[hostPair]*group{}, revs: map[revKey]*rev{},
		pend: map[pendKey]pending{}, ring: make([]ringItem, l.MaxProbation)}, nil
}

// Stats returns the counters.
func (x *Learner) Stats() Stats { return x.stats }

// Tables returns the entries held: flows, reverse QPs (all states), CM REQs waiting.
func (x *Learner) Tables() (flows, reverse, pendingREQs int) {
	return len(x.flows), len(x.revs), len(x.pend)
}

// Events hands out the pairings learned and ended since the last call, in order.
func (x *Learner) Events(f func(Event)) {
	if len(x.events) == 0 {
		return
	}
	for _, e := range x.events {
		f(e)
	}
	clear(x.events)
	x.events = x.events[:0]
}

const maxEvents = 4096

func (x *Learner) emit(e Event) {
	if len(x.events) >= maxEvents {
		x.stats.EventsDropped++
		return
	}
	x.events = append(x.events, e)
}

// ReverseQP returns the reverse QP paired with a flow, if any.
func (x *Learner) ReverseQP(k flow.Key) (uint32, bool) {
	if f := x.flows[k]; f != nil && f.rev != nil {
		return f.rev.key.qp, true
	}
	return 0, false
}

// Configure pins a flow's reverse QP (the operator's word): it is never unpaired, never
// replaced by CM or correlation, and never expires.
func (x *Learner) Configure(k flow.Key, qp uint32) {
	qp &= psn.Mask
	f := x.flows[k]
	if f == nil {
		f = x.addFlow(k)
		if f == nil {
			return
		}
	}
	rk := revKey{src: k.Dst, dst: k.Src, qp: qp}
	if f.rev != nil && f.rev.key == rk && f.pinned {
		return
	}
	x.unpair(f, ReasonReplaced)
	if r := x.revs[rk]; r != nil {
		x.dropRev(r, ReasonReplaced)
	}
	r := &rev{key: rk}
	x.revs[rk] = r
	f.pinned = true
	x.pair(r, f, ByConfig, 0)
	x.stats.Configured++
}

func (x *Learner) addFlow(k flow.Key) *fwd {
	if len(x.flows) >= x.l.MaxFlows {
		return nil
	}
	hp := hostPair{k.Src, k.Dst}
	g := x.groups[hp]
	if g == nil {
		g = &group{}
		x.groups[hp] = g
	}
	f := &fwd{key: k, group: g, idx: len(g.flows)}
	g.flows = append(g.flows, f)
	x.flows[k] = f
	x.stats.FlowsTracked++
	return f
}

func (x *Learner) removeFlow(f *fwd) {
	g := f.group
	last := len(g.flows) - 1
	g.flows[f.idx] = g.flows[last]
	g.flows[f.idx].idx = f.idx
	g.flows[last] = nil
	g.flows = g.flows[:last]
	if len(g.flows) == 0 {
		delete(x.groups, hostPair{f.key.Src, f.key.Dst})
	}
	delete(x.flows, f.key)
	f.dead = true
}

func destQP(b []byte) uint32  { return uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7]) }
func bthPSN(b []byte) psn.PSN { return psn.PSN(uint32(b[9])<<16 | uint32(b[10])<<8 | uint32(b[11])) }

// readPSNs returns how many PSNs a READ of dma octets takes at mtu (C13), at least 1.
func readPSNs(dma uint32, mtu int) int {
	return int(max((uint64(dma)+uint64(mtu)-1)/uint64(mtu), 1))
}

// Forward takes a RoCEv2 packet (BTH to ICRC) leaving from src to dst toward the peer. RC
// requests extend their flow's range; a CM MAD on QP 1 is read for REQ and REP.
func (x *Learner) Forward(now time.Duration, src, dst netip.Addr, pkt []byte) {
	if len(pkt) < roce.BTHLen {
		x.stats.ForwardShort++
		return
	}
	if roce.IsGSI(pkt) {
		x.cm(now, src, dst, pkt)
		return
	}
	op := roce.Opcode(pkt[0])
	info := op.Info()
	if info.Transport != roce.TransportRC || !info.Request {
		x.stats.ForwardOther++
		return
	}
	p := bthPSN(pkt)
	n, nMax := 1, 1
	if op == roce.OpReadRequest {
		if len(pkt) < roce.BTHLen+roce.RETHLen {
			x.stats.ForwardShort++
			return
		}
		dma := binary.BigEndian.Uint32(pkt[roce.BTHLen+12:])
		// The CSF's count, and the most a READ may take (the smallest MTU): responses
		// up to the latter are in range whatever the endpoints' MTU.
		n, nMax = min(readPSNs(dma, x.l.MTU), psn.Modulus/4), min(readPSNs(dma, 256), psn.Modulus/4)
	}
	x.stats.ForwardRequests++
	k := flow.Key{Src: src, Dst: dst, DestQP: destQP(pkt)}
	f := x.flows[k]
	if f == nil {
		if f = x.addFlow(k); f == nil {
			x.stats.FlowsRefused++
			return
		}
		f.start(p)
	}
	f.last = now
	x.advance(f, p, n, nMax, op == roce.OpReadRequest)
}

func (f *fwd) start(p psn.PSN) {
	f.first, f.next, f.end, f.haveRead = p, p, p, false
}

// advance records a request at p taking n PSNs (nMax at most, a READ's).
func (x *Learner) advance(f *fwd, p psn.PSN, n, nMax int, read bool) {
	w := x.l.Window
	switch {
	case f.next.Forward(p) < w || f.next.Forward(p) < f.next.Forward(f.end):
		// In order, after a gap of fewer than Window PSNs (packets this gateway missed), or
		// within what the latest READ may have taken (an MTU smaller than the CSF's).
		f.next = p.Add(n)
	case p.Forward(f.next) <= w || f.inSpace(p):
		// A retransmission, or a request older than the window: the range reaches back to it.
		if !f.inSpace(p) {
			f.first = p
		}
	default:
		// Out of the space: the QP was connected again with a new initial PSN. The pairing
		// of the old connection is no evidence for the new one.
		x.stats.Restarts++
		x.unpair(f, ReasonRestart)
		f.epoch++
		f.start(p)
		f.next = p.Add(n)
	}
	if read {
		f.readStart, f.haveRead = p, true
		if e := p.Add(nMax); f.end.Before(e) {
			f.end = e
		}
	}
	if f.end.Before(f.next) {
		f.end = f.next
	}
}

// inSpace reports whether p lies in [first, end), the PSNs the flow has sent (and that its
// latest READ may take).
func (f *fwd) inSpace(p psn.PSN) bool { return f.first.Forward(p) < f.first.Forward(f.end) }

// inRange reports whether a response PSN p may belong to f: from one before the start of its
// recent range (an ACK of nothing yet) to the last PSN a response may carry.
func (x *Learner) inRange(f *fwd, p psn.PSN) bool {
	lo := f.first
	if f.first.Forward(f.next) > x.l.Window {
		lo = f.next.Add(-int(x.l.Window))
		if f.haveRead && f.first.Forward(f.readStart) < f.first.Forward(lo) {
			lo = f.readStart // the whole of the latest READ stays in range
		}
	}
	lo = lo.Add(-1)
	return lo.Forward(p) < lo.Forward(f.end)
}

// isResponse: ACKNOWLEDGE, ATOMIC ACKNOWLEDGE and the READ responses of RC.
func isResponse(op roce.Opcode) bool {
	return op >= roce.OpReadResponseFirst && op <= roce.OpAtomicAcknowledge
}

// Reverse takes a RoCEv2 packet passing back from src to dst (toward the flows' sources). It
// returns the flow the packet belongs to when its destination QP is paired with one and its
// PSN is in that flow's range; otherwise the packet is evidence, or nothing, and belongs to
// no flow yet.
func (x *Learner) Reverse(now time.Duration, src, dst netip.Addr, pkt []byte) (flow.Key, bool) {
	if len(pkt) < roce.BTHLen {
		x.stats.ReverseShort++
		return flow.Key{}, false
	}
	if roce.IsGSI(pkt) {
		x.cm(now, src, dst, pkt)
		return flow.Key{}, false
	}
	op := roce.Opcode(pkt[0])
	if !isResponse(op) {
		x.stats.ReverseOther++
		return flow.Key{}, false
	}
	x.stats.ReverseResponses++
	p := bthPSN(pkt)
	rk := revKey{src: src, dst: dst, qp: destQP(pkt)}
	r := x.revs[rk]
	if r != nil {
		var k flow.Key
		var ok, done bool
		if r, k, ok, done = x.known(now, r, p); done {
			return k, ok
		}
	}
	f, matches := x.onlyMatch(now, src, dst, r, p)
	switch {
	case matches == 0:
		x.stats.Unmatched++
		if r != nil {
			x.strike(r, now)
		}
		return flow.Key{}, false
	case matches > 1:
		x.stats.Ambiguous++
		return flow.Key{}, false
	}
	return x.evidence(now, r, rk, f, p)
}

// known takes PSN p of a response to reverse QP r: a paired one says its flow (done), a
// blocked one drops it (done) until its block ends, when r is forgotten (nil).
func (x *Learner) known(now time.Duration, r *rev, p psn.PSN) (_ *rev, k flow.Key, ok, done bool) {
	switch r.state {
	case paired:
		f := r.cand
		if f.pinned {
			x.stats.ReversePaired++
			x.stats.ReversePinned++
			return r, f.key, true, true
		}
		if x.inRange(f, p) {
			r.contra, r.seen = 0, now
			x.stats.ReversePaired++
			return r, f.key, true, true
		}
		x.stats.Contradictions++
		if r.contra++; r.contra >= x.l.Unpair {
			x.unpair(f, ReasonContradiction)
		}
		return r, flow.Key{}, false, true
	case blocked:
		if now < r.until {
			x.stats.BlockedDropped++
			return r, flow.Key{}, false, true
		}
		x.deleteRev(r)
		return nil, flow.Key{}, false, false
	}
	return r, flow.Key{}, false, false
}

// onlyMatch is the unpaired flow from dst to src whose range PSN p is in, when exactly one is
// (matches 1); matches counts up to two.
func (x *Learner) onlyMatch(now time.Duration, src, dst netip.Addr, r *rev, p psn.PSN) (only *fwd, matches int) {
	g := x.groups[hostPair{dst, src}]
	if g == nil {
		return nil, 0
	}
	for _, f := range g.flows {
		if f.pinned || (f.rev != nil && f.rev != r && x.live(f.rev, now)) {
			continue // its reverse QP is known
		}
		if x.inRange(f, p) {
			if matches++; matches > 1 {
				break
			}
			only = f
		}
	}
	return only, matches
}

// evidence takes PSN p of a response to reverse QP rk (r: its record, or nil) as evidence that
// it pairs with flow f, the only one whose range it is in.
func (x *Learner) evidence(now time.Duration, r *rev, rk revKey, f *fwd, p psn.PSN) (flow.Key, bool) {
	if r == nil {
		if r = x.newCandidate(rk); r == nil {
			return flow.Key{}, false
		}
		r.cand, r.epoch, r.count, r.last, r.seen = f, f.epoch, 1, p, now
		x.stats.Evidence++
		return x.maybeConfirm(r, f, now)
	}
	if r.cand != f || r.cand.dead || r.epoch != f.epoch || r.count == 0 {
		if r.cand != nil && r.count > 0 && !r.cand.dead && r.epoch == r.cand.epoch {
			// Evidence for another flow than its candidate: a contradiction.
			if x.strike(r, now) {
				return flow.Key{}, false
			}
		}
		r.cand, r.epoch, r.count, r.last, r.seen = f, f.epoch, 1, p, now
		x.stats.Evidence++
		return x.maybeConfirm(r, f, now)
	}
	switch {
	case p == r.last:
		x.stats.Duplicates++
		return flow.Key{}, false
	case p.Before(r.last):
		x.stats.Backward++
		if p.Forward(r.last) > x.l.Reorder {
			x.strike(r, now)
		}
		return flow.Key{}, false
	}
	r.count++
	r.last, r.seen = p, now
	x.stats.Evidence++
	if r.state == probation {
		if x.ncand < x.l.MaxCandidates {
			r.state = candidate
			x.ncand++
		} else {
			x.stats.CandidatesFull++
		}
	}
	return x.maybeConfirm(r, f, now)
}

func (x *Learner) maybeConfirm(r *rev, f *fwd, now time.Duration) (flow.Key, bool) {
	if r.count < x.l.Confirm {
		return flow.Key{}, false
	}
	if f.rev != nil && f.rev != r {
		x.unpair(f, ReasonReplaced) // its QP went stale; this one confirmed
	}
	x.pair(r, f, ByCorrelation, now)
	x.stats.PairedByCorrelation++
	x.stats.ReversePaired++
	return f.key, true
}

// live: a pairing that is not contested (configured, or a response seen within Stale).
func (x *Learner) live(r *rev, now time.Duration) bool {
	return r.state == paired && (r.by == ByConfig || now-r.seen < x.l.Stale)
}

// strike records a contradiction against a candidate; true when it blocked it.
func (x *Learner) strike(r *rev, now time.Duration) bool {
	x.stats.Strikes++
	r.count = 0
	if r.strikes++; r.strikes >= x.l.Strikes {
		if r.state == candidate {
			x.ncand--
		}
		r.state, r.until, r.cand = blocked, now+x.l.BlockFor, nil
		switch {
		case x.revs[r.key] != r:
		case x.nblock >= x.l.MaxBlocked:
			delete(x.revs, r.key)
			x.stats.BlockedForgotten++
		default:
			x.nblock++
			x.stats.Blocked++
		}
		return true
	}
	return false
}

// newCandidate enters a reverse QP on probation, evicting the oldest probation entry when the
// ring is full; nil if it cannot.
func (x *Learner) newCandidate(rk revKey) *rev {
	if x.nring == len(x.ring) {
		it := x.ring[x.head]
		x.head = (x.head + 1) % len(x.ring)
		x.nring--
		if old := x.revs[it.key]; old != nil && old.gen == it.gen && old.state == probation {
			x.deleteRev(old)
			x.stats.ProbationEvicted++
		}
	}
	x.gen++
	r := &rev{key: rk, state: probation, gen: x.gen}
	x.ring[(x.head+x.nring)%len(x.ring)] = ringItem{rk, x.gen}
	x.nring++
	x.revs[rk] = r
	return r
}

func (x *Learner) deleteRev(r *rev) {
	if r.state == candidate {
		x.ncand--
	}
	if x.revs[r.key] == r {
		if r.state == blocked {
			x.nblock--
		}
		delete(x.revs, r.key)
	}
	r.state = blocked // inert if still referenced
}

// pair makes r the reverse QP of f.
func (x *Learner) pair(r *rev, f *fwd, by By, now time.Duration) {
	if r.state == candidate {
		x.ncand--
	}
	r.state, r.cand, r.epoch, r.by, r.strikes, r.contra, r.seen = paired, f, f.epoch, by, 0, 0, now
	x.revs[r.key] = r
	f.rev = r
	x.emit(Event{Kind: Paired, Flow: f.key, ReverseQP: r.key.qp, By: by})
}

// unpair ends f's pairing (not a configured one, except when replacing it).
func (x *Learner) unpair(f *fwd, why Reason) {
	r := f.rev
	if r == nil {
		return
	}
	if f.pinned && why != ReasonReplaced {
		return
	}
	f.rev = nil
	f.pinned = false
	if x.revs[r.key] == r {
		delete(x.revs, r.key)
	}
	r.state, r.cand = blocked, nil
	switch why {
	case ReasonContradiction:
		x.stats.UnpairedContradiction++
	case ReasonRestart:
		x.stats.UnpairedRestart++
	case ReasonExpired:
		x.stats.UnpairedExpired++
	case ReasonReplaced:
		x.stats.UnpairedReplaced++
	}
	x.emit(Event{Kind: Unpaired, Flow: f.key, ReverseQP: r.key.qp, Reason: why})
}

// dropRev removes a reverse entry, ending its pairing if it has one.
func (x *Learner) dropRev(r *rev, why Reason) {
	if r.state == paired && r.cand != nil && r.cand.rev == r {
		x.unpair(r.cand, why)
		return
	}
	x.deleteRev(r)
}

// cm reads a MAD on QP 1: a REQ waits for its REP; a REP pairs both directions.
func (x *Learner) cm(now time.Duration, src, dst netip.Addr, pkt []byte) {
	m, err := roce.ParseCM(pkt)
	switch {
	case errors.Is(err, roce.ErrNotCM):
		x.stats.CMOther++
		return
	case err != nil:
		x.stats.CMMalformed++
		return
	}
	switch m.Header.AttributeID {
	case roce.CMAttrREQ:
		if m.Req.TransportService != roce.CMTransportRC {
			x.stats.CMNotRC++
			return
		}
		x.stats.CMRequests++
		k := pendKey{req: src, resp: dst, commID: m.Req.LocalCommID}
		if _, ok := x.pend[k]; !ok && len(x.pend) >= x.l.MaxPending {
			x.stats.CMPendingFull++
			return
		}
		x.pend[k] = pending{qpn: m.Req.LocalQPN, psn: m.Req.StartingPSN, at: now}
	case roce.CMAttrREP:
		x.stats.CMReplies++
		k := pendKey{req: dst, resp: src, commID: m.Rep.RemoteCommID}
		req, ok := x.pend[k]
		if !ok {
			x.stats.CMUnmatched++
			return
		}
		delete(x.pend, k)
		// Requester to responder: addressed to the responder's QP, acknowledged to the
		// requester's; and the other way round.
		x.pairCM(now, flow.Key{Src: dst, Dst: src, DestQP: m.Rep.LocalQPN}, req.qpn, req.psn)
		x.pairCM(now, flow.Key{Src: src, Dst: dst, DestQP: req.qpn}, m.Rep.LocalQPN, m.Rep.StartingPSN)
	default:
		x.stats.CMOther++
	}
}

func (x *Learner) pairCM(now time.Duration, k flow.Key, revQP uint32, start psn.PSN) {
	f := x.flows[k]
	if f == nil {
		if f = x.addFlow(k); f == nil {
			x.stats.CMFlowsRefused++
			return
		}
		f.start(start)
	} else if f.pinned {
		x.stats.PinnedIgnored++
		return
	} else if !f.inSpace(start) && start != f.next {
		// A new connection on a QP number seen before.
		x.unpair(f, ReasonRestart)
		f.epoch++
		f.start(start)
	}
	f.last = now
	rk := revKey{src: k.Dst, dst: k.Src, qp: revQP}
	if f.rev != nil && f.rev.key == rk {
		f.rev.seen = now
		return
	}
	x.unpair(f, ReasonReplaced)
	if r := x.revs[rk]; r != nil {
		x.dropRev(r, ReasonReplaced)
	}
	x.pair(&rev{key: rk}, f, ByCM, now)
	x.stats.PairedByCM++
}

// NextDeadline returns when Expire should next run, if ever.
func (x *Learner) NextDeadline() (time.Duration, bool) {
	if len(x.flows) == 0 && len(x.revs) == 0 && len(x.pend) == 0 {
		return 0, false
	}
	if !x.swept {
		return 0, true
	}
	return x.sweepAt, true
}

// Expire removes what has been idle too long: flows (and their pairings; configured ones
// stay), candidates, blocked QPs whose time is up, REQs with no REP.
func (x *Learner) Expire(now time.Duration) {
	x.swept, x.sweepAt = true, now+x.l.Sweep
	for _, f := range x.flows {
		if !f.pinned && now-f.last >= x.l.FlowIdle {
			x.unpair(f, ReasonExpired)
			x.removeFlow(f)
			x.stats.FlowsExpired++
		}
	}
	for _, r := range x.revs {
		switch r.state {
		case probation, candidate:
			if now-r.seen >= x.l.CandidateIdle {
				x.deleteRev(r)
				x.stats.CandidatesIdle++
			}
		case blocked:
			if now >= r.until {
				x.deleteRev(r)
			}
		}
	}
	for k, p := range x.pend {
		if now-p.at >= x.l.PendingIdle {
			delete(x.pend, k)
			x.stats.CMPendingIdle++
		}
	}
}
