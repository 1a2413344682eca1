package csf

import "github.com/crem-project/crem/psn"

// absentRuns records the PSNs of the flow's direction that carry no packet and belong to no
// block: the gaps the Sender skipped (a requester's SEND and WRITE PSNs among the READ
// responses it protects) and the PSNs a READ request consumed (C13) beyond its block. A PSN-range
// request naming them gets an INFO message with no present position (E29), so the CRF settles
// them as absent instead of asking until it gives up and counts a loss that never happened.
//
// Runs are appended in PSN order (the Sender sees sources in order, and a run ends where the
// next source starts), so the ring is sorted from its oldest run and a binary search finds a PSN.
// The ring is bounded; the oldest runs go first, and no run is kept once the newest lies more
// than a quarter of the PSN space ahead of it, so serial comparisons stay meaningful.
type absentRuns struct {
	r    []psn.Range
	head int // index of the oldest run
	n    int
}

// maxAbsentRuns bounds the runs a flow remembers.
const maxAbsentRuns = 1024

// absentHorizon is how far behind the newest PSN a run is still answered for; maxRun bounds one
// run (a READ of 2^31 octets at an MTU of 256 consumes 2^23 PSNs).
const (
	absentHorizon = psn.Modulus / 4
	maxRun        = psn.Modulus/2 - 1
)

func (a *absentRuns) at(i int) *psn.Range { return &a.r[(a.head+i)%len(a.r)] }

// add records count PSNs from start; a run that continues the newest extends it.
func (a *absentRuns) add(start psn.PSN, count uint32) {
	if count == 0 {
		return
	}
	if a.r == nil {
		a.r = make([]psn.Range, maxAbsentRuns)
	}
	if a.n > 0 {
		if last := a.at(a.n - 1); last.End() == start && last.Count+count <= maxRun {
			last.Count += count
			a.expire(start.Add(int(count) - 1))
			return
		}
	}
	if a.n == len(a.r) {
		a.head = (a.head + 1) % len(a.r)
		a.n--
	}
	*a.at(a.n) = psn.Range{Start: start, Count: min(count, maxRun)}
	a.n++
	a.expire(start.Add(int(count) - 1))
}

// expire drops the runs that end more than the horizon behind newest.
func (a *absentRuns) expire(newest psn.PSN) {
	for a.n > 1 && a.at(0).Last().Forward(newest) > absentHorizon {
		a.head = (a.head + 1) % len(a.r)
		a.n--
	}
}

// find returns the run that holds p, if any.
func (a *absentRuns) find(p psn.PSN) (psn.Range, bool) {
	if a.n == 0 {
		return psn.Range{}, false
	}
	base := a.at(0).Start
	d := base.Forward(p)
	if d >= psn.Modulus/2 {
		return psn.Range{}, false // before the oldest run
	}
	// The last run starting at or before p, counted from base.
	i, j := 0, a.n
	for i < j {
		h := i + (j-i)/2
		if base.Forward(a.at(h).Start) <= d {
			i = h + 1
		} else {
			j = h
		}
	}
	if i == 0 {
		return psn.Range{}, false
	}
	if r := *a.at(i - 1); r.Contains(p) {
		return r, true
	}
	return psn.Range{}, false
}

// within returns how many PSNs of [from, to) the runs hold (to at most half the space after
// from).
func (a *absentRuns) within(from, to psn.PSN) uint32 {
	span := from.Forward(to)
	var n uint32
	for i := 0; i < a.n; i++ {
		r := a.at(i)
		lo := from.Forward(r.Start) // the run's start, counted from from
		if lo >= psn.Modulus/2 {
			// The run starts before from: it counts from from on, if it reaches that far.
			if back := r.Start.Forward(from); back < r.Count {
				n += min(r.Count-back, span)
			}
			continue
		}
		if lo >= span {
			continue
		}
		n += min(r.Count, span-lo)
	}
	return n
}

// reset forgets every run (a new session), keeping the storage.
func (a *absentRuns) reset() { a.head, a.n = 0, 0 }
