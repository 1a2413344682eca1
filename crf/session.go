package crf

import (
	"net/netip"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/wire"
)

// onHello answers HELLO (draft, Session; C3).
func (r *Receiver) onHello(now time.Duration, from netip.AddrPort, msg []byte) {
	m, err := wire.ParseHello(msg)
	if err != nil {
		r.st.MessagesMalformed++
		return
	}
	r.st.HelloReceived++
	desc := flow.Descriptor{Kind: m.FlowKind, Src: m.Source, Dst: m.Destination, DestQP: m.DestQP()}
	key := desc.Key()
	if id, ok := r.byKey[key]; ok {
		f := r.flows[id]
		if f.nonce == m.SenderNonce && f.from == from {
			// C3: a retransmitted HELLO gets the same HELLO_ACK, same Flow ID.
			r.st.HelloDuplicate++
			if r.send(from, &f.ack) {
				r.st.HelloAckSent++
			}
			return
		}
		// A new session for the flow: the old one is gone.
		r.release(f)
	}
	theirs := flow.LimitsOf(m.Capabilities, 0)
	eff := r.o.limits.Min(theirs)
	set, ok := Settings{}, true
	if r.o.settings != nil {
		set, ok = r.o.settings(desc)
	}
	if !ok || desc.Check() != nil || !eff.Schemes.Has(wire.SchemeCauchy) || len(r.flows) >= r.o.maxFlows {
		r.st.HelloRefused++ // C3: silently, no state, nothing to amplify
		return
	}
	id := r.newFlowID()
	desc.SrcPort = set.SrcPort
	f := &rflow{id: id, desc: desc, key: key, from: from, nonce: m.SenderNonce, eff: eff, mtu: int(m.RDMAMTU),
		set: set, rtt: flow.NewRTT(r.o.initialRTT), est: policy.NewEstimator(0.05)}
	f.ack = wire.HelloAck{FlowID: id, Capabilities: r.o.limits.Capabilities(int(m.RDMAMTU)), AF: m.AF(),
		SenderNonce: m.SenderNonce, MaxOpenBlocks: uint16(r.o.limits.MaxOpenBlocks)}
	f.nextReq = r.o.firstReqID
	for f.nextReq == 0 {
		f.nextReq = uint16(r.o.rand())
	}
	f.ivStart, f.lastSource = now, now
	f.reportAt = now + f.rtt.SRTT()
	r.flows[id] = f
	r.order = append(r.order, f)
	r.byKey[key] = id
	r.st.FlowsOpened++
	if r.send(from, &f.ack) {
		r.st.HelloAckSent++
	}
}

// newFlowID draws Flow IDs at random until one is unused (draft: MUST choose at random among
// unused values); 0 is never assigned, it marks HELLO and PATH_REPORT.
func (r *Receiver) newFlowID() uint32 {
	for {
		id := uint32(r.o.rand())
		if _, used := r.flows[id]; id != 0 && !used {
			return id
		}
	}
}

// onParamUpdate acknowledges a configuration, reserving its resources, or refuses it with a
// status (draft, Configuration; PARAM_ACK).
func (r *Receiver) onParamUpdate(now time.Duration, f *rflow, msg []byte) {
	m, err := wire.ParseParamUpdate(msg)
	if err != nil {
		r.st.MessagesMalformed++
		return
	}
	r.st.ParamUpdates++
	cfg := flow.Config{ID: m.ConfigID, Scheme: m.Scheme, K: int(m.K), M: int(m.M), T: int(m.T)}
	status := wire.StatusAccepted
	var free *cfgSlot
	for i := range f.cfgs {
		c := &f.cfgs[i]
		if c.valid && !c.released && c.cfg.ID == cfg.ID {
			if c.cfg != cfg {
				// A Config ID names one configuration; redefining it is a protocol error.
				r.st.ParamRejected++
				_ = r.Close(now, f.id, wire.ReasonProtocolError)
				return
			}
			free = c // a retransmission: acknowledge again
		}
	}
	switch {
	case !f.eff.Schemes.Has(cfg.Scheme) || (cfg.Scheme != wire.SchemeCauchy && cfg.Scheme != wire.SchemeXOR):
		status = wire.StatusUnsupportedScheme
	case cfg.Check(f.eff) != nil:
		status = wire.StatusLimitsExceeded
	case f.eff.MaxOpenBlocks*cfg.K*cfg.T > r.o.memory:
		status = wire.StatusResourcesExhausted
	}
	if status == wire.StatusAccepted && free == nil {
		for i := range f.cfgs {
			if c := &f.cfgs[i]; !c.valid || c.released {
				free = c
				break
			}
		}
		if free == nil {
			status = wire.StatusResourcesExhausted
		} else {
			*free = cfgSlot{valid: true, cfg: cfg}
		}
	}
	if status == wire.StatusAccepted {
		f.allocate(r.prefix)
		r.st.ParamAccepted++
	} else {
		r.st.ParamRejected++
	}
	r.send(f.from, &wire.ParamAck{FlowID: f.id, ConfigID: cfg.ID, Status: status})
}

// releaseConfigs releases every configuration older than one the CSF has started using, once
// none of its blocks is open (draft: a newer one acknowledged and every block of the older one
// closed or fallen back; E4: "newer" is proven by a REPAIR of it).
func (r *Receiver) releaseConfigs(f *rflow, newest uint8) {
	for i := range f.cfgs {
		c := &f.cfgs[i]
		if !c.valid || c.released || c.cfg.ID == newest || !older(c.cfg.ID, newest) {
			continue
		}
		live := false
		for j := range f.blocks {
			if b := &f.blocks[j]; b.used && !b.ended && b.cfg.ID == c.cfg.ID {
				live = true
			}
		}
		if !live {
			c.released = true
			r.st.ConfigsReleased++
		}
	}
}

// older compares Config IDs in 8-bit serial arithmetic.
func older(a, b uint8) bool { d := b - a; return d != 0 && d < 128 }

// tickFlow runs one flow's timers.
func (r *Receiver) tickFlow(now time.Duration, f *rflow) {
	if now >= f.lastSource+f.idle() {
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
	iv := f.iv
	if iv.Expected == 0 && iv.Received == 0 && iv.RepairsReceived == 0 {
		f.ivStart = now
		return
	}
	iv.FlowID = f.id
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
	// C7 b: Max Open Blocks x Max k, rounded up to a power of two.
	w := 1
	for w < f.eff.MaxOpenBlocks*f.eff.MaxK {
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
