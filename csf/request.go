package csf

import (
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// onRequest answers a REPAIR_REQUEST (draft, Coded Retransmission; RULINGS C8).
func (s *Sender) onRequest(now time.Duration, msg []byte) {
	m, err := wire.ParseRepairRequest(msg)
	if err != nil {
		s.stats.MessagesMalformed++
		return
	}
	s.stats.RequestsReceived++
	if m.Fallback {
		s.stats.FallbackRequests++
	}
	if m.RangeForm {
		s.stats.RangeRequests++
		if s.mOverride {
			s.stats.RequestsBreaker++
		}
		// While the breaker is open only what settles absent PSNs is sent (INFO): no repair.
		s.onRanges(now, &m, s.mOverride)
		return
	}
	if s.mOverride {
		// C11 f: the breaker stops coded retransmission; recovery is the RDMA transport's.
		s.stats.RequestsBreaker++
		return
	}
	i := s.find(m.BlockStartPSN)
	if i >= 0 && (!s.blocks[i].closed || s.blocks[i].start != m.BlockStartPSN) {
		i = -1
	}
	if i < 0 || s.blocks[i].cfg.ID != m.ConfigID || s.blocks[i].k != int(m.K) {
		s.stats.RequestsUnknownBlock++
		return
	}
	b := &s.blocks[i]
	if !b.present.Contains(&m.Lost) {
		s.stats.RequestsAbsent++
		return
	}
	s.consider(now, b, request{valid: true, id: m.RequestID, lost: m.Lost, r: int(m.RepairsHeld),
		ms: int(m.SuggestedM), fallback: m.Fallback})
}

// consider applies C8's pacing: each Request ID once; at most one answer per block per SRTT,
// a sooner request deferred (not dropped) until SRTT has passed since the last answer.
func (s *Sender) consider(now time.Duration, b *block, r request) {
	if b.answeredID(r.id) || (b.deferred.valid && b.deferred.id == r.id) {
		s.stats.RequestsDuplicate++
		return
	}
	if r.lost.Empty() {
		s.stats.RequestsAbsent++
		return
	}
	if b.answered && now-b.answeredAt < s.srtt() && !s.hook(Hooks.AnswerWithinSRTT) {
		s.stats.RequestsDeferred++
		b.deferred = r
		b.deferredDue = b.answeredAt + s.srtt()
		s.schedule(b)
		return
	}
	s.answer(now, b, r)
}

// answer sends the coded retransmission, or Source Copy symbols for a FALLBACK request or where
// coded retransmission is impossible (XOR, no Repair Index left).
func (s *Sender) answer(now time.Duration, b *block, r request) {
	b.remember(r.id)
	b.answered, b.answeredAt = true, now
	s.stats.RequestsAnswered++
	x := r.lost.Count()
	left := 255 - b.k - b.nextIndex
	if !r.fallback && b.coded >= maxCodedRounds {
		// C9 (a): two coded rounds per block, then per-packet retransmission. The CRF counts
		// its rounds too, but requests in the PSN-range form for different PSNs of one block can
		// be in flight before it knows the block; the CSF holds the line (E34).
		r.fallback = true
		s.stats.RequestsPastRounds++
	}
	if r.fallback || b.cfg.Scheme != wire.SchemeCauchy || left < 1 {
		if !r.fallback && left < 1 {
			s.stats.RequestsNoIndex++
		}
		s.sourceCopy(b, r)
		// C9: the sources go after a give-up time unless the RDMA transport acknowledges first.
		b.giveUpAt = now + 4*s.srtt()
		s.schedule(b)
		return
	}
	delta := 0
	if s.est.P() > 0.01 {
		delta = 1
	}
	m := min(x, max(r.ms, x-r.r+delta), left)
	over := r.lost
	if s.hook(Hooks.AnswerBeyondX) {
		m = min(x+faultExtraSymbols, left) // bent: more than X
	}
	if s.hook(Hooks.RetransmitOverBlock) {
		over = b.present // bent: over every present position, not L
	}
	syms := s.encode(b, b.nextIndex, m, over)
	if syms == nil {
		return
	}
	first := b.nextIndex
	b.nextIndex += m
	b.coded++
	for n := range m {
		// No LAST on a coded retransmission: the Appendix's REPAIR (flags 0x80) has none;
		// the CRF judges the round by its 1.5 SRTT retry timer (E5).
		rep := wire.Repair{Retx: true, Scheme: wire.SchemeCauchy, RepairIndex: uint8(first + n),
			RepairSessionID: r.id, Lost: r.lost, Symbol: syms[n]}
		if s.sendRepair(b, rep) {
			s.stats.RetxSent++
		}
	}
}

// sourceCopy sends source symbol j unmodified for every j in L (scheme 0, C1).
func (s *Sender) sourceCopy(b *block, r request) {
	n, x := 0, r.lost.Count()
	r.lost.Each(func(j int) {
		n++
		rep := wire.Repair{Scheme: wire.SchemeSourceCopy, RepairIndex: uint8(j), RepairSessionID: r.id,
			Last: n == x, Symbol: s.sourceSymbol(b, j)}
		if s.sendRepair(b, rep) {
			s.stats.SourceCopySent++
		}
	})
}

// sourceSymbol returns source symbol j of b, T octets. Where the codec reads only a prefix
// (flow.SourcePrefixer) the rest was never kept and is sent as zeros.
func (s *Sender) sourceSymbol(b *block, j int) []byte {
	sym := b.syms[j]
	if len(sym) >= b.cfg.T {
		return sym[:b.cfg.T]
	}
	if cap(s.symbuf) < b.cfg.T {
		s.symbuf = make([]byte, b.cfg.T)
	}
	out := s.symbuf[:b.cfg.T]
	clear(out[copy(out, sym):])
	return out
}

// onRanges maps a PSN-range request onto the held blocks and answers each with r = 0; a range
// that names absent positions gets an INFO message for its block (C8), and one that names PSNs
// of no block that the flow skipped or a READ consumed gets an INFO with no present position
// (E29). With infoOnly (the circuit breaker is open) only the INFO messages go out.
func (s *Sender) onRanges(now time.Duration, m *wire.RepairRequest, infoOnly bool) {
	var lost [maxRangeBlocks]psn.Bitmap
	var info [maxRangeBlocks]bool
	var idx [maxRangeBlocks]int
	var runs [maxRangeBlocks]psn.Range // asked PSNs of no block, known absent
	nb, nr, looked := 0, 0, 0
	for _, rg := range m.Ranges {
		for c := uint32(0); c < rg.Count; c++ {
			if looked++; looked > maxRangePSNs {
				s.stats.RequestsTruncated++
				goto answer
			}
			p := rg.Start.Add(int(c))
			i := s.find(p)
			if i < 0 || !s.blocks[i].closed {
				// A PSN of no block, or one the block still open has passed without a source:
				// absent either way. (An INFO of the open block would name a k not yet final.)
				if _, ok := s.absent.find(p); ok {
					if nr > 0 && runs[nr-1].End() == p {
						runs[nr-1].Count++
					} else if nr < len(runs) {
						runs[nr] = psn.Range{Start: p, Count: 1}
						nr++
					}
					continue
				}
				s.stats.RequestsUnknownBlock++
				continue
			}
			slot := -1
			for n := 0; n < nb; n++ {
				if idx[n] == i {
					slot = n
				}
			}
			if slot < 0 {
				if nb == maxRangeBlocks {
					continue
				}
				slot, idx[nb] = nb, i
				nb++
			}
			b := &s.blocks[i]
			j := int(b.start.Forward(p))
			if b.present.Has(j) {
				lost[slot].Set(j)
			} else {
				info[slot] = true
			}
		}
	}
answer:
	for n := 0; n < nr; n++ {
		s.stats.RequestsAbsent++
		s.absentInfo(runs[n])
	}
	for n := 0; n < nb; n++ {
		b := &s.blocks[idx[n]]
		if info[n] {
			s.stats.RequestsAbsent++
			if s.sendRepair(b, wire.Repair{Info: true, Scheme: b.cfg.Scheme}) {
				s.stats.InfoSent++
			}
		}
		if !lost[n].Empty() && !infoOnly {
			x := lost[n].Count()
			s.consider(now, b, request{valid: true, id: m.RequestID, lost: lost[n], r: 0, ms: x, fallback: m.Fallback})
		}
	}
}

// absentInfo sends INFO messages with no present position for the PSNs of r, at most 255 a
// message (E29): they belong to no block and carry no source in this direction.
func (s *Sender) absentInfo(r psn.Range) {
	if !s.haveCfg {
		return
	}
	for r.Count > 0 {
		k := min(r.Count, 255)
		m := wire.Repair{FlowID: s.flowID, Info: true, ConfigID: s.cur.ID, Scheme: s.cur.Scheme, K: uint8(k),
			BlockStartPSN: r.Start}
		buf := s.q.Next()
		if buf == nil {
			s.stats.QueueFull++
			return
		}
		buf, err := m.Append(buf)
		if err != nil {
			s.stats.EncodeErrors++
			return
		}
		s.q.Commit(s.bound, buf)
		s.stats.InfoSent++
		s.stats.InfoAbsentSent++
		r.Start, r.Count = r.Start.Add(int(k)), r.Count-k
	}
}

// maxCodedRounds is C9 (a)'s two coded retransmission rounds per block.
const maxCodedRounds = 2

// maxRangeBlocks bounds the blocks one PSN-range request can name.
const maxRangeBlocks = 64

// maxRangePSNs bounds the PSNs one PSN-range request can make the Sender look up: twice the
// largest window a CRF keeps by default, far more than it asks for at once.
const maxRangePSNs = 8192
