package soak

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/gateway"
	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// The invariants (protocol notes K4). Each Failure names one.
const (
	InvData       = "data"               // every request completes once, successfully, with the right data, on its QP
	InvOwnAck     = "own-ack"            // no CSF counts an acknowledgement its flow's responder never sent (contract 1)
	InvLossless   = "expected-received"  // Expected = Received in every LOSS_REPORT of a lossless interval
	InvResume     = "protection-resumes" // m > 0 or coded retransmission answered, within the ruled time after the bad minute
	InvLiveConfig = "repair-live-config" // no REPAIR of a live configuration dropped by the CRF
	InvBudget     = "repair-budget"      // all repair within C11 (b)'s token bucket
	InvClose      = "close"              // no CLOSE but the ruled ones
	InvProtected  = "protected"          // an established flow on a clean path gets its configuration
	InvRounds     = "coded-rounds"       // at most two coded rounds per block before FALLBACK (C9 a)
	InvBreaker    = "breaker"            // the breaker trips in the bad minute and not on a clean path
	InvEngine     = "engine-counters"    // no queue overflow, no wrong restoration, no packet for a wrong QP
	InvMemory     = "memory"             // held state within its bounds
	InvProgress   = "progress"           // every request completes within a bound of its size
)

// ProtectionDeadline is how long after the bad minute ends protection must be back (K6): the
// breaker's ten seconds without a bad window (C11 f), plus the one-second window that may still
// straddle the end, plus the LOSS_REPORT interval that judges it (one SRTT, at most 200 ms here).
const ProtectionDeadline = 10*time.Second + time.Second + 200*time.Millisecond + 300*time.Millisecond

// Failure is one violated invariant.
type Failure struct {
	Invariant string
	Kind      string // which way it failed, where an invariant can fail in several
	Phase     string
	At        time.Duration
	Flow      string
	Detail    string
	Count     int // how often this invariant failed in the run
}

func (f *Failure) String() string {
	name := f.Invariant
	if f.Kind != "" {
		name += "/" + f.Kind
	}
	s := fmt.Sprintf("%s at %v in phase %s", name, f.At, f.Phase)
	if f.Flow != "" {
		s += " on " + f.Flow
	}
	s += ": " + f.Detail
	if f.Count > 1 {
		s += fmt.Sprintf(" (%d times in the run)", f.Count)
	}
	return s
}

// flowRec is the checker's record of one direction of one QP pair: a flow the gateways protect.
type flowRec struct {
	qp         *qpPair
	dir        int // the side whose gateway holds the flow's CSF: sideA for A->B, sideB for B->A
	key        flow.Key
	srcPort    uint16
	reverseQP  uint32
	name       string
	cs         *csf.Sender // its CSF, once the gateway made one (the same Sender for every session)
	ackChecked psn.PSN     // the AckedThrough last checked
	nonce      uint64      // the HELLO nonce of its CSF's current session
	sessions   int

	// What the sending host sent (first transmissions) and what the flow's own responder
	// acknowledged.
	highSent     psn.PSN
	haveHigh     bool
	ownAck       psn.PSN
	haveOwnAck   bool
	lastSourceAt time.Duration // the latest source packet its CSF observed
	lastNewAt    time.Duration // the latest first transmission (a new PSN)
	firstTx      uint64        // first transmissions of source packets
	repE, repR   uint64        // Expected and Received of the LOSS_REPORTs its CRF sent

	// At the start of the bad minute: first transmissions, drops, reported counts, trips.
	bad0Tx, bad0Drops, bad0E, bad0R, bad0Trips uint64
	lastArrival                                time.Duration // the latest source packet that reached the CRF's gateway

	// Lossless accounting (K5).
	unsettled   map[psn.PSN]int
	nUnsettled  int
	lastDisturb time.Duration
	highArrived psn.PSN
	haveArrived bool
	drops       uint64

	// The CSF's session (K6, K7, K8).
	startedAt   time.Duration
	estAt       time.Duration
	established bool
	srcOctets   float64 // source octets observed while established, this Sender's lifetime
	repOctets   float64 // repair symbol octets it sent
	minSlack    float64 // min over time of repOctets - 0.5 srcOctets
	maxBurst    int
	cfgAt       time.Duration // when the current session first had a configuration (0: none)
	sourcesAt   uint64        // Stats().Sources when the check of K4 (protected) was armed

	// Coded rounds per block (K4): by Block Start PSN, in the CSF's current session.
	rounds map[psn.PSN]*blockRounds

	probeArmed bool
	probeSkip  int // first transmissions to let pass before the probe drop

	// The breaker's window as the CSF sums it (C11 f, P4): interval time, and whether every
	// LOSS_REPORT in it lay in a lossless interval (K5), by the report's octets.
	winDur     time.Duration
	winClean   bool
	winReports int
	winE, winR uint64 // Expected and Received the window sums
	winCE      uint64
	cleanRep   map[string]bool
	// A breaker fed the LOSS_REPORTs the CSF's session took: when it has closed again after the
	// bad minute, the CSF's must have too (K6).
	brk       policy.Breaker
	brkClosed time.Duration // when brk last went from open to closed

	// CRF side: the Flow IDs its receiver gave the flow (one per session).
	crfID uint32
}

type blockRounds struct {
	coded, fallback int
	answered        map[uint16]bool // requests (either form) a coded retransmission of the block answered
	k               int
}

func newFlowRec(p *qpPair, dir int) *flowRec {
	f := &flowRec{qp: p, dir: dir, unsettled: map[psn.PSN]int{}, rounds: map[psn.PSN]*blockRounds{},
		cleanRep: map[string]bool{}, winClean: true}
	s := &p.spec
	if dir == sideA {
		f.key = flow.Key{Src: hostAddr[sideA], Dst: hostAddr[sideB], DestQP: s.QPNB}
		f.srcPort, f.reverseQP = s.PortA, s.QPNA
		f.name = fmt.Sprintf("%s A->B (QP %#x, first PSN %v)", p.name, s.QPNB, s.SendPSN)
	} else {
		f.key = flow.Key{Src: hostAddr[sideB], Dst: hostAddr[sideA], DestQP: s.QPNA}
		f.srcPort, f.reverseQP = s.PortB, s.QPNB
		f.name = fmt.Sprintf("%s B->A (QP %#x, READ responses from PSN %v)", p.name, s.QPNA, s.SendPSN)
	}
	return f
}

// checker holds the invariants' state and the failures found.
type checker struct {
	w        *world
	failures map[string]*Failure
	order    []string

	crfFlow  [2]map[uint32]*flowRec // by the Flow ID the CRF on that side assigned
	nonces   [2]map[uint64]*flowRec // HELLO nonces of the CSFs on that side
	csfByID  [2]map[uint32]*flowRec // by the Flow ID of a CSF on that side
	cleanAt  time.Duration          // the path is clean, and drained of earlier phases, since
	clean    bool
	resumeAt time.Duration // protection must be back from here on (0: not yet known)
	tripBy   time.Duration // every busy flow's breaker must have tripped by then (0: none due)
	sweepAt  time.Duration

	// Figures for the report.
	lossReports, judged                        uint64
	trips, closes4, restarts, probes, refusals uint64
	busy                                       int // flows busy enough in the bad minute for the breaker check (tripped)
	maxHeap                                    uint64
	ownAckChecks                               uint64
}

func newChecker(w *world) *checker {
	c := &checker{w: w, failures: map[string]*Failure{}}
	for s := range 2 {
		c.crfFlow[s] = map[uint32]*flowRec{}
		c.nonces[s] = map[uint64]*flowRec{}
		c.csfByID[s] = map[uint32]*flowRec{}
	}
	return c
}

func (c *checker) phaseName() string { return c.w.sc.Phases[c.w.phase].Name }

// failf records a failure of invariant inv; failk one of a kind of failure of inv, so that
// different faults behind one invariant are reported apart.
func (c *checker) failf(inv string, f *flowRec, format string, a ...any) {
	c.failk(inv, "", f, format, a...)
}

func (c *checker) failk(inv, kind string, f *flowRec, format string, a ...any) {
	key := inv + "/" + kind
	if x := c.failures[key]; x != nil {
		x.Count++
		return
	}
	x := &Failure{Invariant: inv, Kind: kind, Phase: c.phaseName(), At: c.w.now, Detail: fmt.Sprintf(format, a...), Count: 1}
	if f != nil {
		x.Flow = f.name
	}
	c.failures[key] = x
	c.order = append(c.order, key)
}

// Failures returns the failures in the order they were first found.
func (c *checker) Failures() []Failure {
	out := make([]Failure, 0, len(c.order))
	for _, k := range c.order {
		out = append(out, *c.failures[k])
	}
	return out
}

func (c *checker) enterPhase(i int) {
	p := &c.w.sc.Phases[i]
	if !p.Clean() {
		c.clean = false
	} else if !c.clean {
		c.clean, c.cleanAt = true, c.w.now // refined once the old links are drained
	}
	if i > 0 && c.w.sc.Phases[i-1].Bad {
		c.resumeAt = c.w.now + ProtectionDeadline
		c.tripBy = 0
	}
	if p.Bad {
		c.tripBy = c.w.now + tripWithin
		for _, f := range c.w.flist {
			f.bad0Tx, f.bad0Drops, f.bad0E, f.bad0R, f.bad0Trips = f.firstTx, f.drops, f.repE, f.repR, 0
			if cs := c.csf(f); cs != nil {
				f.bad0Trips = cs.Stats().BreakerTrips
			}
		}
	}
	if p.Probe > 0 {
		c.probeAt(c.w.now + p.Probe)
	}
}

// cleanFor reports whether the path has been clean (no loss, no reordering, nothing left on the
// links of earlier phases) for at least d.
func (c *checker) cleanFor(d time.Duration) bool {
	return c.clean && c.w.drained() && c.w.now-c.cleanAt >= d
}

// ---- packets ----

// srcPSNs returns the PSN and the PSNs a source packet consumes (C13), and whether it is one.
func (c *checker) srcPSNs(pkt []byte) (psn.PSN, int, bool) {
	if len(pkt) < roce.BTHLen || !isSource(pkt[0]) {
		return 0, 0, false
	}
	p := psn.PSN(uint32(pkt[9])<<16 | uint32(pkt[10])<<8 | uint32(pkt[11]))
	n := 1
	if roce.Opcode(pkt[0]) == roce.OpReadRequest && len(pkt) >= roce.BTHLen+roce.RETHLen {
		dma := binary.BigEndian.Uint32(pkt[roce.BTHLen+12:])
		n = int(roce.OpReadRequest.PSNs(dma, uint32(c.w.sc.MTU)))
	}
	return p, n, true
}

// roceOut sees every RoCEv2 packet gateway s puts on the path and returns the flow whose source
// it is (nil for ACKs). ACKs, NAKs and READ responses record what the flow's own responder
// acknowledged (contract 1).
func (c *checker) roceOut(s int, pkt []byte) *flowRec {
	if len(pkt) < roce.BTHLen {
		return nil
	}
	qp := uint32(pkt[5])<<16 | uint32(pkt[6])<<8 | uint32(pkt[7])
	if qp == 1 {
		return nil // RDMA CM's MADs (the general services QP) pass the gateways as they are
	}
	f := c.w.flows[qp]
	if f == nil {
		c.failf(InvEngine, nil, "gateway %c sent a packet for QP %#x, which no host has", 'A'+s, qp)
		return nil
	}
	op := roce.Opcode(pkt[0])
	if s == sideB {
		// B's responder acknowledges the requests of its QP's A->B flow.
		var through psn.PSN
		ok := true
		p := psn.PSN(uint32(pkt[9])<<16 | uint32(pkt[10])<<8 | uint32(pkt[11]))
		switch op {
		case roce.OpAcknowledge, roce.OpAtomicAcknowledge:
			through = p
			if len(pkt) > roce.BTHLen && pkt[roce.BTHLen]>>5&3 != 0 {
				through = p.Add(-1) // a NAK acknowledges what precedes its PSN
			}
		case roce.OpReadResponseFirst, roce.OpReadResponseMiddle, roce.OpReadResponseLast, roce.OpReadResponseOnly:
			through = p.Add(-1)
		default:
			ok = false
		}
		if ft := c.w.faults; ft != nil && ft.hideOwnAck && f.qp.idx == 0 {
			ok = false
		}
		if ok {
			g := f.qp.flows[sideA]
			if !g.haveOwnAck || through.After(g.ownAck) {
				g.ownAck, g.haveOwnAck = through, true
			}
		}
	}
	if f.dir != s {
		return nil
	}
	p, n, ok := c.srcPSNs(pkt)
	if !ok {
		return nil
	}
	if !f.haveHigh || p.After(f.highSent) {
		f.highSent, f.haveHigh = p.Add(n-1), true
		f.lastNewAt = c.w.now
		f.firstTx++
	}
	return f
}

// isFirstTransmission reports whether pkt, which roceOut has just seen, took a new PSN.
func (c *checker) isFirstTransmission(f *flowRec, pkt []byte) bool {
	p, n, ok := c.srcPSNs(pkt)
	return ok && f.haveHigh && f.highSent == p.Add(n-1)
}

// dropped records a packet the path lost.
func (c *checker) dropped(s int, pkt []byte, kind int, f *flowRec) {
	if kind != kindRoCE || f == nil {
		return
	}
	p, _, ok := c.srcPSNs(pkt)
	if !ok {
		return
	}
	f.drops++
	f.unsettled[p]++
	f.nUnsettled++
	f.lastDisturb = c.w.now
}

func (c *checker) settle(f *flowRec, p psn.PSN) bool {
	n := f.unsettled[p]
	if n == 0 {
		return false
	}
	delete(f.unsettled, p)
	f.nUnsettled -= n
	f.lastDisturb = c.w.now
	return true
}

// arrived sees a RoCEv2 packet reaching gateway s from the path, before the CRF.
func (c *checker) arrived(s int, pkt []byte) {
	if len(pkt) < roce.BTHLen {
		return
	}
	qp := uint32(pkt[5])<<16 | uint32(pkt[6])<<8 | uint32(pkt[7])
	f := c.w.flows[qp]
	if f == nil || f.dir == s {
		return
	}
	p, n, ok := c.srcPSNs(pkt)
	if !ok {
		return
	}
	f.lastArrival = c.w.now
	settled := c.settle(f, p)
	if !settled && f.haveArrived && !p.After(f.highArrived) {
		f.lastDisturb = c.w.now // late, reordered or repeated: the CRF may count it in another interval
	}
	if !f.haveArrived || p.Add(n-1).After(f.highArrived) {
		f.highArrived, f.haveArrived = p.Add(n-1), true
	}
}

// deliveredToQP sees a packet the gateway hands to its host.
func (c *checker) deliveredToQP(s int, p *qpPair, pkt []byte) {}

// crfDelivery sees what gateway s's CRF releases or restores for its host.
func (c *checker) crfDelivery(s int, d gateway.Datagram) {
	f := c.crfFlow[s][d.Flow]
	if f == nil {
		return
	}
	if d.Restored {
		c.settle(f, psn.PSN(d.PSN))
		f.lastDisturb = c.w.now
	}
}

// ---- the CSF ----

// csf returns the CSF of f, nil before the gateway made one.
func (c *checker) csf(f *flowRec) *csf.Sender {
	if f.cs == nil {
		f.cs = c.w.gw[f.dir].sender(f)
	}
	return f.cs
}

// started records a new session of f's CSF (a HELLO with a new nonce).
func (c *checker) started(f *flowRec, now time.Duration) {
	f.startedAt, f.established, f.cfgAt = now, false, 0
	f.brk, f.brkClosed = policy.Breaker{}, 0 // a new session gets a fresh breaker (E16)
	f.winDur, f.winClean, f.winReports, f.winE, f.winR, f.winCE = 0, true, 0, 0, 0, 0
	clear(f.rounds)
	if f.sessions > 0 {
		c.restarts++
	}
	f.sessions++
}

// observe sees a source packet about to be observed by f's CSF.
func (c *checker) observe(f *flowRec, now time.Duration, pkt []byte) {
	f.lastSourceAt = now
	if cs := c.csf(f); cs != nil && cs.State() == csf.StateEstablished {
		f.srcOctets += float64(len(pkt)) // over-counts retransmissions: a looser bound, never a wrong one
	}
}

// ackedThrough is contract 1's accessor, where the CSF has it.
type ackedThrough interface {
	AckedThrough() (psn.PSN, bool)
}

// reverseObserved checks contract 1 after gateway side took a packet passing back toward its
// host: no CSF there counts an acknowledgement its own flow's responder did not send.
func (c *checker) reverseObserved(side int, pkt []byte) {
	if len(pkt) < roce.BTHLen {
		return
	}
	switch roce.Opcode(pkt[0]) {
	case roce.OpAcknowledge, roce.OpAtomicAcknowledge, roce.OpReadResponseFirst, roce.OpReadResponseMiddle,
		roce.OpReadResponseLast, roce.OpReadResponseOnly:
	default:
		return // nothing else acknowledges (C9)
	}
	for _, f := range c.w.flist {
		if f.dir != side || f.cs == nil {
			continue
		}
		a, ok := any(f.cs).(ackedThrough)
		if !ok {
			return
		}
		p, has := a.AckedThrough()
		if !has || f.ackChecked == p {
			continue
		}
		f.ackChecked = p
		c.ownAckChecks++
		if !f.haveOwnAck || p.After(f.ownAck) {
			own := "nothing"
			if f.haveOwnAck {
				own = f.ownAck.String()
			}
			c.failf(InvOwnAck, f, "the CSF counts PSNs through %v acknowledged, its flow's responder acknowledged %s (the packet passing back: %s)",
				p, own, describe(pkt))
		}
	}
}

// csfTouched runs the checks of f's CSF after the gateway gave it an input or a tick.
func (c *checker) csfTouched(f *flowRec) {
	cs := c.csf(f)
	if cs == nil {
		return
	}
	st := cs.State()
	now := c.w.now
	if st == csf.StateEstablished && !f.established {
		f.established, f.estAt = true, now
		f.sourcesAt = cs.Stats().Sources
	}
	if st != csf.StateEstablished {
		f.established = false
	}
	if _, ok := cs.Config(); ok && f.cfgAt == 0 && f.established {
		f.cfgAt = now
	}
	if f.established {
		if cfg, ok := cs.Config(); ok {
			if b := cfg.K * cfg.T; b > f.maxBurst {
				f.maxBurst = b
			}
			if c.resumed(f) && cfg.M > 0 && cs.M() == 0 {
				c.failk(InvResume, "m-held-at-0", f, "%v after the bad minute (and %v after a breaker fed the same LOSS_REPORTs closed) the configuration says m = %d, the CSF sends m = 0: its breaker is still open",
					now-c.w.badEnd, now-f.brkClosed, cfg.M)
			}
		}
	}
}

// csfHandled checks what a CREM message from the CRF did to f's CSF.
func (c *checker) csfHandled(f *flowRec, cs *csf.Sender, t wire.Type, b []byte, before *csf.Stats) {
	after := cs.Stats()
	now := c.w.now
	if t == wire.TypeLossReport && after.LossReports > before.LossReports {
		// The breaker's window, summed as the breaker sums it (P4).
		m, _ := wire.ParseLossReport(b)
		interval := time.Duration(m.IntervalUS) * time.Microsecond
		was := f.brk.State()
		if f.brk.Report(now, interval, m.Expected, m.Received, m.CEMarked) == policy.BreakerClosed && was != policy.BreakerClosed {
			f.brkClosed = now
		}
		clean, known := f.cleanRep[string(b)]
		f.winClean = f.winClean && clean && known
		f.winReports++
		f.winDur += interval
		f.winE, f.winR, f.winCE = f.winE+uint64(m.Expected), f.winR+uint64(m.Received), f.winCE+uint64(m.CEMarked)
		if after.BreakerTrips > before.BreakerTrips {
			c.trips++
		}
		if f.winDur >= policy.BreakerWindow {
			// The window is judged (P4): bad on a path that lost nothing of the flow in it only if
			// its reports were wrong.
			bad := f.winE > 0 && f.winR < f.winE && float64(f.winE-f.winR)/float64(f.winE) > policy.BreakerLoss ||
				f.winR > 0 && float64(f.winCE)/float64(f.winR) > policy.BreakerCE
			if bad && f.winClean {
				c.failk(InvBreaker, "clean-path", f, "a breaker window of %d LOSS_REPORTs over %v, every one of them from a lossless interval (K5), is bad: Expected %d, Received %d (the last: %s)",
					f.winReports, f.winDur, f.winE, f.winR, describeCREM(b))
			}
			f.winDur, f.winClean, f.winReports, f.winE, f.winR, f.winCE = 0, true, 0, 0, 0, 0
		}
	}
	if c.resumed(f) && after.RequestsBreaker > before.RequestsBreaker {
		c.failk(InvResume, "request-refused", f, "%v after the bad minute (and %v after a breaker fed the same LOSS_REPORTs closed) the CSF refused a REPAIR_REQUEST for the breaker (%s)",
			now-c.w.badEnd, now-f.brkClosed, describeCREM(b))
	}
}

// resumed reports whether f's protection must be back (K6): the ruled time after the bad minute
// has passed, and a breaker fed the LOSS_REPORTs of the CSF's session (P4, policy.Breaker) has
// closed again (a flow of little traffic sums its one-second windows over longer).
func (c *checker) resumed(f *flowRec) bool {
	return c.resumeAt > 0 && c.w.now >= c.resumeAt && f.brk.State() == policy.BreakerClosed
}

// repairBudget checks C11 (b) after a repair symbol of n octets (K8): over any stretch of time the
// repair sent is at most one block's burst plus half the source octets observed meanwhile.
func (c *checker) repairBudget(f *flowRec, n int) {
	f.repOctets += float64(n)
	slack := f.repOctets - policy.DefaultRepairFraction*f.srcOctets
	burst := float64(max(f.maxBurst, c.w.sc.MaxK*(c.w.sc.MTU+64)))
	if slack-f.minSlack > burst+1 {
		c.failf(InvBudget, f, "repair of %.0f octets beyond the bucket: %.0f repair octets against %.0f source octets, burst %.0f",
			slack-f.minSlack-burst, f.repOctets, f.srcOctets, burst)
	}
	if slack < f.minSlack {
		f.minSlack = slack
	}
}

// checkClose applies K7 to a CLOSE.
func (c *checker) checkClose(f *flowRec, who string, r wire.Reason) {
	w := c.w
	now := w.now
	switch r {
	case wire.ReasonCircuitBreaker:
		c.closes4++
		// A breaker fed the LOSS_REPORTs of the session (fresh for it, E16) must ask for it too;
		// whether those reports said what the path did is K5's and the breaker invariant's.
		if who == "CSF" && f.brk.State() != policy.BreakerCloseFlow {
			c.failk(InvClose, "reason4-breaker-disagrees", f, "the CSF sent CLOSE reason 4 (circuit breaker) %v after its session started, a breaker fed the session's LOSS_REPORTs is %v",
				now-f.startedAt, f.brk.State())
		}
		if who == "CRF" {
			c.failk(InvClose, "reason4-CRF", f, "the CRF sent CLOSE reason 4 (the circuit breaker is the CSF's)")
		}
	case wire.ReasonIdle:
		last := f.lastSourceAt
		if who == "CRF" {
			last = f.lastArrival
		}
		if now-last < gwIdle-time.Second {
			detail := ""
			if cs := c.csf(f); who == "CSF" && cs != nil {
				st := cs.Stats()
				detail = fmt.Sprintf(" and %v after its last new PSN (the CSF observed %d sources, %d retransmissions, %d READ re-issues; %d closes, %d restarts)",
					now-f.lastNewAt, st.Sources, st.Retransmissions, st.ReadReissued, st.CloseSent, c.restarts)
			}
			c.failk(InvClose, "idle-"+who, f, "the %s sent CLOSE reason 1 (idle) %v after the flow's last source packet%s", who, now-last, detail)
		}
	case wire.ReasonParamUnanswered:
		if w.sc.Phases[w.phase].Clean() && c.cleanFor(10*time.Second) {
			c.failk(InvClose, "reason2", f, "the %s sent CLOSE reason 2 (PARAM_UPDATE unanswered) on a path clean for %v", who, now-c.cleanAt)
		}
	default:
		c.failk(InvClose, fmt.Sprintf("reason%d", r), f, "the %s sent CLOSE reason %d (%v)", who, r, r)
	}
}

// ---- the CRF ----

// cremOut sees every CREM message gateway side sends: the CSFs' (HELLO, PARAM_UPDATE, REPAIR,
// their CLOSE) and the CRF's (HELLO_ACK, PARAM_ACK, LOSS_REPORT, REPAIR_REQUEST, its CLOSE).
func (c *checker) cremOut(side int, to netip.AddrPort, b []byte) {
	if len(b) < wire.HeaderLen {
		c.failf(InvEngine, nil, "gateway %c sent a CREM message of %d octets", 'A'+side, len(b))
		return
	}
	if to != cremAddr[1-side] {
		c.failf(InvEngine, nil, "gateway %c sent a CREM message to %v, not to the peer's %v (C14)", 'A'+side, to, cremAddr[1-side])
	}
	id := binary.BigEndian.Uint32(b[4:8])
	switch t := wire.Type(b[0] & 0x0f); t {
	case wire.TypeHello:
		h, err := wire.ParseHello(b)
		if err != nil {
			return
		}
		f := c.w.flows[h.DestQP()]
		if f == nil || f.dir != side {
			c.failf(InvEngine, nil, "gateway %c sent a HELLO for QP %#x, no flow of its own", 'A'+side, h.DestQP())
			return
		}
		c.nonces[side][h.SenderNonce] = f
		if h.SenderNonce != f.nonce {
			f.nonce = h.SenderNonce
			c.started(f, c.w.now)
		}
	case wire.TypeParamUpdate, wire.TypeRepair:
		if f := c.csfByID[side][id]; f != nil {
			c.csfMessage(f, t, b)
		}
	case wire.TypeClose:
		m, err := wire.ParseClose(b)
		if err != nil {
			return
		}
		if f := c.csfByID[side][id]; f != nil {
			c.checkClose(f, "CSF", m.Reason)
		} else if f := c.crfFlow[side][id]; f != nil {
			c.checkClose(f, "CRF", m.Reason)
		}
	default:
		c.crfMessage(side, t, id, b)
	}
}

// csfMessage checks a PARAM_UPDATE or REPAIR of f's CSF.
func (c *checker) csfMessage(f *flowRec, t wire.Type, b []byte) {
	if t != wire.TypeRepair {
		return
	}
	m, err := wire.ParseRepair(b)
	if err != nil {
		c.failf(InvEngine, f, "the CSF sent a REPAIR that does not parse: %v", err)
		return
	}
	if !m.Info {
		n := len(m.Symbol)
		if ft := c.w.faults; ft != nil && ft.heavyRepair {
			n *= 20
		}
		c.repairBudget(f, n)
	}
	if m.Retx && m.Scheme == wire.SchemeCauchy {
		r := c.block(f, m.BlockStartPSN, int(m.K))
		if r.answered == nil {
			r.answered = map[uint16]bool{}
		}
		r.answered[m.RepairSessionID] = true
		c.checkRounds(f, m.BlockStartPSN, r)
	}
}

// crfMessage checks a message of gateway side's CRF.
func (c *checker) crfMessage(side int, t wire.Type, id uint32, b []byte) {
	switch t {
	case wire.TypeHelloAck:
		h, err := wire.ParseHelloAck(b)
		if err != nil {
			return
		}
		if f := c.nonces[1-side][h.SenderNonce]; f != nil {
			c.crfFlow[side][h.FlowID] = f
			c.csfByID[1-side][h.FlowID] = f
			f.crfID = h.FlowID
		}
	case wire.TypeLossReport:
		f := c.crfFlow[side][id]
		if f == nil {
			return
		}
		if ft := c.w.faults; ft != nil && ft.skewReport && len(b) >= wire.HeaderLen+12 {
			// One expected packet more than counted (the Expected field).
			binary.BigEndian.PutUint32(b[wire.HeaderLen+4:], binary.BigEndian.Uint32(b[wire.HeaderLen+4:])+1)
		}
		m, err := wire.ParseLossReport(b)
		if err != nil {
			c.failf(InvEngine, f, "the CRF sent a LOSS_REPORT that does not parse: %v", err)
			return
		}
		clean := c.lossReport(f, &m)
		if len(f.cleanRep) > 4096 {
			clear(f.cleanRep)
		}
		f.cleanRep[string(b)] = clean
	case wire.TypeRepairRequest:
		f := c.crfFlow[side][id]
		if f == nil {
			return
		}
		m, err := wire.ParseRepairRequest(b)
		if err != nil {
			c.failf(InvEngine, f, "the CRF sent a REPAIR_REQUEST that does not parse: %v", err)
			return
		}
		c.request(f, &m)
	case wire.TypeParamAck:
		m, err := wire.ParseParamAck(b)
		if err == nil && m.Status != wire.StatusAccepted {
			c.refusals++
		}
	}
}

// lossReport applies K5: over an interval in which the path lost, reordered and repeated
// nothing of the flow, Expected equals Received. It reports whether the interval was lossless.
func (c *checker) lossReport(f *flowRec, m *wire.LossReport) bool {
	c.lossReports++
	f.repE += uint64(m.Expected)
	f.repR += uint64(m.Received)
	now := c.w.now
	t0 := now - time.Duration(m.IntervalUS)*time.Microsecond - time.Microsecond
	const margin = time.Millisecond
	// The CRF settles a PSN its requests got no answer for (a request or an INFO the path lost)
	// after three range rounds, a reorder allowance plus 4.5 SRTT after its gap (crf E42): it
	// counts as lost then, in whatever interval that falls. So the path must have been clean at
	// least that long, with room, before an interval is judged lossless.
	settle := margin + 6*c.w.sc.RTT
	if !c.clean || !c.w.drained() || c.cleanAt > t0-settle || f.nUnsettled > 0 || f.lastDisturb >= t0-margin {
		return false
	}
	c.judged++
	if m.Expected != m.Received {
		c.failk(InvLossless, dirName[f.dir], f, "LOSS_REPORT over %v of a lossless interval says Expected %d, Received %d (Restored %d, Incomplete %d); the path has been clean for %v",
			time.Duration(m.IntervalUS)*time.Microsecond, m.Expected, m.Received, m.Restored, m.IncompleteBlocks, now-c.cleanAt)
	}
	return true
}

// block returns the coded-round record of f's block at start.
func (c *checker) block(f *flowRec, start psn.PSN, k int) *blockRounds {
	r := f.rounds[start]
	if r == nil {
		r = &blockRounds{k: k}
		if len(f.rounds) > 1<<14 {
			// Blocks far behind are settled long ago; the record stays bounded (it may then
			// miss a violation, never invent one).
			clear(f.rounds)
		}
		f.rounds[start] = r
	}
	if k > r.k {
		r.k = k
	}
	return r
}

// request records a REPAIR_REQUEST of the block form and checks C9 (a): one FALLBACK, and no
// coded request after it (coded rounds are counted where the CSF answers: checkRounds). A
// request in the PSN-range form names no block; its answer does.
func (c *checker) request(f *flowRec, m *wire.RepairRequest) {
	if m.RangeForm {
		return
	}
	r := c.block(f, m.BlockStartPSN, int(m.K))
	if m.Fallback {
		r.fallback++
		if r.fallback > 1 {
			c.failk(InvRounds, "fallbacks", f, "block %v got FALLBACK request number %d", m.BlockStartPSN, r.fallback)
		}
	} else {
		r.coded++
		if r.fallback > 0 {
			c.failk(InvRounds, "coded-after-fallback", f, "block %v got a coded REPAIR_REQUEST after its FALLBACK", m.BlockStartPSN)
		}
	}
	c.checkRounds(f, m.BlockStartPSN, r)
}

// checkRounds counts a block's coded rounds: the requests, of either form, a coded
// retransmission of it answered (a request in the PSN-range form for another PSN of the block,
// sent before the CRF knew the block, is a round too; a request past the two is answered with
// Source Copy, as a FALLBACK is: csf E34).
func (c *checker) checkRounds(f *flowRec, start psn.PSN, r *blockRounds) {
	if n := len(r.answered); n > 2 {
		c.failf(InvRounds, f, "block %v (k %d) got %d coded retransmission rounds (%d block-form coded requests); C9 (a) allows two before per-packet retransmission",
			start, r.k, n, r.coded)
	}
}

// crfHandled checks the CRF's per-flow counters after it took a CREM message (K4).
func (c *checker) crfHandled(side int, b []byte) {
	if wire.Type(b[0]&0x0f) != wire.TypeRepair {
		return
	}
	id := binary.BigEndian.Uint32(b[4:8])
	f := c.crfFlow[side][id]
	if f == nil {
		return
	}
	st, ok := c.w.gw[side].node.Receiver().FlowStats(id)
	if !ok {
		return
	}
	if st.RepairUnknownConfig > 0 {
		m, _ := wire.ParseRepair(b)
		c.failk(InvLiveConfig, "unknown-config", f, "the CRF dropped %d REPAIR of a configuration it does not hold (the latest: Config ID %d, block %v, RETX %v, scheme %v)",
			st.RepairUnknownConfig, m.ConfigID, m.BlockStartPSN, m.Retx, m.Scheme)
	}
	if n := st.RepairBadScheme + st.RepairBadK + st.RepairBadT + st.RepairInconsistent + st.RepairRejected; n > 0 {
		m, _ := wire.ParseRepair(b)
		c.failk(InvLiveConfig, "refused", f, "the CRF refused %d REPAIR of a live configuration (bad scheme %d, bad k %d, bad T %d, inconsistent %d, rejected %d; the latest: Config ID %d, block %v k %d, INFO %v)",
			n, st.RepairBadScheme, st.RepairBadK, st.RepairBadT, st.RepairInconsistent, st.RepairRejected, m.ConfigID, m.BlockStartPSN, m.K, m.Info)
	}
	if st.ICRCMismatch > 0 || st.DecodeErrors > 0 {
		c.failk(InvEngine, "crf-icrc-mismatch", f, "the CRF restored %d packets whose ICRC failed, %d decode errors", st.ICRCMismatch, st.DecodeErrors)
	}
}

// ---- every step ----

func (c *checker) probeAt(t time.Duration) { c.sweepAt = t }

func (c *checker) nextDeadline() (time.Duration, bool) {
	d, ok := c.sweepAt, c.sweepAt > 0
	if c.tripBy > 0 && (!ok || c.tripBy < d) {
		d, ok = c.tripBy, true
	}
	if c.resumeAt > 0 && c.resumeAt > c.w.now {
		if !ok || c.resumeAt < d {
			d, ok = c.resumeAt, true
		}
	}
	return d, ok
}

// afterStep runs once after every step of the loop.
func (c *checker) afterStep() {
	w := c.w
	if c.clean && !w.drained() {
		c.cleanAt = w.now // clean only once nothing of the earlier phases is on its way
	}
	if c.sweepAt > 0 && w.now >= c.sweepAt {
		c.sweepAt = 0
		for _, f := range w.flist {
			f.probeArmed, f.probeSkip = true, probeSkip
		}
		c.probes++
		w.work.probe()
	}
	if c.tripBy > 0 && w.now >= c.tripBy {
		c.tripBy = 0
		c.tripped()
	}
	if w.steps%1024 == 0 {
		c.sweep()
	}
}

// tripWithin is how far into the bad minute every busy flow's breaker must have tripped, and
// tripPackets what makes a flow busy: first transmissions over that time (K4 breaker).
const (
	tripWithin  = 20 * time.Second
	tripPackets = 500
)

// tripped checks that the breaker of every flow that carried traffic in the bad minute's first
// seconds tripped: its path lost 15 percent, above the ten of C11 (f).
//
// busy counts the flows judged: a run whose flows were all too sparse for the CRF to see their
// losses is not expected to trip any breaker.
func (c *checker) tripped() {
	for _, f := range c.w.flist {
		cs := c.csf(f)
		// Busy: enough packets, and dense enough that a lost one shows as a gap to the CRF
		// before the RDMA transport's retransmission fills it, that is about a packet every half
		// round trip (E42: a flow slower than that shows its losses only in its blocks' Present
		// Bitmaps, and with m = 0 not at all; K4).
		busy := uint64(max(tripPackets, int(2*tripWithin/c.w.sc.RTT)))
		if cs == nil || f.firstTx-f.bad0Tx < busy || c.w.now-f.startedAt < tripWithin/2 {
			continue // little traffic, or a session too young to have judged its windows
		}
		c.busy++
		st := cs.Stats()
		if st.BreakerTrips > f.bad0Trips || f.bad0Trips > 0 && st.BreakerTrips == f.bad0Trips && cs.M() == 0 {
			continue // tripped now, or still open from before
		}
		tx, drops := f.firstTx-f.bad0Tx, f.drops-f.bad0Drops
		e, r := f.repE-f.bad0E, f.repR-f.bad0R
		rep := 0.0
		if e > 0 && e > r {
			rep = float64(e-r) / float64(e)
		}
		c.failk(InvBreaker, "not-tripped", f, "%v into the bad minute the breaker has not tripped: the path dropped %d of the flow's packets (%d first transmissions), its LOSS_REPORTs say Expected %d, Received %d (%.1f%% loss)",
			tripWithin, drops, tx, e, r, 100*rep)
	}
}

// probeSkip is how many first transmissions of a flow pass after the probe's requests are posted
// before one is dropped: the drop falls inside the probe's requests of at least probePackets
// packets, so that one drop is never a tenth of a breaker window's packets (K6).
const (
	probeSkip    = 8
	probePackets = 32
)

// probed records a probe drop.
func (c *checker) probed(f *flowRec, pkt []byte) {}

// sweep runs the checks that depend on time passing: an established flow on a clean path has
// its configuration (K4 protected); no request waits beyond its bound (K4 progress).
func (c *checker) sweep() {
	w := c.w
	now := w.now
	for _, q := range w.work.qs {
		if len(q.out) == 0 || q.stalled {
			continue
		}
		o := q.out[0]
		bound := stallBase + 8*time.Duration(float64(o.size)*8/float64(q.p.spec.Rate)*float64(time.Second))
		if age := now - o.posted; age > bound {
			q.stalled = true
			a := q.p.a.Stats()
			c.failf(InvProgress, q.p.flows[sideA], "%v %d of %d octets outstanding for %v (bound %v); A sent %d, resent %d (%d timeouts), got %d ACKs, %d READ responses; %s; %s",
				o.kind, o.id, o.size, age, bound, a.DataPackets, a.RetransmittedPackets, a.Timeouts, a.AcksReceived, a.ReadResponsesReceived,
				c.crfState(q.p.flows[sideA]), c.crfState(q.p.flows[sideB]))
		}
	}
	if w.steps%(1<<16) == 0 {
		// The engines' tables: one CRF flow per inbound flow at most (a new session's HELLO
		// replaces the old), one CSF per outbound flow.
		for s := range 2 {
			n := w.gw[s].node
			if got, want := len(n.Receiver().Flows()), len(w.flist)/2; got > want {
				c.failk(InvMemory, "crf-flows", nil, "the CRF of gateway %c serves %d flows; %d flows arrive there", 'A'+s, got, want)
			}
			if got, want := len(n.Flows()), len(w.flist)/2; got > want {
				c.failk(InvMemory, "csfs", nil, "gateway %c has %d CSFs; %d flows leave there", 'A'+s, got, want)
			}
		}
	}
	for _, f := range w.flist {
		cs := f.cs
		if cs == nil {
			continue
		}
		c.csfTouched(f)
		if !f.established {
			continue
		}
		if _, ok := cs.Config(); ok {
			continue
		}
		// Established for a second of clean path, and sources observed since a handshake's
		// worth of round trips after: the first configuration must be in force (C6 b, E3).
		if now-f.estAt > time.Second && c.cleanFor(time.Second) &&
			cs.Stats().Sources > f.sourcesAt+uint64(w.sc.K)*2 && f.lastSourceAt > f.estAt+200*time.Millisecond {
			st := cs.Stats()
			c.failf(InvProtected, f, "established %v ago and %d sources observed since, but no configuration in force (%d sources unprotected, %d PARAM_UPDATE sent, %d accepted)",
				now-f.estAt, st.Sources-f.sourcesAt, st.SourcesUnprotected, st.ParamUpdateSent, st.ParamAccepted)
		}
	}
}

// stallBase is the part of a request's bound that does not depend on its size (K4 progress).
const stallBase = 20 * time.Second

// crfState describes the CRF's counters of flow f for a failure message.
func (c *checker) crfState(f *flowRec) string {
	st, ok := c.w.gw[1-f.dir].node.Receiver().FlowStats(f.crfID)
	if !ok {
		return fmt.Sprintf("CRF %s: no flow", dirName[f.dir])
	}
	return fmt.Sprintf("CRF %s: %d sources, %d duplicates, %d late, %d held, %d released, %d gaps skipped, %d restored, %d abandoned, %d forwarded",
		dirName[f.dir], st.Sources, st.Duplicates, st.Late, st.HeldPackets, st.Released, st.GapsSkipped, st.Restored, st.Abandoned, st.Forwarded)
}

// finish runs the checks of the end of the run.
func (c *checker) finish() {
	w := c.w
	for s := range 2 {
		st := w.gw[s].node.Receiver().Stats()
		if st.QueueFull > 0 || st.DeliveriesDropped > 0 || st.EncodeErrors > 0 {
			c.failf(InvEngine, nil, "the CRF of gateway %c: %d messages lost to a full queue, %d deliveries dropped, %d encode errors",
				'A'+s, st.QueueFull, st.DeliveriesDropped, st.EncodeErrors)
		}
		if st.Flows.ICRCMismatch > 0 {
			c.failf(InvEngine, nil, "the CRF of gateway %c restored %d packets whose ICRC failed", 'A'+s, st.Flows.ICRCMismatch)
		}
		for _, f := range w.flist {
			if f.dir != s || f.cs == nil {
				continue
			}
			if cs := f.cs.Stats(); cs.QueueFull > 0 || cs.EncodeErrors > 0 {
				c.failf(InvEngine, f, "the CSF lost %d datagrams to a full queue, %d encode errors", cs.QueueFull, cs.EncodeErrors)
			}
		}
	}
	for _, p := range w.qps {
		for s := range 2 {
			st := p.qp(s).Stats()
			if st.BadICRC > 0 || st.WrongQP > 0 || st.Malformed > 0 {
				c.failf(InvEngine, p.flows[1-s], "host %c's QP got %d packets with a bad ICRC, %d for another QP, %d malformed",
					'A'+s, st.BadICRC, st.WrongQP, st.Malformed)
			}
		}
	}
	if w.haveBad && c.trips == 0 && c.busy > 0 {
		c.failf(InvBreaker, nil, "no CSF's breaker tripped in the bad minute")
	}
}

var dirName = [2]string{"A->B", "B->A"}

// describe names a RoCEv2 packet for a failure message.
func describe(pkt []byte) string {
	if len(pkt) < roce.BTHLen {
		return fmt.Sprintf("%d octets", len(pkt))
	}
	qp := uint32(pkt[5])<<16 | uint32(pkt[6])<<8 | uint32(pkt[7])
	p := psn.PSN(uint32(pkt[9])<<16 | uint32(pkt[10])<<8 | uint32(pkt[11]))
	return fmt.Sprintf("%v to QP %#x PSN %v", roce.Opcode(pkt[0]), qp, p)
}

// describeCREM names a CREM message for a failure message.
func describeCREM(b []byte) string {
	if len(b) < wire.HeaderLen {
		return fmt.Sprintf("%d octets", len(b))
	}
	var sb strings.Builder
	sb.WriteString(wire.Type(b[0] & 0x0f).String())
	switch wire.Type(b[0] & 0x0f) {
	case wire.TypeLossReport:
		if m, err := wire.ParseLossReport(b); err == nil {
			fmt.Fprintf(&sb, " over %vus: expected %d received %d restored %d", m.IntervalUS, m.Expected, m.Received, m.Restored)
		}
	case wire.TypeRepairRequest:
		if m, err := wire.ParseRepairRequest(b); err == nil {
			if m.RangeForm {
				fmt.Fprintf(&sb, " ranges %v", m.Ranges)
			} else {
				fmt.Fprintf(&sb, " block %v k %d lost %d", m.BlockStartPSN, m.K, m.Lost.Count())
			}
		}
	}
	return sb.String()
}
