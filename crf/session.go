package crf

import (
	"net/netip"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// onHello answers HELLO (draft, Session; C3). A HELLO makes a pending session, never a flow
// and never the end of one (pending.go, E53, E54).
func (r *Receiver) onHello(now time.Duration, from netip.AddrPort, msg []byte) {
	m, err := wire.ParseHello(msg)
	if err != nil {
		r.st.MessagesMalformed++
		return
	}
	r.st.HelloReceived++
	desc := flow.Descriptor{Kind: m.FlowKind, Src: m.Source, Dst: m.Destination, DestQP: m.DestQP()}
	key := desc.Key()
	old := r.established(key)
	// C3: a retransmitted HELLO gets the same HELLO_ACK, same Flow ID.
	if old != nil && old.nonce == m.SenderNonce && old.from == from {
		r.st.HelloDuplicate++
		if r.sendHelloAck(from, &old.ack, len(msg)) {
			r.st.HelloAckSent++
		}
		old.helloAcks++ // the first PARAM_UPDATE no longer tells the round trip (Karn)
		return
	}
	if p := r.pend.byHello[helloKey{key, from, m.SenderNonce}]; p != nil {
		r.st.HelloDuplicate++
		if r.sendHelloAck(from, &p.ack, len(msg)) {
			r.st.HelloAckSent++
		}
		p.helloAcks++
		return
	}
	if old != nil && old.from != from {
		// Never a takeover: the flow stays with its bound address until it closes or idles
		// out. Dropped silently like any HELLO the CRF cannot serve (C3), counted, logged once.
		r.st.TakeoverRefused++
		r.logTakeover(old, from)
		return
	}
	theirs := flow.LimitsOf(m.Capabilities, 0)
	eff := r.o.limits.Min(theirs)
	if r.hook(Hooks.OwnLimits) {
		eff = r.o.limits // bent: the CRF's own limits, not the minimum of both sides'
	}
	if desc.Check() != nil || !eff.Schemes.Has(wire.SchemeCauchy) || old == nil && len(r.flows) >= r.o.maxFlows {
		r.st.HelloRefused++ // C3: silently, no state, nothing to amplify
		return
	}
	set, ok := Settings{}, true
	if r.o.settings != nil {
		set, ok = r.o.settings(desc)
	}
	if !ok {
		r.st.HelloRefused++
		return
	}
	src := from.Addr().Unmap()
	if !r.admit(now, src) {
		r.st.HelloBusy++
		r.pressure(now, "refusing HELLOs")
		return
	}
	id := r.newFlowID()
	desc.SrcPort = set.SrcPort
	p := &pending{id: id, desc: desc, key: key, from: from, src: src, nonce: m.SenderNonce, eff: eff,
		mtu: int(m.RDMAMTU), set: set, at: now}
	p.ack = wire.HelloAck{FlowID: id, Capabilities: r.o.limits.Capabilities(int(m.RDMAMTU)), AF: m.AF(),
		SenderNonce: m.SenderNonce, MaxOpenBlocks: uint16(r.o.limits.MaxOpenBlocks)}
	r.pend.add(p)
	r.emit(EventFlowAssigned, id)
	r.st.HandshakesOpened++
	if old != nil {
		r.st.HandshakesRestart++ // a new session from the flow's own address: a restarted CSF
	}
	if r.sendHelloAck(from, &p.ack, len(msg)) {
		r.st.HelloAckSent++
	}
	p.helloAcks, p.helloAckAt = 1, now
}

// newFlowID draws Flow IDs at random until one is unused (draft: MUST choose at random among
// unused values); 0 is never assigned, it marks HELLO and PATH_REPORT.
func (r *Receiver) newFlowID() uint32 {
	for {
		id := uint32(r.o.rand())
		if _, used := r.flows[id]; id != 0 && !used && r.pend.byID[id] == nil {
			return id
		}
	}
}

// onParamUpdate acknowledges a configuration, reserving its resources, or refuses it with a
// status (draft, Configuration; PARAM_ACK). It keeps each configuration's latest Effective PSN
// (contract 3) and learns from it where older configurations end (E44).
func (r *Receiver) onParamUpdate(now time.Duration, f *rflow, msg []byte) {
	m, err := wire.ParseParamUpdate(msg)
	if err != nil {
		r.st.MessagesMalformed++
		return
	}
	r.st.ParamUpdates++
	if f.helloAcks == 1 && now > f.helloAckAt { // (both at one instant: a driver's artifact, no round trip)
		// The CSF proposes its first configuration as soon as HELLO_ACK arrives: HELLO_ACK to
		// that PARAM_UPDATE is a round trip (E49), the CRF's first, long before any request.
		f.rtt.Sample(now - f.helloAckAt)
		f.st.RTTSamples++
	}
	f.helloAcks = 2 // one sample per session
	cfg := flow.Config{ID: m.ConfigID, Scheme: m.Scheme, K: int(m.K), M: int(m.M), T: int(m.T)}
	if f.started {
		r.boundOlder(f, cfg.ID, m.EffectivePSN)
	}
	r.releaseConfigs(f)
	held, redefined := f.heldConfig(cfg)
	if redefined {
		// A Config ID names one configuration; redefining it is a protocol error.
		r.st.ParamRejected++
		_ = r.Close(now, f.id, wire.ReasonProtocolError)
		return
	}
	status := r.configStatus(f, cfg)
	// One Config ID, one answer: a PARAM_UPDATE sent again after a refusal (its copy crossed
	// the PARAM_ACK) is refused again, even if room has come meanwhile. Accepting it would leave
	// the CRF holding a configuration the CSF has given up, and taking it for one applied (E44)
	// would release the one the CSF goes on using (E51).
	if st, ok := f.refusedAs(cfg.ID); ok && status == wire.StatusAccepted && held == nil {
		status = st
	}
	switch {
	case status == wire.StatusAccepted && held == nil:
		status = r.holdConfig(f, cfg, m.EffectivePSN)
	case status == wire.StatusAccepted && m.EffectivePSN.After(held.eff):
		held.eff = m.EffectivePSN // a retransmission: acknowledged again, with its latest Effective PSN
	}
	if status == wire.StatusAccepted {
		f.allocate(r.prefix)
		r.st.ParamAccepted++
	} else {
		f.refuse(cfg.ID, status)
		r.st.ParamRejected++
	}
	r.send(f.from, &wire.ParamAck{FlowID: f.id, ConfigID: cfg.ID, Status: status})
}

// boundOlder takes a PARAM_UPDATE for configuration id with Effective PSN eff as evidence: the
// CSF proposes a configuration only once the one before is applied (or refused), so every
// configuration older than that one has its blocks before eff.
func (r *Receiver) boundOlder(f *rflow, id uint8, eff psn.PSN) {
	var prev *cfgSlot
	for i := range f.cfgs {
		if c := &f.cfgs[i]; c.valid && !c.released && older(c.cfg.ID, id) && (prev == nil || older(prev.cfg.ID, c.cfg.ID)) {
			prev = c
		}
	}
	if prev != nil {
		r.bound(f, prev.cfg.ID, eff)
	}
}

// heldConfig is the slot that holds a configuration with cfg's Config ID (a PARAM_UPDATE sent
// again), or nil; redefined says it holds another configuration under that ID.
func (f *rflow) heldConfig(cfg flow.Config) (held *cfgSlot, redefined bool) {
	for i := range f.cfgs {
		c := &f.cfgs[i]
		if c.valid && !c.released && c.cfg.ID == cfg.ID {
			if c.cfg != cfg {
				return nil, true
			}
			held = c
		}
	}
	return held, false
}

// configStatus is the answer to a proposed configuration by what it asks for: its scheme, the
// flow's effective limits and the CRF's memory.
func (r *Receiver) configStatus(f *rflow, cfg flow.Config) wire.Status {
	switch {
	case !f.eff.Schemes.Has(cfg.Scheme) || (cfg.Scheme != wire.SchemeCauchy && cfg.Scheme != wire.SchemeXOR):
		return wire.StatusUnsupportedScheme
	case cfg.Check(f.eff) != nil:
		return wire.StatusLimitsExceeded
	case f.eff.MaxOpenBlocks*cfg.K*cfg.T > r.o.memory:
		return wire.StatusResourcesExhausted
	}
	return wire.StatusAccepted
}

// holdConfig takes an accepted new configuration into a free slot, from Effective PSN eff;
// without one it is refused.
func (r *Receiver) holdConfig(f *rflow, cfg flow.Config, eff psn.PSN) wire.Status {
	for range 2 {
		for i := range f.cfgs {
			if c := &f.cfgs[i]; !c.valid || c.released {
				*c = cfgSlot{valid: true, cfg: cfg, eff: eff, first: f.configs == 0}
				f.configs++
				return wire.StatusAccepted
			}
		}
		if !r.retireBefore(f, cfg.ID) {
			break
		}
	}
	r.st.ConfigsFull++
	return wire.StatusResourcesExhausted // every slot holds a configuration still repairable
}

// retireBefore releases, when every slot is held and configuration id is proposed, the
// configurations older than the newest one held before id: the CSF proposes only once it holds
// no block of any of them (E80), so none of them will have a REPAIR sent again (E81). It
// reports whether it released any.
func (r *Receiver) retireBefore(f *rflow, id uint8) bool {
	var prev *cfgSlot
	for i := range f.cfgs {
		if c := &f.cfgs[i]; c.valid && !c.released && older(c.cfg.ID, id) && (prev == nil || older(prev.cfg.ID, c.cfg.ID)) {
			prev = c
		}
	}
	if prev == nil {
		return false
	}
	freed := false
	for i := range f.cfgs {
		c := &f.cfgs[i]
		if !c.valid || c.released || !older(c.cfg.ID, prev.cfg.ID) {
			continue
		}
		for j := range f.blocks {
			if b := &f.blocks[j]; b.used && !b.ended && b.cfg.ID == c.cfg.ID {
				r.abandon(f, b, true)
			}
		}
		c.released, c.retired, freed = true, true, true
		r.st.ConfigsReleased++
		r.st.ConfigsRetired++
	}
	return freed
}

// evidence learns from a block of configuration id starting at start that every older
// configuration's blocks start before it (the CSF uses configurations in order, and a block's
// coded retransmissions carry its own Config ID, contract 3).
func (r *Receiver) evidence(f *rflow, id uint8, start psn.PSN) {
	if r.bound(f, id, start) {
		r.releaseConfigs(f)
	}
}

// bound records that every configuration older than id has its blocks before PSN q; it
// reports whether that told anything new.
func (r *Receiver) bound(f *rflow, id uint8, q psn.PSN) bool {
	changed := false
	for i := range f.cfgs {
		if c := &f.cfgs[i]; c.valid && !c.released && older(c.cfg.ID, id) && (!c.haveUntil || q.Before(c.until)) {
			c.until, c.haveUntil = q, true
			changed = true
		}
	}
	return changed
}

// releaseConfigs releases every configuration none of whose blocks can be repaired any more
// (E44): all its blocks start before a PSN that is behind the window, so a REPAIR for one would
// be too late anyway. Its blocks still open, evicted by the window already in all but name,
// fall back to the RDMA transport.
func (r *Receiver) releaseConfigs(f *rflow) {
	for i := range f.cfgs {
		c := &f.cfgs[i]
		if !c.valid || c.released || !c.haveUntil || !f.gone(c.until.Add(-1)) {
			continue
		}
		for j := range f.blocks {
			if b := &f.blocks[j]; b.used && !b.ended && b.cfg.ID == c.cfg.ID {
				r.abandon(f, b, true)
			}
		}
		c.released = true
		r.st.ConfigsReleased++
	}
}

// older compares Config IDs in 8-bit serial arithmetic.
func older(a, b uint8) bool { d := b - a; return d != 0 && d < 128 }

// tickFlow runs one flow's timers.
func (r *Receiver) tickFlow(now time.Duration, f *rflow) {
	if now >= f.lastSource+f.idle(r.o.handshake) {
		_ = r.Close(now, f.id, wire.ReasonIdle)
		return
	}
	if now >= f.reportAt {
		r.report(now, f)
	}
	if f.holding && now >= f.holdDue {
		r.flushHold(f)
	}
	if t, ok := f.nextMiss(); ok && now >= t {
		r.requestRanges(now, f)
	}
	if len(f.aside) > 0 {
		r.releaseAside(now, f)
	}
	// Blocks due, earliest first (the heap's order).
	for {
		e, ok := f.timers.Peek()
		if !ok || e.At > now {
			break
		}
		f.timers.Pop()
		if !f.blockCurrent(e) {
			f.dropBlockTimer(e)
			continue
		}
		b := &f.blocks[e.Index]
		b.queued = false
		r.blockTimeout(now, f, b)
		f.schedule(b)
	}
}

// report sends LOSS_REPORT for the interval (at least once per SRTT while the flow is active)
// and folds it into the CRF's own loss estimate, which sets delta in requests.
func (r *Receiver) report(now time.Duration, f *rflow) {
	f.reportAt = now + f.rtt.SRTT()
	if r.hook(Hooks.RareLossReports) {
		f.reportAt = now + max(faultReportEvery*f.rtt.SRTT(), faultReportFloor) // bent
	}
	r.releaseConfigs(f) // once per SRTT: the window may have moved past an old configuration
	iv := f.iv
	if iv.Expected == 0 && iv.Received == 0 && iv.RepairsReceived == 0 {
		f.ivStart = now
		return
	}
	iv.FlowID = f.id
	if r.hook(Hooks.HideLosses) && iv.Expected > iv.Received {
		iv.Expected = iv.Received // bent: the interval's losses left out
	}
	iv.IntervalUS = uint32(min((now-f.ivStart)/time.Microsecond, 1<<32-1))
	if r.sendReport(f.from, &iv) {
		f.st.LossReports++
	}
	f.est.Update(policy.Interval{Expected: iv.Expected, Received: iv.Received, CEMarked: iv.CEMarked})
	f.iv = wire.LossReport{}
	f.ivStart = now
}

// allocate gives the flow its window and block table when its first configuration is
// acknowledged, not at HELLO: a HELLO costs its sender nothing, a PARAM_UPDATE needs the Flow ID
// from HELLO_ACK.
// prefix is the octets of a source symbol the codec reads (0: all, E23).
func (f *rflow) allocate(prefix int) {
	if f.win != nil {
		return
	}
	// C7 b: Max Open Blocks x Max k, rounded up to a power of two; at least 4 x Max k, so that
	// half the window (how far a gap or a block described ahead may reach, E40) holds two
	// blocks.
	w := 1
	for w < max(f.eff.MaxOpenBlocks, 4)*f.eff.MaxK {
		w *= 2
	}
	f.win, f.mask = make([]slot, w), uint32(w-1)
	if prefix > 0 {
		f.kp = prefix - 2
		f.pre = make([]byte, w*f.kp)
	} else {
		f.bufs = make([][]byte, w)
	}
	f.blocks, f.maxBlocks = nil, 2*f.eff.MaxOpenBlocks // allocated as blocks are first needed
}
