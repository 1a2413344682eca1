package rc

import (
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// afterData decides whether a new request packet triggers an ACK.
func (r *responder) afterData(q *QP, ackReq, opened bool) {
	if r.cfg.Mode == ModeTCAETH {
		if r.batchCount == 0 {
			r.batchStart = q.now
		}
		r.batchCount++
		switch {
		case ackReq:
			q.stats.AckTriggerImmediate++
		case opened:
			// A new gap: report the range below it in its final extent now, before the
			// sender's loss decision can take its unreported tail for lost (protocol notes R6).
			q.stats.AckTriggerGap++
		case q.now-r.batchStart >= r.cfg.TThresh:
			q.stats.AckTriggerTime++ // Condition A
			r.sendAck(q, false)
			return
		case r.batchCount >= q.cthresh:
			q.stats.AckTriggerCount++ // Condition B
			r.sendAck(q, false)
			return
		default:
			return
		}
		r.sendAck(q, true)
		return
	}
	if r.pending == 0 {
		r.pendingSince = q.now
	}
	r.pending++
	if ackReq || r.pending >= r.cfg.AckEvery {
		r.sendAck(q, false)
	}
}

// sendAck sends an ACK (an extended one in tcaeth, T2) and starts a new batch. A tcaeth ACK
// that may be the last before the requester falls silent is repeated should nothing new
// arrive (protocol notes R20): one that completes a message (AckReq, R21), reports a new gap,
// flushes a tail batch on the T6 timer or answers a duplicate. One that Condition A or B sent
// on a packet's arrival is not: the flow is sending, and its next packet's ACK carries the
// state (R26).
func (r *responder) sendAck(q *QP, repeat bool) {
	r.emitAck(q)
	r.pending, r.batchCount = 0, 0
	r.reportRuns(q) // sr: the selective acknowledgement rides with each ACK (protocol notes R15)
	if r.cfg.Mode == ModeTCAETH {
		r.ackAt, r.repeats, r.repeatArmed = q.now, 0, repeat
	}
}

func (r *responder) emitAck(q *QP) {
	p := roce.Packet{BTH: roce.BTH{OpCode: roce.OpAcknowledge, PSN: r.epsn.Add(-1)},
		AETH: roce.ACK(roce.CreditInvalid, r.msn)}
	r.extend(&p)
	q.emit(&p)
	q.stats.AckPackets++
}

// AckRepeats is how often a tcaeth responder repeats its latest ACK when nothing new arrives
// after it: T_thresh after it, and T_thresh after each repeat (protocol notes R20).
const AckRepeats = 2

// repeatDue returns when the tcaeth responder repeats its latest ACK: T_thresh after the ACK
// or the previous repeat, while no packet is pending (a pending batch has its own timer, T6)
// and fewer than AckRepeats were sent.
func (r *responder) repeatDue() (time.Duration, bool) {
	if r.cfg.Mode != ModeTCAETH || !r.repeatArmed || r.batchCount > 0 || r.repeats >= AckRepeats {
		return 0, false
	}
	return r.ackAt + time.Duration(r.repeats+1)*r.cfg.TThresh, true
}

// extend adds the T/C AETH to an acknowledgement of an extended QP.
func (r *responder) extend(p *roce.Packet) {
	if r.cfg.Mode != ModeTCAETH {
		return
	}
	p.Headers |= roce.HasTCAETH
	p.TCAETH = roce.TCAETH{LastFinished: r.epsn.Add(-1)}
	r.ackSeq++
	r.ranges.report(&p.TCAETH, r.epsn, r.recent, r.hasRecent, r.ackSeq)
}

func (r *responder) sendNAK(q *QP, a roce.AETH, p psn.PSN) {
	pk := roce.Packet{BTH: roce.BTH{OpCode: roce.OpAcknowledge, PSN: p}, AETH: a}
	if r.cfg.Mode == ModeTCAETH {
		r.repeatArmed = false // the latest word is this NAK, which the requester's own timers cover
		r.extend(&pk)
		pk.BTH.PSN = pk.TCAETH.LastFinished // T2: the BTH PSN of an extended ACK is Last Finished
		if p != pk.BTH.PSN.Add(1) {
			// The NAKed PSN is then the one after Last Finished; a NAK for a held packet
			// further ahead waits for its turn (the walker NAKs in order).
			return
		}
	}
	q.emit(&pk)
	q.stats.NAKPackets++
}

func (r *responder) sendAtomicAck(q *QP, p psn.PSN, orig uint64) {
	pk := roce.Packet{BTH: roce.BTH{OpCode: roce.OpAtomicAcknowledge, PSN: p},
		AETH: roce.ACK(roce.CreditInvalid, r.msn), AtomicAckETH: roce.AtomicAckETH{OrigRemData: orig}}
	r.extend(&pk)
	q.emit(&pk)
	q.stats.AckPackets++
}

// sendRead sends the next paced READ response.
func (r *responder) sendRead(q *QP) int {
	if len(r.reads) == 0 {
		return 0
	}
	j := &r.reads[0]
	i := j.next
	mtu := r.cfg.MTU
	pk := roce.Packet{BTH: roce.BTH{PSN: j.p.Add(i)}, AETH: roce.ACK(roce.CreditInvalid, r.msn)}
	switch {
	case j.n == 1:
		pk.BTH.OpCode = roce.OpReadResponseOnly
	case i == 0:
		pk.BTH.OpCode = roce.OpReadResponseFirst
	case i == j.n-1:
		pk.BTH.OpCode = roce.OpReadResponseLast
	default:
		pk.BTH.OpCode = roce.OpReadResponseMiddle
	}
	lo := min(i*mtu, len(j.buf))
	pk.Payload = j.buf[lo:min(len(j.buf), lo+mtu)]
	q.emit(&pk)
	if j.retx && !j.isFresh(pk.BTH.PSN) {
		q.stats.RetransmittedPackets++
	} else {
		q.stats.DataPackets++
	}
	j.next++
	if j.next >= j.end {
		r.reads = r.reads[1:]
		if len(r.reads) == 0 {
			r.reads = nil
		}
	}
	return pk.Len()
}

// isFresh reports whether the job's response at p goes out for the first time.
func (j *readJob) isFresh(p psn.PSN) bool {
	for _, f := range j.fresh {
		if f.p.Forward(p) < uint32(f.n) {
			return true
		}
	}
	return false
}

// timers sends the ACK that a coalescing delay or the T6 timer holds back, and tcaeth's
// repeat of the latest ACK at an idle tail.
func (r *responder) timers(q *QP) {
	if t, ok := r.ackDue(); ok && q.now >= t {
		if r.cfg.Mode == ModeTCAETH {
			q.stats.AckTriggerTime++
		}
		r.sendAck(q, true)
	}
	if t, ok := r.repeatDue(); ok && q.now >= t {
		r.repeats++
		q.stats.AckRepeats++
		r.emitAck(q)
	}
}

// ackDue returns when a held-back ACK is due.
func (r *responder) ackDue() (time.Duration, bool) {
	if r.cfg.Mode == ModeTCAETH {
		return r.batchStart + r.cfg.TThresh, r.batchCount > 0
	}
	return r.pendingSince + r.cfg.TThresh, r.pending > 0
}

func (r *responder) deadline(q *QP) (time.Duration, bool) {
	d, ok := r.ackDue()
	if t, ok2 := r.repeatDue(); ok2 && (!ok || t < d) {
		d, ok = t, true
	}
	return d, ok
}
