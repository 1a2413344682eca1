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

// Observe takes a RoCEv2 packet (the whole UDP payload) of flow id arriving from the network;
// ce says whether it carried a CE mark. The driver finds id with Lookup. Packets of unknown
// flows, and packets that take no new PSN (ACKs, CNPs), are simply forwarded.
func (r *Receiver) Observe(now time.Duration, id uint32, pkt []byte, ce bool) Verdict {
	f := r.flow(id)
	if f == nil || f.win == nil || len(pkt) < roce.BTHLen+roce.ICRCLen {
		return Forward // unknown, or not yet configured: nothing to protect it with
	}
	op := roce.Opcode(pkt[0])
	if !r.ops[op] {
		return Forward
	}
	p := psn.PSN(uint32(pkt[9])<<16 | uint32(pkt[10])<<8 | uint32(pkt[11]))
	n := 1
	if op == roce.OpReadRequest && len(pkt) >= roce.BTHLen+roce.RETHLen+roce.ICRCLen {
		dma := binary.BigEndian.Uint32(pkt[roce.BTHLen+12:])
		n = int(min(op.PSNs(dma, uint32(f.mtu)), uint32(len(f.win))))
	}
	return r.observe(now, f, p, n, pkt, ce)
}

// ObserveIP is Observe for transparent (TUN) mode: ip and udp are the packet's IP header (IPv4
// with options, or IPv6 with extension headers) and UDP header. They become the flow's header
// template for restored packets (C12), and an IPv4 Identification is kept per PSN so that a
// restored packet's can be interpolated from its neighbours.
func (r *Receiver) ObserveIP(now time.Duration, id uint32, ip, udp, pkt []byte, ce bool) Verdict {
	f := r.flow(id)
	if f == nil || f.win == nil || len(pkt) < roce.BTHLen+roce.ICRCLen {
		return Forward
	}
	if err := r.SetTemplate(id, ip, udp); err != nil {
		f.st.TemplateErrors++
	}
	v := r.Observe(now, id, pkt, ce)
	if len(ip) >= 20 && ip[0]>>4 == 4 {
		p := psn.PSN(uint32(pkt[9])<<16 | uint32(pkt[10])<<8 | uint32(pkt[11]))
		if s := f.slotOf(p); s.p == p && s.rx {
			s.ipid, s.hasID = binary.BigEndian.Uint16(ip[4:]), true
			if prev := f.slotOf(p.Add(-1)); prev.p == p.Add(-1) && prev.hasID {
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
	if f == nil || f.win == nil {
		return Forward
	}
	return r.observe(now, f, p, max(n, 1), payload, ce)
}

func (r *Receiver) observe(now time.Duration, f *rflow, p psn.PSN, n int, payload []byte, ce bool) Verdict {
	f.lastSource = now
	s := f.slotOf(p)
	if s.p == p && (s.st == slotHeld || s.st == slotRestored) {
		if v, dup := r.again(f, s, payload); dup {
			return v
		}
	}
	f.st.Sources++
	f.iv.Received++
	if ce {
		f.st.SourcesCE++
		f.iv.CEMarked++
	}
	switch {
	case f.haveHigh && p == f.high.Add(1):
		// In order: the common case.
		f.high = p.Add(n - 1)
		f.st.Expected++
		f.iv.Expected++
		if s.p != p {
			r.reset(f, s, p)
		}
	case !f.haveHigh:
		f.haveHigh, f.high = true, p.Add(n-1)
		f.st.Expected++
		f.iv.Expected++
		r.reset(f, s, p)
	case p.After(f.high):
		r.advance(now, f, p)
		f.high = p.Add(n - 1)
		f.st.Expected++
		f.iv.Expected++
		if s.p != p {
			r.reset(f, s, p)
		}
	case s.p == p && s.st == slotMissing:
		f.st.Late++
		f.missing--
	default:
		// Behind the highest PSN and not known missing: a retransmission of something settled
		// (abandoned, or older than the window's record of it).
		f.st.Late++
		if s.p != p {
			r.reset(f, s, p)
		}
	}
	s.st, s.ce, s.rx = slotHeld, ce, true
	f.store(s, p, payload)
	for q := 1; q < n; q++ {
		a := f.slotOf(p.Add(q))
		if a.p != p.Add(q) {
			r.reset(f, a, p.Add(q))
		}
		if a.st == slotMissing {
			f.missing--
		}
		a.st = slotAbsent // C13: READ-consumed PSNs are absent in this direction
		f.st.ReadAbsent++
	}
	if s.gen != 0 {
		if b := f.blockOf(s); b != nil && !b.ended {
			r.sourceIntoBlock(now, f, b, p, payload)
		}
	}
	return r.deliverReceived(f, s, p, payload)
}

// again handles a PSN whose slot already holds a packet: a duplicate, or the original arriving
// after its restoration. dup is false when the slot's state says it is neither.
func (r *Receiver) again(f *rflow, s *slot, payload []byte) (Verdict, bool) {
	switch {
	case s.st == slotRestored && !s.rx:
		// The original arrives after its restoration: a late source, delivered again (the
		// RDMA transport drops duplicates), not used for decoding.
		s.rx = true
		f.st.Sources++
		f.st.Late++
		f.iv.Received++
		if f.set.Ordered && !s.delivered {
			f.st.Superseded++ // the restored copy goes out in order instead
			return Held, true
		}
	case s.st == slotHeld || s.st == slotRestored:
		// C7 d: a duplicate is ignored for decoding; the RDMA transport may want it.
		f.st.Duplicates++
		if k := f.kept(s, s.p); s.st == slotHeld && (int(s.n) != len(payload) || !bytes.Equal(k, payload[:len(k)])) {
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

// reset makes slot s the record of PSN p, flushing what it held before (window wrap).
func (r *Receiver) reset(f *rflow, s *slot, p psn.PSN) {
	if s.st == slotMissing {
		f.missing--
	}
	if s.st == slotHeld && !s.delivered && f.set.Ordered {
		r.flushHold(f) // never drop a held packet: release in order first
	}
	if b := f.blockOf(s); b != nil && !b.ended && s.p != p {
		r.abandon(f, b, true) // the window moved past a live block (C7 b, g)
	}
	f.dropWhole(p)
	s.p, s.st, s.ce, s.rx, s.hasID, s.delivered, s.rounds, s.blk, s.gen = p, slotEmpty, false, false, false, false, 0, 0, 0
}

// advance marks the PSNs between the highest seen and p as missing.
func (r *Receiver) advance(now time.Duration, f *rflow, p psn.PSN) {
	gap := f.high.Forward(p) - 1
	if gap >= uint32(len(f.win)) {
		f.st.WindowJumps++
		f.st.Expected += uint64(gap)
		f.iv.Expected += gap
		gap = uint32(len(f.win)) - 1
	}
	for q := p.Add(-int(gap)); q != p; q = q.Add(1) {
		s := f.slotOf(q)
		if s.p != q {
			r.reset(f, s, q)
		}
		if s.st != slotEmpty {
			continue // absent, or known from a block described ahead of its sources
		}
		s.st = slotMissing
		s.due = now + f.allowance()
		f.scheduleMiss(s)
		f.missing++
		f.st.Expected++
		f.iv.Expected++
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
		f.cursor = p.Add(1)
		r.drainCursor(f)
		return Forward
	case p.Before(f.cursor):
		s.delivered = true
		f.st.Forwarded++
		return Forward
	}
	holdP, holdB := f.holdLimits()
	if f.heldPkts+1 > holdP || f.heldBytes+len(payload) > holdB {
		f.st.HoldOverflows++
		r.flushHold(f)
		if s.delivered {
			return Held // released in order through DrainDeliveries by the flush
		}
		s.delivered = true
		f.st.Forwarded++
		return Forward
	}
	f.keepWhole(p, payload) // where only a prefix is kept for the codec: the hold needs it all
	f.heldPkts++
	f.heldBytes += len(payload)
	f.st.HeldPackets++
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
// skips absent and abandoned PSNs, stopping at the first gap.
func (r *Receiver) drainCursor(f *rflow) {
	for range len(f.win) {
		s := f.slotOf(f.cursor)
		if s.p != f.cursor {
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
	k := Received
	if s.st == slotRestored {
		k = Restored
	} else {
		f.heldPkts--
		f.heldBytes -= int(s.n)
		f.st.Released++
	}
	if !r.dq.push(Delivery{Flow: f.id, PSN: s.p, Kind: k, CE: s.ce && k == Received, Packet: f.packet(s, s.p)}) {
		r.st.DeliveriesDropped++
	}
	f.dropWhole(s.p)
}

// flushHold ends the hold: everything held goes out in PSN order and the gaps before it are
// left to the RDMA transport (C7 a).
func (r *Receiver) flushHold(f *rflow) {
	f.holding = false
	for n := 0; f.heldPkts > 0 && n < len(f.win); n++ {
		s := f.slotOf(f.cursor)
		if s.p == f.cursor && (s.st == slotHeld || s.st == slotRestored) {
			if !s.delivered {
				r.release1(f, s)
			}
		} else if s.p == f.cursor && s.st == slotMissing || s.p != f.cursor || s.st == slotEmpty {
			f.st.GapsSkipped++
		}
		f.cursor = f.cursor.Add(1)
		if f.cursor == f.high.Add(1) {
			break
		}
	}
	f.heldPkts, f.heldBytes = 0, 0
	r.drainCursor(f)
}
