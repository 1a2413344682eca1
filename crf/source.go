package crf

import (
	"bytes"
	"encoding/binary"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// Verdict tells the driver what to do with a packet it passed to Observe.
type Verdict uint8

const (
	// Forward: hand the packet to the RDMA receiver now (the Receiver kept a copy if it needs one).
	Forward Verdict = iota
	// Held: the Receiver holds the packet for in-order delivery (C7 a); it comes out of
	// DrainDeliveries later, or its PSN is abandoned there.
	Held
)

// maxReadPSNs bounds the PSNs one READ request consumes: 2^31 octets (the largest DMA Length
// of a READ) at the smallest RDMA MTU, 256.
const maxReadPSNs = 1 << 23

// firstPosition is the virtual position of a flow's first PSN (any value would do).
const firstPosition = 1 << 31

// Observe takes a RoCEv2 packet (the whole UDP payload) of flow id arriving from the network;
// ce says whether it carried a CE mark. The driver finds id with Lookup. Packets of unknown
// flows, and packets that take no new PSN (ACKs, CNPs), are simply forwarded.
func (r *Receiver) Observe(now time.Duration, id uint32, pkt []byte, ce bool) Verdict {
	if len(pkt) < roce.BTHLen+roce.ICRCLen || !r.ops[roce.Opcode(pkt[0])] {
		return Forward // no source
	}
	f := r.flow(id)
	p := psn.PSN(uint32(pkt[9])<<16 | uint32(pkt[10])<<8 | uint32(pkt[11]))
	if f == nil {
		if q := r.pend.byID[id]; q != nil {
			q.passed(p, consumes(pkt, q.mtu)) // a pending session notes what goes by (E52)
		}
		return Forward
	}
	f.active = true
	if f.win == nil {
		f.passed(p, f.consumes(pkt)) // not yet configured: nothing to protect it with
		return Forward
	}
	return r.observe(now, f, p, f.consumes(pkt), pkt, ce)
}

// passed notes a source that went by before the flow's first configuration (E52): its PSNs
// are not missing when the window starts.
func (f *rflow) passed(p psn.PSN, n int) {
	f.preHigh, f.havePre = notePassed(f.preHigh, f.havePre, p, n)
}

// passed is rflow.passed for a pending session; what it notes goes to the flow it becomes.
func (q *pending) passed(p psn.PSN, n int) {
	q.preHigh, q.havePre = notePassed(q.preHigh, q.havePre, p, n)
	q.active = true
}

func notePassed(high psn.PSN, have bool, p psn.PSN, n int) (psn.PSN, bool) {
	if last := p.Add(max(n, 1) - 1); !have || last.After(high) {
		return last, true
	}
	return high, have
}

// consumes returns the PSNs a source packet takes: one, or a READ request's max(1,
// ceil(DMA Length / RDMA MTU)) (C13).
func (f *rflow) consumes(pkt []byte) int { return consumes(pkt, f.mtu) }

func consumes(pkt []byte, mtu int) int {
	if roce.Opcode(pkt[0]) != roce.OpReadRequest || len(pkt) < roce.BTHLen+roce.RETHLen+roce.ICRCLen {
		return 1
	}
	dma := binary.BigEndian.Uint32(pkt[roce.BTHLen+12:])
	return int(min(roce.OpReadRequest.PSNs(dma, uint32(mtu)), maxReadPSNs))
}

// ObserveIP is Observe for transparent (TUN) mode: ip and udp are the packet's IP header (IPv4
// with options, or IPv6 with extension headers) and UDP header. They become the flow's header
// template for restored packets (C12), and an IPv4 Identification is kept per PSN so that a
// restored packet's can be interpolated from its neighbours.
func (r *Receiver) ObserveIP(now time.Duration, id uint32, ip, udp, pkt []byte, ce bool) Verdict {
	f := r.flow(id)
	if f == nil || f.win == nil || len(pkt) < roce.BTHLen+roce.ICRCLen {
		return r.Observe(now, id, pkt, ce) // nothing to protect it with yet: noted only (E52)
	}
	if err := r.SetTemplate(id, ip, udp); err != nil {
		f.st.TemplateErrors++
	}
	v := r.Observe(now, id, pkt, ce)
	if len(ip) >= 20 && ip[0]>>4 == 4 {
		p := psn.PSN(uint32(pkt[9])<<16 | uint32(pkt[10])<<8 | uint32(pkt[11]))
		if s := f.at(p); s != nil && s.rx {
			s.ipid, s.hasID = binary.BigEndian.Uint16(ip[4:]), true
			if prev := f.at(p.Add(-1)); prev != nil && prev.hasID {
				f.idStep = s.ipid - prev.ipid
			}
		}
	}
	return v
}

// ObserveSource takes a source packet of flow id whose PSN p the driver knows and which
// consumes n PSNs (C13); payload is its whole UDP payload. Observe calls it after parsing.
func (r *Receiver) ObserveSource(now time.Duration, id uint32, p psn.PSN, n int, payload []byte, ce bool) Verdict {
	f := r.flow(id)
	if f == nil {
		if q := r.pend.byID[id]; q != nil {
			q.passed(p, n)
		}
		return Forward
	}
	f.active = true
	if f.win == nil {
		f.passed(p, n)
		return Forward
	}
	return r.observe(now, f, p, min(max(n, 1), maxReadPSNs), payload, ce)
}

func (r *Receiver) observe(now time.Duration, f *rflow, p psn.PSN, n int, payload []byte, ce bool) Verdict {
	// After a quiet spell of half an SRTT, a READ response with an AETH may be one sent again
	// for a re-issued READ whose originals, the newest PSNs of the flow, were all lost: no gap
	// showed them missing, so arriving "ahead" says nothing of its being the original (E46).
	quiet := now-f.lastSource >= f.rtt.SRTT()/2
	f.lastSource = now
	var s *slot
	resent := false
	if f.started && p == f.high.Add(1) && f.top == f.high {
		resent = quiet && resentDiffers(payload)
		// In order, nothing given a position ahead of its packet: the common case.
		v := f.vhigh + 1
		f.high, f.top, f.vhigh, f.vtop = p, p, v, v
		if len(f.holes) > f.h0 {
			f.trim(0)
		}
		s = &f.win[v&f.mask]
		if !s.is(p, v) {
			r.reset(f, s, p, v)
		}
		f.st.Sources++
		if ce {
			f.st.SourcesCE++
		}
		f.expect(s)
		f.receive(ce)
	} else {
		var v Verdict
		var done bool
		if s, resent, v, done = r.outOfOrder(now, f, p, n, payload, ce, quiet); done {
			return v
		}
	}
	if !resent && f.nextA > 0 && resentDiffers(payload) && f.askedAgain(p, now) {
		resent = true // the requester asked for it again: this may be the copy sent again (E48)
		f.st.ResentAskedAgain++
	}
	s.st, s.ce, s.rx, s.resent = slotHeld, ce, true, resent
	f.store(s, payload)
	if n > 1 {
		r.consume(now, f, p, n)
	}
	// Delivery first: decoding may restore the packets after it and release them in order, and
	// this one must be in the hold's count by then (E50).
	v := r.deliverReceived(f, s, p, payload)
	if s.gen != 0 {
		if b := f.blockOf(s); b != nil {
			r.sourceIntoBlocks(now, f, b, p, payload)
		}
	}
	if len(f.aside) > 0 {
		r.releaseAside(now, f)
	}
	return v
}

// outOfOrder places a source that is not the next in order: the flow's first, one ahead of a
// gap, a late one, or one the window keeps nothing for. done: its verdict is out, and it is not
// kept; else s is its slot and resent says it may differ from the original.
func (r *Receiver) outOfOrder(now time.Duration, f *rflow, p psn.PSN, n int, payload []byte, ce, quiet bool) (s *slot, resent bool, out Verdict, done bool) {
	v, l, hi := f.locate(p)
	if l == locTracked {
		if t := &f.win[v&f.mask]; t.is(p, v) && (t.st == slotHeld || t.st == slotRestored) {
			if verdict, dup := r.again(f, t, payload); dup {
				return nil, false, verdict, true
			}
		}
	}
	f.st.Sources++
	if ce {
		f.st.SourcesCE++
	}
	switch {
	case !f.started && f.havePre && p.Before(f.preHigh):
		// The first source since the configuration is one sent again, behind what went by
		// before it: the window starts after that, and nothing before is missing (E52).
		r.begin(f, f.preHigh)
		if f.set.Ordered && !f.haveCursor {
			f.haveCursor, f.cursor = true, f.preHigh.Add(1)
		}
		if s = r.take(f, p); s == nil {
			f.st.Late++
			f.st.Forwarded++
			return nil, false, Forward, true
		}
		f.expect(s)
		f.receive(ce)
	case !f.started:
		r.begin(f, p)
		s = r.take(f, p)
		f.expect(s)
		f.receive(ce)
	case l == locAhead || l == locTracked && p.After(f.high):
		r.advance(now, f, p)
		s = r.take(f, p)
		f.expect(s)
		f.receive(ce)
		resent = quiet && resentDiffers(payload)
	case l == locTracked:
		s = r.take(f, p)
		f.st.Late++
		var keep bool
		if resent, keep = r.lateSource(now, f, s, payload, ce); !keep {
			f.st.Forwarded++
			return nil, false, Forward, true
		}
	case l == locHole && f.holes[hi].read:
		f.st.ReadReissued++ // C13: left to the RDMA transport
		f.st.Forwarded++
		return nil, false, Forward, true
	default:
		// Behind the window, or in a gap too long for it: nothing to keep it for. A READ
		// request reordered into a gap's untracked middle still consumes its PSNs (C13).
		f.st.Late++
		f.st.Forwarded++
		if l == locHole && n > 1 {
			r.consume(now, f, p, n)
		}
		return nil, false, Forward, true
	}
	return s, resent, 0, false
}

// lateSource takes a source behind the highest PSN into its slot s. keep false: a position
// no packet takes, nothing to keep; else resent says it may differ from the original.
func (r *Receiver) lateSource(now time.Duration, f *rflow, s *slot, payload []byte, ce bool) (resent, keep bool) {
	switch s.st {
	case slotMissing, slotEmpty:
		late := s.st == slotMissing && f.lateFill(s, now)
		f.unmiss(s)
		f.expect(s)
		if late {
			// Half an SRTT or more after its gap was seen: the RDMA transport's
			// retransmission (or an original as late): the loss stands (E42). A READ
			// response sent again after a re-issued READ may differ from the original
			// (its AETH, even its opcode): it is delivered, never decoded with (E46).
			f.st.LateFilled++
			return resentDiffers(payload), true
		}
		f.receive(ce) // reordered or delayed, or passed before the flow's first source
	case slotAbsent:
		if f.claimed(s) {
			// One definition of its block said no packet takes it, another says a source
			// does: it is kept, and it condemns the first (E66).
			f.expect(s)
			f.receive(ce)
			return false, true
		}
		// The Present Bitmap, an INFO or a READ said no packet takes this PSN.
		f.st.SourceAtAbsent++
		return false, false
	}
	// slotAbandoned: settled as lost; its late arrival does not cancel the loss.
	return false, true
}

// ReadAskedAgain tells the Receiver that the RDMA requester of flow id's READ responses asked
// for the responses of PSNs [p, p+n) again (a READ re-issued, or a READ request sent again), as
// the driver saw the request leave: the responses that answer it are sent anew and may differ
// from the originals (E46, E48). One with an AETH that comes in that range is delivered but never
// decoded with, wherever it falls (also ahead of every PSN seen, where no gap told it late).
func (r *Receiver) ReadAskedAgain(now time.Duration, id uint32, p psn.PSN, n int) {
	f := r.flow(id)
	if f == nil || n < 1 {
		return
	}
	f.again[f.nextA%maxAgain] = againRange{r: psn.Range{Start: p, Count: uint32(min(n, maxReadPSNs))}, at: now}
	f.nextA++
	f.st.ReadsAskedAgain++
}

// resentDiffers reports whether a packet sent again may differ from the original: a READ
// response with an AETH (FIRST, LAST, ONLY: the MSN it carries is the responder's current one,
// and a re-issue from the middle of a READ starts with FIRST where the original was MIDDLE). A
// MIDDLE response sent again is the original's copy, as every other source is (E10, E46).
func resentDiffers(pkt []byte) bool {
	switch roce.Opcode(pkt[0]) {
	case roce.OpReadResponseFirst, roce.OpReadResponseLast, roce.OpReadResponseOnly:
		return true
	}
	return false
}

// begin places the flow's first source p: the mapping starts there, or goes on from the blocks
// REPAIR messages described before it. Nothing before p is missing: the CRF does not know
// where the flow began (E8).
func (r *Receiver) begin(f *rflow, p psn.PSN) {
	f.started = true
	_, l, _ := f.locate(p)
	switch l {
	case locNone:
		f.anchor(p, firstPosition)
	case locTracked:
		if p.After(f.high) || len(f.holes) == f.h0 {
			f.setHigh(p)
		}
	case locAhead:
		if d := f.top.Forward(p); d > f.reach() {
			f.addHole(p.Add(-1), false)
		}
		f.assign(p)
		f.setHigh(p)
	default:
		// Behind every block described, by more than the window: start afresh.
		f.anchor(p, f.vtop+uint32(len(f.win))+1)
	}
}

// again handles a PSN whose slot already holds a packet: a duplicate, or the original arriving
// after its restoration. dup is false when the slot's state says it is neither.
func (r *Receiver) again(f *rflow, s *slot, payload []byte) (Verdict, bool) {
	switch {
	case s.st == slotRestored && !s.rx:
		// The original arrives after its restoration: a late source, delivered again (the
		// RDMA transport drops duplicates), not used for decoding, and not counted received:
		// the loss it caused stands (E42).
		s.rx = true
		f.st.Sources++
		f.st.Late++
		f.st.LateAfterRestore++
		if f.set.Ordered && !s.delivered {
			f.st.Superseded++ // the restored copy goes out in order instead
			return Held, true
		}
	case s.st == slotHeld || s.st == slotRestored:
		// C7 d: a duplicate is ignored for decoding; the RDMA transport may want it.
		f.st.Duplicates++
		if k := f.kept(s); s.st == slotHeld && (int(s.n) != len(payload) || !bytes.Equal(k, payload[:len(k)])) {
			f.st.DuplicateMismatch++
		}
		if f.set.Ordered && !s.delivered {
			return Held, true // the held copy goes out in order
		}
	default:
		return Forward, false
	}
	f.st.Forwarded++
	return Forward, true
}

// reset makes slot s the record of PSN p at position v, flushing what it held before (the
// window moved on).
func (r *Receiver) reset(f *rflow, s *slot, p psn.PSN, v uint32) {
	if s.st == slotMissing {
		f.missing--
		if !s.counted {
			f.st.Forgotten++ // never settled: neither expected nor lost (E42)
		}
	}
	if (s.st == slotHeld || s.st == slotRestored) && !s.delivered && f.set.Ordered {
		r.flushHold(f) // never drop a held packet: release in order first
	}
	if b := f.blockOf(s); b != nil && !b.ended {
		r.abandon(f, b, true) // the window moved past a live block (C7 b, g)
	}
	f.dropWhole(s)
	*s = slot{p: p, v: v, st: slotEmpty}
}

// advance moves high to p, a PSN after it: the PSNs passed without their packet become missing
// (once a source has been seen). Of a gap longer than two blocks (2 x Max k), only a block's
// worth at each end keeps positions: a lost READ request and the rest of its block lie at a gap's
// start, READ responses lost after the requester's own PSNs at its end; the middle is a hole
// (E40), so that long gaps do not fill the window. p gets a position.
func (r *Receiver) advance(now time.Duration, f *rflow, p psn.PSN) {
	g := f.high.Forward(p) - 1
	head, tail := g, uint32(0)
	track := min(f.reach(), uint32(2*f.eff.MaxK))
	if keep := max(f.high.Forward(f.top), track); g > keep {
		f.st.WindowJumps++
		tail = min(track/2, keep)
		head = keep - tail
	}
	for i := uint32(1); i <= head; i++ {
		if s := r.take(f, f.high.Add(int(i))); s != nil && s.st == slotEmpty && f.started {
			r.miss(now, f, s)
		}
	}
	if tail > 0 {
		f.addHole(p.Add(-1-int(tail)), false)
		for i := tail; i >= 1; i-- {
			if s := r.take(f, p.Add(-int(i))); s != nil && s.st == slotEmpty && f.started {
				r.miss(now, f, s)
			}
		}
	}
	if d := f.top.Forward(p); d != 0 && d < psnHalf {
		if d > 1 {
			f.addHole(p.Add(-1), false)
		}
		f.assign(p)
	}
	f.setHigh(p)
}

// miss marks slot s missing: its range request is due after the reorder allowance (E12). A
// position a block's Present Bitmap has confirmed is a source: it enters Expected now.
func (r *Receiver) miss(now time.Duration, f *rflow, s *slot) {
	f.missAt(s, now)
	s.due = now + f.allowance()
	f.scheduleMiss(s)
	if b := f.blockOf(s); b != nil && b.present.Has(int(b.start.Forward(s.p))) {
		f.expect(s)
	}
}

// consume makes the PSNs a READ request at p consumes, beyond p itself, absent (C13): those with
// positions in their slots, the rest as a hole, without a position each (E40); high moves to the
// last of them. p has its slot, received or restored.
func (r *Receiver) consume(now time.Duration, f *rflow, p psn.PSN, n int) {

	f.st.ReadAbsent += uint64(n - 1)
	last := p.Add(n - 1)
	if last.After(f.top) && p.After(f.high) {
		r.advance(now, f, p) // a restored READ ahead of the sources: high first reaches it
	}
	q := p.Add(1)
	for range 2 * len(f.win) {
		if !q.AtOrBefore(last) || q.After(f.top) {
			break
		}
		v, l, hi := f.locate(q)
		switch l {
		case locHole:
			q = f.holes[hi].end()
			continue
		case locTracked:
			s := &f.win[v&f.mask]
			if !s.is(q, v) {
				r.reset(f, s, q, v)
			}
			switch b := f.blockOf(s); {
			case s.st == slotHeld || s.st == slotRestored:
				f.st.SourceAtAbsent++
			case b != nil && b.present.Has(int(b.start.Forward(q))):
				// Its block says a source takes it: the block decides, not the READ.
			default:
				f.unmiss(s)
				s.st = slotAbsent
			}
		}
		q = q.Add(1)
	}
	switch {
	case last.After(f.top):
		f.addHole(last, true)
	case last.After(f.high):
		f.setHigh(last)
	}
}

// deliverReceived applies the delivery mode to a received source (C7 a).
func (r *Receiver) deliverReceived(f *rflow, s *slot, p psn.PSN, payload []byte) Verdict {
	if !f.set.Ordered {
		s.delivered = true
		f.st.Forwarded++
		return Forward
	}
	if !f.haveCursor {
		f.haveCursor, f.cursor = true, p
	}
	switch {
	case p == f.cursor:
		s.delivered = true
		f.st.Forwarded++
		f.cursor = f.next(p)
		r.drainCursor(f)
		return Forward
	case p.Before(f.cursor):
		s.delivered = true
		f.st.Forwarded++
		return Forward
	}
	holdP, holdB := f.holdLimits()
	over := f.heldPkts+1 > holdP || f.heldBytes+len(payload) > holdB
	f.keepWhole(s, payload) // where only a prefix is kept for the codec: the hold needs it all
	f.heldPkts++            // counted before any flush, which releases it with the others (E50)
	f.heldBytes += len(payload)
	f.st.HeldPackets++
	if over {
		f.st.HoldOverflows++
		r.flushHold(f)
		return Held // released in order through DrainDeliveries by the flush
	}
	if !f.holding {
		f.holding = true
		f.holdDue = f.lastSource + f.allowance()
	}
	return Held
}

// holdLimits are C15's bounds on the ordered-mode hold.
func (f *rflow) holdLimits() (int, int) {
	p, b := f.set.HoldPackets, f.set.HoldBytes
	if p <= 0 {
		p = f.eff.MaxOpenBlocks * f.eff.MaxK
	}
	if b <= 0 {
		b = 64 << 20
	}
	return min(p, len(f.win)-1), b
}

// drainCursor delivers, in PSN order, what waits at the cursor: held and restored packets, and
// steps over absent and abandoned PSNs and holes, stopping at the first gap.
func (r *Receiver) drainCursor(f *rflow) {
	for range 2 * len(f.win) {
		v, l, hi := f.locate(f.cursor)
		if l == locHole {
			f.cursor = f.holes[hi].end()
			continue
		}
		if l != locTracked {
			break
		}
		s := &f.win[v&f.mask]
		if !s.is(f.cursor, v) {
			break
		}
		switch s.st {
		case slotHeld, slotRestored:
			if !s.delivered {
				r.release1(f, s)
			}
		case slotAbsent, slotAbandoned:
		default:
			return
		}
		f.cursor = f.cursor.Add(1)
	}
	if f.heldPkts == 0 {
		f.holding = false
	}
}

// release1 hands a held or restored packet to the RDMA receiver through the delivery queue.
func (r *Receiver) release1(f *rflow, s *slot) {
	s.delivered = true
	f.heldPkts--
	f.heldBytes -= int(s.n)
	k := Received
	if s.st == slotRestored {
		k = Restored
	} else {
		f.st.Released++
	}
	if !r.dq.push(Delivery{Flow: f.id, PSN: s.p, Kind: k, CE: s.ce && k == Received, Packet: f.packet(s)}) {
		r.st.DeliveriesDropped++
	}
	f.dropWhole(s)
}

// flushHold ends the hold: everything held goes out in PSN order and the gaps before them are
// left to the RDMA transport (C7 a).
func (r *Receiver) flushHold(f *rflow) {
	f.holding = false
	for n := 0; f.heldPkts > 0 && n < 3*len(f.win) && f.cursor != f.top.Add(1); n++ { // up to top: restored packets may stand ahead of high
		v, l, hi := f.locate(f.cursor)
		switch l {
		case locHole:
			f.cursor = f.holes[hi].end()
			continue
		case locOld:
			// The window moved past the cursor: its oldest position is where delivery resumes.
			f.st.GapsSkipped++
			f.cursor = f.psnAt(f.vtop - uint32(len(f.win)) + 1)
			continue
		case locTracked:
			s := &f.win[v&f.mask]
			switch {
			case s.is(f.cursor, v) && (s.st == slotHeld || s.st == slotRestored):
				if !s.delivered {
					r.release1(f, s)
				}
			case !s.is(f.cursor, v) || s.st == slotMissing || s.st == slotEmpty:
				f.st.GapsSkipped++
			}
		default:
			n = 3 * len(f.win)
			continue
		}
		f.cursor = f.cursor.Add(1)
	}
	if f.heldPkts > 0 {
		// Cannot happen (the walk above reaches top in fewer steps); were it to, a held packet
		// would never be released and every retransmission of it held too.
		for i := range f.win {
			if s := &f.win[i]; (s.st == slotHeld || s.st == slotRestored) && !s.delivered {
				r.release1(f, s)
			}
		}
		f.heldPkts, f.heldBytes = 0, 0
	}
	// Every packet counted in the hold has gone out; the count stays exact, so that a packet
	// restored after this still counts and is still released (E50).
	r.drainCursor(f)
}
