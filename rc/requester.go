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
	seq     uint32 // its place in post order, which send-buffer records name it by
	first   psn.PSN
	n       int // PSNs it consumes
	started bool
	next    int // segments sent for the first time
	unacked int // SEND and WRITE: PSNs not yet acknowledged
	done    bool
	// READ and atomics: responses, and the retry timer.
	got          []bool
	edges        []uint8         // READ: where a request for its responses began and ended (readEdge*)
	asked        []time.Duration // READ: when each response was last asked for
	askedFirst   time.Duration   // READ: when it was first asked for
	gotN         int
	lastProgress time.Duration
	lastReissue  time.Duration
	reissued     bool
	retries      int
	low          int  // READ: the first response not received
	waiting      bool // gbn READ: re-issued from low, which has not arrived since (R16)
	// sr and tcaeth READ: the latest evidence of loss queued for it (readLost), so that every
	// later response of the same evidence does not queue it again.
	hasEv    bool
	evBefore time.Duration
	evLimit  int
	orig     uint64
}

func (w *wqe) responder() bool { return w.wr.Op == OpRead || w.wr.Op.isAtomic() }

// txPkt is one PSN in the send buffer: 24 octets and no pointer, so that a send buffer of
// millions of PSNs stays small and the garbage collector never scans it. Its request is
// found by seq (requester.wqe), its place in the message by PSN distance from the first.
type txPkt struct {
	sent     time.Duration // last transmission
	xmit     uint32        // sr: the order of its last transmission among all (protocol notes R15), serial
	wq       uint32        // the request's seq
	sends    uint16        // transmissions, saturating
	timeouts uint16        // sr: per-packet timer expiries, saturating
	acked    bool
	sacked   bool // reported received (the tcaeth scoreboard, T5; sr's reports, R15)
	queued   bool // waiting in the retransmission queue
	resp     bool // a READ or atomic PSN
}

// xmitAfter reports whether transmission number a came after b (serial arithmetic: the
// numbers of live packets lie far less than 2^31 apart).
func xmitAfter(a, b uint32) bool { return int32(a-b) > 0 }

func inc16(v *uint16) {
	if *v < ^uint16(0) {
		*v++
	}
}

// txRing is the send buffer: the records of the PSNs from una on, in a ring that grows by
// doubling up to the configured send buffer.
type txRing struct {
	buf  []txPkt
	head int
	n    int
}

func (t *txRing) len() int { return t.n }

func (t *txRing) at(i int) *txPkt {
	k := t.head + i
	if k >= len(t.buf) {
		k -= len(t.buf)
	}
	return &t.buf[k]
}

// push appends e; limit bounds the ring's growth (the send buffer).
func (t *txRing) push(e txPkt, limit int) {
	if t.n == len(t.buf) {
		nb := make([]txPkt, min(max(64, 2*len(t.buf)), max(limit, t.n+1)))
		k := copy(nb, t.buf[t.head:])
		copy(nb[k:], t.buf[:t.head])
		t.buf, t.head = nb, 0
	}
	*t.at(t.n) = e
	t.n++
}

// drop forgets the first k records.
func (t *txRing) drop(k int) {
	t.head += k
	if t.head >= len(t.buf) {
		t.head -= len(t.buf)
	}
	t.n -= k
	if t.n == 0 {
		t.head = 0
	}
}

func (t *txRing) reset() { t.head, t.n = 0, 0 }

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
	// sr, a timeout's retransmission: its timer's backoff (timerEnt).
	level uint8
	epoch uint32
}

// timerEnt is an sr per-packet timer: the transmission of p at sent. After level timeouts of
// p with no progress of the QP between them (progress epoch the same), the timer waits 2^level
// RTOs; once the QP progresses it expires one RTO after sent again (R34).
type timerEnt struct {
	p     psn.PSN
	sent  time.Duration
	level uint8
	epoch uint32
}

// requester is the sending half of a QP: the send queue, the send buffer and its recovery.
type requester struct {
	cfg    *Config
	sq     []*wqe // posted and not completed, in post order
	sqBase uint32 // seq of sq[0]
	cur    int    // index in sq of the request being segmented
	tx     txRing
	// readTail counts the records in tx of READ responses after each READ's first: they take
	// no room in the send buffer (protocol notes R24).
	readTail int
	// ackScan is how many records from the front of tx are known acknowledged or READ and
	// atomic PSNs, which ackTo passes over: so that an ACK does not walk the responses of a
	// large READ outstanding before it (R24).
	ackScan int
	una     psn.PSN // PSN of tx.at(0)
	nxt     psn.PSN // next new PSN
	err     error

	retx     []retxItem
	retxHead int
	pkt      roce.Packet // the packet being built

	srtt, rttvar time.Duration
	sampled      bool          // srtt rests on a sample: a stated RTT or an ACK's (R33)
	lastProgress time.Duration // gbn: the RTO runs from here; tcaeth: the last extended ACK (T7)
	retries      int
	stalled      bool
	tq           []timerEnt // sr: transmissions in time order, for the per-packet timers
	tqHead       int
	// tqb[l-1] holds the sr timers of timeout retransmissions at backoff level l, in time
	// order, and so in the order they expire (R34).
	tqb     [maxBackoffShift][]timerEnt
	tqbHead [maxBackoffShift]int
	// epoch counts the QP's progress (an ACK that advanced, new PSNs reported received, a READ
	// response), for the backoff of sr's per-packet timers (R34).
	epoch    uint32
	xmits    uint32        // sr: transmissions so far, numbering txPkt.xmit
	reads    int           // outstanding READ and atomic requests
	dataOut  int           // SEND and WRITE PSNs sent and not acknowledged (gbn's timer runs for them)
	respLast time.Duration // the last READ response or ATOMIC ACKNOWLEDGE that progressed
	rdAtomic int           // READ and atomic requests started and not completed

	rnrActive  bool
	rnrUntil   time.Duration
	rnrPSN     psn.PSN
	rnrRetries int

	// The tcaeth scoreboard (T5): tx[].sacked marks; the highest PSN ever reported received
	// and the send time of the newest packet reported received (RACK).
	highestRep psn.PSN
	hasRep     bool
	rackXmit   time.Duration
	// The loss decision's candidates (detectLoss): PSNs below scanned neither acknowledged
	// nor marked when it passed them.
	scanned psn.PSN
	holes   []psn.PSN
	// sr and tcaeth: evidence of lost READ responses in arrival order, acted on a reorder
	// window after it arrived (protocol notes R22).
	readEv     []readEvidence
	readEvHead int

	// What the walks of reported runs learned, so that a report of a run that only grew walks
	// its new part alone: a run of a million PSNs above a loss is reported every few packets
	// for an RTT and more (sr's RTO, tcaeth's reorder window), and walking it whole each time
	// was quadratic in the run. srMemo is the last run onSRNAK walked; marked are runs the
	// tcaeth scoreboard marked whole (tcaeth never takes a mark back).
	srMemo runMemo
	marked []psnSpan
	// fullWalks turns the memos off: every report is walked whole (the tests' reference).
	fullWalks bool
}

// runMemo is a run of the send buffer, [lo, hi), that onSRNAK walked: every SEND and WRITE PSN
// of it acknowledged or marked, and last (hasLast) the latest transmission among them. It holds
// while no PSN of it is sent again or loses its mark and una does not pass lo.
type runMemo struct {
	valid   bool
	lo, hi  psn.PSN
	last    uint32
	hasLast bool
}

// psnSpan is the PSNs [lo, hi).
type psnSpan struct{ lo, hi psn.PSN }

// memoTouch forgets the sr run memo when it holds p, a PSN whose transmission or mark changes.
func (r *requester) memoTouch(p psn.PSN) {
	if m := &r.srMemo; m.valid && !p.Before(m.lo) && p.Before(m.hi) {
		m.valid = false
	}
}

// readEvidence says that the responses of w below limit last asked for no later than before
// and missing at `at` are lost, unless they arrive within the reorder window.
type readEvidence struct {
	w      *wqe
	at     time.Duration
	before time.Duration
	limit  int
}

func (r *requester) init(cfg *Config, stated bool) {
	r.cfg = cfg
	r.una, r.nxt, r.scanned = cfg.SendPSN, cfg.SendPSN, cfg.SendPSN
	r.srtt, r.rttvar = cfg.RTT, cfg.RTT/2
	r.sampled = stated
}

// wqe returns the request e belongs to. Every record in the send buffer names a request still
// in sq: a request completes only when all its PSNs, and all before them, are acknowledged
// and so gone from the buffer.
func (r *requester) wqe(e *txPkt) *wqe { return r.sq[e.wq-r.sqBase] }

// done reports whether e is a PSN of a READ or atomic that has completed.
func (r *requester) done(e *txPkt) bool { return e.resp && r.wqe(e).done }

// post adds a request to the send queue.
func (r *requester) post(w *wqe) {
	w.seq = r.sqBase + uint32(len(r.sq))
	r.sq = append(r.sq, w)
}

func (r *requester) rto() time.Duration {
	if r.cfg.RTO > 0 {
		return r.floor(r.cfg.RTO)
	}
	return r.floor(max(MinRTO, 3*r.srtt))
}

func (r *requester) ackTimeout() time.Duration {
	if r.cfg.AckTimeout > 0 {
		return r.floor(r.cfg.AckTimeout)
	}
	return r.floor(r.srtt + 3*r.cfg.TThresh)
}

// floor keeps a timeout at least the local ACK timeout until the QP has an RTT sample (R33),
// and at least the driver's MinTimeout always (R37).
func (r *requester) floor(d time.Duration) time.Duration {
	d = max(d, r.cfg.MinTimeout)
	if !r.sampled {
		d = max(d, r.cfg.LocalAckTimeout)
	}
	return d
}

// backoff returns the timeout d after n consecutive timeouts without progress: doubled for
// each, up to MaxBackoff times (R34).
func backoff(d time.Duration, n int) time.Duration {
	return d << min(max(n, 0), maxBackoffShift)
}

func (r *requester) sample(q *QP, s time.Duration) {
	q.stats.RTTSamples++
	if !r.sampled {
		// The first sample replaces the estimate the QP started from (RFC 6298, 2.2).
		r.sampled = true
		r.srtt, r.rttvar = s, s/2
		return
	}
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
	if r.retxHead < len(r.retx) {
		return true
	}
	w := r.nextNew()
	if w == nil || w.responder() && r.rdAtomic >= MaxRdAtomic {
		return false
	}
	if !r.room(w) {
		if !r.stalled {
			r.stalled = true
			q.stats.SendBufferStalls++
		}
		return false
	}
	return true
}

// MaxOutstandingPSNs bounds the PSNs a requester has sent and not had acknowledged, READ
// responses included, and so the PSNs one READ may take: a quarter of the 24-bit space, so that
// serial arithmetic over everything outstanding holds (a READ of 2 GiB at MTU 1024 takes 2^21).
const MaxOutstandingPSNs = psn.Modulus / 4

// psns returns how many PSNs the next packet of w takes: all of a READ's at once.
func (w *wqe) psns() int {
	if w.wr.Op == OpRead {
		return w.n
	}
	return 1
}

// room reports whether the next packet of w may go: the send buffer bounds the SEND and WRITE
// PSNs outstanding and one per READ or atomic request (T8: what the requester keeps to resend;
// a READ's responses are kept as records but take no room), and everything outstanding stays
// within MaxOutstandingPSNs (protocol notes R24).
func (r *requester) room(w *wqe) bool {
	return r.tx.len()-r.readTail+1 <= r.cfg.SendBuffer && r.tx.len()+w.psns() <= MaxOutstandingPSNs
}

// sendNew sends the next segment of the send queue for the first time.
func (r *requester) sendNew(q *QP) int {
	if r.err != nil || r.rnrActive {
		return 0
	}
	w := r.nextNew()
	if w == nil || w.responder() && r.rdAtomic >= MaxRdAtomic || !r.room(w) {
		return 0
	}
	need := w.psns()
	r.stalled = false
	if !w.started {
		w.started, w.first, w.lastProgress, w.askedFirst = true, r.nxt, q.now, q.now
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
	if r.tx.len() == 0 {
		r.lastProgress = q.now // the timers run from the first packet outstanding
	}
	p := r.nxt
	seg := w.next
	r.xmits++
	resp := w.responder()
	limit := max(r.cfg.SendBuffer, r.tx.len()+need)
	for range need {
		r.tx.push(txPkt{sent: q.now, xmit: r.xmits, wq: w.seq, sends: 1, resp: resp}, limit)
	}
	if w.wr.Op == OpRead {
		r.readTail += need - 1
	}
	r.nxt = r.nxt.Add(need)
	w.next += need
	n := q.emit(r.build(w, seg, p, 0))
	q.stats.DataPackets++
	if !w.responder() {
		if r.dataOut == 0 && r.cfg.Mode != ModeSR {
			// gbn's timer and tcaeth's fallback run from the first SEND or WRITE outstanding
			// (R16, R24).
			r.lastProgress = q.now
		}
		r.dataOut++
	}
	if r.cfg.Mode == ModeSR && !w.responder() {
		r.tq = append(r.tq, timerEnt{p: p, sent: q.now})
	}
	return n
}

// build makes the packet of segment seg of w at PSN p, in the requester's scratch packet. For
// a READ, seg is the first response wanted and run the number of responses (0: to the end).
func (r *requester) build(w *wqe, seg int, p psn.PSN, run int) *roce.Packet {
	mtu := r.cfg.MTU
	wr := &w.wr
	pk := &r.pkt
	*pk = roce.Packet{BTH: roce.BTH{PSN: p}}
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
	hi := min(wr.size(), lo+mtu)
	pk.Payload = wr.segment(lo, hi)
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
		pk.RETH = roce.RETH{VA: wr.RemoteAddr, RKey: wr.RKey, DMALength: uint32(wr.size())}
	}
	if last && wr.Op.hasImm() {
		pk.ImmDt = roce.ImmDt(wr.Imm)
	}
	return pk
}

// queue adds p to the retransmission queue unless it is acknowledged or already queued.
func (r *requester) queue(p psn.PSN, cause uint8, run int) bool {
	i := psnIndex(r.una, p, r.tx.len())
	if i < 0 {
		return false
	}
	e := r.tx.at(i)
	if e.acked || e.queued || r.done(e) {
		return false
	}
	e.queued = true
	if r.retxHead == len(r.retx) {
		r.retx, r.retxHead = r.retx[:0], 0
	}
	r.retx = append(r.retx, retxItem{p: p, cause: cause, run: run})
	return true
}

// sendRetx sends the first live entry of the retransmission queue.
func (r *requester) sendRetx(q *QP) int {
	for r.retxHead < len(r.retx) {
		it := r.retx[r.retxHead]
		r.retxHead++
		i := psnIndex(r.una, it.p, r.tx.len())
		if i < 0 {
			continue
		}
		e := r.tx.at(i)
		e.queued = false
		w := r.wqe(e)
		if e.acked || w.done || r.err != nil || e.sacked && r.cfg.Mode == ModeSR && it.cause != causeProbe {
			continue
		}
		seg, p, run := int(w.first.Forward(it.p)), it.p, it.run
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
			// Where this request's responses begin and end (R27).
			w.edges[seg] |= readEdgeBegin
			w.edges[end-1] |= readEdgeEnd
		}
		pkt := r.build(w, seg, p, run)
		r.xmits++
		e.sent, e.xmit = q.now, r.xmits
		r.memoTouch(it.p)
		inc16(&e.sends)
		if w.responder() {
			w.lastReissue, w.reissued = q.now, true
		}
		n := q.emit(pkt)
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
			te := timerEnt{p: it.p, sent: q.now, level: it.level, epoch: it.epoch}
			if te.level == 0 {
				r.tq = append(r.tq, te)
			} else {
				r.tqb[te.level-1] = append(r.tqb[te.level-1], te)
			}
		}
		return n
	}
	r.retx, r.retxHead = r.retx[:0], 0
	return 0
}

// goBack queues every unacknowledged PSN from p on (go-back-N, RNR retry).
func (r *requester) goBack(p psn.PSN, cause uint8) {
	for _, it := range r.retx[r.retxHead:] {
		if i := psnIndex(r.una, it.p, r.tx.len()); i >= 0 {
			r.tx.at(i).queued = false
		}
	}
	r.retx, r.retxHead = r.retx[:0], 0
	start := psnIndex(r.una, p, r.tx.len())
	if start < 0 {
		return
	}
	// A READ that p falls inside of is asked again from its first missing response.
	if w := r.wqe(r.tx.at(start)); w.wr.Op == OpRead {
		start -= int(w.first.Forward(p))
		start = max(start, 0)
	}
	for i := start; i < r.tx.len(); i++ {
		e := r.tx.at(i)
		if e.acked || e.sacked || r.done(e) {
			continue
		}
		if e.resp {
			if w := r.wqe(e); w.wr.Op == OpRead && w.first != r.una.Add(i) {
				continue
			}
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
		marked := r.onTCAETH(q, &p.TCAETH)
		if progress || marked || p.AETH.Type() != roce.AckTypeACK {
			// An extended ACK restarts the fallback timer (T7); one that tells nothing new,
			// as the responder's repeat of its latest ACK (protocol notes R20), does not, or
			// a tail that the fallback alone recovers would wait longer.
			r.lastProgress = q.now
		}
		if progress || marked {
			r.retries = 0
			r.epoch++
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
			r.epoch++
		}
	case roce.AckTypeRNRNAK:
		q.stats.NAKsReceived++
		q.stats.RNRNAKsReceived++
		if !r.cumulativeOK(c.Add(-1)) || psnIndex(r.una, c, r.tx.len()) < 0 {
			q.stats.StaleAcks++
			return
		}
		r.ackTo(q, c.Add(-1))
		if i := psnIndex(r.una, c, r.tx.len()); i >= 0 && r.cfg.Mode == ModeSR {
			r.tx.at(i).sacked = false // the responder let the packet go with this NAK (R15)
			r.memoTouch(c)
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
		if psnIndex(r.una, c, r.tx.len()) < 0 {
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
	if k > r.tx.len() {
		return false
	}
	newest, fresh := -1, 0
	var w *wqe // the request of the records walked, looked up once per request
	for i := r.ackScan; i < k; i++ {
		e := r.tx.at(i)
		if e.acked || e.resp {
			if i == r.ackScan {
				r.ackScan++
			}
			continue
		}
		fresh++
		e.acked = true
		if w == nil || w.seq != e.wq {
			w = r.wqe(e)
		}
		w.unacked--
		r.dataOut--
		if e.sends == 1 && !e.sacked {
			newest = i
		}
		r.rackXmit = max(r.rackXmit, e.sent)
		if i == r.ackScan {
			r.ackScan++
		}
	}
	if newest >= 0 {
		r.sample(q, q.now-r.tx.at(newest).sent)
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
	for n < r.tx.len() && r.tx.at(n).acked {
		if e := r.tx.at(n); e.resp {
			if w := r.wqe(e); w.wr.Op == OpRead && w.first != r.una.Add(n) {
				r.readTail--
			}
		}
		n++
	}
	if n > 0 {
		r.ackScan = max(0, r.ackScan-n)
		r.tx.drop(n)
		r.una = r.una.Add(n)
		if r.scanned.Before(r.una) {
			r.scanned = r.una // so that it never lags by half the PSN space
		}
		r.forgetBefore(r.una)
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
		c := Completion{ID: w.wr.ID, Kind: KindSend, Op: w.wr.Op, Len: w.wr.size()}
		if w.wr.Op.isAtomic() {
			c.Len, c.Orig = 8, w.orig
		}
		q.complete(c)
		n++
	}
	if n > 0 {
		clear(r.sq[:n])
		r.sq = r.sq[n:]
		r.sqBase += uint32(n)
		r.cur = max(0, r.cur-n)
	}
}

// fail completes the request holding PSN p with st, flushes the rest, and puts the requester
// in the error state.
func (r *requester) fail(q *QP, p psn.PSN, st Status) {
	var bad *wqe
	if i := psnIndex(r.una, p, r.tx.len()); i >= 0 {
		bad = r.wqe(r.tx.at(i))
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
	r.sqBase += uint32(len(r.sq))
	r.tx.reset()
	r.srMemo, r.marked = runMemo{}, r.marked[:0]
	r.readTail, r.ackScan = 0, 0
	r.holes = r.holes[:0]
	clear(r.readEv)
	r.readEv, r.readEvHead = r.readEv[:0], 0
	r.sq, r.retx, r.retxHead, r.cur, r.reads, r.rdAtomic, r.dataOut = nil, nil, 0, 0, 0, 0, 0
}

// onSRNAK takes an sr NAK PSN sequence error: m has not arrived, and, when top follows m,
// every PSN after m up to top has (protocol notes R4, R15). The PSNs reported received are
// marked and never resent; m is resent when the NAK names it for the first time (no run
// reported) or when a PSN of the run went out after m's last transmission, which therefore
// did not arrive. Without NAKs (R19) the report is a selective acknowledgement only.
func (r *requester) onSRNAK(q *QP, m, top psn.PSN) {
	var last uint32 // the latest transmission among the PSNs reported received
	hasLast := false
	if m.Before(top) {
		lo, hi := r.clip(m.Add(1), top)
		newest, fresh := -1, false
		start := lo
		if mm := &r.srMemo; mm.valid && !r.fullWalks && lo < hi && mm.lo == r.una.Add(lo) {
			// The same run as the last walked, grown or not: its walked part is unchanged.
			if k := int(r.una.Forward(mm.hi)); k <= hi {
				start, last, hasLast = k, mm.last, mm.hasLast
			}
		}
		for i := start; i < hi; i++ {
			e := r.tx.at(i)
			if e.resp {
				continue // READ and atomics are acknowledged by their responses
			}
			if !hasLast || xmitAfter(e.xmit, last) {
				last, hasLast = e.xmit, true
			}
			if e.acked || e.sacked {
				continue
			}
			e.sacked, fresh = true, true
			if e.sends == 1 {
				newest = i
			}
		}
		if lo < hi {
			r.srMemo = runMemo{valid: true, lo: r.una.Add(lo), hi: r.una.Add(hi), last: last, hasLast: hasLast}
		}
		if newest >= 0 {
			r.sample(q, q.now-r.tx.at(newest).sent)
		}
		if fresh {
			r.lastProgress, r.retries = q.now, 0 // progress: the probe waits (R15)
			r.epoch++
		}
	}
	if r.cfg.SRNoNAK {
		// Without NAKs a report only marks what arrived; the timers alone resend (R19).
		return
	}
	i := psnIndex(r.una, m, r.tx.len())
	if i < 0 {
		q.stats.StaleAcks++
		return
	}
	e := r.tx.at(i)
	if m.Before(top) && (e.resp || !hasLast || !xmitAfter(last, e.xmit)) {
		// A report of a run: the PSN below it is not known lost (its last transmission may be
		// on its way, or it is inside a READ, which recovers by its own rules, R10).
		return
	}
	if w := r.wqe(e); w.wr.Op == OpRead {
		m = w.first
	}
	r.queue(m, causeNAK, 0)
}
