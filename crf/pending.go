package crf

import (
	"net/netip"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// A HELLO costs its sender nothing and proves nothing: its source address may be spoofed and
// its descriptor guessed. So a HELLO the CRF can serve makes only a pending session: a small
// record that answers the HELLO (and its retransmissions, C3) and waits for the session's
// first message carrying its Flow ID from the address the HELLO came from (a PARAM_UPDATE, a
// REPAIR). Only that proves the sender got the HELLO_ACK; only then does the session become a
// flow, with its counters, timers and window, and only then may it replace the flow of its
// descriptor, and only one bound to that same address (a restarted CSF). Pending sessions
// are bounded in all, per source address, and in time, oldest evicted first (E53, E54).

// pending is a session begun by a HELLO and not yet proven.
type pending struct {
	id    uint32
	desc  flow.Descriptor
	key   flow.Key
	from  netip.AddrPort
	src   netip.Addr // from's address, unmapped: the per-source budget's key
	nonce uint64
	eff   flow.Limits
	mtu   int
	set   Settings
	ack   wire.HelloAck
	at    time.Duration // when the HELLO came: the session expires a handshake time later

	helloAcks  int // HELLO_ACKs sent (1: the first PARAM_UPDATE samples the RTT, E49)
	helloAckAt time.Duration
	preHigh    psn.PSN // the newest PSN that went by meanwhile (E52)
	havePre    bool
	active     bool // a source went by meanwhile

	links [numLists]plink
}

// The lists every pending session is on, oldest first.
const (
	listAll    = iota // every pending session: expiry, and the table's budget
	listSource        // the sessions of one source address: its budget
	listKey           // the sessions of one descriptor: Lookup, and what the winner supersedes
	numLists
)

type plink struct{ prev, next *pending }

// plist is an intrusive list of pending sessions in the order they came.
type plist struct {
	head, tail *pending
	n          int
}

func (l *plist) push(p *pending, k int) {
	p.links[k] = plink{prev: l.tail}
	if l.tail != nil {
		l.tail.links[k].next = p
	} else {
		l.head = p
	}
	l.tail = p
	l.n++
}

func (l *plist) remove(p *pending, k int) {
	lk := &p.links[k]
	if lk.prev != nil {
		lk.prev.links[k].next = lk.next
	} else {
		l.head = lk.next
	}
	if lk.next != nil {
		lk.next.links[k].prev = lk.prev
	} else {
		l.tail = lk.prev
	}
	*lk = plink{}
	l.n--
}

// helloKey names a HELLO for C3: a retransmission has the same nonce, descriptor and address.
type helloKey struct {
	key   flow.Key
	from  netip.AddrPort
	nonce uint64
}

// pendingTables are the Receiver's pending sessions.
type pendingTables struct {
	byID    map[uint32]*pending
	byHello map[helloKey]*pending
	all     plist
	bySrc   map[netip.Addr]*plist
	byKey   map[flow.Key]*plist
	flooded bool // the budget has refused or evicted since the table was last empty (logged once)
}

func newPendingTables() pendingTables {
	return pendingTables{byID: map[uint32]*pending{}, byHello: map[helloKey]*pending{},
		bySrc: map[netip.Addr]*plist{}, byKey: map[flow.Key]*plist{}}
}

// add enters a new pending session.
func (t *pendingTables) add(p *pending) {
	t.byID[p.id] = p
	t.byHello[helloKey{p.key, p.from, p.nonce}] = p
	t.all.push(p, listAll)
	ls := t.bySrc[p.src]
	if ls == nil {
		ls = &plist{}
		t.bySrc[p.src] = ls
	}
	ls.push(p, listSource)
	lk := t.byKey[p.key]
	if lk == nil {
		lk = &plist{}
		t.byKey[p.key] = lk
	}
	lk.push(p, listKey)
}

// drop forgets a pending session; every map entry it made goes with it.
func (t *pendingTables) drop(p *pending) {
	delete(t.byID, p.id)
	delete(t.byHello, helloKey{p.key, p.from, p.nonce})
	t.all.remove(p, listAll)
	if ls := t.bySrc[p.src]; ls != nil {
		if ls.remove(p, listSource); ls.n == 0 {
			delete(t.bySrc, p.src)
		}
	}
	if lk := t.byKey[p.key]; lk != nil {
		if lk.remove(p, listKey); lk.n == 0 {
			delete(t.byKey, p.key)
		}
	}
	if t.all.n == 0 {
		t.flooded = false
	}
}

// grace is how long a pending session is safe from eviction: its proof needs a round trip,
// which the initial RTT stands for (capped by the handshake time).
func (r *Receiver) grace() time.Duration { return min(r.o.initialRTT, r.o.handshake) }

// admit makes room for a new pending session from src, evicting the oldest of the source's
// own, or the oldest of all, when their budget is full; false when the one that would have to
// go is younger than the grace: then the HELLO is refused (E54).
func (r *Receiver) admit(now time.Duration, src netip.Addr) bool {
	if ls := r.pend.bySrc[src]; ls != nil && ls.n >= r.o.perSource {
		if now-ls.head.at < r.grace() {
			return false
		}
		r.evict(now, ls.head)
	}
	if r.pend.all.n >= r.o.pending {
		if now-r.pend.all.head.at < r.grace() {
			return false
		}
		r.evict(now, r.pend.all.head)
	}
	return true
}

func (r *Receiver) evict(now time.Duration, p *pending) {
	r.st.HandshakesEvicted++
	r.pressure(now, "evicting the oldest pending session for a new HELLO")
	r.dropPending(p)
}

// pressure logs, once until the pending table has emptied again, that HELLOs arrive faster
// than sessions prove themselves: a flood, or a peer starting many flows at once.
func (r *Receiver) pressure(now time.Duration, what string) {
	if r.pend.flooded {
		return
	}
	r.pend.flooded = true
	if r.o.log != nil {
		r.o.log.Warn("crem: HELLOs faster than their sessions prove themselves; "+what,
			"pending", r.pend.all.n, "budget", r.o.pending, "per_source", r.o.perSource, "at", now)
	}
}

// expire drops the pending sessions whose handshake time has passed.
func (r *Receiver) expire(now time.Duration) {
	for p := r.pend.all.head; p != nil && now >= p.at+r.o.handshake; p = r.pend.all.head {
		r.st.HandshakesExpired++
		r.dropPending(p)
	}
}

// pendingFor returns the pending session a message from from with Flow ID id proves, if any.
func (r *Receiver) pendingFor(id uint32) *pending { return r.pend.byID[id] }

// promote makes pending session p a flow: its first message has come from its address. The
// flow of its descriptor, if any, is replaced when bound to that same address (a restart of
// its CSF) and kept otherwise (p is dropped). The other pending sessions of the descriptor are
// superseded. nil (counted) when p cannot become a flow.
func (r *Receiver) promote(now time.Duration, p *pending) *rflow {
	old := r.established(p.key)
	switch {
	case old != nil && old.from != p.from:
		// It began before that flow was established from elsewhere: the first proof wins.
		r.st.HandshakesRefused++
		r.st.TakeoverRefused++
		r.logTakeover(old, p.from)
		r.dropPending(p)
		return nil
	case old == nil && len(r.flows) >= r.o.maxFlows:
		// Proven, so CLOSE goes where it cannot be reflected: resources exhausted (C2).
		r.st.HandshakesRefused++
		if r.send(p.from, &wire.Close{FlowID: p.id, Reason: wire.ReasonResourcesExhausted}) {
			r.st.CloseSent++
			r.st.CloseSentByReason[wire.ReasonResourcesExhausted]++
		}
		r.dropPending(p)
		return nil
	}
	pre, havePre, active := p.preHigh, p.havePre, p.active
	if lk := r.pend.byKey[p.key]; lk != nil {
		for q := lk.head; q != nil; {
			next := q.links[listKey].next
			if q.havePre && (!havePre || q.preHigh.After(pre)) {
				pre, havePre = q.preHigh, true // Lookup gave the sources to the oldest (E52)
			}
			active = active || q.active
			if q != p {
				r.st.HandshakesSuperseded++
				r.dropPending(q)
			}
			q = next
		}
	}
	r.pend.drop(p) // promoted: the Flow ID goes on naming the flow
	if old != nil {
		// The CSF at the flow's bound address started a new session and proved it: the old
		// one is gone at its end. What the old flow holds for in-order delivery goes out first.
		if old.set.Ordered && old.holding {
			r.flushHold(old)
		}
		r.release(old)
		r.st.FlowsRestarted++
		if r.o.log != nil {
			r.o.log.Info("crem: flow restarted by a new session from its bound address",
				"old_flow", old.id, "flow", p.id, "from", p.from, "qp", p.desc.DestQP)
		}
	}
	f := &rflow{id: p.id, desc: p.desc, key: p.key, from: p.from, nonce: p.nonce, eff: p.eff, mtu: p.mtu,
		set: p.set, ack: p.ack, rtt: flow.NewRTT(r.o.initialRTT), est: policy.NewEstimator(0.05)}
	f.nextReq = r.o.firstReqID
	for f.nextReq == 0 {
		f.nextReq = uint16(r.o.rand())
	}
	f.ivStart, f.lastSource = now, now
	f.reportAt = now + f.rtt.SRTT()
	f.helloAcks, f.helloAckAt = p.helloAcks, p.helloAckAt
	f.preHigh, f.havePre, f.active = pre, havePre, active
	r.flows[f.id] = f
	r.order = append(r.order, f)
	r.byKey[f.key] = f.id
	r.st.FlowsOpened++
	return f
}

// established returns the flow serving key, if any.
func (r *Receiver) established(k flow.Key) *rflow {
	if id, ok := r.byKey[k]; ok {
		return r.flows[id]
	}
	return nil
}

// logTakeover logs, once per flow, a HELLO (or its session) that would have taken the flow
// from its bound address.
func (r *Receiver) logTakeover(f *rflow, from netip.AddrPort) {
	if f.takeoverLogged {
		return
	}
	f.takeoverLogged = true
	if r.o.log != nil {
		r.o.log.Warn("crem: HELLO for a protected flow from another address refused; the flow stays bound until it closes or idles out",
			"flow", f.id, "bound", f.from, "from", from, "qp", f.desc.DestQP)
	}
}

// sessionFor returns the flow a message with Flow ID id from from belongs to: an established
// flow, or the one a pending session becomes now that this message proves it. nil, counted,
// when there is none or the message comes from elsewhere (C14).
func (r *Receiver) sessionFor(now time.Duration, id uint32, from netip.AddrPort) *rflow {
	if f := r.flow(id); f != nil {
		if from != f.from {
			r.st.MessagesWrongSource++
			return nil
		}
		return f
	}
	p := r.pendingFor(id)
	switch {
	case p == nil:
		r.st.UnknownFlow++
		return nil
	case from != p.from:
		r.st.MessagesWrongSource++
		return nil
	}
	return r.promote(now, p)
}
