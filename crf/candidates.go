package crf

import (
	"bytes"
	"slices"
	"time"

	"github.com/crem-project/crem/psn"
)

// Without IPsec, anyone on the path can send REPAIRs from the CSF's address with the flow's
// Flow ID, and the ICRC check (C12) is all that stops their bytes. It stops them from being
// delivered; it cannot tell which symbol of a failed solve was wrong. So a block keeps the
// repair symbols it received until it ends: a second version of a Repair Index whose bytes
// differ from the first, and every symbol a solve did not need. When a solve's packets fail
// the check, its symbols become suspects and the block solves again from symbols not yet
// suspected first (a second version, a surplus symbol, a coded retransmission asked for with
// only the unsuspected ones counted as held), within a small budget of solves. Every packet of
// every solve is checked; none that fails is delivered (E56).

// cand is a repair symbol a block keeps for another solve.
type cand struct {
	idx   uint8
	fails uint8  // failed solves it took part in
	fed   bool   // the decoder holds it
	seq   uint16 // arrival order within the block
	over  psn.Bitmap
	sym   []byte
}

const (
	maxSolves   = 4    // solves per block: each is a chance of 2^-32 for wrong bytes to pass C12
	maxVersions = 2    // versions of one Repair Index kept
	maxSpareSym = 1024 // symbol buffers kept for reuse
)

// keepLimit bounds the symbols a block keeps: twice k and some more, beyond what the CSF sends
// for a block (m, two coded rounds of at most k + 1, E56).
func keepLimit(b *rblock) int { return min(255*maxVersions, 2*b.k+32) }

// keep takes a coded repair symbol of block b (its decoder in use). It reports whether the
// block has something new to solve with. A copy of one held (same index, set and bytes) is a
// duplicate (C7 d); another version of a held index is kept beside it, unfed, for when a solve
// fails.
func (r *Receiver) keep(f *rflow, b *rblock, idx int, over psn.Bitmap, sym []byte) bool {
	versions := 0
	for i := range b.cands {
		c := &b.cands[i]
		if int(c.idx) != idx {
			continue
		}
		if c.over == over && bytes.Equal(c.sym, sym) {
			f.st.RepairDuplicate++
			return false
		}
		versions++
	}
	if versions >= maxVersions || len(b.cands) >= keepLimit(b) && !r.dropSuspect(b) {
		f.st.RepairNotKept++
		return false
	}
	c := r.addCand(b, idx, over, sym)
	if versions > 0 {
		// One of the two is not the CSF's (or the link changed its bytes). The first stays in
		// the decoder until a solve says otherwise; after one has failed, the decoder takes
		// this one if it holds no version of the index (its first is suspected).
		f.st.RepairConflict++
		if b.failed == 0 {
			return false
		}
		c.fed = b.dec.AddRepair(idx, over, sym) == nil
		b.stuck = false
		return true
	}
	if err := b.dec.AddRepair(idx, over, sym); err != nil {
		f.st.RepairRejected++
		r.dropCand(b, len(b.cands)-1)
		return false
	}
	c.fed = true
	b.stuck = false
	return true
}

func (r *Receiver) addCand(b *rblock, idx int, over psn.Bitmap, sym []byte) *cand {
	var buf []byte
	if n := len(r.syms); n > 0 {
		buf, r.syms = r.syms[n-1][:0], r.syms[:n-1]
	}
	b.seq++
	b.cands = append(b.cands, cand{idx: uint8(idx), seq: b.seq, over: over, sym: append(buf, sym...)})
	return &b.cands[len(b.cands)-1]
}

// dropSuspect makes room by dropping the kept symbol with the most failed solves; false when
// none has failed.
func (r *Receiver) dropSuspect(b *rblock) bool {
	worst := -1
	for i := range b.cands {
		if c := &b.cands[i]; c.fails > 0 && !c.fed && (worst < 0 || c.fails > b.cands[worst].fails) {
			worst = i
		}
	}
	if worst < 0 {
		return false
	}
	r.dropCand(b, worst)
	return true
}

func (r *Receiver) dropCand(b *rblock, i int) {
	r.spareSym(b.cands[i].sym)
	b.cands = slices.Delete(b.cands, i, i+1)
}

func (r *Receiver) spareSym(s []byte) {
	if s != nil && len(r.syms) < maxSpareSym {
		r.syms = append(r.syms, s)
	}
}

// releaseCands gives an ended block's symbols back for reuse.
func (r *Receiver) releaseCands(b *rblock) {
	for i := range b.cands {
		r.spareSym(b.cands[i].sym)
		b.cands[i] = cand{}
	}
	b.cands = b.cands[:0]
	b.failed, b.solves, b.stuck = 0, 0, false
}

// planOf returns, in order, the kept symbols the decoder's solve takes for the unknown set u:
// the lowest Repair Indices fed whose sets cover u (fec.Block.Plan), n of them.
func (r *Receiver) planOf(b *rblock, u psn.Bitmap, n int) []int {
	p := r.order2[:0]
	for i := range b.cands {
		if c := &b.cands[i]; c.fed && c.over.Contains(&u) {
			p = append(p, i)
		}
	}
	slices.SortFunc(p, func(x, y int) int { return int(b.cands[x].idx) - int(b.cands[y].idx) })
	r.order2 = p
	return p[:min(n, len(p))]
}

// planKey names a set of kept symbols by their arrival numbers, whatever their order.
func planKey(b *rblock, plan []int) uint64 {
	var seqs [64]uint16
	s := seqs[:0]
	for _, i := range plan {
		s = append(s, b.cands[i].seq)
	}
	slices.Sort(s)
	h := uint64(14695981039346656037)
	for _, q := range s {
		h = (h ^ uint64(q)) * 1099511628211
	}
	return h | 1
}

// tried reports whether a solve from this set of symbols has failed already.
func (b *rblock) triedPlan(key uint64) bool {
	for _, k := range b.tried[:min(b.solves, maxSolves)] {
		if k == key {
			return true
		}
	}
	return false
}

// refeed rebuilds b's decoder from the sources and restored packets the window holds and the
// kept symbols: all of them in arrival order until a solve has failed; after that, those not
// suspected, and, when all is true, the suspects too, least suspected first, until the block is
// solvable.
func (r *Receiver) refeed(f *rflow, b *rblock, all bool) error {
	b.decoding = false
	if err := r.ensureDecoder(f, b); err != nil {
		return err
	}
	ord := r.order2[:0]
	for i := range b.cands {
		b.cands[i].fed = false
		ord = append(ord, i)
	}
	if b.failed > 0 {
		slices.SortStableFunc(ord, func(x, y int) int { return int(b.cands[x].fails) - int(b.cands[y].fails) })
	}
	r.order2 = ord
	for _, i := range ord {
		c := &b.cands[i]
		if b.failed > 0 && c.fails > 0 && !all {
			break
		}
		if b.failed > 0 && all && b.dec.Status().Solvable() {
			break
		}
		if err := b.dec.AddRepair(int(c.idx), c.over, c.sym); err == nil {
			c.fed = true
		}
	}
	return nil
}

// failedSolve records that the solve of unknown set u from the decoder as fed delivered packets
// that failed the ICRC check: its symbols are suspects. The decoder is rebuilt from what is not
// suspected.
func (r *Receiver) failedSolve(f *rflow, b *rblock, u psn.Bitmap, n int) {
	b.failed++
	plan := r.planOf(b, u, n)
	if i := b.solves - 1; i >= 0 && i < maxSolves {
		b.tried[i] = planKey(b, plan)
	}
	for _, i := range plan {
		if c := &b.cands[i]; c.fails < 255 {
			c.fails++
		}
	}
	if err := r.refeed(f, b, false); err != nil {
		r.abandon(f, b, false)
	}
}

// retry tries the suspects too, least suspected first, when what is not suspected cannot solve
// the block and its round has ended (C7 f): sets not tried yet, within the budget of solves. It
// leaves the decoder holding the unsuspected symbols only, so that the next request counts
// only those as held (C8: r). false: the block was abandoned.
func (r *Receiver) retry(now time.Duration, f *rflow, b *rblock) bool {
	for !b.stuck && b.solves < maxSolves {
		if err := r.refeed(f, b, true); err != nil {
			r.abandon(f, b, false)
			return false
		}
		st := b.dec.Status()
		if !st.Solvable() || b.triedPlan(planKey(b, r.planOf(b, st.Unknown, st.U))) {
			b.stuck = true // nothing new to try until another symbol or source comes
			break
		}
		if !r.tryDecode(now, f, b) {
			return false
		}
		if b.ended {
			return true
		}
	}
	if err := r.refeed(f, b, false); err != nil {
		r.abandon(f, b, false)
		return false
	}
	return true
}
