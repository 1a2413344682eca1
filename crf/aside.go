package crf

import (
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// maxAside bounds the REPAIRs a flow keeps aside: a genuine one is kept only while the sources
// of the blocks before its own are still arriving, so a few suffice.
const maxAside = 16

// asideRepair is a REPAIR for a block ahead of every source seen, kept until the sources reach
// the block (E60). Taking it at once would make the block before its sources arrive: a forged
// one (an on-path sender at the CSF's address) would then take the block, the solves of its
// arriving sources fail, and its round would run out before the genuine REPAIRs come.
type asideRepair struct {
	at        time.Duration
	reachedAt time.Duration // when the sources passed its block's last PSN
	reached   bool
	ready     bool // with the others of its block, enough to solve it without its sources
	idx       uint8
	need      int // its block's sources (the Present Bitmap's count)
	start     psn.PSN
	k         int
	ce        bool
	msg       []byte
}

// countRepair counts a REPAIR as received.
func (f *rflow) countRepair(ce bool) {
	f.st.Repairs++
	f.iv.RepairsReceived++
	if ce {
		f.st.RepairsCE++
		f.iv.RepairsCEMarked++
	}
}

// ahead reports whether m names a block none of whose sources has been seen (its Block Start
// PSN after the highest source PSN, within the window's reach) and that is not made yet. An
// INFO is taken at once: it settles PSNs, it asks for nothing.
func (f *rflow) ahead(m *wire.Repair) bool {
	if !f.started || m.Info {
		return false
	}
	if d := f.high.Forward(m.BlockStartPSN); d == 0 || d >= psnHalf || d > f.reach() {
		return false
	}
	return !f.blockAt(m.BlockStartPSN)
}

// blockAt reports whether a live block starts at p.
func (f *rflow) blockAt(p psn.PSN) bool {
	if s := f.at(p); s != nil {
		if b := f.blockOf(s); b != nil && b.start == p {
			return true
		}
	}
	return false
}

// setAside keeps REPAIR msg for later; when the bound is full the oldest is dropped.
func (r *Receiver) setAside(now time.Duration, f *rflow, msg []byte, m *wire.Repair, ce bool) {
	f.st.RepairAside++
	if len(f.aside) == maxAside {
		f.st.RepairAsideDropped++
		old := f.aside[0]
		copy(f.aside, f.aside[1:])
		f.aside[maxAside-1] = old
		f.aside = f.aside[:maxAside-1]
	}
	if f.aside == nil {
		f.aside = make([]asideRepair, 0, maxAside)
	}
	n := len(f.aside)
	f.aside = f.aside[:n+1]
	a := &f.aside[n]
	a.at, a.reached, a.ready, a.start, a.k, a.ce = now, false, false, m.BlockStartPSN, int(m.K), ce
	a.idx, a.need = m.RepairIndex, m.Present.Count()
	a.msg = append(a.msg[:0], msg...)
	// A block whose sources were all lost is restored at once when its REPAIRs alone can solve
	// it (as many Repair Indexes as sources): a forger must then send a whole block's worth.
	var seen [256 / 64]uint64
	n = 0
	for i := range f.aside {
		if e := &f.aside[i]; e.start == a.start && e.k == a.k && seen[e.idx/64]&(1<<(e.idx%64)) == 0 {
			seen[e.idx/64] |= 1 << (e.idx % 64)
			n++
		}
	}
	if n >= a.need {
		for i := range f.aside {
			if e := &f.aside[i]; e.start == a.start {
				e.ready = true
			}
		}
	}
}

// asideDue is when a REPAIR kept aside is taken without another REPAIR making its block: a
// reorder allowance after the sources passed the block's last PSN (its genuine REPAIRs follow
// its last source: they have come by then, and a forged one is then only a second version).
// One the sources do not reach is dropped after asideWait reorder allowances (expired): a
// forged one for a block that never comes, or for one after a pause of the flow, must not make
// a block ahead of the sources, where the next message's blocks (of another k) would meet it.
// A genuine one for a block whose sources were all lost is taken when the next sources pass
// its PSNs (the RDMA transport's retransmission of them included), and only when none come for
// that long is the block left to the RDMA transport, as a lost REPAIR would.
func (f *rflow) asideDue(a *asideRepair) time.Duration {
	if a.reached {
		return a.reachedAt + f.allowance()
	}
	return a.at + asideWait*f.allowance()
}

// asideWait is how many reorder allowances a REPAIR no source reaches is kept.
const asideWait = 64

// releaseAside takes the REPAIRs kept aside whose block another REPAIR has made, or that are
// due (asideDue), and drops those expired.
func (r *Receiver) releaseAside(now time.Duration, f *rflow) {
	for i := 0; i < len(f.aside); {
		a := &f.aside[i]
		if !a.reached && !a.start.Add(a.k-1).After(f.high) {
			a.reached, a.reachedAt = true, now // its sources arrived or were lost
		}
		made := a.ready || f.blockAt(a.start)
		if !made && now < f.asideDue(a) {
			i++
			continue
		}
		take := made || a.reached && !f.allHeld(a.start, a.k)
		switch {
		case take:
			f.st.RepairAsideTaken++
		case a.reached:
			f.st.RepairAsideUnneeded++
		default:
			f.st.RepairAsideExpired++
		}
		// Move it past the length (its buffer stays for reuse) and take it from there: taking
		// it never sets another aside.
		e := *a
		n := len(f.aside)
		copy(f.aside[i:], f.aside[i+1:])
		f.aside[n-1] = e
		f.aside = f.aside[:n-1]
		if take {
			r.takeRepair(now, f, e.msg, e.ce, true)
		}
	}
}

// allHeld reports whether every PSN of the k from start has its source held: a block there has
// nothing to restore, and a REPAIR kept aside for it is not needed (a forged one, taken, would
// only meet the genuine blocks of those PSNs, which may start elsewhere or have another k).
func (f *rflow) allHeld(start psn.PSN, k int) bool {
	for j := range k {
		if s := f.at(start.Add(j)); s == nil || s.st != slotHeld {
			return false
		}
	}
	return true
}

// asideDeadline is the earliest time a REPAIR kept aside is due.
func (f *rflow) asideDeadline() (time.Duration, bool) {
	var d time.Duration
	for i := range f.aside {
		if t := f.asideDue(&f.aside[i]); i == 0 || t < d {
			d = t
		}
	}
	return d, len(f.aside) > 0
}
