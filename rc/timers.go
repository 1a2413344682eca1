package rc

import "time"

// timers runs the requester's expired timers.
func (r *requester) timers(q *QP) {
	if r.err != nil {
		return
	}
	now := q.now
	if r.rnrActive && now >= r.rnrUntil {
		r.rnrActive = false
		r.goBack(r.rnrPSN, causeRNR)
	}
	if len(r.tx) > 0 {
		switch r.cfg.Mode {
		case ModeGBN:
			if now >= r.lastProgress+r.rto() {
				q.stats.Timeouts++
				r.lastProgress = now
				if r.retry(q) {
					r.goBack(r.una, causeTimeout)
				}
			}
		case ModeSR:
			r.srTimers(q)
		case ModeTCAETH:
			if now >= r.lastProgress+r.ackTimeout() {
				r.lastProgress = now
				r.fallback(q)
			}
		}
	}
	if r.reads > 0 && r.err == nil {
		for _, w := range r.sq {
			if !w.started || !w.responder() || w.done || now < w.lastProgress+r.rto() {
				continue
			}
			w.lastProgress = now
			if w.first != r.una {
				// Earlier requests are outstanding and the responder executes in order:
				// they recover first, and this one's retries do not run.
				continue
			}
			w.retries++
			if w.retries > r.cfg.RetryCount {
				r.fail(q, w.first, StatusRetryExceeded)
				return
			}
			q.stats.Timeouts++
			if w.wr.Op == OpRead {
				r.reissueRead(q, w, w.n, now, causeTimeout)
			} else {
				r.queue(w.first, causeTimeout, 0)
			}
		}
	}
}

// retry counts a timeout without progress and fails the QP beyond the retry count.
func (r *requester) retry(q *QP) bool {
	r.retries++
	if r.retries > r.cfg.RetryCount {
		r.fail(q, r.una, StatusRetryExceeded)
		return false
	}
	return true
}

// srTimers fires the per-packet timers of sr that are due.
func (r *requester) srTimers(q *QP) {
	for r.tqHead < len(r.tq) {
		te := r.tq[r.tqHead]
		i := psnIndex(r.una, te.p, len(r.tx))
		if i < 0 || r.tx[i].acked || r.tx[i].sacked || r.tx[i].sent != te.sent || r.tx[i].w.done {
			r.tqHead++
			continue
		}
		if q.now < te.sent+r.rto() {
			break
		}
		r.tqHead++
		e := &r.tx[i]
		e.timeouts++
		if e.timeouts > r.cfg.RetryCount {
			r.fail(q, te.p, StatusRetryExceeded)
			return
		}
		q.stats.Timeouts++
		r.queue(te.p, causeTimeout, 0)
	}
	if r.tqHead > 1024 && r.tqHead*2 > len(r.tq) {
		r.tq = append(r.tq[:0], r.tq[r.tqHead:]...)
		r.tqHead = 0
	}
	if r.srProbeDue() && q.now >= r.lastProgress+r.rto() {
		r.srProbe(q)
	}
}

// srProbeDue reports whether sr has outstanding PSNs and no timer running for any of them:
// each was reported received by a NAK (protocol notes R15), and only the cumulative ACK is
// missing.
func (r *requester) srProbeDue() bool {
	return len(r.tx) > 0 && r.tqHead == len(r.tq) && len(r.retx) == 0 && !r.rnrActive
}

// srProbe resends the oldest PSN reported received but not acknowledged, once per RTO
// without progress: a duplicate draws the ACK that was lost, and a packet the responder let
// go after reporting it (an RNR NAK that was lost) arrives again (protocol notes R15). A READ
// or atomic that holds the cumulative point recovers by its own retry.
func (r *requester) srProbe(q *QP) {
	r.lastProgress = q.now
	if w := r.tx[0].w; w.responder() && !w.done {
		return
	}
	for i := range r.tx {
		e := &r.tx[i]
		if e.acked || e.w.responder() || e.w.done || e.queued {
			continue
		}
		q.stats.Timeouts++
		if !r.retry(q) {
			return
		}
		r.queue(r.una.Add(i), causeProbe, 0)
		return
	}
}

// deadline returns the earliest requester timer.
func (r *requester) deadline(q *QP) (time.Duration, bool) {
	if r.err != nil {
		return 0, false
	}
	var d time.Duration
	ok := false
	set := func(t time.Duration) {
		if !ok || t < d {
			d, ok = t, true
		}
	}
	if r.rnrActive {
		set(r.rnrUntil)
	}
	if len(r.tx) > 0 {
		switch r.cfg.Mode {
		case ModeGBN:
			set(r.lastProgress + r.rto())
		case ModeSR:
			for r.tqHead < len(r.tq) {
				te := r.tq[r.tqHead]
				i := psnIndex(r.una, te.p, len(r.tx))
				if i < 0 || r.tx[i].acked || r.tx[i].sacked || r.tx[i].sent != te.sent || r.tx[i].w.done {
					r.tqHead++
					continue
				}
				set(te.sent + r.rto())
				break
			}
			if r.srProbeDue() {
				set(r.lastProgress + r.rto())
			}
		case ModeTCAETH:
			set(r.lastProgress + r.ackTimeout())
		}
	}
	if r.reads > 0 {
		for _, w := range r.sq {
			if w.started && w.responder() && !w.done {
				set(w.lastProgress + r.rto())
			}
		}
	}
	return d, ok
}

// MaxRdAtomic bounds the READ and atomic requests a requester has started and not completed,
// as IBTA's max_rd_atomic does: the responder keeps the results of that many atomics, so that
// a retried one is answered from its saved result and never executed twice.
const MaxRdAtomic = 16

// rnrDelays is IBTA's RNR NAK timer table in microseconds, indexed by the 5-bit code.
var rnrDelays = [32]int64{655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280,
	1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840,
	245760, 327680, 491520}

// RNRDelay returns the time an RNR NAK's timer code asks the requester to wait.
func RNRDelay(code uint8) time.Duration {
	return time.Duration(rnrDelays[code&0x1f]) * time.Microsecond
}
