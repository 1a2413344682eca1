package crf

import "github.com/crem-project/crem/psn"

// The source window (C7 b) is indexed by virtual position, not by PSN (E40). Every PSN the CRF
// tracks takes the next virtual position in PSN order, except the PSNs of a hole: the PSNs an
// RDMA READ request consumes (C13), and the part of a gap too long for the window. A hole takes
// no position, so a READ of any DMA length moves the window by one position, and a gap by at
// most half the window: neither can wrap the window over the blocks still open before it.
//
// The mapping is kept as the highest PSN consumed (high, at position vhigh), the highest PSN
// given a position or covered by a hole (top, at vtop), and the holes, oldest first, all at or
// before high. Between high and top there is no hole. A PSN behind high is found by a binary
// search over the holes; the window keeps the newest len(win) positions up to vtop.

// psnHalf is half the PSN space: serial arithmetic compares PSNs closer than this.
const psnHalf = 1 << 23

// hole is a run of PSNs without positions.
type hole struct {
	start psn.PSN
	n     uint32 // PSNs in it, at least 1
	v     uint32 // the position of the PSN after it (start + n)
	read  bool   // consumed by a READ request (else: the untracked part of a gap)
}

func (h *hole) end() psn.PSN { return h.start.Add(int(h.n)) }

// loc says where a PSN stands in the window.
type loc uint8

const (
	locNone    loc = iota // no position yet: the flow's first PSN has not been seen
	locTracked            // it has a position inside the window
	locAhead              // after every PSN given a position; take may give it one
	locHole               // inside a hole: absent, or a gap's untracked part
	locOld                // behind the window
)

// back returns how far q lies behind high + 1 (high itself is 1 back).
func (f *rflow) back(q psn.PSN) uint32 { return q.Forward(f.high.Add(1)) }

// locate returns PSN p's position and where it stands; for a PSN in a hole, the hole's index
// (and the position of the PSN before the hole).
func (f *rflow) locate(p psn.PSN) (uint32, loc, int) {
	if !f.based {
		return 0, locNone, -1
	}
	if d := f.high.Forward(p); d != 0 && d < psnHalf {
		if d <= f.high.Forward(f.top) {
			return f.vhigh + d, locTracked, -1
		}
		return f.vtop + f.top.Forward(p), locAhead, -1
	}
	bk := f.back(p)
	if f.haveFloor && bk > f.back(f.floor) {
		return 0, locOld, -1
	}
	var v uint32
	// The oldest hole whose end lies after p: the hole that holds p, or the first after it.
	// Holes further back have larger back distances, so the predicate runs false, then true.
	lo, hi := f.h0, len(f.holes)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if f.back(f.holes[m].end()) < bk {
			hi = m
		} else {
			lo = m + 1
		}
	}
	if lo == len(f.holes) {
		v = f.vhigh + 1 - bk // after the newest hole
	} else {
		h := &f.holes[lo]
		s := f.back(h.end()) + h.n // the hole's start, counted back
		if bk <= s {
			return h.v - 1, locHole, lo
		}
		v = h.v - (bk - s)
	}
	if f.vtop-v >= uint32(len(f.win)) {
		return v, locOld, -1
	}
	return v, locTracked, -1
}

// is reports whether slot s is the record of PSN p at position v.
func (s *slot) is(p psn.PSN, v uint32) bool { return s.st != slotNone && s.p == p && s.v == v }

// at returns PSN p's slot if it holds p's record, else nil.
func (f *rflow) at(p psn.PSN) *slot {
	v, l, _ := f.locate(p)
	if l != locTracked {
		return nil
	}
	if s := &f.win[v&f.mask]; s.is(p, v) {
		return s
	}
	return nil
}

// reach is how far past the highest PSN consumed a position may be given ahead of its packet
// (a block described before its sources), and how much of a gap keeps positions.
func (f *rflow) reach() uint32 { return uint32(len(f.win) / 2) }

// take returns PSN p's slot, made p's record if it held another's (flushing that); nil when p
// can have no slot: in a hole, behind the window, or further ahead than reach.
func (r *Receiver) take(f *rflow, p psn.PSN) *slot {
	v, l, _ := f.locate(p)
	switch l {
	case locTracked:
	case locAhead:
		if f.high.Forward(p) > f.reach() {
			return nil
		}
		f.assign(p)
	default:
		return nil
	}
	s := &f.win[v&f.mask]
	if !s.is(p, v) {
		r.reset(f, s, p, v)
	}
	return s
}

// anchor starts the mapping at p (position v): the flow's first source, or the PSN before the
// first block a REPAIR describes.
func (f *rflow) anchor(p psn.PSN, v uint32) {
	f.based = true
	f.high, f.vhigh, f.top, f.vtop = p, v, p, v
	f.holes, f.h0, f.haveFloor = f.holes[:0], 0, false
}

// assign gives positions to every PSN after top up to p.
func (f *rflow) assign(p psn.PSN) {
	f.vtop += f.top.Forward(p)
	f.top = p
	f.trim(0)
}

// addHole makes the PSNs after top up to p a hole: no position is used, and high and top become
// p (holes lie at or before high). The PSNs between high and top passed before are the
// caller's to have settled.
func (f *rflow) addHole(p psn.PSN, read bool) {
	n := f.top.Forward(p)
	if n == 0 || n >= psnHalf {
		return
	}
	f.trim(f.high.Forward(p))
	if k := len(f.holes); k > f.h0 && f.holes[k-1].end() == f.top.Add(1) && f.holes[k-1].read == read {
		f.holes[k-1].n += n // nothing took a position between them
	} else {
		f.holes = append(f.holes, hole{start: f.top.Add(1), n: n, v: f.vtop + 1, read: read})
	}
	f.top, f.high, f.vhigh = p, p, f.vtop
}

// setHigh moves high to p, which has a position at or before top; vhigh follows.
func (f *rflow) setHigh(p psn.PSN) {
	if v, l, _ := f.locate(p); l == locTracked {
		f.high, f.vhigh = p, v
	}
}

// trim forgets the holes the window no longer needs: those whose preceding PSN is behind the
// window, and those that high moving on by extra would put half the PSN space behind (serial
// arithmetic could no longer place them). Every PSN before a forgotten hole is behind the
// window (the floor).
func (f *rflow) trim(extra uint32) {
	w := uint32(len(f.win))
	for f.h0 < len(f.holes) {
		h := &f.holes[f.h0]
		if f.vtop-(h.v-1) < w && uint64(f.back(h.start))+uint64(extra) < psnHalf {
			break
		}
		f.floor, f.haveFloor = h.end(), true
		f.h0++
	}
	switch {
	case f.h0 == len(f.holes):
		f.holes, f.h0 = f.holes[:0], 0
	case f.h0 >= 64 && 2*f.h0 >= len(f.holes):
		f.holes = f.holes[:copy(f.holes, f.holes[f.h0:])]
		f.h0 = 0
	}
	if f.haveFloor && uint64(f.back(f.floor))+uint64(extra) >= psnHalf {
		f.haveFloor = false
	}
}

// gone reports whether PSN q is behind the window: no block holding it can be decoded.
func (f *rflow) gone(q psn.PSN) bool {
	v, l, _ := f.locate(q)
	switch l {
	case locOld:
		return true
	case locHole:
		return f.vtop-v >= uint32(len(f.win))
	}
	return false
}

// next returns the PSN after p, stepping over a hole that starts there.
func (f *rflow) next(p psn.PSN) psn.PSN {
	q := p.Add(1)
	if _, l, i := f.locate(q); l == locHole {
		return f.holes[i].end()
	}
	return q
}

// psnAt returns the PSN at position v, which lies at or before vtop and inside the window.
func (f *rflow) psnAt(v uint32) psn.PSN {
	// The newest hole that ends at or before v (positions are in the order of the holes).
	lo, hi := f.h0, len(f.holes)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if int32(v-f.holes[m].v) >= 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == f.h0 {
		if lo < len(f.holes) {
			h := &f.holes[lo]
			return h.start.Add(-int(h.v - v)) // before the oldest hole
		}
		return f.top.Add(-int(f.vtop - v))
	}
	h := &f.holes[lo-1]
	return h.end().Add(int(v - h.v))
}
