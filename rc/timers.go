package rc

import (
	"time"

	"github.com/crem-project/crem/psn"
)

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
	if r.tx.len() > 0 {
		switch r.cfg.Mode {
		case ModeGBN:
			// READ and atomics are recovered by their own timers (R16).
			if r.dataOut > 0 && now >= r.lastProgress+backoff(r.rto(), r.retries) {
				q.stats.Timeouts++
				r.lastProgress = now
				if r.retry(q) {
					r.goBack(r.una, causeTimeout)
				}
			}
		case ModeSR:
			r.srTimers(q)
		case ModeTCAETH:
			// T7 covers SEND and WRITE; READ and atomics have their own retry (R9, R24).
			if r.dataOut > 0 && now >= r.lastProgress+backoff(r.ackTimeout(), r.retries) {
				r.lastProgress = now
				r.fallback(q)
			}
		}
	}
	r.readEvidenceDue(q)
	if w := r.oldestResponder(); w != nil && now >= r.responderDue(w) {
		w.lastProgress = now
		if r.dataBefore(w.first) {
			// A SEND or WRITE before it is outstanding and the responder executes in order:
			// that recovers first, and this one's retries do not run.
			return
		}
		w.retries++
		if w.retries > r.cfg.RetryCount {
			r.fail(q, w.first, StatusRetryExceeded)
			return
		}
		q.stats.Timeouts++
		// As IBTA's timeout resends from the oldest request on: this one, and every later
		// READ or atomic that has had no response, whose request may be lost too (R16).
		later := false
		for _, o := range r.sq {
			if o == w {
				later = true
			}
			if !later || !o.started || !o.responder() || o.done || o != w && o.gotN > 0 {
				continue
			}
			if o.wr.Op == OpRead {
				r.reissueRead(q, o, o.n, now, causeTimeout)
			} else {
				r.queue(o.first, causeTimeout, 0)
			}
		}
	}
}

// dataBefore reports whether a SEND or WRITE PSN before p is neither acknowledged nor reported
// received.
func (r *requester) dataBefore(p psn.PSN) bool {
	n := int(r.una.Forward(p))
	for i := 0; i < n && i < r.tx.len(); i++ {
		if e := r.tx.at(i); !e.acked && !e.sacked && !e.resp {
			return true
		}
	}
	return false
}

// oldestResponder returns the oldest READ or atomic started and not completed, or nil. Only
// its timer runs: the responder answers in order, so the later ones wait for it (R16).
func (r *requester) oldestResponder() *wqe {
	if r.reads == 0 {
		return nil
	}
	for _, w := range r.sq {
		if w.started && w.responder() && !w.done {
			return w
		}
	}
	return nil
}

// responderDue returns when the timer of w, the oldest READ or atomic, expires: an RTO after
// the last response received, of w or of a later READ streaming in its turn, or after w's own
// last response or re-issue when it was re-issued since it last progressed, as a re-issue is
// answered ahead of the READs streaming (R16, R17).
func (r *requester) responderDue(w *wqe) time.Duration {
	base := max(w.lastProgress, r.respLast)
	if w.reissued && w.lastReissue >= w.lastProgress {
		base = w.lastReissue
	}
	return base + backoff(r.rto(), w.retries)
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
	rto := r.rto()
	for r.tqHead < len(r.tq) {
		te := r.tq[r.tqHead]
		if !r.srLive(te) {
			r.tqHead++
			continue
		}
		if q.now < te.sent+rto {
			break
		}
		r.tqHead++
		if !r.srTimeout(q, te) {
			return
		}
	}
	if r.tqHead > 1024 && r.tqHead*2 > len(r.tq) {
		r.tq = append(r.tq[:0], r.tq[r.tqHead:]...)
		r.tqHead = 0
	}
	for l := range r.tqb {
		for r.tqbHead[l] < len(r.tqb[l]) {
			te := r.tqb[l][r.tqbHead[l]]
			if !r.srLive(te) {
				r.tqbHead[l]++
				continue
			}
			if q.now < r.srDue(te, rto) {
				break
			}
			r.tqbHead[l]++
			if !r.srTimeout(q, te) {
				return
			}
		}
		if r.tqbHead[l] == len(r.tqb[l]) {
			r.tqb[l], r.tqbHead[l] = r.tqb[l][:0], 0
		}
	}
	if r.srProbeDue() && q.now >= r.lastProgress+backoff(r.rto(), r.retries) {
		r.srProbe(q)
	}
}

// srDue is when the sr timer te of a timeout retransmission expires: 2^level RTOs after it was
// sent while the QP has not progressed since, one RTO once it has (R34). Within a level the
// timers expire in the order of the transmissions: those of an earlier progress epoch, which
// wait one RTO, come before those of the present one.
func (r *requester) srDue(te timerEnt, rto time.Duration) time.Duration {
	if te.epoch != r.epoch {
		return te.sent + rto
	}
	return te.sent + backoff(rto, int(te.level))
}

// srLive reports whether the sr timer te still runs: its transmission is the packet's last,
// and the packet is neither acknowledged nor reported received nor of a completed READ.
func (r *requester) srLive(te timerEnt) bool {
	i := psnIndex(r.una, te.p, r.tx.len())
	return i >= 0 && !r.tx.at(i).acked && !r.tx.at(i).sacked && r.tx.at(i).sent == te.sent && !r.done(r.tx.at(i))
}

// srTimeout fires the sr timer te: the packet is resent, its timer backing off one level more
// when the QP has not progressed since the packet's last timeout (R34). It returns false when
// the packet exceeded the retry count and the QP failed.
func (r *requester) srTimeout(q *QP, te timerEnt) bool {
	e := r.tx.at(psnIndex(r.una, te.p, r.tx.len()))
	inc16(&e.timeouts)
	if int(e.timeouts) > r.cfg.RetryCount {
		r.fail(q, te.p, StatusRetryExceeded)
		return false
	}
	level := uint8(1)
	if te.level > 0 && te.epoch == r.epoch {
		level = min(te.level+1, maxBackoffShift)
	}
	q.stats.Timeouts++
	if r.queue(te.p, causeTimeout, 0) {
		it := &r.retx[len(r.retx)-1]
		it.level, it.epoch = level, r.epoch
	}
	return true
}

// srProbeDue reports whether sr has outstanding PSNs and no timer running for any of them:
// each was reported received by a NAK (protocol notes R15), and only the cumulative ACK is
// missing.
func (r *requester) srProbeDue() bool {
	if r.tx.len() == 0 || r.tqHead != len(r.tq) || r.retxHead != len(r.retx) || r.rnrActive {
		return false
	}
	for l := range r.tqb {
		if r.tqbHead[l] != len(r.tqb[l]) {
			return false
		}
	}
	return true
}

// srProbe resends the oldest PSN reported received but not acknowledged, once per RTO
// without progress: a duplicate draws the ACK that was lost, and a packet the responder let
// go after reporting it (an RNR NAK that was lost) arrives again (protocol notes R15). A READ
// or atomic that holds the cumulative point recovers by its own retry.
func (r *requester) srProbe(q *QP) {
	r.lastProgress = q.now
	if e := r.tx.at(0); e.resp && !r.wqe(e).done {
		return
	}
	for i := range r.tx.len() {
		e := r.tx.at(i)
		if e.acked || e.resp || e.queued {
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
	if r.tx.len() > 0 {
		switch r.cfg.Mode {
		case ModeGBN:
			if r.dataOut > 0 {
				set(r.lastProgress + backoff(r.rto(), r.retries))
			}
		case ModeSR:
			for r.tqHead < len(r.tq) {
				te := r.tq[r.tqHead]
				if !r.srLive(te) {
					r.tqHead++
					continue
				}
				set(te.sent + r.rto())
				break
			}
			for l := range r.tqb {
				for r.tqbHead[l] < len(r.tqb[l]) {
					te := r.tqb[l][r.tqbHead[l]]
					if !r.srLive(te) {
						r.tqbHead[l]++
						continue
					}
					set(r.srDue(te, r.rto()))
					break
				}
			}
			if r.srProbeDue() {
				set(r.lastProgress + backoff(r.rto(), r.retries))
			}
		case ModeTCAETH:
			if r.dataOut > 0 {
				set(r.lastProgress + backoff(r.ackTimeout(), r.retries))
			}
		}
	}
	if r.readEvHead < len(r.readEv) {
		set(r.readEv[r.readEvHead].at + r.cfg.ReorderWindow)
	}
	if w := r.oldestResponder(); w != nil {
		set(r.responderDue(w))
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
