package csf

import (
	"errors"
	"net/netip"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// Start sends the first HELLO (draft, Session). Calling it again after CLOSE starts a new
// session with a new nonce. Toward a CRF taken for down (E71) it sends nothing: the flow waits,
// unprotected, for the Peer's next probe or for the CRF to answer another flow.
func (s *Sender) Start(now time.Duration) {
	s.release()
	// A new session starts with a fresh circuit breaker: one that closed the last session
	// (CLOSE reason 4) would close this one at its first report (E16).
	s.tripsPast += s.breaker.Trips()
	s.breaker = policy.Breaker{}
	s.probing = false
	if down, _, epoch := s.o.peer.state(); down {
		s.state, s.peerEpoch, s.helloDue = StateUnprotected, epoch, now
		s.freshWait = true // it goes before the flows that have tried (probeAt)
		s.o.peer.addFresh(1)
		return
	}
	s.state = StateHello
	s.nonce = s.o.rand()
	if s.hook(Hooks.FixedNonce) {
		s.nonce = faultNonce
	}
	s.attempts = 0
	s.sendHello(now)
}

// tickUnprotected runs the wait for a CRF taken for down (E71): a new session at once when it
// answered meanwhile, else this Sender's probe when the Peer grants it one.
func (s *Sender) tickUnprotected(now time.Duration) {
	down, next, epoch := s.o.peer.state()
	if !down || epoch != s.peerEpoch {
		s.Start(now)
		return
	}
	if now < s.probeAt(next) || !s.o.peer.takeProbe(now, s.o.holdOff) {
		return
	}
	s.leaveFresh()
	// One round: a HELLO and its retransmissions (the draft's backoff, eight in 255 ms);
	// unanswered, the last one's timeout brings the Sender back here.
	s.state, s.probing = StateHello, true
	s.nonce = s.o.rand()
	if s.hook(Hooks.FixedNonce) {
		s.nonce = faultNonce
	}
	s.attempts = 0
	s.stats.HelloProbes++
	s.sendHello(now)
}

// probeAt is when this Sender asks for the probe due at next: then, unless it has tried already
// and a flow that started while the CRF was taken for down waits too (that one goes first, so
// it is not starved by flows that probe in vain, one the CRF refuses: E71); such a Sender asks
// half a hold-off later.
func (s *Sender) probeAt(next time.Duration) time.Duration {
	if !s.freshWait && s.o.peer.freshWaiting() {
		return next + s.o.holdOff/2
	}
	return next
}

// leaveFresh takes this Sender off the Peer's count of flows that wait without having tried.
func (s *Sender) leaveFresh() {
	if s.freshWait {
		s.freshWait = false
		s.o.peer.addFresh(-1)
	}
}

// sessionLost counts the sources coded since the CRF last spoke as protected by nothing: the
// session they went with was gone (E72).
func (s *Sender) sessionLost() {
	s.stats.UnprotectedSessionLost += s.heardSources
	s.heardSources = 0
}

func (s *Sender) sendHello(now time.Duration) {
	s.attempts++
	s.attemptAt = now
	// Exponential backoff from 1 ms (draft, Session).
	s.helloDue = now + time.Millisecond<<min(s.attempts-1, 30)
	if s.hook(Hooks.HelloWithoutBackoff) {
		s.helloDue = now + time.Millisecond
	}
	m := wire.Hello{Capabilities: s.o.limits.Capabilities(s.mtu), SenderNonce: s.nonce,
		Source: s.o.desc.Src, Destination: s.o.desc.Dst, FlowLabel: s.o.desc.DestQP}
	if s.send(s.o.crf, &m) {
		s.emit(Event{Kind: EventNonceSent, Nonce: s.nonce})
		s.stats.HelloSent++
		if s.attempts > 1 {
			s.stats.HelloRetransmitted++
		}
	}
}

func (s *Sender) helloTimeout(now time.Duration) {
	if s.attempts < maxAttempts || s.hook(Hooks.HelloWithoutBackoff) {
		s.sendHello(now)
		return
	}
	// C3: not fatal; the flow goes unprotected and the CRF is probed once per hold-off, by
	// one flow of all those toward it (E71).
	probe := s.probing
	s.probing = false
	s.o.peer.markDown(now, s.o.holdOff)
	_, _, s.peerEpoch = s.o.peer.state()
	s.state = StateUnprotected
	s.helloDue = now
	if probe {
		return // a probe unanswered: the episode goes on
	}
	s.stats.Unprotected++
	if s.o.log != nil {
		s.o.log.Warn("crem: no HELLO_ACK after eight attempts; flow unprotected, the CRF probed once per hold-off",
			"crf", s.o.crf, "qp", s.o.desc.DestQP, "holdoff", s.o.holdOff)
	}
}

// send appends m to the queue for to; false (and counted) when the queue is full.
func (s *Sender) send(to netip.AddrPort, m wire.Message) bool {
	b := s.q.Next()
	if b == nil {
		s.stats.QueueFull++
		return false
	}
	b, err := m.Append(b)
	if err != nil {
		s.stats.EncodeErrors++
		return false
	}
	s.q.Commit(to, b)
	return true
}

// Handle takes a CREM message that arrived from from.
func (s *Sender) Handle(now time.Duration, from netip.AddrPort, msg []byte) {
	// HELLO_ACK and PATH_REPORT are not of a session yet: their own parsers check the header.
	if len(msg) >= wire.HeaderLen && msg[0]>>4 == wire.Version {
		switch wire.Type(msg[0] & 0x0f) {
		case wire.TypeHelloAck:
			s.onHelloAck(now, from, msg)
			return
		case wire.TypePathReport:
			s.onPathReport(now, from, msg)
			return
		}
	}
	h, err := wire.ParseHeader(msg)
	if err != nil {
		if errors.Is(err, wire.ErrDiscard) {
			s.stats.MessagesIgnored++
		} else {
			s.stats.MessagesMalformed++
		}
		return
	}
	if s.state != StateEstablished || h.FlowID != s.flowID {
		s.stats.MessagesIgnored++
		return
	}
	if from != s.bound {
		if !s.anySource(h.Type) {
			s.stats.MessagesWrongSource++
			return
		}
		if h.Type == wire.TypeRepairRequest {
			// Hooks.AnswerAnySource: the answer goes where the request came from.
			bound := s.bound
			s.bound = from
			s.onRequest(now, msg)
			s.bound = bound
			return
		}
	}
	s.lastHeard = max(s.lastHeard, now)
	unheard := s.heardSources
	s.heardSources = 0
	switch h.Type {
	case wire.TypeParamAck:
		s.onParamAck(now, msg)
	case wire.TypeRepairRequest:
		s.onRequest(now, msg)
	case wire.TypeLossReport:
		s.onLossReport(now, msg)
	case wire.TypeClose:
		m, err := wire.ParseClose(msg)
		if err != nil {
			s.stats.MessagesMalformed++
			return
		}
		s.stats.CloseReceived++
		s.stats.CloseReceivedByReason[min(int(m.Reason), 5)]++
		if m.Reason == wire.ReasonProtocolError {
			// A CRF answers REPAIR or PARAM_UPDATE for a Flow ID it does not know with this
			// (a restart forgot the session, E70): what went since it last spoke went unguarded.
			s.heardSources = unheard
			s.sessionLost()
		}
		s.release()
		s.state = StateClosed
	default:
		s.stats.MessagesIgnored++ // HELLO, PARAM_UPDATE, REPAIR go the other way
	}
}

func (s *Sender) onHelloAck(now time.Duration, from netip.AddrPort, msg []byte) {
	m, err := wire.ParseHelloAck(msg)
	if err != nil {
		s.stats.MessagesMalformed++
		return
	}
	if s.state != StateHello || m.SenderNonce != s.nonce || m.FlowID == 0 {
		// A duplicate after the first, or a blind guess: the nonce is the only proof.
		s.stats.HelloAckIgnored++
		return
	}
	eff := s.o.limits.Min(flow.LimitsOf(m.Capabilities, int(m.MaxOpenBlocks)))
	cfg, ok := s.firstConfig(eff)
	if !ok {
		s.stats.HelloAckIgnored++
		return
	}
	s.stats.HelloAckAccepted++
	s.o.peer.markUp()
	s.probing = false
	s.haveRetry, s.refusals = false, 0
	if s.attempts == 1 { // Karn: no sample from a retransmitted HELLO
		s.rtt.Sample(now - s.attemptAt)
	}
	s.state, s.flowID, s.bound, s.eff = StateEstablished, m.FlowID, from, eff
	s.emit(Event{Kind: EventFlowAssigned, FlowID: m.FlowID})
	held := s.o.maxHeld
	if held == 0 {
		held = 2 * eff.MaxOpenBlocks
	}
	s.blocks, s.seq, s.ackSeq = make([]block, held), 0, 0
	s.timers.Reset()
	s.lastSrc, s.lastHeard = now, now
	s.nextID = 1
	s.propose(now, cfg)
}

// firstConfig clips the configured (scheme, k, m, T) to the effective limits.
func (s *Sender) firstConfig(eff flow.Limits) (flow.Config, bool) {
	t := s.o.t
	if t == 0 {
		// RDMA MTU + BTH + RETH + ImmDt + ICRC + the 2-octet length prefix.
		t = s.mtu + 12 + 16 + 4 + 4 + 2
	}
	c := flow.Config{Scheme: s.o.scheme, K: min(s.o.k, eff.MaxK), M: min(s.o.m, eff.MaxM), T: min(t, eff.MaxT)}
	if c.Scheme == wire.SchemeXOR {
		c.M = min(c.M, 1)
	}
	if !eff.Schemes.Has(c.Scheme) {
		c.Scheme = wire.SchemeCauchy
	}
	return c, c.Check(eff) == nil
}

// propose sends PARAM_UPDATE for cfg with a new Config ID (draft, Configuration).
func (s *Sender) propose(now time.Duration, cfg flow.Config) {
	cfg.ID = s.nextID
	s.nextID++
	if s.nextID == 0 {
		s.nextID = 1
	}
	eff, known := s.effectivePSN(0)
	s.pend = pendingParam{active: true, cfg: cfg, effective: eff, provisional: !known && s.haveCfg,
		rto: max(2*s.srtt(), time.Millisecond)}
	s.sendParam(now)
}

// effectivePSN is a PSN far enough ahead that PARAM_ACK can arrive before it: the packets of
// one SRTT at the observed packet rate, at least one block, doubled for each time the update's
// Effective PSN has passed already (moves). The first configuration applies at once, wherever
// the flow's PSNs start (E27). Before any source is seen there is no PSN to name: known is false.
func (s *Sender) effectivePSN(moves int) (p psn.PSN, known bool) {
	if !s.haveNext {
		return 0, false
	}
	if !s.haveCfg {
		return s.next, true // nothing is protected yet: the first configuration applies at once
	}
	ahead := s.cur.K
	if s.meanGap > 0 {
		ahead += int(min(s.srtt()/s.meanGap, 1<<20))
	}
	return s.next.Add(min(ahead<<min(moves, 8), 1<<21)), true
}

func (s *Sender) sendParam(now time.Duration) {
	p := &s.pend
	p.attempts++
	s.writeParam(now)
}

// writeParam sends the pending PARAM_UPDATE as it stands and restarts its timer.
func (s *Sender) writeParam(now time.Duration) {
	p := &s.pend
	p.sentAt = now
	p.due = now + p.rto
	m := wire.ParamUpdate{FlowID: s.flowID, ConfigID: p.cfg.ID, Scheme: p.cfg.Scheme, K: uint8(p.cfg.K),
		M: uint8(p.cfg.M), T: uint16(p.cfg.T), EffectivePSN: p.effective}
	if s.send(s.bound, &m) {
		s.stats.ParamUpdateSent++
		if p.attempts > 1 || p.resent {
			s.stats.ParamUpdateRetransmitted++
		}
	}
}

func (s *Sender) paramTimeout(now time.Duration) {
	p := &s.pend
	forever := s.hook(Hooks.RetryParamsForever)
	if p.attempts >= maxAttempts && !forever {
		s.Close(now, wire.ReasonParamUnanswered)
		return
	}
	p.rto *= 2
	if forever {
		p.rto = min(p.rto, faultParamRTO) // retried on and on, not once every few days
	}
	// A passed Effective PSN: the old configuration continues and the update goes again
	// with a later one (draft, Configuration).
	if s.haveCfg && s.haveNext && (p.provisional || s.next.After(p.effective)) {
		p.effective, _ = s.effectivePSN(p.moves)
		p.provisional = false
		p.moves++
	}
	s.sendParam(now)
}

// sourcesPassed runs after a new source: an unacknowledged update whose Effective PSN the flow
// has now passed goes again at once with a later one, the old configuration continuing
// meanwhile (draft, Configuration: "sends PARAM_UPDATE again with a later Effective PSN"); one
// proposed before any source gets its first real Effective PSN (E27). Neither counts as one of
// the eight attempts: the timer's retransmissions do.
func (s *Sender) sourcesPassed(now time.Duration) {
	p := &s.pend
	if !p.active || p.acked || !s.haveCfg || !(p.provisional || s.next.After(p.effective)) {
		return
	}
	p.effective, _ = s.effectivePSN(p.moves)
	p.provisional, p.resent = false, true
	p.moves++
	s.stats.ParamEffectiveMoved++
	s.writeParam(now)
}

func (s *Sender) onParamAck(now time.Duration, msg []byte) {
	m, err := wire.ParseParamAck(msg)
	if err != nil {
		s.stats.MessagesMalformed++
		return
	}
	p := &s.pend
	if !p.active || p.acked || m.ConfigID != p.cfg.ID {
		s.stats.ParamAckIgnored++
		return
	}
	if p.attempts == 1 && !p.resent {
		s.rtt.Sample(now - p.sentAt)
	}
	if m.Status != wire.StatusAccepted {
		// A non-zero Status keeps the current configuration; the choice is offered again
		// after a back-off that doubles with each refusal in a row (E28).
		s.stats.ParamRejected++
		p.active = false
		s.refusals++
		s.retry, s.haveRetry = p.cfg, true
		s.retryAt = now + min(max(4*s.srtt(), 100*time.Millisecond)<<min(s.refusals-1, 10), maxRefusalBackoff)
		s.refusalsUnsaid++
		if s.o.log != nil && (!s.refusalLogged || now-s.refusalLogAt >= refusalLogEvery) {
			s.o.log.Warn("crem: PARAM_UPDATE refused; configuration kept, offered again later",
				"flow", s.flowID, "config", p.cfg.ID, "m", p.cfg.M, "status", m.Status, "refusals", s.refusalsUnsaid)
			s.refusalLogged, s.refusalLogAt, s.refusalsUnsaid = true, now, 0
		}
		return
	}
	s.stats.ParamAccepted++
	s.refusals = 0
	p.acked = true
	if s.open < 0 {
		s.maybeApply(s.next) // the next block starts at or after s.next
	}
}

// refusalLogEvery is the least time between two log lines of a flow's refused PARAM_UPDATEs.
const refusalLogEvery = time.Minute

// maxRefusalBackoff bounds the wait before a refused configuration is offered again.
const maxRefusalBackoff = 30 * time.Second

// retryRefused offers again what a refused PARAM_UPDATE proposed: the policy's current choice
// where adaptation decides m, else the refused configuration, unless it is in force already.
func (s *Sender) retryRefused(now time.Duration) {
	s.haveRetry = false
	cfg := s.retry
	if !s.haveCfg {
		c, ok := s.firstConfig(s.eff)
		if !ok {
			return
		}
		s.propose(now, c)
		return
	}
	if s.o.adapt {
		cfg = s.cur
		cfg.M = s.sel.Current()
	}
	if cfg.Scheme == s.cur.Scheme && cfg.K == s.cur.K && cfg.M == s.cur.M && cfg.T == s.cur.T {
		return
	}
	if s.waitOlder(now) {
		// E80: not while a block of a configuration before the one in force is held; again an
		// SRTT later.
		s.retry, s.haveRetry, s.retryAt = cfg, true, now+s.srtt()
		return
	}
	s.stats.ParamRetried++
	s.propose(now, cfg)
}

// maybeApply switches to the acknowledged configuration for a block starting at start: never
// before PARAM_ACK, never for a block that starts before the Effective PSN (the first
// configuration of a flow applies at its first block, wherever its PSNs start: E27).
func (s *Sender) maybeApply(start psn.PSN) {
	p := &s.pend
	early := p.active && s.hook(Hooks.ApplyParamsEarly) // bent: neither PARAM_ACK nor Effective PSN waited for
	if !early && (!p.active || !p.acked || s.haveCfg && (p.provisional || start.Before(p.effective))) {
		return
	}
	s.cur, s.haveCfg = p.cfg, true
	p.active = false
	s.emit(Event{Kind: EventConfigInForce, Config: s.cur})
	s.stats.ConfigsApplied++
	s.noteKM(s.lastSrc)
	s.sel.Force(s.cur.M) // the hysteresis moves from the m in force
	s.budget.SetBurst(s.cur.K * s.cur.T)
	if s.haveCfg && s.stats.ConfigsApplied == 1 {
		s.budget.ObserveSource(1 << 30) // the bucket starts full (P3)
	}
}

// Reconfigure proposes a new configuration through PARAM_UPDATE (RULINGS C6 b). It does
// nothing while another update is outstanding.
func (s *Sender) Reconfigure(now time.Duration, cfg flow.Config) error {
	if s.state != StateEstablished {
		return errors.New("csf: Reconfigure: no established session")
	}
	if err := cfg.Check(s.eff); err != nil {
		return err
	}
	if s.pend.active {
		return errors.New("csf: Reconfigure: an update is outstanding")
	}
	s.haveRetry = false // this choice replaces a refused one waiting to be offered again
	s.propose(now, cfg)
	return nil
}

// waitOlder reports whether the policy's next proposal waits (E80): the Sender holds a block of
// a configuration before the one in force, whose REPAIRs the CRF could no longer take once the
// proposal makes it retire that configuration (E81), and has waited less than olderWait for its
// acknowledgement. Each wait is counted; a proposal made with such a block still held is counted
// too.
func (s *Sender) waitOlder(now time.Duration) bool {
	if !s.holdsOlderBlocks() {
		s.deferring = false
		return false
	}
	if !s.deferring {
		s.deferring, s.deferSince = true, now
	}
	if now-s.deferSince >= olderWait(s.srtt()) {
		s.deferring = false
		s.stats.ParamOlderBlocksHeld++
		return false
	}
	s.stats.ParamDeferred++
	return true
}

// olderWait is how long the policy's proposal waits for the blocks of older configurations to
// be acknowledged (E80): two SRTT, the acknowledgement of a block that ended as the
// configuration in force began, with a round trip to spare.
func olderWait(srtt time.Duration) time.Duration { return max(2*srtt, time.Millisecond) }

// holdsOlderBlocks reports whether the Sender holds a block of a configuration older than the
// one in force: one it could still send a REPAIR of (E80). Blocks open in PSN order and
// configurations apply in order, so the oldest block held tells.
func (s *Sender) holdsOlderBlocks() bool {
	if !s.haveCfg {
		return false
	}
	n := uint64(len(s.blocks))
	for q := max(s.ackSeq, s.seq-min(s.seq, n)); q < s.seq; q++ {
		if b := &s.blocks[q%n]; b.used {
			return olderID(b.cfg.ID, s.cur.ID)
		}
	}
	return false
}

// olderID compares Config IDs in 8-bit serial arithmetic (they count up and wrap, skipping 0).
func olderID(a, b uint8) bool { d := b - a; return d != 0 && d < 128 }

// Close sends CLOSE with the reason and releases every state of the flow (RULINGS C2).
func (s *Sender) Close(now time.Duration, reason wire.Reason) {
	if s.state == StateEstablished {
		if s.o.log != nil {
			s.o.log.Info("crem: closing the flow", "flow", s.flowID, "reason", reason)
		}
		if s.send(s.bound, &wire.Close{FlowID: s.flowID, Reason: reason}) {
			s.stats.CloseSent++
			s.stats.CloseSentByReason[min(int(reason), 5)]++
		}
	}
	s.release()
	s.state = StateClosed
}

// release drops every block and the session's bindings. The flow's PSN space stays known (the
// next PSN, the absent runs): a new session goes on in it, and a gap across the two is a gap all
// the same (E29); only a new PSN space forgets it (E32).
func (s *Sender) release() {
	s.blocks, s.open, s.seq, s.ackSeq = nil, -1, 0, 0
	s.timers.Reset()
	s.haveCfg, s.pend = false, pendingParam{}
	if s.flowID != 0 {
		s.emit(Event{Kind: EventFlowReleased, FlowID: s.flowID})
	}
	s.flowID, s.bound = 0, netip.AddrPort{}
	s.mOverride = false
	s.haveAcked, s.haveReleased = false, false
	s.heardSources = 0
	s.leaveFresh()
}
