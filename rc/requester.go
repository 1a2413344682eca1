package rc

import (
	"fmt"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// wqe is a posted send work request and its progress.
type wqe struct {
	wr      SendWR
	first   psn.PSN
	n       int // PSNs it consumes
	started bool
	next    int // segments sent for the first time
	unacked int // SEND and WRITE: PSNs not yet acknowledged
	done    bool
	// READ and atomics: responses, and the retry timer.
	got          []bool
	asked        []time.Duration // READ: when each response was last asked for
	gotN         int
	lastProgress time.Duration
	lastReissue  time.Duration
	reissued     bool
	retries      int
	low          int  // READ: the first response not received
	waiting      bool // gbn READ: re-issued from low, which has not arrived since (R16)
	orig         uint64
}

func (w *wqe) responder() bool { return w.wr.Op == OpRead || w.wr.Op.isAtomic() }

// txPkt is one PSN in the send buffer.
type txPkt struct {
	w        *wqe
	seg      int           // PSN offset within its message
	sent     time.Duration // last transmission
	xmit     uint64        // sr: the order of its last transmission among all (protocol notes R15)
	sends    int
	timeouts int // sr: per-packet timer expiries
	acked    bool
	sacked   bool // reported received by a T/C AETH (the scoreboard, T5)
	queued   bool // waiting in the retransmission queue
}

// Why a packet is retransmitted.
const (
	causeNAK = iota
	causeTimeout
	causeLoss
	causeRNR
	causeRead
	causeProbe // sr: a duplicate of a reported PSN to draw a lost ACK (protocol notes R15)
)

type retxItem struct {
	p     psn.PSN
	cause uint8
	run   int // READ re-issues: PSNs to request; 0 means to the end of the READ
}

type timerEnt struct {
	p    psn.PSN
	sent time.Duration
}

// requester is the sending half of a QP: the send queue, the send buffer and its recovery.
type requester struct {
	cfg *Config
	sq  []*wqe // posted and not completed, in post order
	cur int    // index in sq of the request being segmented
	tx  []txPkt
	una psn.PSN // PSN of tx[0]
	nxt psn.PSN // next new PSN
	err error

	retx []retxItem

	srtt, rttvar time.Duration
	lastProgress time.Duration // gbn: the RTO runs from here; tcaeth: the last extended ACK (T7)
	retries      int
	stalled      bool
	tq           []timerEnt // sr: transmissions in time order, for the per-packet timers
	tqHead       int
	xmits        uint64        // sr: transmissions so far, numbering txPkt.xmit
	reads        int           // outstanding READ and atomic requests
	dataOut      int           // SEND and WRITE PSNs sent and not acknowledged (gbn's timer runs for them)
	respLast     time.Duration // the last READ response or ATOMIC ACKNOWLEDGE that progressed
	rdAtomic     int           // READ and atomic requests started and not completed

	rnrActive  bool
	rnrUntil   time.Duration
	rnrPSN     psn.PSN
	rnrRetries int

	// The tcaeth scoreboard (T5): tx[].sacked marks; the highest PSN ever reported received
	// and the send time of the newest packet reported received (RACK).
	highestRep psn.PSN
	hasRep     bool
	rackXmit   time.Duration
}

func (r *requester) init(cfg *Config) {
	r.cfg = cfg
	r.una, r.nxt = cfg.SendPSN, cfg.SendPSN
	r.srtt, r.rttvar = cfg.RTT, cfg.RTT/2
}

func (r *requester) rto() time.Duration {
	if r.cfg.RTO > 0 {
		return r.cfg.RTO
	}
	return max(MinRTO, 3*r.srtt)
}

func (r *requester) ackTimeout() time.Duration {
	if r.cfg.AckTimeout > 0 {
		return r.cfg.AckTimeout
	}
	return r.srtt + 3*r.cfg.TThresh
}

func (r *requester) sample(q *QP, s time.Duration) {
	q.stats.RTTSamples++
	d := r.srtt - s
	if d < 0 {
		d = -d
	}
	r.rttvar = (3*r.rttvar + d) / 4
	r.srtt = (7*r.srtt + s) / 8
}

// nextNew returns the request whose next segment goes out for the first time, or nil.
func (r *requester) nextNew() *wqe {
	for r.cur < len(r.sq) {
		w := r.sq[r.cur]
		if !w.started || w.next < w.n && !w.responder() {
			return w
		}
		r.cur++
	}
	return nil
}

// ready reports whether a paced packet of the requester may go now.
func (r *requester) ready(q *QP) bool {
	if r.err != nil || r.rnrActive {
		return false
	}
	if len(r.retx) > 0 {
		return true
	}
	w := r.nextNew()
	if w == nil || w.responder() && r.rdAtomic >= MaxRdAtomic {
		return false
	}
	need := 1
	if w.wr.Op == OpRead {
		need = w.n
	}
	if len(r.tx)+need > r.cfg.SendBuffer {
		if !r.stalled {
			r.stalled = true
			q.stats.SendBufferStalls++
		}
		return false
	}
	return true
}

// sendNew sends the next segment of the send queue for the first time.
func (r *requester) sendNew(q *QP) int {
	if r.err != nil || r.rnrActive {
		return 0
	}
	w := r.nextNew()
	if w == nil || w.responder() && r.rdAtomic >= MaxRdAtomic {
		return 0
	}
	need := 1
	if w.wr.Op == OpRead {
		need = w.n
	}
	if len(r.tx)+need > r.cfg.SendBuffer {
		return 0
	}
	r.stalled = false
	if !w.started {
		w.started, w.first, w.lastProgress = true, r.nxt, q.now
		if !w.responder() {
			w.unacked = w.n
		} else {
			if r.reads == 0 {
				r.respLast = q.now
			}
			r.reads++
			r.rdAtomic++
		}
		if w.wr.Op == OpRead {
			w.asked = make([]time.Duration, w.n)
			for k := range w.asked {
				w.asked[k] = q.now
			}
		}
	}
	if len(r.tx) == 0 {
		r.lastProgress = q.now // the timers run from the first packet outstanding
	}
	p := r.nxt
	seg := w.next
	r.xmits++
	for i := range need {
		r.tx = append(r.tx, txPkt{w: w, seg: seg + i, sent: q.now, xmit: r.xmits, sends: 1})
	}
	r.nxt = r.nxt.Add(need)
	w.next += need
	pkt := r.build(w, seg, p, 0)
	q.emit(pkt)
	q.stats.DataPackets++
	if !w.responder() {
		if r.dataOut == 0 && r.cfg.Mode == ModeGBN {
			r.lastProgress = q.now // gbn's timer runs from the first SEND or WRITE outstanding (R16)
		}
		r.dataOut++
	}
	if r.cfg.Mode == ModeSR && !w.responder() {
		r.tq = append(r.tq, timerEnt{p, q.now})
	}
	return pkt.Len()
}

// build makes the packet of segment seg of w at PSN p. For a READ, seg is the first response
// wanted and run the number of responses (0: to the end).
func (r *requester) build(w *wqe, seg int, p psn.PSN, run int) *roce.Packet {
	mtu := r.cfg.MTU
	wr := &w.wr
	pk := &roce.Packet{BTH: roce.BTH{PSN: p}}
	switch {
	case wr.Op == OpRead:
		end := len(wr.Local)
		if run > 0 {
			end = min(end, (seg+run)*mtu)
		}
		pk.BTH.OpCode = roce.OpReadRequest
		pk.BTH.AckReq = true
		pk.RETH = roce.RETH{VA: wr.RemoteAddr + uint64(seg*mtu), RKey: wr.RKey, DMALength: uint32(end - seg*mtu)}
		return pk
	case wr.Op.isAtomic():
		pk.BTH.OpCode = roce.OpCompareSwap
		if wr.Op == OpFetchAdd {
			pk.BTH.OpCode = roce.OpFetchAdd
		}
		pk.BTH.AckReq = true
		pk.AtomicETH = roce.AtomicETH{VA: wr.RemoteAddr, RKey: wr.RKey, SwapAdd: wr.SwapAdd, Compare: wr.Compare}
		return pk
	}
	lo := seg * mtu
	hi := min(len(wr.Local), lo+mtu)
	pk.Payload = wr.Local[lo:hi]
	last := seg == w.n-1
	pk.BTH.AckReq = last
	var ops [4]roce.Opcode // first, middle, last, only
	if wr.Op.isSend() {
		ops = [4]roce.Opcode{roce.OpSendFirst, roce.OpSendMiddle, roce.OpSendLast, roce.OpSendOnly}
		if wr.Op.hasImm() {
			ops[2], ops[3] = roce.OpSendLastWithImmediate, roce.OpSendOnlyWithImmediate
		}
	} else {
		ops = [4]roce.Opcode{roce.OpWriteFirst, roce.OpWriteMiddle, roce.OpWriteLast, roce.OpWriteOnly}
		if wr.Op.hasImm() {
			ops[2], ops[3] = roce.OpWriteLastWithImmediate, roce.OpWriteOnlyWithImmediate
		}
	}
	switch {
	case w.n == 1:
		pk.BTH.OpCode = ops[3]
	case seg == 0:
		pk.BTH.OpCode = ops[0]
	case last:
		pk.BTH.OpCode = ops[2]
	default:
		pk.BTH.OpCode = ops[1]
	}
	if seg == 0 && wr.Op.isWrite() {
		pk.RETH = roce.RETH{VA: wr.RemoteAddr, RKey: wr.RKey, DMALength: uint32(len(wr.Local))}
	}
	if last && wr.Op.hasImm() {
		pk.ImmDt = roce.ImmDt(wr.Imm)
	}
	return pk
}

// queue adds p to the retransmission queue unless it is acknowledged or already queued.
func (r *requester) queue(p psn.PSN, cause uint8, run int) {
	i := psnIndex(r.una, p, len(r.tx))
	if i < 0 {
		return
	}
	e := &r.tx[i]
	if e.acked || e.queued || e.w.done {
		return
	}
	e.queued = true
	r.retx = append(r.retx, retxItem{p: p, cause: cause, run: run})
}

// sendRetx sends the first live entry of the retransmission queue.
func (r *requester) sendRetx(q *QP) int {
	for len(r.retx) > 0 {
		it := r.retx[0]
		r.retx = r.retx[1:]
		i := psnIndex(r.una, it.p, len(r.tx))
		if i < 0 {
			continue
		}
		e := &r.tx[i]
		e.queued = false
		w := e.w
		if e.acked || w.done || r.err != nil || e.sacked && r.cfg.Mode == ModeSR && it.cause != causeProbe {
			continue
		}
		seg, p, run := e.seg, it.p, it.run
		if w.wr.Op == OpRead && run == 0 {
			// From the first response still missing to the end.
			j := 0
			for j < w.n && w.got[j] {
				j++
			}
			if j == w.n {
				continue
			}
			seg, p = j, w.first.Add(j)
		}
		if w.wr.Op == OpRead {
			end := w.n
			if run > 0 {
				end = min(w.n, seg+run)
			}
			for k := seg; k < end; k++ {
				w.asked[k] = q.now
			}
		}
		pkt := r.build(w, seg, p, run)
		r.xmits++
		e.sent, e.xmit = q.now, r.xmits
		e.sends++
		if w.responder() {
			w.lastReissue, w.reissued = q.now, true
		}
		q.emit(pkt)
		q.stats.RetransmittedPackets++
		switch it.cause {
		case causeNAK:
			q.stats.NAKRetransmissions++
		case causeTimeout, causeProbe:
			q.stats.TimeoutRetransmissions++
		case causeLoss:
			q.stats.LossRetransmissions++
		case causeRNR:
			q.stats.RNRRetransmissions++
		}
		if r.cfg.Mode == ModeSR && !w.responder() {
			r.tq = append(r.tq, timerEnt{it.p, q.now})
		}
		return pkt.Len()
	}
	r.retx = nil
	return 0
}

// goBack queues every unacknowledged PSN from p on (go-back-N, RNR retry).
func (r *requester) goBack(p psn.PSN, cause uint8) {
	for _, it := range r.retx {
		if i := psnIndex(r.una, it.p, len(r.tx)); i >= 0 {
			r.tx[i].queued = false
		}
	}
	r.retx = r.retx[:0]
	start := psnIndex(r.una, p, len(r.tx))
	if start < 0 {
		return
	}
	// A READ that p falls inside of is asked again from its first missing response.
	if e := r.tx[start]; e.w.wr.Op == OpRead && e.seg > 0 {
		start -= e.seg
		start = max(start, 0)
	}
	for i := start; i < len(r.tx); i++ {
		e := &r.tx[i]
		if e.acked || e.sacked || e.w.done {
			continue
		}
		if e.w.wr.Op == OpRead && e.seg > 0 {
			continue
		}
		r.queue(r.una.Add(i), cause, 0)
	}
}

// handle takes a response: ACKNOWLEDGE, ATOMIC ACKNOWLEDGE or a READ response.
func (r *requester) handle(q *QP, p *roce.Packet) {
	if r.err != nil {
		q.stats.Unexpected++
		return
	}
	switch p.BTH.OpCode {
	case roce.OpAcknowledge:
		r.onAck(q, p)
	case roce.OpAtomicAcknowledge:
		r.onAtomicAck(q, p)
	case roce.OpReadResponseFirst, roce.OpReadResponseMiddle, roce.OpReadResponseLast, roce.OpReadResponseOnly:
		r.onReadResponse(q, p)
	default:
		q.stats.Unexpected++
	}
	r.complete(q)
}

// extendedOK checks T2: an extended QP's ACKs carry a T/C AETH whose Last Finished PSN is the
// BTH PSN (ACKNOWLEDGE), and a plain QP's never do.
func (r *requester) extendedOK(p *roce.Packet) bool {
	ext := r.cfg.Mode == ModeTCAETH
	if p.Has(roce.HasTCAETH) != ext {
		return false
	}
	return !ext || p.BTH.OpCode != roce.OpAcknowledge || p.TCAETH.LastFinished == p.BTH.PSN
}

// cumulativeOK reports whether "everything up to c received" fits what was sent.
func (r *requester) cumulativeOK(c psn.PSN) bool {
	return r.una.Add(-1).Forward(c) <= r.una.Add(-1).Forward(r.nxt.Add(-1))
}

func (r *requester) onAck(q *QP, p *roce.Packet) {
	if !r.extendedOK(p) {
		q.stats.Malformed++
		return
	}
	c := p.BTH.PSN
	if r.cfg.Mode == ModeTCAETH {
		// Every extended ACK, NAKs included, carries the cumulative state (T2); a NAK names
		// the PSN after Last Finished (protocol notes R5).
		if !r.cumulativeOK(c) {
			q.stats.AcksReceived++
			q.stats.StaleAcks++
			return
		}
		progress := r.ackTo(q, c)
		progress = r.onTCAETH(q, &p.TCAETH) || progress
		r.lastProgress = q.now // any extended ACK restarts the fallback timer (T7)
		if progress {
			r.retries = 0
		}
		c = c.Add(1)
	}
	switch p.AETH.Type() {
	case roce.AckTypeACK:
		q.stats.AcksReceived++
		if r.cfg.Mode == ModeTCAETH {
			return
		}
		if !r.cumulativeOK(c) {
			q.stats.StaleAcks++
			return
		}
		if r.ackTo(q, c) {
			r.lastProgress = q.now
			r.retries = 0
		}
	case roce.AckTypeRNRNAK:
		q.stats.NAKsReceived++
		q.stats.RNRNAKsReceived++
		if !r.cumulativeOK(c.Add(-1)) || psnIndex(r.una, c, len(r.tx)) < 0 {
			q.stats.StaleAcks++
			return
		}
		r.ackTo(q, c.Add(-1))
		if i := psnIndex(r.una, c, len(r.tx)); i >= 0 && r.cfg.Mode == ModeSR {
			r.tx[i].sacked = false // the responder let the packet go with this NAK (R15)
		}
		r.rnrRetries++
		if r.cfg.RNRRetry < 7 && r.rnrRetries > r.cfg.RNRRetry {
			r.fail(q, c, StatusRNRRetryExceeded)
			return
		}
		timer, _ := p.AETH.RNRTimer()
		r.rnrActive, r.rnrUntil, r.rnrPSN = true, q.now+RNRDelay(timer), c
	case roce.AckTypeNAK:
		q.stats.NAKsReceived++
		code, _ := p.AETH.NAKCode()
		if r.cfg.Mode == ModeSR && code == roce.NAKPSNSequenceError {
			r.onSRNAK(q, c, psn.Of(p.AETH.MSN))
			return
		}
		if psnIndex(r.una, c, len(r.tx)) < 0 {
			q.stats.StaleAcks++
			return
		}
		switch code {
		case roce.NAKPSNSequenceError:
			switch r.cfg.Mode {
			case ModeGBN:
				r.ackTo(q, c.Add(-1))
				r.lastProgress = q.now
				r.goBack(c, causeNAK)
			default: // sr took it above
				q.stats.Unexpected++
			}
		case roce.NAKRemoteAccessError:
			r.ackTo(q, c.Add(-1))
			r.fail(q, c, StatusRemoteAccessError)
		case roce.NAKInvalidRequest:
			r.ackTo(q, c.Add(-1))
			r.fail(q, c, StatusRemoteInvalidRequest)
		default:
			r.ackTo(q, c.Add(-1))
			r.fail(q, c, StatusRemoteOperationError)
		}
	default:
		q.stats.Malformed++
	}
}

// ackTo marks every SEND and WRITE PSN up to c acknowledged and reports whether any was new.
func (r *requester) ackTo(q *QP, c psn.PSN) bool {
	k := int(r.una.Forward(c.Add(1)))
	if k > len(r.tx) {
		return false
	}
	newest, fresh := -1, 0
	for i := range k {
		e := &r.tx[i]
		if e.acked || e.w.responder() {
			continue
		}
		fresh++
		e.acked = true
		e.w.unacked--
		r.dataOut--
		if e.sends == 1 && !e.sacked {
			newest = i
		}
		r.rackXmit = max(r.rackXmit, e.sent)
	}
	if newest >= 0 {
		r.sample(q, q.now-r.tx[newest].sent)
	}
	if fresh > 0 {
		r.rnrRetries = 0
	}
	r.pop()
	return fresh > 0
}

// pop drops acknowledged PSNs from the front of the send buffer and returns how many.
func (r *requester) pop() int {
	n := 0
	for n < len(r.tx) && r.tx[n].acked {
		n++
	}
	if n > 0 {
		r.tx = r.tx[n:]
		r.una = r.una.Add(n)
		if len(r.tx) == 0 {
			r.tx = nil // let the old array go
		}
	}
	return n
}

// complete emits the completions of finished requests, in post order.
func (r *requester) complete(q *QP) {
	n := 0
	for _, w := range r.sq {
		if !w.started || w.next < w.n && !w.responder() {
			break
		}
		if w.responder() && !w.done || !w.responder() && w.unacked > 0 {
			break
		}
		if w.responder() {
			r.rdAtomic--
		}
		c := Completion{ID: w.wr.ID, Kind: KindSend, Op: w.wr.Op, Len: len(w.wr.Local)}
		if w.wr.Op.isAtomic() {
			c.Len, c.Orig = 8, w.orig
		}
		q.complete(c)
		n++
	}
	if n > 0 {
		clear(r.sq[:n])
		r.sq = r.sq[n:]
		r.cur = max(0, r.cur-n)
	}
}

// fail completes the request holding PSN p with st, flushes the rest, and puts the requester
// in the error state.
func (r *requester) fail(q *QP, p psn.PSN, st Status) {
	var bad *wqe
	if i := psnIndex(r.una, p, len(r.tx)); i >= 0 {
		bad = r.tx[i].w
	}
	r.complete(q)
	r.err = fmt.Errorf("rc: QP %#x: request at PSN %d: %v: %w", r.cfg.QPN, uint32(p), st, ErrQPError)
	for _, w := range r.sq {
		s := StatusFlushed
		if w == bad {
			s = st
		}
		q.complete(Completion{ID: w.wr.ID, Kind: KindSend, Op: w.wr.Op, Status: s})
	}
	r.sq, r.tx, r.retx, r.cur, r.reads, r.rdAtomic, r.dataOut = nil, nil, nil, 0, 0, 0, 0
}

// onSRNAK takes an sr NAK PSN sequence error: m has not arrived, and, when top follows m,
// every PSN after m up to top has (protocol notes R4, R15). The PSNs reported received are
// marked and never resent; m is resent when the NAK names it for the first time (no run
// reported) or when a PSN of the run went out after m's last transmission, which therefore
// did not arrive.
func (r *requester) onSRNAK(q *QP, m, top psn.PSN) {
	var last uint64 // the latest transmission among the PSNs reported received
	if m.Before(top) {
		lo, hi := r.clip(m.Add(1), top)
		newest, fresh := -1, false
		for i := lo; i < hi; i++ {
			e := &r.tx[i]
			if e.w.responder() {
				continue // READ and atomics are acknowledged by their responses
			}
			last = max(last, e.xmit)
			if e.acked || e.sacked {
				continue
			}
			e.sacked, fresh = true, true
			if e.sends == 1 {
				newest = i
			}
		}
		if newest >= 0 {
			r.sample(q, q.now-r.tx[newest].sent)
		}
		if fresh {
			r.lastProgress, r.retries = q.now, 0 // progress: the probe waits (R15)
		}
	}
	i := psnIndex(r.una, m, len(r.tx))
	if i < 0 {
		q.stats.StaleAcks++
		return
	}
	e := &r.tx[i]
	if m.Before(top) && (e.w.responder() || e.xmit >= last) {
		// A report of a run: the PSN below it is not known lost (its last transmission may be
		// on its way, or it is inside a READ, which recovers by its own rules, R10).
		return
	}
	if e.w.wr.Op == OpRead {
		m = e.w.first
	}
	r.queue(m, causeNAK, 0)
}
