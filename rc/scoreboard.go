package rc

import (
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// onTCAETH applies an extended ACK's segments to the scoreboard and runs the loss decision
// (T5). It reports whether the ACK marked anything new.
func (r *requester) onTCAETH(q *QP, t *roce.TCAETH) bool {
	newest, fresh := -1, false
	hi := t.LastFinished
	for _, s := range t.Used() {
		hi = s.Right
		// Only the part inside the send buffer matters; a forged segment of millions of
		// PSNs costs no more than the buffer.
		lo, hi2 := r.clip(s.Left, s.Right)
		for i := r.markedTo(lo, hi2); i < hi2; i++ {
			e := r.tx.at(i)
			if e.sacked || e.acked {
				continue
			}
			e.sacked, fresh = true, true
			if e.sends == 1 {
				newest = max(newest, i)
			}
			r.rackXmit = max(r.rackXmit, e.sent)
		}
		r.markSpan(lo, hi2)
	}
	if newest >= 0 {
		r.sample(q, q.now-r.tx.at(newest).sent)
	}
	if r.cumulativeOK(hi) && (!r.hasRep || r.highestRep.Before(hi)) {
		r.highestRep, r.hasRep = hi, true
	}
	r.detectLoss(q)
	return fresh
}

// detectLoss queues every PSN the T5 decision deems lost: not marked by the scoreboard, below
// the highest PSN reported received, sent more than the reorder window before the newest
// packet reported received, and not retransmitted within the last SRTT (plus four RTT
// deviations, the time its own report may take).
//
// The candidates are kept as they are found (holes, ascending): a PSN below the highest
// reported one that is neither acknowledged nor marked when the decision first passes it, until
// it is; marks are never taken back in tcaeth. Each ACK so looks at the candidates and the
// PSNs newly below the highest reported, not at the whole send buffer.
func (r *requester) detectLoss(q *QP) {
	if !r.hasRep {
		return
	}
	hi := psnIndex(r.una, r.highestRep, r.tx.len())
	start := 0
	if r.scanned.After(r.una) {
		start = min(int(r.una.Forward(r.scanned)), r.tx.len())
	}
	for i := start; i < hi; i++ {
		if e := r.tx.at(i); !e.acked && !e.sacked && !e.resp {
			r.holes = append(r.holes, r.una.Add(i))
		}
	}
	if hi > start {
		r.scanned = r.una.Add(hi)
	}
	keep := r.holes[:0]
	for _, p := range r.holes {
		i := psnIndex(r.una, p, r.tx.len())
		if i < 0 {
			continue
		}
		e := r.tx.at(i)
		if e.acked || e.sacked {
			continue
		}
		keep = append(keep, p)
		if e.queued || i >= hi {
			continue
		}
		if e.sent+r.reorderWindow(e, p) > r.rackXmit {
			continue
		}
		if e.sends > 1 && q.now-e.sent < r.srtt+4*r.rttvar {
			continue
		}
		r.queue(p, causeLoss, 0)
	}
	r.holes = keep
}

// fallback is the T7 timeout: resend the highest min(C_thresh, outstanding) PSNs that the
// scoreboard does not mark.
func (r *requester) fallback(q *QP) {
	n := CThresh(r.cfg.Rate, r.cfg.MTU, r.cfg.TThresh)
	var picked []int
	for i := r.tx.len() - 1; i >= 0 && len(picked) < n; i-- {
		e := r.tx.at(i)
		if e.acked || e.sacked || e.resp {
			continue
		}
		picked = append(picked, i)
	}
	if len(picked) == 0 {
		if r.tx.len() > 0 && r.tx.at(0).resp {
			return // a READ or atomic holds the cumulative point; its own retry runs
		}
		// Everything is marked but not cumulatively acknowledged (the last ACK was lost):
		// one duplicate of the highest PSN draws an ACK.
		for i := r.tx.len() - 1; i >= 0; i-- {
			if e := r.tx.at(i); !e.acked && !e.resp {
				picked = append(picked, i)
				break
			}
		}
	}
	if len(picked) == 0 {
		return
	}
	q.stats.Timeouts++
	if !r.retry(q) {
		return
	}
	for k := len(picked) - 1; k >= 0; k-- {
		e := r.tx.at(picked[k])
		if e.queued {
			continue
		}
		r.queue(r.una.Add(picked[k]), causeTimeout, 0)
	}
}

// clip returns the send-buffer indexes [lo, hi) of the PSNs from left to right.
func (r *requester) clip(left, right psn.PSN) (lo, hi int) {
	n := r.tx.len()
	last := r.una.Add(n - 1)
	if n == 0 || right.Before(r.una) || last.Before(left) {
		return 0, 0
	}
	if left.After(r.una) {
		lo = int(r.una.Forward(left))
	}
	hi = n
	if right.Before(last) {
		hi = int(r.una.Forward(right)) + 1
	}
	return lo, hi
}

// maxMarkedSpans bounds the spans the scoreboard remembers as marked: an ACK reports at most
// TCAETHMaxSegments ranges, and the ranges that grow are few.
const maxMarkedSpans = 8

// markedTo returns the first send-buffer index from lo (below hi) not known marked: lo itself
// unless a span the scoreboard marked whole holds it.
func (r *requester) markedTo(lo, hi int) int {
	if lo >= hi || r.fullWalks {
		return lo
	}
	p := r.una.Add(lo)
	for _, s := range r.marked {
		if !p.Before(s.lo) && p.Before(s.hi) {
			return min(hi, lo+int(p.Forward(s.hi)))
		}
	}
	return lo
}

// markSpan remembers the send-buffer indexes [lo, hi), just marked whole, in place of the
// spans it covers or that start where it does; beyond maxMarkedSpans the oldest goes.
func (r *requester) markSpan(lo, hi int) {
	if lo >= hi {
		return
	}
	n := psnSpan{r.una.Add(lo), r.una.Add(hi)}
	keep := r.marked[:0]
	for _, s := range r.marked {
		if !s.lo.Before(n.lo) && !n.hi.Before(s.hi) {
			continue // inside the new span
		}
		keep = append(keep, s)
	}
	r.marked = keep
	if len(r.marked) == maxMarkedSpans {
		r.marked = append(r.marked[:0], r.marked[1:]...)
	}
	r.marked = append(r.marked, n)
}

// forgetBefore drops what the memos of reported runs know of PSNs before una, which have left
// the send buffer, so that a PSN of a later turn of the 24-bit space is never taken for one
// of theirs.
func (r *requester) forgetBefore(una psn.PSN) {
	if m := &r.srMemo; m.valid && m.lo.Before(una) {
		m.valid = false
	}
	keep := r.marked[:0]
	for _, s := range r.marked {
		if !una.Before(s.hi) {
			continue
		}
		if s.lo.Before(una) {
			s.lo = una
		}
		keep = append(keep, s)
	}
	r.marked = keep
}

// reorderWindow is the T5 reorder window of the loss decision for e, at PSN p: ReorderWindow,
// or TThresh for a packet sent more than ReorderTail before its message's last one (R38).
func (r *requester) reorderWindow(e *txPkt, p psn.PSN) time.Duration {
	if r.cfg.ReorderTail <= 0 || r.cfg.Rate <= 0 || e.resp {
		return r.cfg.ReorderWindow
	}
	w := r.wqe(e)
	after := w.n - 1 - int(w.first.Forward(p)) // the message's packets after this one
	if float64(after)*float64(r.cfg.MTU)*8/float64(r.cfg.Rate) <= r.cfg.ReorderTail.Seconds() {
		return r.cfg.ReorderWindow
	}
	return min(r.cfg.TThresh, r.cfg.ReorderWindow)
}
