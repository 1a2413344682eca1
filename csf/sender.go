package csf

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// State is where the Sender's session stands.
type State int

// The session states.
const (
	StateIdle        State = iota // before Start
	StateHello                    // HELLO sent, waiting for HELLO_ACK
	StateUnprotected              // eight HELLOs unanswered; waiting for the hold-off (C3)
	StateEstablished              // HELLO_ACK received: the flow is protected once a configuration is acknowledged
	StateClosed                   // CLOSE sent or received; all state released
)

func (s State) String() string {
	return [...]string{"idle", "hello", "unprotected", "established", "closed"}[s]
}

// maxAttempts is the draft's bound on HELLO and PARAM_UPDATE attempts.
const maxAttempts = 8

// Sender is the CREM sender function for one flow.
type Sender struct {
	o     options
	state State
	stats Stats
	q     *flow.Queue
	enc   flow.Encoder
	ops   [256]uint8

	// Session.
	nonce     uint64
	flowID    uint32
	bound     netip.AddrPort // where HELLO_ACK came from: every later message goes there (C14)
	eff       flow.Limits
	attempts  int
	attemptAt time.Duration // when the current HELLO attempt went out
	helloDue  time.Duration // next HELLO retransmission or hold-off end
	rtt       flow.RTT
	// probing: the HELLO out is a single probe of a CRF taken for down (E71); peerEpoch is
	// the Peer's epoch when this Sender began to wait for it.
	probing   bool
	freshWait bool // waiting for the Peer without having sent a HELLO (counted in the Peer)
	peerEpoch uint64
	// heardSources counts the sources coded since the bound CRF last spoke: should the session
	// turn out lost (silence, or a CLOSE for a Flow ID it does not know), they were protected
	// by nothing (E72).
	heardSources uint64

	// Configuration.
	cur     flow.Config
	haveCfg bool
	nextID  uint8
	pend    pendingParam
	// A refused PARAM_UPDATE (E28): the choice is offered again at retryAt,
	// each refusal in a row doubling the wait.
	retry     flow.Config
	haveRetry bool
	retryAt   time.Duration
	refusals  int
	// The log says a refusal at most once a minute per flow, with the refusals since the last
	// line (the count is in Stats.ParamRejected).
	refusalLogAt   time.Duration
	refusalLogged  bool
	refusalsUnsaid int

	// Blocks.
	blocks   []block
	open     int    // index of the open block, -1 when none
	seq      uint64 // the number of the next block opened; its slot is seq modulo len(blocks)
	ackSeq   uint64 // no block numbered below it is held: Acknowledge starts there
	timers   flow.Timers
	prefix   int        // octets of a source symbol the encoder reads (0: all, flow.SourcePrefixer)
	absent   absentRuns // PSNs skipped or READ-consumed beyond their block (E29)
	farRun   int        // consecutive PSNs far behind next: a new PSN space after restartRun (E32)
	farNext  psn.PSN
	next     psn.PSN // the PSN after the newest source
	haveNext bool
	lastSrc  time.Duration
	// lastAgain is when a packet sent again last went by: the flow is not idle while its RDMA
	// transport still retransmits (C15: idle means no source packets at all).
	lastAgain time.Duration
	// lastHeard is when the bound CRF last answered (HELLO_ACK, PARAM_ACK, LOSS_REPORT,
	// REPAIR_REQUEST): a CRF that restarted has forgotten the flow and says nothing (E31).
	lastHeard time.Duration
	// unheardFrom is the first source after lastHeard: the CRF owes a LOSS_REPORT within an
	// SRTT of it, and its silence is timed from there, not from a message before an idle spell
	// (E70).
	unheardFrom time.Duration
	meanGap     time.Duration // between sources, idle spells included
	burstMean   time.Duration // between the packets of a burst (E35)
	scratch     [][]byte
	idx         []int
	symbuf      []byte

	// mtu is the RDMA MTU: configured, then as the flow's full-sized packets show it (E33).
	mtu     int
	mtuSeen int // another MTU the latest FIRST and MIDDLE packets showed, mtuRun of them in a row
	mtuRun  int

	// The flow's reverse queue pair (the requester's): acknowledgements to it release blocks.
	reverseQP     uint32
	haveReverseQP bool
	ackedThrough  psn.PSN
	haveAcked     bool
	// The highest PSN Acknowledge was given: a path report's drop at or before it is delivered.
	releasedThrough psn.PSN
	haveReleased    bool

	// The latest long message (C16): its PSNs.
	long             bool
	longFrom, longTo psn.PSN

	// The latest message WithMessagePolicy chose for: its PSNs, k and extra repair.
	msg            bool
	msgFrom, msgTo psn.PSN
	msgK, msgExtra int
	// msgTail: only blocks that end at or after it get msgExtra (the cost rule's critical
	// blocks, P9); msgFrom for WithMessagePolicy. msgAt is when the latest message was learned.
	msgTail psn.PSN
	msgAt   time.Duration
	kmLine  []KMPoint // the codes used over time (P11)

	// Measurement and policy.
	est       *policy.Estimator
	sel       *policy.MSelector
	budget    *policy.Budget
	breaker   policy.Breaker
	tripsPast uint64 // breaker trips of earlier sessions (each session starts with a fresh breaker)
	mOverride bool   // the breaker holds m at zero (C11 f)
	// lowerSince is when the cost rule began to choose an m below the one in force without a
	// break (lowering: one is pending); m falls only after lowerHold of that (P12).
	lowerSince time.Duration
	lowering   bool
	// lowerTop is the highest m the draft's rule wanted since lowerSince, lowerLost and
	// lowerExpected the transmission loss of the intervals since: how far it falls (P15).
	lowerTop                 int
	lowerLost, lowerExpected uint64
	// deferSince is when the policy's proposal began to wait for the blocks of older
	// configurations (deferring: it waits, E80).
	deferSince time.Duration
	deferring  bool
	// ivLost and ivExpected are the latest interval's transmission loss (P15).
	ivLost, ivExpected uint32
	// evidence is the latest intervals' transmission loss: the cost rule raises m only as far
	// as the rate they show with confidence calls for (P12).
	evidence  policy.LossEvidence
	pathCong  uint32 // Lost Counts with Cause congestion this interval, saturating at what was sent
	pathDelay bool
	pathSince time.Duration // when the current path findings began
	// Packets of the flow (new sources and ones sent again) in the window that started at
	// winStart and in the one before: what a path reporter's Lost Count may plausibly reach.
	winPackets [2]uint64
	winStart   time.Duration
}

type pendingParam struct {
	active    bool
	acked     bool
	cfg       flow.Config
	effective psn.PSN
	// provisional: proposed before any source was seen, so the Effective PSN is not yet
	// meaningful; the first source fixes it and the update goes again (E27).
	provisional bool
	resent      bool // sent again for a passed Effective PSN: no RTT sample (Karn)
	moves       int  // times the Effective PSN moved; each doubles the lead of the next
	attempts    int
	sentAt      time.Duration
	due         time.Duration
	rto         time.Duration
}

// New returns a Sender. WithFlow, WithCRF and WithRandom are required.
func New(opts ...Option) (*Sender, error) {
	o := defaults()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	switch {
	case !o.desc.Src.IsValid():
		return nil, errors.New("csf: New: WithFlow is required")
	case !o.crf.IsValid():
		return nil, errors.New("csf: New: WithCRF is required (no default CREM port, C14)")
	case o.rand == nil:
		return nil, errors.New("csf: New: WithRandom is required (no global randomness)")
	}
	if o.peer == nil {
		o.peer = NewPeer()
	}
	enc := o.encoder
	if enc == nil {
		e, err := fec.NewEncoder()
		if err != nil {
			return nil, fmt.Errorf("csf: New: %w", err)
		}
		enc = e
	}
	s := &Sender{o: o, q: flow.NewQueue(o.queue), enc: enc, open: -1, rtt: flow.NewRTT(o.initialRTT),
		prefix: flow.SourcePrefix(enc), reverseQP: o.reverseQP, haveReverseQP: o.haveReverseQP, mtu: o.mtu}
	s.ops = opTable()
	s.est = policy.NewEstimator(o.ceCongested)
	if o.seedLoss {
		s.est.Seed(o.initialLoss)
	}
	s.sel = policy.NewMSelector(o.m)
	s.budget = policy.NewBudget(o.repairFraction, 1)
	return s, nil
}

// State returns the session state.
func (s *Sender) State() State { return s.state }

// FlowID returns the Flow ID the CRF assigned (0 before HELLO_ACK).
func (s *Sender) FlowID() uint32 { return s.flowID }

// Config returns the configuration in force and whether there is one.
func (s *Sender) Config() (flow.Config, bool) { return s.cur, s.haveCfg }

// NextPSN returns the PSN after the newest source of the session, if a source has been seen: a
// packet with an earlier PSN is one sent again.
func (s *Sender) NextPSN() (psn.PSN, bool) { return s.next, s.haveNext }

// RDMAMTU returns the RDMA MTU in use: the configured one until a full-sized packet shows the
// flow's own (E33).
func (s *Sender) RDMAMTU() int { return s.mtu }

// CostPath returns what the cost rule knows of the flow at this moment (P5): the loss estimate,
// the assumed burst, the round cost at SRTT and the time one symbol takes at the flow's rate
// (configured, else the gap between the packets of a burst, E35), zero when repair does not
// compete for the bottleneck.
func (s *Sender) CostPath() policy.Path {
	t, k := s.cur.T, s.cur.K
	if !s.haveCfg {
		t, k = s.o.t, s.o.k
	}
	if t <= 0 {
		t = s.mtu + 64
	}
	sym := policy.SymbolTime(t, s.o.rateBits, s.o.competes)
	if s.o.rateBits == 0 && s.o.competes {
		sym = s.burstMean
	}
	return policy.Path{Loss: s.est.P(), Burst: s.o.lossBurst, Round: policy.RoundCost(s.srtt()), Symbol: sym,
		MaxM: s.maxM(), MaxK: k, Epsilon: s.o.epsilon, Rho: s.o.rho}
}

// configM is the m of the configuration in force, or of the first one before there is one.
func (s *Sender) configM() int {
	if s.haveCfg {
		return s.cur.M
	}
	return s.o.m
}

// maxM is the receiver's Max m once known, else the Sender's own limit.
func (s *Sender) maxM() int {
	if s.eff.MaxM > 0 {
		return s.eff.MaxM
	}
	return s.o.limits.MaxM
}

// BreakerState returns the circuit breaker's state (C11 f).
func (s *Sender) BreakerState() policy.BreakerState { return s.breaker.State() }

// SRTT returns the smoothed round-trip time.
func (s *Sender) SRTT() time.Duration { return s.rtt.SRTT() }

// Stats returns the counters.
func (s *Sender) Stats() Stats {
	st := s.stats
	st.RTTSamples = s.rtt.Samples()
	st.BreakerTrips = s.tripsPast + s.breaker.Trips()
	return st
}

// Drain hands every datagram the Sender wants sent to out. A datagram's Payload is valid only
// during the call.
func (s *Sender) Drain(out func(flow.Datagram)) { s.q.Drain(out) }

// srtt returns the smoothed RTT (C4); callers apply the draft's floors where it sets them.
func (s *Sender) srtt() time.Duration { return s.rtt.SRTT() }

// NextDeadline returns when Tick should next be called, if ever.
func (s *Sender) NextDeadline() (time.Duration, bool) {
	var d time.Duration
	have := false
	at := func(t time.Duration) {
		if !have || t < d {
			d, have = t, true
		}
	}
	switch s.state {
	case StateHello:
		at(s.helloDue)
	case StateUnprotected:
		// The Peer's schedule (E71), not before this Sender began to wait (a schedule no one
		// followed for a while is not caught up on); at once when the CRF answered meanwhile.
		if down, next, epoch := s.o.peer.state(); down && epoch == s.peerEpoch {
			at(max(s.probeAt(next), s.helloDue))
		} else {
			at(s.helloDue)
		}
	case StateEstablished:
		if s.pend.active && !s.pend.acked {
			at(s.pend.due)
		}
		if s.haveRetry && !s.pend.active {
			at(s.retryAt)
		}
		if s.haveNext {
			at(max(s.lastSrc, s.lastAgain) + s.o.idle)
		}
		if s.peerMayBeSilent() {
			at(max(s.lastHeard, s.unheardFrom) + s.silence())
		}
		if s.open >= 0 {
			at(s.lastSrc + s.burstGap())
		}
		if t, ok := s.nextBlockDeadline(); ok {
			at(t)
		}
	}
	return d, have
}

// Tick runs every timer that is due at now.
func (s *Sender) Tick(now time.Duration) {
	switch s.state {
	case StateHello:
		if now >= s.helloDue {
			s.helloTimeout(now)
		}
	case StateUnprotected:
		s.tickUnprotected(now)
	case StateEstablished:
		if s.haveNext && now >= max(s.lastSrc, s.lastAgain)+s.o.idle {
			s.Close(now, wire.ReasonIdle)
			return
		}
		if s.peerMayBeSilent() && now >= max(s.lastHeard, s.unheardFrom)+s.silence() {
			// Sources went by and the CRF has said nothing for so long: it no longer knows the
			// flow (a restart). A new session (HELLO) protects it again (E31).
			s.stats.PeerSilent++
			s.sessionLost()
			if s.o.log != nil {
				s.o.log.Warn("crem: no message from the CRF while sources flow; starting a new session",
					"flow", s.flowID, "crf", s.bound, "silent", now-s.lastHeard)
			}
			s.Start(now)
			return
		}
		if s.pend.active && !s.pend.acked && now >= s.pend.due {
			s.paramTimeout(now)
			if s.state != StateEstablished {
				return
			}
		}
		if s.haveRetry && !s.pend.active && now >= s.retryAt {
			s.retryRefused(now)
		}
		if s.open >= 0 && now >= s.lastSrc+s.burstGap() {
			s.closeBlock(now, s.open, false)
		}
		s.tickBlocks(now)
	}
}

// silence is how long the CRF may say nothing while sources flow before the session is taken
// for lost (E31, E70): 32 SRTT (LOSS_REPORT comes once per SRTT), at least the configured time.
func (s *Sender) silence() time.Duration { return max(s.o.silence, 32*s.srtt()) }

// peerMayBeSilent reports whether the CRF's silence can mean it forgot the flow (E31): a
// configuration is in force and sources went by for silentSpan after its last message (from
// the first to the latest), so that it had several LOSS_REPORTs to send about them. A flow that went quiet just after the CRF last
// spoke had one report at most to come, and losing it is no sign of a restart (E82).
func (s *Sender) peerMayBeSilent() bool {
	return s.haveCfg && s.lastSrc > s.lastHeard && s.unheardFrom > s.lastHeard && s.lastSrc-s.unheardFrom >= silentSpan(s.srtt())
}

// silentSpan is how long sources must go by after the CRF's last message before its silence
// counts (E82): four SRTT, four LOSS_REPORT intervals, at least 4 ms.
func silentSpan(srtt time.Duration) time.Duration { return max(4*srtt, 4*time.Millisecond) }

// burstGap is RULINGS C5's gap: max(floor, 4 x the mean packet gap).
func (s *Sender) burstGap() time.Duration { return max(s.o.burstGapMin, 4*s.burstMean) }
