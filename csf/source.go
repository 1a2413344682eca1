package csf

import (
	"bytes"
	"encoding/binary"
	"time"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// Observe takes a RoCEv2 packet (the whole UDP payload) that the RDMA sender emits toward the
// receiver. Packets that take a new PSN become sources (C13); ACKs and CNPs never do.
func (s *Sender) Observe(now time.Duration, pkt []byte) {
	s.stats.Observed++
	if len(pkt) < roce.BTHLen+roce.ICRCLen {
		s.stats.Malformed++
		return
	}
	op := roce.Opcode(pkt[0])
	switch s.ops[op] {
	case opUnknown:
		s.stats.Malformed++
		return
	case opNonSource:
		s.stats.NonSource++
		return
	}
	if qp := uint32(pkt[5])<<16 | uint32(pkt[6])<<8 | uint32(pkt[7]); qp != s.o.desc.DestQP {
		s.stats.OtherQP++
		return
	}
	if h := fullHeaders[op]; h > 0 {
		s.learnMTU(now, len(pkt)-h-roce.ICRCLen)
	}
	p := psn.PSN(uint32(pkt[9])<<16 | uint32(pkt[10])<<8 | uint32(pkt[11]))
	n := 1
	if (s.o.longExtra > 0 || s.o.msgPolicy != nil || s.o.rule == policy.RuleCost) &&
		(op == roce.OpWriteFirst || op == roce.OpWriteOnly || op == roce.OpWriteOnlyWithImmediate) &&
		len(pkt) >= roce.BTHLen+roce.RETHLen+roce.ICRCLen {
		// C16: a message's length is known from its RETH.
		dma := binary.BigEndian.Uint32(pkt[roce.BTHLen+12:])
		pkts := int(min(max((uint64(dma)+uint64(s.mtu)-1)/uint64(s.mtu), 1), 1<<22)) // the message's packets
		switch {
		case s.o.msgPolicy != nil:
			k, extra := s.o.msgPolicy(pkts, s.est.P())
			s.msg, s.msgFrom, s.msgTo, s.msgK, s.msgExtra = true, p, p.Add(pkts), k, max(extra, 0)
			s.msgTail, s.msgAt = p, now
			s.stats.MessagesChosen++
		case s.o.rule == policy.RuleCost:
			// P9: repair for the blocks whose loss would delay the message's end (planned also
			// before the session is up: its blocks may start after).
			pl := policy.PlanMessage(pkts, s.CostPath())
			s.msg, s.msgFrom, s.msgTo, s.msgK = true, p, p.Add(pkts), pl.K
			s.msgExtra = max(pl.TailM-s.configM(), 0)
			s.msgTail, s.msgAt = p.Add(pkts-pl.TailPackets), now
			s.stats.MessagesChosen++
			s.stats.MessagesPlanned++
			s.noteKM(now)
		case dma >= s.o.longMin:
			// A long message: its blocks get extra ordinary repair.
			s.longFrom, s.longTo, s.long = p, p.Add(pkts), true
		}
	}
	if op == roce.OpReadRequest {
		if len(pkt) < roce.BTHLen+roce.RETHLen+roce.ICRCLen {
			s.stats.Malformed++
			return
		}
		dma := binary.BigEndian.Uint32(pkt[roce.BTHLen+12:])
		n = int(min(op.PSNs(dma, uint32(s.mtu)), maxReadPSNs))
	}
	s.ObserveSource(now, p, n, pkt)
}

// maxReadPSNs bounds the PSNs one READ request consumes: 2^31 octets (the largest DMA Length) at
// the smallest RDMA MTU, 256.
const maxReadPSNs = 1 << 23

// fullHeaders gives, for the RC opcodes whose packets always carry exactly one RDMA MTU of
// payload (the FIRST and MIDDLE packets of a message), the octets of their headers.
var fullHeaders = [256]int{
	roce.OpSendFirst: roce.BTHLen, roce.OpSendMiddle: roce.BTHLen,
	roce.OpWriteFirst: roce.BTHLen + roce.RETHLen, roce.OpWriteMiddle: roce.BTHLen,
	roce.OpReadResponseFirst: roce.BTHLen + roce.AETHLen, roce.OpReadResponseMiddle: roce.BTHLen,
}

// learnMTU takes the payload length of a FIRST or MIDDLE packet, which is the connection's RDMA
// MTU. A configured MTU that differs (an operator's default of 4096 on a path of 1024, say)
// would count READ PSNs wrongly (C13) and size symbols wrongly; once mtuAgree such packets in a
// row agree on another MTU, the session starts anew with the flow's own, which HELLO then
// announces (E33).
func (s *Sender) learnMTU(now time.Duration, payload int) {
	if payload == s.mtu || payload < 256 || payload > 4096 || payload&(payload-1) != 0 {
		s.mtuRun = 0
		return
	}
	if payload != s.mtuSeen {
		s.mtuSeen, s.mtuRun = payload, 0
	}
	if s.mtuRun++; s.mtuRun < mtuAgree {
		return
	}
	s.mtuRun = 0
	if s.o.log != nil {
		s.o.log.Warn("crem: the flow's RDMA MTU differs from the configured one; using the flow's",
			"qp", s.o.desc.DestQP, "configured", s.mtu, "flow", payload)
	}
	s.mtu = payload
	s.stats.MTUChanges++
	if s.state == StateHello || s.state == StateEstablished {
		s.Start(now)
	}
}

// mtuAgree is how many FIRST or MIDDLE packets in a row must show another MTU before it is taken.
const mtuAgree = 4

// ObserveSource takes one packet of the protected direction whose PSN p is known to the
// driver and which consumes n PSNs (a READ request more than one, C13). Observe calls it; a
// driver with its own parsing, or payloads that are not RoCEv2, may call it directly.
func (s *Sender) ObserveSource(now time.Duration, p psn.PSN, n int, payload []byte) {
	if n < 1 {
		n = 1
	}
	// Not ahead is behind: a PSN exactly half the space away is neither, and taking it for a new
	// source would put its block out of the order find relies on.
	if s.haveNext && p != s.next && !s.next.Before(p) && !s.newPSNSpace(now, p, n) {
		s.retransmission(now, p, payload)
		return
	}
	s.stats.Sources++
	s.countPacket(now)
	if s.haveNext {
		if gap := s.next.Forward(p); gap > 0 {
			s.stats.SkippedPSNs += uint64(gap)
			s.absent.add(s.next, gap) // no packet in this direction (E29)
		}
		// The gap between the packets of a burst (C5): an idle spell between messages is not
		// one, so a gap counts at most twice the mean. Otherwise one idle spell of an RTT would
		// stretch the burst gap to many milliseconds, and the last block of every message (the
		// one its completion waits on) would wait that long for its repair (E35).
		g := now - s.lastSrc
		if s.burstMean == 0 {
			s.burstMean = g
		} else {
			s.burstMean += (min(g, 2*s.burstMean) - s.burstMean) / 8
		}
		s.meanGap += (g - s.meanGap) / 8 // idle included: the packet rate an Effective PSN needs
	}
	if n > 1 {
		s.absent.add(p.Add(1), uint32(n-1)) // consumed by a READ request (C13)
	}
	if s.lastSrc <= s.lastHeard {
		s.unheardFrom = now // the first source the CRF has not answered yet (E70, E82)
	}
	s.haveNext, s.next, s.lastSrc = true, p.Add(n), now
	if s.state != StateEstablished {
		s.stats.SourcesUnprotected++
		s.stats.UnprotectedNoSession++
		return
	}
	s.sourcesPassed(now)
	s.budget.ObserveSource(len(payload))
	if s.open >= 0 {
		b := &s.blocks[s.open]
		if j := b.start.Forward(p); j >= uint32(b.limit) {
			s.closeBlock(now, s.open, true)
		}
	}
	if s.open < 0 {
		s.maybeApply(p)
		if !s.haveCfg {
			s.stats.SourcesUnprotected++
			s.stats.UnprotectedNoConfig++
			return
		}
		s.openBlock(now, p)
	}
	b := &s.blocks[s.open]
	j := int(b.start.Forward(p))
	if len(payload) > b.cfg.T-2 {
		// Cannot be coded: left absent, and to the RDMA transport.
		s.stats.SourceTooLong++
		s.stats.UnprotectedTooLong++
	} else if s.prefix > 0 {
		// The encoder reads only a prefix of the symbol (flow.SourcePrefixer): keep that much.
		o := j * s.prefix
		b.syms[j] = prefixSymbol(b.pre[o:o:o+s.prefix], payload, s.prefix)
		b.present.Set(j)
		s.codedSource()
	} else {
		b.holdPosition(j)
		sym, err := fec.AppendSymbol(fec.SymbolAt(b.slab, j, b.cfg.T)[:0], payload, b.cfg.T)
		if err != nil {
			s.stats.EncodeErrors++
			s.stats.UnprotectedEncodeError++
		} else {
			b.syms[j] = sym
			b.present.Set(j)
			s.codedSource()
		}
	}
	for r := j + 1; r < j+n && r < b.limit; r++ {
		b.read.Set(r)
	}
	b.k = min(j+n, b.limit)
	if b.k == b.limit {
		s.closeBlock(now, s.open, true)
	}
	s.releaseFarBehind()
}

// codedSource counts a source coded into a block: one the circuit breaker leaves without
// repair (m held at zero, C11 f) is unprotected; any other is protected as far as the Sender
// knows, until the session turns out lost (E72).
func (s *Sender) codedSource() {
	if s.mOverride {
		s.stats.UnprotectedBreaker++
		return
	}
	s.heardSources++
}

// retransmission handles a PSN the Sender has seen: it keeps its old position and is not a new
// source; a copy that differs from the original is counted (the original stays coded).
func (s *Sender) retransmission(now time.Duration, p psn.PSN, payload []byte) {
	s.stats.Retransmissions++
	s.countPacket(now)
	s.lastAgain = now
	i := s.find(p)
	if i < 0 {
		s.stats.RetransmissionUnheld++
		s.stats.UnprotectedUnheld++
		return
	}
	b := &s.blocks[i]
	j := int(b.start.Forward(p))
	switch {
	case b.read.Has(j):
		s.stats.ReadReissued++ // C13: a re-issued READ is left to the RDMA transport
	case !b.present.Has(j):
		s.stats.RetransmissionUnheld++
		s.stats.UnprotectedUnheld++
	default:
		// Where only a prefix is kept, the length and the prefix are what can be compared.
		sym := b.syms[j]
		n := int(binary.BigEndian.Uint16(sym))
		kept := min(n, len(sym)-2)
		if n != len(payload) || !bytes.Equal(sym[2:2+kept], payload[:kept]) {
			s.stats.RetransmissionMismatch++
		}
	}
}

// Far behind: a run of this many consecutive PSNs, each more than restartDistance behind the
// next PSN expected, is a new PSN space (E32).
const (
	restartDistance = 1 << 20
	restartRun      = 32
)

// newPSNSpace reports whether p, behind the next PSN expected, starts a new PSN space: the RDMA
// queue pair was created anew under the same number, with a new initial PSN (E32). A
// retransmission lies within the packets outstanding, never a million PSNs back, and a new space
// shows as a run of consecutive PSNs there. On the run's restartRun-th packet the session starts
// anew, so both functions forget the old space, and p is its first source.
func (s *Sender) newPSNSpace(now time.Duration, p psn.PSN, n int) bool {
	// The distance counts the PSNs the flow carried: not those a READ consumed or the flow
	// skipped (a go-back-N resend just before a READ of 2 GiB lies 2^21 PSNs behind).
	if d := p.Forward(s.next); d <= restartDistance || d-s.absent.within(p, s.next) <= restartDistance {
		s.farRun = 0
		return false
	}
	if s.farRun > 0 && p == s.farNext {
		s.farRun++
	} else {
		s.farRun = 1
	}
	s.farNext = p.Add(n)
	if s.farRun < restartRun {
		return false
	}
	s.farRun = 0
	s.stats.PSNSpaceRestarts++
	if s.o.log != nil {
		s.o.log.Warn("crem: the flow's PSNs start anew (its queue pair was created again); starting a new session",
			"flow", s.flowID, "qp", s.o.desc.DestQP, "psn", p, "expected", s.next)
	}
	s.absent.reset()
	s.haveNext = false
	if s.state != StateIdle && s.state != StateClosed {
		s.Start(now)
	}
	return true
}

// releaseFarBehind releases the held blocks the flow's PSNs have moved half the PSN space or
// more past (READ requests consume up to 2^23 PSNs each; a large ring holds many): serial
// comparison no longer places them behind the next PSN, so the lookup by PSN and the
// acknowledgements would take them for blocks ahead, and the RDMA transport, whose window of
// outstanding PSNs is under half the space, has long been done with them. Blocks lie in PSN
// order from the oldest, so the walk stops at the first one still behind; like Acknowledge it
// moves ackSeq, so its cost is the blocks released.
func (s *Sender) releaseFarBehind() {
	n := uint64(len(s.blocks))
	if n == 0 {
		return
	}
	s.ackSeq = max(s.ackSeq, s.seq-min(s.seq, n))
	for ; s.ackSeq < s.seq; s.ackSeq++ {
		slot := int(s.ackSeq % n)
		b := &s.blocks[slot]
		if !b.used {
			continue
		}
		if b.last().Before(s.next) {
			return
		}
		b.used = false
		if slot == s.open {
			s.open = -1
		}
		s.stats.BlocksFarBehind++
	}
}

// prefixSymbol appends the first n octets of the source symbol of payload (len || P) to dst.
func prefixSymbol(dst, payload []byte, n int) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(payload)))
	return append(dst, payload[:min(len(payload), n-2)]...)
}

// find returns the held block that covers p, or -1. Blocks open in PSN order and never
// overlap, so the slots in the order of their numbers are sorted by Block Start PSN, and a
// binary search finds the last block starting at or before p.
func (s *Sender) find(p psn.PSN) int {
	n := uint64(len(s.blocks))
	if n == 0 || s.seq == 0 {
		return -1
	}
	lo := uint64(0)
	if s.seq > n {
		lo = s.seq - n
	}
	base := s.blocks[lo%n].start
	d := base.Forward(p)
	// The last number in [lo, s.seq) whose start is at or before p, counted from base.
	i, j := lo, s.seq
	for i < j {
		h := i + (j-i)/2
		if base.Forward(s.blocks[h%n].start) <= d {
			i = h + 1
		} else {
			j = h
		}
	}
	if i == lo {
		return -1
	}
	slot := int((i - 1) % n)
	if b := &s.blocks[slot]; b.used && b.contains(p) {
		return slot
	}
	return -1
}

// openBlock starts a block at p with the configuration in force. Slots are taken in a ring,
// so the slot reused is the oldest; a block still held there is dropped and counted.
func (s *Sender) openBlock(now time.Duration, p psn.PSN) {
	slot := int(s.seq % uint64(len(s.blocks)))
	b := &s.blocks[slot]
	if b.used {
		s.stats.BlocksEvicted++
	}
	syms := b.syms
	if len(syms) < s.cur.K {
		syms = append(syms, make([][]byte, s.cur.K-len(syms))...)
	}
	limit := s.cur.K
	if s.msg && !p.Before(s.msgFrom) && p.Before(s.msgTo) {
		s.msgAt = now // the flow is still one of messages (P9)
		if s.msgK >= 1 {
			limit = min(limit, s.msgK) // the message policy's k: a block closed early (C7 c)
		}
	}
	pre := b.pre
	if s.prefix > 0 && len(pre) < s.cur.K*s.prefix {
		pre = make([]byte, s.cur.K*s.prefix)
	}
	*b = block{seq: s.seq, used: true, start: p, cfg: s.cur, limit: limit, syms: syms, pre: pre, slab: b.slab,
		opened: now, proactiveFrom: noProactive}
	s.seq++
	s.open = slot
	s.stats.BlocksOpened++
}

// closeBlock closes the open block, full or at the end of a burst (C5), and sends its ordinary
// repair symbols (draft, Sending Repair).
func (s *Sender) closeBlock(now time.Duration, i int, full bool) {
	b := &s.blocks[i]
	s.open = -1
	b.closed, b.closedAt = true, now
	if full {
		s.stats.BlocksClosedFull++
	} else {
		s.stats.BlocksClosedBurst++
	}
	if b.present.Empty() {
		b.used = false
		return
	}
	m := b.cfg.M
	if b.cfg.Scheme == wire.SchemeXOR {
		m = min(m, 1)
	}
	if s.mOverride {
		if m > 0 {
			s.stats.RepairSkippedBreaker += uint64(m)
		}
		m = 0
	}
	switch {
	case s.mOverride || b.cfg.Scheme != wire.SchemeCauchy:
	case s.msg && b.start.Before(s.msgTo) && !b.last().Before(s.msgFrom):
		// A block of a message the policy chose for (C16): extra ordinary symbols, at most Max m;
		// under the cost rule only for the blocks that end in the message's critical tail (P9).
		if s.msgExtra > 0 && !b.last().Before(s.msgTail) {
			m = max(m, min(m+s.msgExtra, s.eff.MaxM))
			s.stats.MessagePolicyBlocks++
		}
	case s.long && b.start.Before(s.longTo) && !b.last().Before(s.longFrom):
		// A block of a long message (C16): extra ordinary symbols, at most Max m in all.
		m = max(m, min(m+s.o.longExtra, s.eff.MaxM))
		s.stats.LongMessageBlocks++
	}
	if n := b.reported.Count(); n > 0 && !s.mOverride && b.cfg.Scheme == wire.SchemeCauchy {
		// Dropped PSNs a path reporter named while the block was open (C16): ordinary symbols
		// for those beyond what m covers, and one more for a burst (symbolsFor), at most Max m in all;
		// those beyond m count as extra (ExtraSent).
		b.proactiveFrom = m
		if add := symbolsFor(n) - m; add > 0 {
			m = max(m, min(m+add, s.eff.MaxM))
		} else {
			s.stats.PathReportDropsCovered += uint64(n)
		}
		b.reportedAt = now
	}
	m = min(m, 255-b.k)
	b.ordinary = m
	b.covering = m
	burst := min(m, 4)
	s.sendOrdinary(b, burst, m)
	if m > burst {
		// C11 c: beyond a burst of 4, paced over at most the block's own duration.
		b.pacedLeft = m - burst
		b.pacedStep = (b.closedAt - b.opened) / time.Duration(b.pacedLeft+1)
		b.pacedAt = now + b.pacedStep
		s.schedule(b)
	}
}

// sendOrdinary computes and sends the next n ordinary symbols of b; total is the round's
// count, so that the one with index total-1 carries LAST.
func (s *Sender) sendOrdinary(b *block, n, total int) {
	if n <= 0 {
		return
	}
	first := b.nextIndex
	if b.cfg.Scheme == wire.SchemeXOR && first > 0 {
		return // one symbol only
	}
	syms := s.encode(b, first, n, b.present)
	if syms == nil {
		return
	}
	if s.hook(Hooks.SkewCoefficients) {
		s.skewCoefficients(b, syms)
	}
	b.nextIndex += n
	for r := range n {
		last := first+r == total-1
		if s.sendRepair(b, wire.Repair{Scheme: b.cfg.Scheme, RepairIndex: uint8(first + r), Last: last, Symbol: syms[r]}) {
			s.stats.RepairSent++
			if first+r >= b.proactiveFrom {
				s.stats.ExtraSent++
			}
		}
	}
}

// encode computes n symbols with Repair Indices first.. over the set L into scratch buffers.
func (s *Sender) encode(b *block, first, n int, over psn.Bitmap) [][]byte {
	T := b.cfg.T
	if len(s.symbuf) < n*fec.SymbolStride(T) {
		s.symbuf = fec.NewSymbolBuffer(n, T) // the encoder writes the n in lockstep too (F7)
	}
	s.scratch, s.idx = s.scratch[:0], s.idx[:0]
	for r := range n {
		s.scratch = append(s.scratch, fec.SymbolAt(s.symbuf, r, T))
		s.idx = append(s.idx, first+r)
	}
	src := b.syms[:b.k]
	var err error
	if b.cfg.Scheme == wire.SchemeXOR {
		err = s.enc.XOR(s.scratch[0], over, src)
	} else {
		err = s.enc.Encode(s.scratch, s.idx, over, src)
	}
	if err != nil {
		s.stats.EncodeErrors++
		return nil
	}
	return s.scratch
}

// sendRepair fills in the block's fields, passes the repair budget (C11 b) and queues m.
func (s *Sender) sendRepair(b *block, m wire.Repair) bool {
	m.FlowID, m.ConfigID, m.K, m.BlockStartPSN, m.Present = s.flowID, b.cfg.ID, uint8(b.k), b.start, b.present
	// The bucket counts symbol octets: its burst is one block, k x T (C11 b).
	if !s.budget.Take(len(m.Symbol)) {
		s.stats.RepairDeniedBudget++
		return false
	}
	// Appended directly, not through wire.Message: the interface would move m to the heap.
	buf := s.q.Next()
	if buf == nil {
		s.stats.QueueFull++
		return false
	}
	buf, err := m.Append(buf)
	if err != nil {
		s.stats.EncodeErrors++
		return false
	}
	s.q.Commit(s.bound, buf)
	return true
}

// tickBlock runs block i's timers.
func (s *Sender) tickBlock(now time.Duration, i int) {
	b := &s.blocks[i]
	if !b.used || !b.closed {
		return
	}
	if s.mOverride {
		// C11 f: while the breaker is open no repair goes out, paced or deferred.
		if b.pacedLeft > 0 {
			s.stats.RepairSkippedBreaker += uint64(b.pacedLeft)
			b.pacedLeft = 0
		}
		if b.deferred.valid {
			s.stats.RequestsBreaker++
			b.deferred.valid = false
		}
	}
	for b.pacedLeft > 0 && now >= b.pacedAt {
		b.pacedLeft--
		b.pacedAt += b.pacedStep
		s.stats.RepairPaced++
		s.sendOrdinary(b, 1, b.ordinary)
	}
	if b.deferred.valid && now >= b.deferredDue {
		r := b.deferred
		b.deferred.valid = false
		s.answer(now, b, r)
	}
	if b.giveUpAt > 0 && now >= b.giveUpAt {
		s.stats.BlocksGivenUp++
		b.used = false
	}
	s.schedule(b)
}

// Opcode classes, tabulated once per Sender from roce's opcode table (the per-packet path
// then costs one load).
const (
	opUnknown uint8 = iota
	opNonSource
	opSource
)

func opTable() (t [256]uint8) {
	for op := range t {
		info := roce.Opcode(op).Info()
		switch {
		case !info.Known:
			t[op] = opUnknown
		case !info.Source:
			t[op] = opNonSource
		default:
			t[op] = opSource
		}
	}
	return t
}
