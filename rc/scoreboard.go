package rc

import (
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// onTCAETH applies an extended ACK's segments to the scoreboard and runs the loss decision
// (T5). It reports whether the ACK marked anything new.
func (r *requester) onTCAETH(q *QP, t *roce.TCAETH) bool {
	newest := -1
	hi := t.LastFinished
	for _, s := range t.Used() {
		hi = s.Right
		// Only the part inside the send buffer matters; a forged segment of millions of
		// PSNs costs no more than the buffer.
		lo, hi2 := r.clip(s.Left, s.Right)
		for i := lo; i < hi2; i++ {
			e := &r.tx[i]
			if e.sacked || e.acked {
				continue
			}
			e.sacked = true
			if e.sends == 1 {
				newest = max(newest, i)
			}
			r.rackXmit = max(r.rackXmit, e.sent)
		}
	}
	if newest >= 0 {
		r.sample(q, q.now-r.tx[newest].sent)
	}
	if r.cumulativeOK(hi) && (!r.hasRep || r.highestRep.Before(hi)) {
		r.highestRep, r.hasRep = hi, true
	}
	r.detectLoss(q)
	return newest >= 0
}

// detectLoss queues every PSN the T5 decision deems lost: not marked by the scoreboard, below
// the highest PSN reported received, sent more than the reorder window before the newest
// packet reported received, and not retransmitted within the last SRTT (plus four RTT
// deviations, the time its own report may take).
func (r *requester) detectLoss(q *QP) {
	if !r.hasRep {
		return
	}
	hi := psnIndex(r.una, r.highestRep, len(r.tx))
	for i := 0; i < hi; i++ {
		e := &r.tx[i]
		if e.acked || e.sacked || e.queued || e.w.responder() {
			continue
		}
		if e.sent+r.cfg.ReorderWindow > r.rackXmit {
			continue
		}
		if e.sends > 1 && q.now-e.sent < r.srtt+4*r.rttvar {
			continue
		}
		r.queue(r.una.Add(i), causeLoss, 0)
	}
}

// fallback is the T7 timeout: resend the highest min(C_thresh, outstanding) PSNs that the
// scoreboard does not mark.
func (r *requester) fallback(q *QP) {
	n := CThresh(r.cfg.Rate, r.cfg.MTU, r.cfg.TThresh)
	var picked []int
	for i := len(r.tx) - 1; i >= 0 && len(picked) < n; i-- {
		e := &r.tx[i]
		if e.acked || e.sacked || e.w.responder() || e.w.done {
			continue
		}
		picked = append(picked, i)
	}
	if len(picked) == 0 {
		if len(r.tx) > 0 && r.tx[0].w.responder() {
			return // a READ or atomic holds the cumulative point; its own retry runs
		}
		// Everything is marked but not cumulatively acknowledged (the last ACK was lost):
		// one duplicate of the highest PSN draws an ACK.
		for i := len(r.tx) - 1; i >= 0; i-- {
			if e := &r.tx[i]; !e.acked && !e.w.responder() {
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
		e := &r.tx[picked[k]]
		if e.queued {
			continue
		}
		r.queue(r.una.Add(picked[k]), causeTimeout, 0)
	}
}

// clip returns the send-buffer indexes [lo, hi) of the PSNs from left to right.
func (r *requester) clip(left, right psn.PSN) (lo, hi int) {
	n := len(r.tx)
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
