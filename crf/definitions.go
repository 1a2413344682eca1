package crf

import (
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// A REPAIR defines its block: k, the Present Bitmap and the Config ID, for its Block Start PSN.
// Anyone on the path can send one from the CSF's address with the flow's Flow ID (E20, E56), so
// the first definition to arrive is not the CSF's for being first. When a REPAIR defines a block
// made already another way, the CRF keeps both definitions (E66): the first stays bound to the
// window's slots, the second is a block of its own that binds none (a shadow), reads the sources
// the window holds, keeps its own repair symbols and decodes with them. The evidence decides
// which stands, never the order of arrival:
//   - a solve whose packets all verify (C12) confirms its definition: the other ends without a
//     word (DefinitionsConfirmed, DefinitionsRetired), and a REPAIR that defines the block
//     another way after that is refused (RepairInconsistent);
//   - a solve whose packets fail the check while the other definition stands condemns its own
//     (DefinitionsCondemned): it ends without a word, and the other goes on (E67);
//   - a source at a position one definition says no packet takes and the other says a source
//     takes condemns the first (DefinitionsContradicted);
//   - a definition whose rounds run out while the other stands ends without a word: the other's
//     still may restore.
// At most two definitions stand for a block; a third is refused (DefinitionsRefused) unless the
// second was condemned, whose place it takes, and a block's Block Start PSN gets at most
// maxDefinitions definitions beyond its first (E68).

// maxDefinitions bounds the definitions made for one Block Start PSN beyond the first: the
// second, and one that takes a condemned second's place.
const maxDefinitions = 2

// sameDefinition reports whether REPAIR m defines block b as b is defined.
func sameDefinition(b *rblock, m *wire.Repair) bool {
	return b.k == int(m.K) && b.present == m.Present && b.cfg.ID == m.ConfigID
}

// twinOf returns the other definition of b's block, nil when there is none (any more).
func (f *rflow) twinOf(b *rblock) *rblock {
	if b.twinGen == 0 || int(b.twin) >= len(f.blocks) {
		return nil
	}
	t := &f.blocks[b.twin]
	if !t.used || t.gen != b.twinGen || t.twin != b.idx || t.twinGen != b.gen {
		return nil
	}
	return t
}

// otherDefinition serves REPAIR m, which defines block known's Block Start PSN another way: the
// block of m's definition when it is kept (maybe ended), else nil (counted).
func (r *Receiver) otherDefinition(now time.Duration, f *rflow, known *rblock, m *wire.Repair, c *cfgSlot) *rblock {
	t := f.twinOf(known)
	if t != nil && sameDefinition(t, m) {
		return t
	}
	f.st.DefinitionConflicts++
	switch {
	case known.confirmed || t != nil && t.confirmed:
		// A solve of the block verified: a definition other than that one is not the CSF's.
		f.st.RepairInconsistent++
		return nil
	case m.Info:
		f.st.RepairInconsistent++ // an INFO restores nothing: it cannot show its definition right
		return nil
	case !restorable(f, m):
		f.st.RepairLate++ // every source it names is held: nothing to restore whatever the truth
		return nil
	case t != nil && !t.condemned, known.defs >= maxDefinitions, !r.roomForDefinition(f, known):
		f.st.DefinitionsRefused++
		return nil
	}
	v0, flat, ok := r.placeBlock(f, m, true)
	if !ok {
		return nil
	}
	ki := known.idx
	b := r.allocBlock(now, f, m, c, v0, flat)
	known = &f.blocks[ki] // the ring may have grown
	b.shadow = true
	known.defs++
	known.twin, known.twinGen = b.idx, b.gen
	b.twin, b.twinGen = known.idx, known.gen
	f.st.DefinitionsKept++
	r.bindShadow(now, f, b)
	return b
}

// bindShadow binds to second definition b the slots of the sources it names that no block
// binds (those beyond the first definition's k): their losses are b's to ask for, in its
// requests, not in the PSN-range form, whose answers b could not solve with. A block made later
// over such a slot takes it (placeBlock): a second definition never stands in a block's way.
func (r *Receiver) bindShadow(now time.Duration, f *rflow, b *rblock) {
	for j := 0; j < b.k; j++ {
		if !b.present.Has(j) {
			continue
		}
		s := f.bslot(b, j)
		if s == nil || s.gen != 0 && f.blockOf(s) != nil {
			continue
		}
		if p := b.start.Add(j); s.st == slotEmpty && f.started && !p.After(f.high) {
			f.missAt(s, now)
		}
		if s.st == slotMissing {
			f.expect(s) // the Present Bitmap confirms a source (E42)
		}
		s.blk, s.gen = b.idx, b.gen
	}
}

// restorable reports whether a position m's Present Bitmap names has no source held or
// restored: m's definition could restore something.
func restorable(f *rflow, m *wire.Repair) bool {
	for j := 0; j < int(m.K); j++ {
		if !m.Present.Has(j) {
			continue
		}
		if s := f.at(m.BlockStartPSN.Add(j)); s == nil || s.st != slotHeld && s.st != slotRestored {
			return true
		}
	}
	return false
}

// roomForDefinition reports whether a second definition of known's block can be made without
// pushing out an open block to stay within Max Open Blocks: a forger's definitions never make
// room that way (E68). It takes the ring's next entry as any block does; an open block there was
// made 2 x Max Open Blocks blocks ago, and the next block made would evict it all the same, but
// never known itself.
func (r *Receiver) roomForDefinition(f *rflow, known *rblock) bool {
	if f.live >= f.eff.MaxOpenBlocks {
		return false
	}
	return f.nextBlk >= len(f.blocks) || &f.blocks[f.nextBlk] != known
}

// confirm records that a solve of b verified: its definition is the CSF's, and the other, if
// any, ends without a word.
func (r *Receiver) confirm(f *rflow, b *rblock) {
	b.confirmed = true
	t := f.twinOf(b)
	if t == nil {
		return
	}
	f.st.DefinitionsConfirmed++
	if !t.ended {
		f.st.DefinitionsRetired++
		r.retire(f, t)
	}
}

// condemn ends b, whose solve failed the ICRC check, when another definition of its block
// stands (not condemned itself): b's definition is taken for a forger's, and the other decodes
// on. false: b is the block's only definition (E56 applies).
func (r *Receiver) condemn(now time.Duration, f *rflow, b *rblock) bool {
	t := f.twinOf(b)
	if t == nil || t.condemned {
		return false
	}
	f.st.DefinitionsCondemned++
	b.condemned = true
	r.retire(f, b)
	if !t.ended && t.decoding {
		r.tryDecode(now, f, t)
	}
	return true
}

// yields reports whether b's requests wait: another definition of its block stands (not
// condemned) whose solves failed less often than b's. Both asking, the CSF would answer the
// first to come (one answer per block per SRTT, C8), over positions the other cannot solve with.
func (f *rflow) yields(b *rblock) bool {
	t := f.twinOf(b)
	return t != nil && !t.ended && !t.condemned && b.failed > t.failed
}

// adopt makes the request t, the other definition of b's block, has out in this round b's own,
// when the CSF would answer it as b's: the same k, Config ID and unknown sources. No message
// goes: a second request for the same would cost the CSF's repair budget a second answer (C8
// answers each Request ID). false: b must ask.
func (r *Receiver) adopt(now time.Duration, f *rflow, b, t *rblock, fallback bool) bool {
	if t.ended || t.condemned || !t.decoding || !t.haveDue || t.reqAt+f.retry() <= now || t.reqID == 0 ||
		t.k != b.k || t.cfg.ID != b.cfg.ID || t.fellBack != fallback || t.dec.Status().Unknown != b.dec.Status().Unknown {
		return false
	}
	if fallback {
		b.fellBack = true
	} else {
		b.rounds++
	}
	b.reqID, b.reqAt = t.reqID, t.reqAt
	b.newSession(t.reqID)
	b.due, b.haveDue = t.due, true
	f.schedule(b)
	return true
}

// retire ends b without a word: no restoration, no abandonment announced. Another definition
// of its block stands, or was confirmed.
func (r *Receiver) retire(f *rflow, b *rblock) {
	if b.ended {
		return
	}
	f.live--
	b.ended, b.haveDue = true, false
	r.recycle(b)
}

// sourceIntoBlocks adds an arriving source at p to its block b and to b's other definition,
// after weighing it: a source where one definition says no packet goes and the other says a
// source does contradicts the first.
func (r *Receiver) sourceIntoBlocks(now time.Duration, f *rflow, b *rblock, p psn.PSN, payload []byte) {
	t := f.twinOf(b)
	if t == nil {
		if !b.ended {
			r.sourceIntoBlock(now, f, b, p, payload)
		}
		return
	}
	r.contradict(f, b, t, p)
	r.contradict(f, t, b, p)
	took := false
	for _, d := range [2]*rblock{b, t} {
		if j := d.start.Forward(p); !d.ended && j < uint32(d.k) && d.present.Has(int(j)) {
			took = true
			r.sourceIntoBlock(now, f, d, p, payload)
		}
	}
	if !took && (!b.ended || !t.ended) {
		f.st.SourceAtAbsent++
	}
}

// contradict condemns definition d when a source arrived at p, which d says no packet takes and
// o, standing, says a source takes.
func (r *Receiver) contradict(f *rflow, d, o *rblock, p psn.PSN) {
	j, i := d.start.Forward(p), o.start.Forward(p)
	if d.ended || o.condemned || j >= uint32(d.k) || d.present.Has(int(j)) || i >= uint32(o.k) || !o.present.Has(int(i)) {
		return
	}
	f.st.DefinitionsContradicted++
	d.condemned = true
	r.retire(f, d)
}

// claimed reports whether slot s, marked absent, is a position another standing definition of
// its block says a source takes: a source arriving there is kept (and contradicts the one that
// marked it).
func (f *rflow) claimed(s *slot) bool {
	b := f.blockOf(s)
	if b == nil {
		return false
	}
	t := f.twinOf(b)
	if t == nil {
		return false
	}
	for _, d := range [2]*rblock{b, t} {
		if j := d.start.Forward(s.p); !d.condemned && j < uint32(d.k) && d.present.Has(int(j)) {
			return true
		}
	}
	return false
}
