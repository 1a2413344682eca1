package rc

import (
	"encoding/binary"
	"time"

	"github.com/crem-project/crem/roce"
)

func (r *requester) onAtomicAck(q *QP, p *roce.Packet) {
	if !r.extendedOK(p) {
		q.stats.Malformed++
		return
	}
	q.stats.AcksReceived++
	i := psnIndex(r.una, p.BTH.PSN, r.tx.len())
	if i < 0 || !r.tx.at(i).resp || !r.wqe(r.tx.at(i)).wr.Op.isAtomic() {
		q.stats.StaleAcks++
		return
	}
	w := r.wqe(r.tx.at(i))
	if r.cfg.Mode == ModeTCAETH {
		if r.cumulativeOK(p.TCAETH.LastFinished) {
			r.ackTo(q, p.TCAETH.LastFinished)
		}
		r.onTCAETH(q, &p.TCAETH)
		r.lastProgress = q.now
	} else {
		r.ackTo(q, p.BTH.PSN.Add(-1))
	}
	if w.done {
		q.stats.DuplicateResponses++
		return
	}
	r.retries = 0
	r.epoch++
	r.respLast = q.now
	w.orig = p.AtomicAckETH.OrigRemData
	binary.LittleEndian.PutUint64(w.wr.Local, w.orig)
	r.finishResponder(w)
}

// finishResponder marks a READ or atomic done and its PSNs acknowledged.
func (r *requester) finishResponder(w *wqe) {
	w.done = true
	r.reads--
	if i := psnIndex(r.una, w.first, r.tx.len()); i >= 0 {
		for k := i; k < i+w.n && k < r.tx.len(); k++ {
			r.tx.at(k).acked = true
		}
	}
	r.pop()
}

func (r *requester) onReadResponse(q *QP, p *roce.Packet) {
	i := psnIndex(r.una, p.BTH.PSN, r.tx.len())
	if i < 0 {
		q.stats.DuplicateResponses++
		return
	}
	w := r.wqe(r.tx.at(i))
	if w.wr.Op != OpRead {
		q.stats.Unexpected++
		return
	}
	j := int(w.first.Forward(p.BTH.PSN))
	if !readOpcodeFits(w, j, p.BTH.OpCode) {
		// IBTA's opcode sequence: a FIRST only where a request for responses began, a LAST
		// only where one ended (R27). A packet that breaks it is discarded whatever its ICRC.
		q.stats.ResponseOutOfSequence++
		return
	}
	// A READ response acknowledges every request before the READ, as in IBTA.
	r.ackTo(q, w.first.Add(-1))
	if w.done || w.got[j] {
		q.stats.DuplicateResponses++
		return
	}
	mtu := r.cfg.MTU
	want := min(mtu, len(w.wr.Local)-j*mtu)
	if len(p.Payload) != want {
		q.stats.Malformed++
		return
	}
	// The READs before this one sent all their responses asked for no later than this one
	// before it: those still missing are lost (R17).
	if r.reads > 1 {
		r.earlierLost(q, w, w.asked[j])
	}
	if r.cfg.Mode == ModeGBN && j != w.low {
		// gbn takes a READ's responses in order only: one beyond the first missing one is
		// discarded, and the READ is re-issued from the missing one, once until it arrives
		// (IBTA's READ retry; R16).
		q.stats.DuplicateResponses++
		if !w.waiting {
			r.reissueRead(q, w, w.n, q.now, causeRead)
		}
		return
	}
	if j == 0 && !w.reissued && !r.sampled {
		// The first response of a READ asked for once is the QP's first RTT sample when it has
		// none, so that a QP that only reads leaves the local ACK timeout's floor (R33).
		r.sample(q, q.now-w.asked[0])
	}
	copy(w.wr.Local[j*mtu:], p.Payload)
	w.got[j] = true
	w.gotN++
	for w.low < w.n && w.got[w.low] {
		w.low++
		w.waiting = false
	}
	w.lastProgress, r.respLast = q.now, q.now
	w.retries, r.retries = 0, 0
	r.epoch++
	q.stats.ReadResponsesReceived++
	if w.gotN == w.n {
		r.finishResponder(w)
		return
	}
	// A response beyond a missing one that was asked for no later than it: the missing one is
	// lost, as one request's responses come in order (IBTA's READ retry).
	if j > 0 && !w.got[j-1] && w.asked[j-1] <= w.asked[j] {
		r.readLost(q, w, j, w.asked[j])
	} else if r.cfg.Mode != ModeGBN && w.low < j && w.asked[j] > w.askedFirst {
		// A re-issued response with a gap below it: re-issues are answered in PSN order (R17),
		// so a response further down asked no later and still missing is lost too, its re-issue
		// or the response; only re-issued responses look, as they are few.
		r.readLost(q, w, j, w.asked[j])
	}
}

// readLost acts on evidence that the missing responses of w below limit, last asked for no
// later than before, are lost: gbn re-issues at once (IBTA); sr and tcaeth wait a reorder
// window from the evidence and re-issue what is still missing then, so that a response that
// was only late (restored by CREM, reordered) costs no re-issue (protocol notes R22).
func (r *requester) readLost(q *QP, w *wqe, limit int, before time.Duration) {
	if r.cfg.Mode == ModeGBN {
		r.reissueRead(q, w, limit, before, causeRead)
		return
	}
	if w.hasEv && before <= w.evBefore && limit <= w.evLimit {
		return // queued already, due no later
	}
	w.hasEv, w.evBefore, w.evLimit = true, before, limit
	if r.readEvHead == len(r.readEv) {
		r.readEv, r.readEvHead = r.readEv[:0], 0
	}
	r.readEv = append(r.readEv, readEvidence{w: w, at: q.now, before: before, limit: limit})
}

// readEvidenceDue re-issues what the evidence older than the reorder window still finds missing.
func (r *requester) readEvidenceDue(q *QP) {
	for r.readEvHead < len(r.readEv) {
		e := r.readEv[r.readEvHead]
		if q.now < e.at+r.cfg.ReorderWindow {
			return
		}
		r.readEv[r.readEvHead] = readEvidence{}
		r.readEvHead++
		// Evidence may queue again: a re-issue asks for at most 16 runs, and what it left
		// out is still lost.
		e.w.hasEv = false
		if !e.w.done {
			r.reissueRead(q, e.w, e.limit, e.before, causeRead)
		}
	}
}

// earlierLost takes as lost (readLost) the READs posted before w whose first missing response
// was asked for no later than t, the ask time of a response of w that arrived: the responder
// sends a READ's responses before those of every later READ asked for at the same time or
// later (R17).
func (r *requester) earlierLost(q *QP, w *wqe, t time.Duration) {
	for _, o := range r.sq {
		if o == w || !o.started {
			return
		}
		if o.wr.Op != OpRead || o.done || o.low >= o.n || o.asked[o.low] > t || o.waiting {
			continue
		}
		r.readLost(q, o, o.n, t)
	}
}

// Where the requests for a READ's responses began and ended: the READ itself at its first and
// last PSN, each re-issue at the first and last it asked for.
const (
	readEdgeBegin uint8 = 1 << iota
	readEdgeEnd
)

// readOpcodeFits reports whether a READ response with opcode op may stand at position j of w
// (IBTA's opcode sequence, R27): a response begins (FIRST, ONLY) only where a request for its
// responses began, ends (LAST, ONLY) only where one ended, and a MIDDLE is neither a READ's
// first nor its last.
func readOpcodeFits(w *wqe, j int, op roce.Opcode) bool {
	e := w.edges[j]
	switch op {
	case roce.OpReadResponseFirst:
		return e&readEdgeBegin != 0 && j < w.n-1
	case roce.OpReadResponseLast:
		return e&readEdgeEnd != 0 && j > 0
	case roce.OpReadResponseOnly:
		return e&readEdgeBegin != 0 && e&readEdgeEnd != 0
	default:
		return j > 0 && j < w.n-1
	}
}

// reissueRead asks again for the missing responses of w below limit that were last asked for
// no later than before: from the first of them to the end in gbn, each missing run in sr and
// tcaeth.
func (r *requester) reissueRead(q *QP, w *wqe, limit int, before time.Duration, cause uint8) {
	lost := func(j int) bool { return !w.got[j] && w.asked[j] <= before }
	if r.cfg.Mode == ModeGBN {
		for j := 0; j < limit; j++ {
			if lost(j) {
				for k := j; k < w.n; k++ {
					w.asked[k] = q.now
				}
				w.waiting = true
				r.queue(w.first.Add(j), cause, 0)
				return
			}
		}
		return
	}
	runs := 0
	for j := 0; j < limit && runs < 16; {
		if !lost(j) {
			j++
			continue
		}
		k := j
		for k < w.n && lost(k) {
			w.asked[k] = q.now
			k++
		}
		r.queue(w.first.Add(j), cause, k-j)
		runs++
		j = k
	}
}
