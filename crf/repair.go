package crf

import (
	"cmp"
	"encoding/binary"
	"errors"
	"slices"
	"time"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// onRepair takes a REPAIR message (C7 c-e).
func (r *Receiver) onRepair(now time.Duration, f *rflow, msg []byte, ce bool) {
	r.takeRepair(now, f, msg, ce, false)
	if len(f.aside) > 0 {
		r.releaseAside(now, f)
	}
}

// takeRepair serves a REPAIR; again says it was kept aside before (and counted then).
func (r *Receiver) takeRepair(now time.Duration, f *rflow, msg []byte, ce, again bool) {
	f.active = true
	if endedBlock(f, msg) {
		if !again {
			f.countRepair(ce)
		}
		f.st.RepairLate++
		return
	}
	m, err := wire.ParseRepair(msg)
	if err != nil && r.hook(Hooks.AcceptMalformedRepair) {
		m, err = parseMalformedRepair(msg)
	}
	if err != nil {
		r.st.MessagesMalformed++
		return
	}
	if !again {
		f.countRepair(ce)
	}
	c := f.config(m.ConfigID)
	switch why := checkRepair(f, c, &m); why {
	case repairFits:
	case repairNoBlock:
		r.noBlock(f, &m)
		return
	default:
		(*repairRefused[why](&f.st))++
		return
	}
	if !again && f.ahead(&m) {
		r.setAside(now, f, msg, &m, ce)
		return
	}
	if !c.first && f.started && m.BlockStartPSN.Before(c.eff) {
		f.st.RepairBeforeEffective++ // contract 3 says it cannot happen; the block is still served
	}
	r.evidence(f, c.cfg.ID, m.BlockStartPSN)
	b := r.blockFor(now, f, &m, c)
	if b == nil {
		return
	}
	if b.ended {
		if m.Info {
			f.st.InfoReceived++ // its absent positions are recorded; nothing is missing
		} else {
			f.st.RepairLate++
		}
		return
	}
	took := true
	switch {
	case m.Info:
		f.st.InfoReceived++
	case m.Scheme == wire.SchemeSourceCopy:
		took = r.takeSourceCopy(now, f, b, &m)
	default:
		took = r.takeSymbol(now, f, b, &m)
	}
	if took {
		r.endRound(now, f, b, &m)
	}
}

// endedBlock reports whether REPAIR msg is for a block that has ended, which takes nothing
// more: the full parse is skipped (the common case without loss, where the first REPAIR finds
// every source held).
func endedBlock(f *rflow, msg []byte) bool {
	if f.win == nil || len(msg) < 16 {
		return false
	}
	start := psn.PSN(uint32(msg[12])<<16 | uint32(msg[13])<<8 | uint32(msg[14]))
	s := f.at(start)
	if s == nil {
		return false
	}
	b := f.blockOf(s)
	if b == nil || !b.ended || b.start != start || b.cfg.ID != msg[8] || b.k != int(msg[10]) {
		return false
	}
	// The same definition: the Present Bitmap too (another one is a second definition, E66).
	for w := range psn.Words(b.k) {
		o := 20 + 4*w
		if len(msg) < o+4 || binary.BigEndian.Uint32(msg[o:]) != b.present[w] {
			return false
		}
	}
	return true
}

// repairCheck is what checkRepair finds of a parsed REPAIR.
type repairCheck uint8

const (
	repairFits          repairCheck = iota // served
	repairNoBlock                          // an INFO naming PSNs in no block (noBlock)
	repairBehind                           // its configuration released, its block behind the window
	repairUnknownConfig                    // no such configuration, or no window yet
	repairRetiredConfig                    // a configuration retired to make room for the CSF's next (E81)
	repairBadScheme                        // neither the configuration's scheme nor a Source Copy
	repairBadK                             // k beyond the configuration's
	repairBadT                             // a symbol not T octets long
)

// repairRefused is the counter of each refusal of checkRepair.
var repairRefused = [...]func(*FlowStats) *uint64{
	repairBehind:        func(s *FlowStats) *uint64 { return &s.RepairLate },
	repairUnknownConfig: func(s *FlowStats) *uint64 { return &s.RepairUnknownConfig },
	repairRetiredConfig: func(s *FlowStats) *uint64 { return &s.RepairRetiredConfig },
	repairBadScheme:     func(s *FlowStats) *uint64 { return &s.RepairBadScheme },
	repairBadK:          func(s *FlowStats) *uint64 { return &s.RepairBadK },
	repairBadT:          func(s *FlowStats) *uint64 { return &s.RepairBadT },
}

// checkRepair says whether REPAIR m of configuration c (nil: unknown) can be served.
func checkRepair(f *rflow, c *cfgSlot, m *wire.Repair) repairCheck {
	switch {
	case c == nil && f.win != nil && f.gone(m.BlockStartPSN.Add(int(m.K)-1)):
		// A configuration released because its blocks had all left the window (E44): this
		// REPAIR's block is behind the window too, too late for decoding whatever its
		// configuration, which the CRF may no longer remember.
		return repairBehind
	case c == nil && f.win != nil && f.retired(m.ConfigID):
		return repairRetiredConfig
	case c == nil || f.win == nil:
		return repairUnknownConfig
	case m.Info && m.Present.Empty():
		return repairNoBlock
	case m.Scheme != c.cfg.Scheme && m.Scheme != wire.SchemeSourceCopy && !m.Info:
		return repairBadScheme
	case int(m.K) > c.cfg.K:
		return repairBadK
	case !m.Info && len(m.Symbol) != c.cfg.T:
		return repairBadT
	}
	return repairFits
}

// takeSourceCopy takes a Source Copy symbol into block b; false: nothing more to do with it.
func (r *Receiver) takeSourceCopy(now time.Duration, f *rflow, b *rblock, m *wire.Repair) bool {
	f.st.SourceCopies++
	j := int(m.RepairIndex)
	if err := r.ensureDecoder(f, b); err != nil {
		return false
	}
	if err := b.dec.AddSourceSymbol(j, m.Symbol); err != nil {
		if errors.Is(err, fec.ErrDuplicate) {
			f.st.RepairDuplicate++
		} else {
			f.st.RepairRejected++
		}
		return true // the block may be solvable all the same
	}
	p, _ := b.dec.Payload(j)
	if !r.restored(now, f, b, j, p) {
		// Not the source (E9): the decoder forgets it, and a genuine copy may still come.
		f.st.SourceCopyMismatch++
		if err := r.refeed(f, b, false); err != nil {
			r.abandon(f, b, false)
		}
		return false
	}
	f.st.RestoredSourceCopy++
	return true
}

// takeSymbol takes a repair symbol (ordinary or a coded retransmission) into block b; false:
// nothing more to do with it.
func (r *Receiver) takeSymbol(now time.Duration, f *rflow, b *rblock, m *wire.Repair) bool {
	over := b.present
	if m.Retx {
		over = m.Lost
		r.countRetx(now, f, b, m)
	}
	if err := r.ensureDecoder(f, b); err != nil {
		return false
	}
	return r.keep(f, b, int(m.RepairIndex), over, m.Symbol)
}

// countRetx counts a coded retransmission for block b: its rounds, and its RTT sample.
func (r *Receiver) countRetx(now time.Duration, f *rflow, b *rblock, m *wire.Repair) {
	if f.rangeAnswered(m.RepairSessionID, now) {
		f.st.RTTSamples++ // the answer to a request of the PSN-range form (E49)
	}
	if m.RepairSessionID != b.reqID && b.newSession(m.RepairSessionID) && b.rounds < 2 {
		// The answer to another request than the block's own: one in the PSN-range
		// form for another of its PSNs, sent before the block was known. It was a round
		// too (C9: two coded rounds, whichever form asked; E45).
		b.rounds++
		f.st.RangeRoundsCounted++
	}
	if m.RepairSessionID == b.reqID && !b.sampled && b.rounds == 1 && !b.fellBack {
		// C4: REPAIR_REQUEST to the first RETX REPAIR of its session (Karn: first round only).
		b.sampled = true
		f.rtt.Sample(now - b.reqAt)
		f.st.RTTSamples++
	}
}

// endRound tries to solve block b after REPAIR m, and ends or schedules its round.
func (r *Receiver) endRound(now time.Duration, f *rflow, b *rblock, m *wire.Repair) {
	if !r.tryDecode(now, f, b) {
		return
	}
	if b.ended {
		return
	}
	// C7 f: the LAST symbol of the round has come and the block still cannot be solved.
	if m.Last && (!m.Retx && m.Scheme != wire.SchemeSourceCopy && b.rounds == 0 ||
		m.RepairSessionID != 0 && m.RepairSessionID == b.reqID) {
		r.incomplete(now, f, b)
	} else if !b.haveDue {
		// The block's first message: its round ends a reorder allowance later (C7 f), also
		// when that message answered a request of the PSN-range form (C9).
		b.due, b.haveDue = now+f.allowance(), true
		f.schedule(b)
	}
}

// noBlock takes an INFO whose Present Bitmap is all zero: its k PSNs from the Block Start PSN
// carry no source and belong to no block (C8, extended by E45). They become
// absent: no block is made, nothing is counted, nothing is asked for them again.
func (r *Receiver) noBlock(f *rflow, m *wire.Repair) {
	f.st.InfoReceived++
	f.st.InfoNoBlock++
	for j := 0; j < int(m.K); j++ {
		q := m.BlockStartPSN.Add(j)
		if _, l, _ := f.locate(q); l != locTracked && l != locAhead {
			continue // in a hole already, or behind the window
		}
		s := r.take(f, q)
		if s == nil {
			continue
		}
		if b := f.blockOf(s); b != nil && b.present.Has(int(b.start.Forward(q))) {
			f.st.InfoConflict++ // a block's Present Bitmap says a source takes it
			continue
		}
		switch s.st {
		case slotHeld, slotRestored:
			f.st.SourceAtAbsent++
		case slotEmpty, slotMissing:
			f.unmiss(s)
			s.st = slotAbsent
		}
	}
	if f.set.Ordered {
		r.drainCursor(f)
	}
}

// blockFor finds or creates the block a REPAIR describes: find the block made already, or place
// a new one on the window's positions, allocate it in the ring and bind its positions' slots.
func (r *Receiver) blockFor(now time.Duration, f *rflow, m *wire.Repair, c *cfgSlot) *rblock {
	if !f.based {
		f.anchor(m.BlockStartPSN.Add(-1), firstPosition) // before the flow's first source (E8)
	}
	if known := findBlock(f, m); known != nil {
		if !sameDefinition(known, m) {
			return r.otherDefinition(now, f, known, m, c) // two definitions, the evidence decides (E66)
		}
		return known
	}
	v0, flat, ok := r.placeBlock(f, m, false)
	if !ok {
		return nil
	}
	b := r.allocBlock(now, f, m, c, v0, flat)
	r.bindBlock(now, f, b, m)
	return b
}

// findBlock is the block made already that starts at m's Block Start PSN, or nil. Fast path:
// the window slot of the Block Start PSN points at the block. A block starting in a gap's hole
// has no slot there: the ring is searched (rare).
func findBlock(f *rflow, m *wire.Repair) *rblock {
	var known *rblock
	if s := f.at(m.BlockStartPSN); s != nil {
		if b := f.blockOf(s); b != nil && b.start == m.BlockStartPSN {
			known = b
		}
	} else if _, l, _ := f.locate(m.BlockStartPSN); l == locHole {
		for i := range f.blocks {
			if b := &f.blocks[i]; b.used && b.start == m.BlockStartPSN {
				known = b
			}
		}
	}
	return known
}

// placeBlock checks that the window can keep every position of the block m describes and that
// no live block overlaps it (blocks of a flow never do; a second definition of a block made
// already, shadow, overlaps it by nature and binds no slot, E66), counting why not when it
// cannot (ok false). v0 is the position of its first PSN; flat says there is no hole inside (the
// positions of the first and the last PSN k - 1 apart), so that position j is at v0 + j.
func (r *Receiver) placeBlock(f *rflow, m *wire.Repair, shadow bool) (v0 uint32, flat, ok bool) {
	k := int(m.K)
	v0, l0, _ := f.locate(m.BlockStartPSN)
	vk, lk, _ := f.locate(m.BlockStartPSN.Add(k - 1))
	flat = l0 != locHole && lk != locHole && vk-v0 == uint32(k-1)
	// Without a hole inside and no live block, only the first and the last position can
	// refuse the block: the ones between share the first's location, lie within the last's
	// reach, and no live block can overlap them (the common case: every block so far ended).
	skip := flat && (f.live == 0 || shadow)
	for j := 0; j < k; j++ {
		if skip && j == 1 && k > 2 {
			j = k - 1
		}
		p := m.BlockStartPSN.Add(j)
		v, l, hi := v0+uint32(j), l0, -1
		if !flat || j == k-1 {
			v, l, hi = f.locate(p)
		}
		switch {
		case l == locOld:
			f.st.RepairLate++ // older than the window: its sources are gone
			r.learnPresent(f, m)
			return v0, flat, false
		case l == locHole && m.Present.Has(j) && f.holes[hi].read, l == locAhead && f.high.Forward(p) > f.reach():
			// A source where a READ consumed the PSN, or further ahead than the window
			// reaches. (A source in a long gap's untracked middle is a position without a slot:
			// the block's repair may restore it all the same.)
			f.st.RepairUntracked++
			return v0, flat, false
		case l == locTracked && !shadow:
			if s := &f.win[v&f.mask]; s.is(p, v) {
				if ob := f.blockOf(s); ob != nil && !ob.ended && !ob.shadow {
					f.st.RepairOverlap++
					return v0, flat, false
				}
			}
		}
	}
	return v0, flat, true
}

// allocBlock makes the block m describes, of configuration c, placed at v0 (placeBlock), in the
// flow's ring of blocks.
func (r *Receiver) allocBlock(now time.Duration, f *rflow, m *wire.Repair, c *cfgSlot, v0 uint32, flat bool) *rblock {
	if f.live >= f.eff.MaxOpenBlocks {
		// C7 g: the oldest open block falls back to make room. Blocks are made in ring order,
		// so the oldest open one is the first not ended from the oldest made.
		f.oldest = max(f.oldest, f.made-min(f.made, uint64(f.maxBlocks)))
		for ; f.oldest < f.made; f.oldest++ {
			if ob := &f.blocks[f.oldest%uint64(f.maxBlocks)]; ob.used && !ob.ended {
				r.abandon(f, ob, true)
				break
			}
		}
	}
	// Blocks are taken in a ring, so the one reused is the oldest. The ring grows to its
	// length as blocks are first needed, so memory follows the blocks a flow really has.
	if f.nextBlk == len(f.blocks) {
		f.blocks = append(f.blocks, rblock{idx: int32(f.nextBlk)})
	}
	b := &f.blocks[f.nextBlk]
	f.nextBlk = (f.nextBlk + 1) % f.maxBlocks
	f.made++
	if b.used && !b.ended {
		r.abandon(f, b, true)
	}
	f.live++
	f.gen++
	if f.gen == 0 {
		f.gen = 1 // 0 names no block: an unused slot's
	}
	k := int(m.K)
	*b = rblock{idx: b.idx, used: true, gen: f.gen, start: m.BlockStartPSN, k: k, v0: v0, flat: flat, cfg: c.cfg,
		present: m.Present, cands: b.cands[:0]}
	f.st.BlocksCreated++
	if f.set.Ordered && f.holding && b.start.Forward(f.cursor) < uint32(b.k) {
		// C7 a: the hold lasts until the gap's block has its repair, plus the allowance.
		f.holdDue = max(f.holdDue, now+f.allowance())
	}
	if flat && f.high.Forward(m.BlockStartPSN.Add(k-1)) < psnHalf && m.BlockStartPSN.Add(k-1).After(f.top) {
		f.assign(m.BlockStartPSN.Add(k - 1)) // described ahead of its sources
	}
	return b
}

// bindBlock binds the slots of new block b's positions to it: missing sources its Present
// Bitmap names are confirmed, absent positions settled. A block whose sources all arrived ends
// at once; one whose sources were asked for in the PSN-range form has had those rounds.
func (r *Receiver) bindBlock(now time.Duration, f *rflow, b *rblock, m *wire.Repair) {
	held, asked := 0, uint8(0)
	for j := 0; j < b.k; j++ {
		p := b.start.Add(j)
		s := r.blockSlot(f, b, j)
		if s == nil {
			continue // absent, in a hole
		}
		if b.present.Has(j) {
			if s.st == slotEmpty && f.started && !p.After(f.high) {
				// Passed, or forgotten: missing now (the block asks for it, not the range timer).
				f.missAt(s, now)
			}
			if s.st == slotMissing {
				f.expect(s) // the Present Bitmap confirms a source (E42)
				asked = max(asked, s.rounds)
			}
		}
		s.blk, s.gen = b.idx, b.gen
		if !b.present.Has(j) {
			f.unmiss(s)
			if s.st != slotHeld {
				s.st = slotAbsent
			}
			continue
		}
		if s.st == slotHeld || s.st == slotRestored {
			held++
		}
	}
	if asked > 0 {
		// Its sources were asked for in the PSN-range form already: those were its first
		// rounds (C9: two coded rounds, then FALLBACK, then the RDMA transport).
		b.rounds = int(min(asked, 2))
		b.fellBack = asked > 2
		b.sampled = true // no RTT sample: the request's time is not the block's
		b.reqID = m.RepairSessionID
		b.newSession(m.RepairSessionID)
	}
	if held == b.present.Count() {
		// Every source arrived: nothing to decode, no decoder needed.
		f.st.BlocksFullyReceived++
		r.endBlock(f, b)
		if f.set.Ordered {
			r.drainCursor(f)
		}
	}
}

// blockSlot is the window slot of new block b's position j, made for it where the window has
// none yet; nil for a position in a hole (absent).
func (r *Receiver) blockSlot(f *rflow, b *rblock, j int) *slot {
	p := b.start.Add(j)
	if !b.flat {
		return r.take(f, p)
	}
	v := b.v0 + uint32(j)
	s := &f.win[v&f.mask]
	if !s.is(p, v) {
		r.reset(f, s, p, v)
	}
	return s
}

// learnPresent applies the Present Bitmap of a block that cannot be made (it starts behind the
// window) to its PSNs still in the window: absent ones are settled, missing sources confirmed
// (E42, E43), so that nothing is asked for or abandoned that carries no source.
func (r *Receiver) learnPresent(f *rflow, m *wire.Repair) {
	for j := 0; j < int(m.K); j++ {
		s := f.at(m.BlockStartPSN.Add(j))
		if s == nil || f.blockOf(s) != nil {
			continue
		}
		switch {
		case m.Present.Has(j):
			if s.st == slotMissing {
				f.expect(s)
			}
		case s.st == slotMissing || s.st == slotEmpty:
			f.unmiss(s)
			s.st = slotAbsent
		}
	}
	if f.set.Ordered {
		r.drainCursor(f)
	}
}

// ensureDecoder gives b a decoder holding the sources the window has for it.
func (r *Receiver) ensureDecoder(f *rflow, b *rblock) error {
	if b.decoding {
		return nil
	}
	if b.dec == nil {
		d, err := r.decoder()
		if err != nil {
			f.st.DecodeErrors++
			return err
		}
		b.dec = d
	}
	scheme := fec.Scheme(b.cfg.Scheme)
	if err := b.dec.Reset(scheme, b.k, b.cfg.T, b.present); err != nil {
		f.st.DecodeErrors++
		return err
	}
	b.decoding = true
	for j := 0; j < b.k; j++ {
		if !b.present.Has(j) {
			continue
		}
		if s := f.bslot(b, j); s != nil && (s.st == slotHeld && !s.resent || s.st == slotRestored) {
			if err := b.dec.AddSource(j, f.kept(s)); err != nil {
				f.st.SourceTooLong++
			}
		}
	}
	return nil
}

// sourceIntoBlock adds an arriving source to its live block (late sources shrink the unknowns,
// coded retransmissions included).
func (r *Receiver) sourceIntoBlock(now time.Duration, f *rflow, b *rblock, p psn.PSN, payload []byte) {
	j := int(b.start.Forward(p))
	if !b.present.Has(j) {
		f.st.SourceAtAbsent++
		return
	}
	if b.decoding {
		if s := f.bslot(b, j); s != nil && s.resent {
			return // held for delivery, not a source to decode with (E46)
		}
		b.stuck = false // one unknown fewer: a set of symbols that failed may solve the rest
		if err := b.dec.AddSource(j, payload); err != nil && !errors.Is(err, fec.ErrDuplicate) {
			f.st.SourceTooLong++
		}
	}
	r.tryDecode(now, f, b)
}

// tryDecode decodes b as soon as it can (C7 e) and ends it when complete. It returns false when
// the block was abandoned on the way. A solve whose packets fail the ICRC check is tried again
// from other symbols (E56).
func (r *Receiver) tryDecode(now time.Duration, f *rflow, b *rblock) bool {
	if !b.decoding {
		if r.complete(f, b) {
			r.endBlock(f, b)
		}
		return true
	}
	if b.shadow && b.failed == 0 {
		// A second definition binds no slot: sources beyond the first's positions reach its
		// decoder only from the window (E66).
		if err := r.refeed(f, b, false); err != nil {
			r.abandon(f, b, false)
			return false
		}
	}
	st := b.dec.Status()
	if st.U == 0 {
		r.endBlock(f, b)
		return true
	}
	if !st.Solvable() {
		if r.onlyResent(f, b, st.Unknown) {
			r.endBlock(f, b) // what is left unknown was delivered, sent again (E46)
		}
		return true // after a failed solve, suspects are tried again only at the round's end
	}
	if b.solves >= maxSolves {
		return true // left to its rounds: Source Copy (verified one by one), then the RDMA transport
	}
	b.solves++
	if b.failed > 0 {
		f.st.SolveRetries++
	}
	gap, gapSeen := firstGap(f, b, st.Unknown, now)
	got, err := b.dec.Decode()
	if err != nil {
		f.st.DecodeErrors++
		return true
	}
	f.st.BlocksDecoded++
	ok := true
	got.Each(func(j int) {
		if b.dec == nil {
			return // the block ended meanwhile (a restored READ moved the window past it)
		}
		p, err := b.dec.Payload(j)
		if err != nil {
			f.st.ICRCMismatch++ // a symbol that is not even a packet: wrong repair bytes
			ok = false
			return
		}
		if !r.restored(now, f, b, j, p) {
			ok = false // the others of the solve are still checked and delivered each (E9)
		}
	})
	switch {
	case b.ended:
		return true
	case ok:
		if b.failed > 0 {
			f.st.BlocksRescued++
		}
		r.confirm(f, b) // its definition is the CSF's (E66)
		if gapSeen {
			r.recovered(b, st.U, gap)
		}
		r.endBlock(f, b)
		return true
	case r.condemn(now, f, b):
		return true // another definition of the block stands: this one was a forger's (E67)
	}
	r.failedSolve(f, b, st.Unknown, st.U)
	if b.ended {
		return false
	}
	return r.tryDecode(now, f, b)
}

// firstGap returns how long ago the CRF saw the first gap among the positions unknown of block
// b (the earliest of their slots' times missing), false when none of them is missing (PR18).
func firstGap(f *rflow, b *rblock, unknown psn.Bitmap, now time.Duration) (time.Duration, bool) {
	nowUS := uint32(now / time.Microsecond)
	var longest uint32
	seen := false
	for j := 0; j < b.k; j++ {
		if !unknown.Has(j) {
			continue
		}
		if s := f.bslot(b, j); s != nil && s.st == slotMissing {
			// The slot keeps the time it went missing in microseconds, modulo 2^32 (71 minutes).
			longest = max(longest, nowUS-uint32(s.n))
			seen = true
		}
	}
	return time.Duration(longest) * time.Microsecond, seen
}

// recovered counts block b's recovery: restored by a solve of u unknowns, its first gap seen
// gap ago (PR18).
func (r *Receiver) recovered(b *rblock, u int, gap time.Duration) {
	if u > b.cfg.M {
		r.st.RecoveryBeyondM.add(gap)
	} else {
		r.st.RecoveryWithinM.add(gap)
	}
}

// onlyResent reports whether every position of unknown holds a READ response sent again.
func (r *Receiver) onlyResent(f *rflow, b *rblock, unknown psn.Bitmap) bool {
	for j := 0; j < b.k; j++ {
		if unknown.Has(j) {
			if s := f.bslot(b, j); s == nil || !s.resent {
				return false
			}
		}
	}
	return true
}

// complete reports whether every present position of b is held (no decoder involved).
func (r *Receiver) complete(f *rflow, b *rblock) bool {
	for j := 0; j < b.k; j++ {
		if !b.present.Has(j) {
			continue
		}
		if s := f.bslot(b, j); s == nil || (s.st != slotHeld && s.st != slotRestored) {
			return false
		}
	}
	return true
}

// restored verifies a restored packet (C12) and delivers it; false on a mismatch, which is
// counted and never delivered. A restored READ request consumes its PSNs as a received one
// does (C13).
func (r *Receiver) restored(now time.Duration, f *rflow, b *rblock, j int, pkt []byte) bool {
	if b.done.Has(j) {
		return true // delivered by an earlier solve
	}
	if err := r.verify(f, pkt); err != nil {
		f.st.ICRCMismatch++
		return false
	}
	b.done.Set(j)
	p := b.start.Add(j)
	s := r.take(f, p)
	if s == nil {
		// The window has moved past p: deliver without keeping it.
		f.st.Restored++
		f.iv.Restored++
		if !r.dq.push(Delivery{Flow: f.id, PSN: p, Kind: Restored, Packet: pkt}) {
			r.st.DeliveriesDropped++
		}
		return true
	}
	s.blk, s.gen = b.idx, b.gen
	if s.st == slotHeld || s.st == slotRestored {
		return true // it arrived meanwhile
	}
	f.unmiss(s)
	f.expect(s) // a source, restored: it counts as expected and not received (E42)
	f.st.Restored++
	f.iv.Restored++
	s.st, s.ce, s.delivered = slotRestored, false, false
	f.store(s, pkt)
	if n := f.consumes(pkt); n > 1 {
		r.consume(now, f, p, n)
	}
	if !f.set.Ordered {
		s.delivered = true
		if !r.dq.push(Delivery{Flow: f.id, PSN: p, Kind: Restored, Packet: pkt}) {
			r.st.DeliveriesDropped++
		}
		return true
	}
	f.keepWhole(s, pkt) // it waits for in-order delivery, where the slot keeps a prefix
	// It is held like a source that came after a gap: counted in the hold (C15's bounds) and
	// under its timer, so that it goes out however the gap before it ends (E50).
	f.heldPkts++
	f.heldBytes += len(pkt)
	if f.haveCursor && p.Before(f.cursor) {
		r.release1(f, s) // the hold already gave up on it; late beats never
	} else {
		r.drainCursor(f)
		if !s.delivered && !f.holding {
			f.holding = true
			f.holdDue = now + f.allowance()
		}
	}
	return true
}

// endBlock marks b done: every present source held or restored (C7 g).
func (r *Receiver) endBlock(f *rflow, b *rblock) {
	if b.ended {
		return
	}
	f.live--
	b.ended, b.haveDue = true, false
	f.st.BlocksComplete++
	r.recycle(b)
}

// decoder returns a decoder from the pool, or a new one.
func (r *Receiver) decoder() (flow.Decoder, error) {
	if n := len(r.decs); n > 0 {
		d := r.decs[n-1]
		r.decs = r.decs[:n-1]
		return d, nil
	}
	return r.newDecoder()
}

// recycle returns an ended block's decoder to the pool: decoders follow the blocks decoding at
// once, not the blocks a flow may hold.
func (r *Receiver) recycle(b *rblock) {
	r.releaseCands(b)
	if b.dec == nil {
		return
	}
	if len(r.decs) < maxPooledDecoders {
		r.decs = append(r.decs, b.dec)
	}
	b.dec, b.decoding = nil, false
}

// maxPooledDecoders bounds the decoders kept for reuse: a burst of blocks decoding at once
// (an attack's included) leaves no more than this behind.
const maxPooledDecoders = 64

// abandon ends b by falling back to the RDMA transport (C9 b): its unknown PSNs are announced as
// abandoned, and count as lost (E42). evicted says it made room rather than failed.
func (r *Receiver) abandon(f *rflow, b *rblock, evicted bool) {
	if b == nil || b.ended {
		return
	}
	if t := f.twinOf(b); t != nil && !t.ended && !t.condemned {
		// Another definition of the block stands: it may still restore what this one could not
		// (E67). Nothing is announced.
		f.st.DefinitionsRetired++
		r.retire(f, b)
		return
	}
	f.live--
	b.ended, b.haveDue = true, false
	if b.failed > 0 {
		f.st.BlocksMismatchAbandoned++
	}
	r.recycle(b)
	if evicted {
		f.st.BlocksEvicted++
	} else {
		f.st.BlocksAbandoned++
	}
	for j := 0; j < b.k; j++ {
		if !b.present.Has(j) {
			continue
		}
		p := b.start.Add(j)
		s := f.bslot(b, j)
		if s != nil && (s.st == slotHeld || s.st == slotRestored) {
			continue
		}
		if s == nil || s.st != slotAbandoned {
			f.st.Abandoned++
			if !r.dq.push(Delivery{Flow: f.id, PSN: p, Kind: Abandoned}) {
				r.st.DeliveriesDropped++
			}
		}
		if s != nil {
			f.unmiss(s)
			f.expect(s)
			s.st = slotAbandoned
		}
	}
	if f.set.Ordered {
		r.drainCursor(f)
	}
}

// incomplete handles a block whose round ended unsolved: the next coded request, the FALLBACK
// request after two coded rounds (C9 a), or abandonment after that (C9 b).
func (r *Receiver) incomplete(now time.Duration, f *rflow, b *rblock) {
	if b.failed > 0 && !b.waited && !b.haveDue {
		// Its round ended on a solve that failed the ICRC check: the REPAIR that made it may
		// be a forger's, ahead of the CSF's own (another version, or another definition of the
		// block). Those come right after it: the block asks a reorder allowance later, so that
		// one request serves what they leave unknown (E67).
		b.waited = true
		b.due, b.haveDue = now+f.allowance(), true
		f.schedule(b)
		return
	}
	if b.failed > 0 {
		// Before asking for more: the suspected symbols too, in sets not tried yet (E56).
		if !r.retry(now, f, b) || b.ended {
			return
		}
	}
	if !b.incomplete {
		b.incomplete = true
		f.st.BlocksIncomplete++
		f.iv.IncompleteBlocks++
	}
	if f.yields(b) {
		// Another definition of the block stands with fewer failed solves: it asks, this one
		// waits for its outcome (E67).
		b.due, b.haveDue = now+f.retry(), true
		f.schedule(b)
		return
	}
	switch {
	case b.fellBack:
		r.abandon(f, b, false)
	case b.rounds < 2 && b.cfg.Scheme == wire.SchemeCauchy && b.solves < maxSolves:
		if b.rounds > 0 {
			f.st.RequestRetries++
		}
		r.request(now, f, b, false)
	default:
		f.st.BlocksFallback++
		r.request(now, f, b, true)
	}
}

// blockTimeout is a block's timer: the reorder allowance after its first REPAIR, or 1.5 SRTT
// after a request without an answer that solved it (C7 f).
func (r *Receiver) blockTimeout(now time.Duration, f *rflow, b *rblock) {
	b.haveDue = false
	if !b.decoding {
		if err := r.ensureDecoder(f, b); err != nil {
			r.abandon(f, b, false)
			return
		}
	}
	if st := b.dec.Status(); st.U == 0 || st.Solvable() && b.solves < maxSolves {
		r.tryDecode(now, f, b)
		return
	}
	r.incomplete(now, f, b) // with the solves spent: Source Copy, verified one by one (E56)
}

// request sends a block-form REPAIR_REQUEST: L = the unknown sources, r = the usable repair
// symbols held, M_s = X - r + delta (delta 1 above one percent loss), never above X.
func (r *Receiver) request(now time.Duration, f *rflow, b *rblock, fallback bool) {
	if !b.decoding {
		if err := r.ensureDecoder(f, b); err != nil {
			r.abandon(f, b, false)
			return
		}
	}
	t := f.twinOf(b)
	if t != nil && r.adopt(now, f, b, t, fallback) {
		return
	}
	id := r.nextRequestID(f)
	m := r.ask(now, f, b, fallback, id)
	if t != nil && !t.ended && !t.condemned && (t.decoding || r.ensureDecoder(f, t) == nil) {
		// Two definitions of the block stand: both ask, under one Request ID, the one with
		// more unknown sources first. The CSF answers the first that matches its block and
		// takes the other for a copy (C8); the CSF's block is the larger one's whenever the
		// CSF would take the smaller's (E67).
		o := r.ask(now, f, t, fallback, id)
		if o.Lost.Count() > m.Lost.Count() {
			m, o = o, m
		}
		if r.sendRequest(f.from, &m) {
			f.st.Requests++
		}
		if r.sendRequest(f.from, &o) {
			f.st.Requests++
		}
		return
	}
	if r.sendRequest(f.from, &m) {
		f.st.Requests++
	}
}

// ask makes block b's REPAIR_REQUEST with Request ID id, and starts the round it opens.
func (r *Receiver) ask(now time.Duration, f *rflow, b *rblock, fallback bool, id uint16) wire.RepairRequest {
	st := b.dec.Status()
	delta := 0
	if f.est.P() > 0.01 {
		delta = 1
	}
	x := st.U
	ms := min(x, max(0, x-st.Usable+delta))
	m := wire.RepairRequest{FlowID: f.id, Fallback: fallback, RequestID: id, ConfigID: b.cfg.ID,
		Scheme: b.cfg.Scheme, K: uint8(b.k), RepairsHeld: uint8(min(st.Usable, 255)), BlockStartPSN: b.start,
		SuggestedM: uint8(ms), Lost: st.Unknown}
	if fallback {
		b.fellBack = true
		f.st.FallbackRequests++
	} else {
		b.rounds++
	}
	b.reqID, b.reqAt = id, now
	b.newSession(id)
	b.due, b.haveDue = now+f.retry(), true
	f.schedule(b)
	return m
}

func (r *Receiver) nextRequestID(f *rflow) uint16 {
	id := f.nextReq
	f.nextReq++
	if f.nextReq == 0 {
		f.nextReq = 1
	}
	return id
}

// requestRanges asks, in the PSN-range form, for missing PSNs no REPAIR has described, once
// their reorder allowance has passed; it retries after 1.5 SRTT, asks for FALLBACK after two
// rounds and then leaves them to the RDMA transport, counting them lost (E42).
func (r *Receiver) requestRanges(now time.Duration, f *rflow) {
	// The due slots come off the heap; they are asked for in PSN order, oldest first.
	due := f.dueScr[:0]
	for {
		e, ok := f.misses.Peek()
		if !ok || e.At > now {
			break
		}
		f.misses.Pop()
		if f.missCurrent(e) {
			due = append(due, psn.PSN(e.Gen))
		}
	}
	back := func(p psn.PSN) uint32 { return p.Forward(f.high) }
	slices.SortFunc(due, func(a, b psn.PSN) int { return cmp.Compare(back(b), back(a)) })
	f.dueScr = due
	ranges := f.lost[:0]
	fallback := false
	for _, p := range due {
		s := f.at(p)
		if s == nil || s.st != slotMissing {
			continue
		}
		if s.rounds >= 3 {
			s.st = slotAbandoned
			f.missing--
			f.expect(s) // asked three times without any answer: lost
			f.st.GivenUp++
			f.st.Abandoned++
			if !r.dq.push(Delivery{Flow: f.id, PSN: s.p, Kind: Abandoned}) {
				r.st.DeliveriesDropped++
			}
			continue
		}
		if s.rounds >= 2 {
			fallback = true
		}
		s.rounds++
		s.due = now + f.retry()
		if n := len(ranges); n > 0 && ranges[n-1].End() == s.p && ranges[n-1].Count < 255 {
			ranges[n-1].Count++
		} else if n < cap(ranges) {
			ranges = append(ranges, psn.Range{Start: s.p, Count: 1})
		} else {
			s.rounds-- // no room this time: at the next timer
			s.due = now + time.Microsecond
		}
		f.scheduleMiss(s)
	}
	if f.set.Ordered {
		r.drainCursor(f)
	}
	if len(ranges) == 0 {
		return
	}
	m := wire.RepairRequest{FlowID: f.id, RangeForm: true, Fallback: fallback, RequestID: r.nextRequestID(f), Ranges: ranges}
	if r.sendRequest(f.from, &m) {
		f.ranges[f.nextRange%len(f.ranges)] = rangeAsk{id: m.RequestID, at: now}
		f.nextRange++
		f.st.RangeRequests++
		if fallback {
			f.st.FallbackRequests++
		}
	}
}
