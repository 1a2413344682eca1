package rc

import (
	"sort"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// rrange is a maximal run of received PSNs above the cumulative point, with what T4 needs to
// choose which ranges an ACK reports.
type rrange struct {
	l, r    psn.PSN
	reports int    // ACKs that carried its present extent
	lastRep uint64 // sequence number of the last ACK that carried it
}

// rangeSet is the receiver's SegmentList (draft section 3): received PSNs at or above a base,
// as ascending, non-adjacent ranges.
type rangeSet struct {
	rs []rrange
}

// insert adds p, received, given base at or below it; ranges that grow or merge count as
// changed (reports = 0).
func (s *rangeSet) insert(base, p psn.PSN) {
	d := base.Forward(p)
	i := sort.Search(len(s.rs), func(i int) bool { return base.Forward(s.rs[i].l) > d })
	if i > 0 && s.rs[i-1].r.Add(1) == p {
		s.rs[i-1].r, s.rs[i-1].reports = p, 0
		if i < len(s.rs) && s.rs[i].l == p.Add(1) {
			s.rs[i-1].r = s.rs[i].r
			s.rs[i-1].lastRep = min(s.rs[i-1].lastRep, s.rs[i].lastRep)
			s.rs = append(s.rs[:i], s.rs[i+1:]...)
		}
		return
	}
	if i > 0 && base.Forward(s.rs[i-1].r) >= d {
		return // already inside
	}
	if i < len(s.rs) && s.rs[i].l == p.Add(1) {
		s.rs[i].l, s.rs[i].reports = p, 0
		return
	}
	s.rs = append(s.rs, rrange{})
	copy(s.rs[i+1:], s.rs[i:])
	s.rs[i] = rrange{l: p, r: p}
}

// has reports whether p is in a range.
func (s *rangeSet) has(base, p psn.PSN) bool {
	d := base.Forward(p)
	i := sort.Search(len(s.rs), func(i int) bool { return base.Forward(s.rs[i].l) > d })
	return i > 0 && base.Forward(s.rs[i-1].r) >= d
}

// reported marks the range holding p as reported in its present extent (sr, protocol notes
// R15).
func (s *rangeSet) reported(base, p psn.PSN) {
	d := base.Forward(p)
	i := sort.Search(len(s.rs), func(i int) bool { return base.Forward(s.rs[i].l) > d })
	if i > 0 && base.Forward(s.rs[i-1].r) >= d {
		s.rs[i-1].reports++
	}
}

// trim forgets everything before base (the cumulative point moved to base).
func (s *rangeSet) trim(old, base psn.PSN) {
	if len(s.rs) == 0 {
		return
	}
	shift := old.Forward(base)
	n := 0
	for n < len(s.rs) && old.Forward(s.rs[n].r) < shift {
		n++
	}
	s.rs = s.rs[n:]
	if len(s.rs) > 0 && old.Forward(s.rs[0].l) < shift {
		s.rs[0].l = base
	}
	if len(s.rs) == 0 {
		s.rs = nil
	}
}

// report fills t's segments by T4: with at most three ranges, all of them; with more, the
// range holding the most recently received PSN and two others, and marks them reported.
// "Reported least recently" counts only reports of a range's present extent: a range that
// grew or merged since it was last reported twice goes first, the highest first, and unchanged
// ranges come round in the order they were last reported (protocol notes R6).
func (s *rangeSet) report(t *roce.TCAETH, base, recent psn.PSN, hasRecent bool, seq uint64) {
	var pick []int
	if len(s.rs) <= roce.TCAETHMaxSegments {
		for i := range s.rs {
			pick = append(pick, i)
		}
	} else {
		first := -1
		if hasRecent {
			d := base.Forward(recent)
			for i := range s.rs {
				if base.Forward(s.rs[i].l) <= d && base.Forward(s.rs[i].r) >= d {
					first = i
					break
				}
			}
		}
		if first >= 0 {
			pick = append(pick, first)
		}
		order := make([]int, 0, len(s.rs))
		for i := range s.rs {
			if i != first {
				order = append(order, i)
			}
		}
		sort.SliceStable(order, func(a, b int) bool {
			x, y := &s.rs[order[a]], &s.rs[order[b]]
			cx, cy := x.reports < 2, y.reports < 2
			switch {
			case cx != cy:
				return cx
			case cx:
				// Among changed ranges the highest first: below the newest data the
				// sender's loss decision is closest to acting on stale marks.
				return base.Forward(x.l) > base.Forward(y.l)
			}
			return x.lastRep < y.lastRep
		})
		pick = append(pick, order[:roce.TCAETHMaxSegments-len(pick)]...)
		sort.Ints(pick)
	}
	t.NumSegs = len(pick)
	for k, i := range pick {
		t.Segs[k] = roce.Segment{Left: s.rs[i].l, Right: s.rs[i].r}
		s.rs[i].reports++
		s.rs[i].lastRep = seq
	}
}
