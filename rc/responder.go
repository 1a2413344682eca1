package rc

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// request is one request packet as the responder keeps it: parsed from the wire, or held in
// the out-of-order buffer.
type request struct {
	op      roce.Opcode
	p       psn.PSN
	ackReq  bool
	reth    roce.RETH
	atomic  roce.AtomicETH
	imm     uint32
	payload []byte
}

// States of a PSN in the out-of-order window. A WRITE packet already in memory (T9) is
// slotPlaced + the index of its message in responder.writes.
const (
	slotEmpty    = 0
	slotBuffered = 1 // held until its turn, in responder.held
	slotPlaced   = 2
)

// maxWrites bounds the WRITE messages whose packets are placed out of order at once.
const maxWrites = 256

// wctx is an RDMA WRITE message whose first packet (and so its RETH) is known: later packets
// of it are placed by their PSN distance from the first (T9).
type wctx struct {
	first psn.PSN
	n     int
	va    uint64
	dst   target // the checked target memory of the whole message
	idx   int    // its index in responder.writes
	// The last packet's opcode and immediate, once it is placed out of order: all its turn
	// needs besides the PSN.
	lastOp  roce.Opcode
	lastImm uint32
}

type readJob struct {
	p    psn.PSN
	buf  []byte
	n    int // responses of the request, for the opcodes
	end  int // responses to send: those from next up to end (protocol notes R17)
	next int
	retx bool
	// fresh are the PSNs it took over from an original READ that had not sent them: first
	// transmissions, counted as data.
	fresh []psnRun
}

type psnRun struct {
	p psn.PSN
	n int
}

type atomicResult struct {
	p     psn.PSN
	orig  uint64
	valid bool
}

// Results of executing a request in order.
const (
	execOK = iota
	execNAK
	execRNR
)

// responder is the receiving half of a QP.
type responder struct {
	cfg  *Config
	epsn psn.PSN // next PSN expected in order
	msn  uint32
	rq   []RecvWR

	// The out-of-order window: 2 octets of state per PSN, allocated when the first packet
	// arrives out of order, and the packets held until their turn (protocol notes R18).
	win      int
	state    []uint16
	held     map[psn.PSN]*request
	ranges   rangeSet
	highest  psn.PSN // sr: the highest PSN accounted for, for NAKing new gaps
	buffered int
	writes   [maxWrites]*wctx
	nwrites  int
	wfree    []int // free indexes of writes

	// The message being executed in order.
	inSend, inWrite bool
	recv            RecvWR
	off             int
	wc              *wctx

	// ACK state. gbn and sr coalesce; tcaeth keeps the batch state of T6.
	pending      int
	pendingSince time.Duration
	nakSent      bool
	batchStart   time.Duration
	batchCount   int
	recent       psn.PSN
	hasRecent    bool
	ackSeq       uint64
	lastImm      time.Duration
	hasImm       bool
	// tcaeth: the highest AckReq received out of order and not yet passed (R21).
	ackReqHeld    psn.PSN
	hasAckReqHeld bool
	// tcaeth: the latest ACK and its repeats at an idle tail (protocol notes R20).
	ackAt       time.Duration
	repeats     int
	repeatArmed bool

	reads   []readJob
	atomics [2 * MaxRdAtomic]atomicResult
	atomicN int
}

func (r *responder) init(cfg *Config) {
	r.cfg = cfg
	r.epsn = cfg.RecvPSN
	r.highest = cfg.RecvPSN.Add(-1)
	w := 1
	for w < cfg.RecvWindow {
		w <<= 1
	}
	r.win = w
}

// stateOf returns the window state of p.
func (r *responder) stateOf(p psn.PSN) uint16 {
	if r.state == nil {
		return slotEmpty
	}
	return r.state[int(uint32(p))&(r.win-1)]
}

func (r *responder) setState(p psn.PSN, v uint16) {
	if r.state == nil {
		if v == slotEmpty {
			return
		}
		r.state = make([]uint16, r.win)
	}
	r.state[int(uint32(p))&(r.win-1)] = v
}

func requestOf(p *roce.Packet) request {
	return request{op: p.BTH.OpCode, p: p.BTH.PSN, ackReq: p.BTH.AckReq, reth: p.RETH,
		atomic: p.AtomicETH, imm: uint32(p.ImmDt), payload: p.Payload}
}

// psnsOf returns the PSNs a request consumes.
func (r *responder) psnsOf(rq *request) int {
	if rq.op == roce.OpReadRequest {
		return int(rq.op.PSNs(rq.reth.DMALength, uint32(r.cfg.MTU)))
	}
	return 1
}

// wellFormed checks the rules a request packet must follow on its own: payload lengths of its
// place in a message, and READ lengths.
func (r *responder) wellFormed(rq *request) bool {
	mtu := r.cfg.MTU
	n := len(rq.payload)
	switch rq.op {
	case roce.OpSendFirst, roce.OpSendMiddle, roce.OpWriteFirst, roce.OpWriteMiddle:
		return n == mtu
	case roce.OpSendLast, roce.OpSendLastWithImmediate, roce.OpWriteLast, roce.OpWriteLastWithImmediate:
		return n > 0 && n <= mtu
	case roce.OpSendOnly, roce.OpSendOnlyWithImmediate:
		return n <= mtu
	case roce.OpWriteOnly, roce.OpWriteOnlyWithImmediate:
		return n <= mtu && uint32(n) == rq.reth.DMALength
	case roce.OpReadRequest:
		return rq.reth.DMALength <= 1<<31 && r.psnsOf(rq) <= MaxOutstandingPSNs
	case roce.OpCompareSwap, roce.OpFetchAdd:
		return true
	}
	return false // SEND with invalidate and the rest are not supported
}

func (r *responder) handle(q *QP, p *roce.Packet) {
	rq := requestOf(p)
	if !r.wellFormed(&rq) {
		q.stats.Malformed++
		return
	}
	d := psn.Diff(r.epsn, rq.p)
	switch {
	case d < 0:
		r.duplicate(q, &rq, int(-d))
		return
	case d >= int32(r.win):
		q.stats.OutOfWindow++
		if r.cfg.Mode == ModeGBN && !r.nakSent {
			// One NAK PSN sequence error per gap.
			r.nakSent = true
			q.stats.SeqNAKs++
			r.sendNAK(q, roce.NAK(roce.NAKPSNSequenceError, r.msn), r.epsn)
		}
		return
	}
	if d > 0 && r.stateOf(rq.p) != slotEmpty {
		r.duplicate(q, &rq, 0)
		return
	}
	q.stats.RequestsReceived++
	// A packet beyond a gap above everything received opens a new range at the top.
	opened := d > 0 && r.highest.Add(1).Before(rq.p)
	if d == 0 {
		if !r.execute(q, &rq) {
			return
		}
	} else {
		q.stats.OutOfOrderPackets++
		if !r.hold(q, &rq) {
			return
		}
		if opened {
			// sr: the runs below the new gap in their final extent first (protocol notes R15).
			r.reportRuns(q)
		}
		r.ranges.insert(r.epsn, rq.p)
		r.sendGapNAKs(q, rq.p)
		if rq.ackReq && r.cfg.Mode == ModeTCAETH && (!r.hasAckReqHeld || r.ackReqHeld.Before(rq.p)) {
			r.ackReqHeld, r.hasAckReqHeld = rq.p, true
		}
	}
	last := rq.p.Add(r.psnsOf(&rq) - 1)
	if r.highest.Before(last) {
		r.highest = last
	}
	r.recent, r.hasRecent = rq.p, true
	r.walk(q)
	// tcaeth: the packet that lets Last Finished pass an AckReq received out of order
	// completes that message, which is worth an ACK at once like the AckReq itself (R21).
	passed := r.hasAckReqHeld && r.ackReqHeld.Before(r.epsn)
	if passed {
		r.hasAckReqHeld = false
	}
	if rq.op != roce.OpReadRequest && rq.op != roce.OpCompareSwap && rq.op != roce.OpFetchAdd {
		// READ is acknowledged by its responses and atomics by ATOMIC ACKNOWLEDGE (T9).
		r.afterData(q, rq.ackReq || passed, opened)
	} else if passed {
		// The READ or atomic filled the gap below a WRITE or SEND that waits for its ACK.
		q.stats.AckTriggerImmediate++
		r.sendAck(q, true)
	}
}

// sendGapNAKs is the sr responder's NAK of each PSN newly found missing (at most 256 per
// packet, so a forged far-ahead PSN cannot make a storm). The NAK of the PSN just below p
// also reports p, the new run's first PSN (protocol notes R15).
func (r *responder) sendGapNAKs(q *QP, p psn.PSN) {
	if !r.srNAKs() || !r.highest.Before(p) {
		return
	}
	from := psn.Max(r.highest.Add(1), r.epsn)
	for k := 0; from.Before(p) && k < 256; k++ {
		if !r.ranges.has(r.epsn, from) {
			top := from // no run reported
			if from.Add(1) == p {
				top = p
				r.ranges.reported(r.epsn, p)
			}
			r.sendSeqNAK(q, from, top)
		}
		from = from.Add(1)
	}
}

// srNAKs reports whether the responder sends sr's NAKs of missing PSNs (protocol notes R4).
func (r *responder) srNAKs() bool { return r.cfg.Mode == ModeSR && !r.cfg.SRNoNAK }

// srReportTimes is how often the sr responder reports a run in its present extent: once
// with NAKs (R15: a lost report is made good by the probe and the NAKs), twice without, where
// an unreported run would be resent whole at its timers (protocol notes R19).
func (r *responder) srReportTimes() int {
	if r.cfg.SRNoNAK {
		return 2
	}
	return 1
}

// sendSeqNAK sends an sr NAK PSN sequence error naming the missing PSN m; the AETH's 24-bit
// MSN field carries top, and every PSN after m up to top has arrived (none when top is m).
func (r *responder) sendSeqNAK(q *QP, m, top psn.PSN) {
	q.stats.SeqNAKs++
	r.sendNAK(q, roce.NAK(roce.NAKPSNSequenceError, uint32(top)), m)
}

// reportRuns is sr's selective acknowledgement: one NAK for each run of PSNs received above
// the expected one that grew or merged since it was last reported, naming the missing PSN
// below the run and carrying the run's last PSN (protocol notes R15). Each arrival changes at
// most one run, so there are never more reports than packets received.
func (r *responder) reportRuns(q *QP) {
	if r.cfg.Mode != ModeSR {
		return
	}
	times := r.srReportTimes()
	for i := range r.ranges.rs {
		g := &r.ranges.rs[i]
		if g.reports >= times || !r.epsn.Before(g.l) {
			continue
		}
		g.reports++
		r.sendSeqNAK(q, g.l.Add(-1), g.r)
	}
}

// hold keeps an out-of-order packet: a WRITE packet whose message is known goes straight to
// memory, anything else into the bounded buffer (T9).
func (r *responder) hold(q *QP, rq *request) bool {
	if wc := r.placeWrite(q, rq); wc != nil {
		if int(wc.first.Forward(rq.p)) == wc.n-1 {
			wc.lastOp, wc.lastImm = rq.op, rq.imm
		}
		r.setState(rq.p, uint16(slotPlaced+wc.idx))
		q.stats.PlacedOutOfOrder++
		return true
	}
	if r.buffered+len(rq.payload) > r.cfg.MaxBuffered {
		q.stats.BufferDrops++
		return false
	}
	c := new(request)
	*c = *rq
	c.payload = append([]byte(nil), rq.payload...)
	r.buffered += len(c.payload)
	if r.held == nil {
		r.held = make(map[psn.PSN]*request)
	}
	r.held[rq.p] = c
	r.setState(rq.p, slotBuffered)
	return true
}

// addWrite enters a WRITE message into writes; false when maxWrites are there.
func (r *responder) addWrite(wc *wctx) bool {
	switch {
	case len(r.wfree) > 0:
		wc.idx = r.wfree[len(r.wfree)-1]
		r.wfree = r.wfree[:len(r.wfree)-1]
	case r.nwrites < maxWrites:
		wc.idx = r.nwrites
		r.nwrites++
	default:
		return false
	}
	r.writes[wc.idx] = wc
	return true
}

// removeWrite takes a finished WRITE message out of writes.
func (r *responder) removeWrite(wc *wctx) {
	if wc.idx < maxWrites && r.writes[wc.idx] == wc {
		r.writes[wc.idx] = nil
		r.wfree = append(r.wfree, wc.idx)
	}
}

// placeWrite places an out-of-order WRITE packet whose message is known, or whose RETH it
// carries and passes the checks; it returns the message, or nil to buffer the packet.
func (r *responder) placeWrite(q *QP, rq *request) *wctx {
	switch rq.op {
	case roce.OpWriteFirst, roce.OpWriteOnly, roce.OpWriteOnlyWithImmediate:
		if r.nwrites == maxWrites && len(r.wfree) == 0 {
			return nil
		}
		wc, err := r.newWrite(q, rq)
		if err != nil {
			return nil // the walker answers it in its turn
		}
		wc.dst.place(0, rq.payload)
		r.addWrite(wc)
		return wc
	case roce.OpWriteMiddle, roce.OpWriteLast, roce.OpWriteLastWithImmediate:
		// The message in order, then the others, in the order of their indexes.
		if wc := r.wc; wc != nil && r.inWrite && wc.idx < maxWrites {
			if k := wc.first.Forward(rq.p); k > 0 && k < uint32(wc.n) {
				if !r.fits(wc, int(k), rq) {
					q.stats.Malformed++
					return nil
				}
				wc.dst.place(int(k)*r.cfg.MTU, rq.payload)
				return wc
			}
		}
		for _, wc := range r.writes[:r.nwrites] {
			if wc == nil {
				continue
			}
			k := wc.first.Forward(rq.p)
			if k == 0 || k >= uint32(wc.n) {
				continue
			}
			if !r.fits(wc, int(k), rq) {
				q.stats.Malformed++
				return nil
			}
			wc.dst.place(int(k)*r.cfg.MTU, rq.payload)
			return wc
		}
	}
	return nil
}

// newWrite checks a WRITE's RETH (R_Key, bounds, access) and returns its message.
func (r *responder) newWrite(q *QP, rq *request) (*wctx, error) {
	mtu := r.cfg.MTU
	n := max(1, (int(rq.reth.DMALength)+mtu-1)/mtu)
	only := rq.op != roce.OpWriteFirst
	if only != (n == 1) {
		return nil, errInvalid
	}
	dst, err := q.mrs.resolve(rq.reth.RKey, rq.reth.VA, uint64(rq.reth.DMALength), AccessRemoteWrite)
	if err != nil {
		return nil, err
	}
	return &wctx{first: rq.p, n: n, va: rq.reth.VA, dst: dst, idx: maxWrites}, nil
}

var errInvalid = errors.New("rc: invalid request")

// fits reports whether packet k of a WRITE message has the opcode and length its place needs.
func (r *responder) fits(wc *wctx, k int, rq *request) bool {
	last := k == wc.n-1
	isLast := rq.op == roce.OpWriteLast || rq.op == roce.OpWriteLastWithImmediate
	if last != isLast || rq.op == roce.OpWriteFirst {
		return false
	}
	want := min(r.cfg.MTU, wc.dst.n-k*r.cfg.MTU)
	return len(rq.payload) == want
}

// walk executes, in PSN order, every held packet from the expected PSN on.
func (r *responder) walk(q *QP) {
	for {
		st := r.stateOf(r.epsn)
		if st == slotEmpty {
			return
		}
		if st >= slotPlaced {
			if !r.passPlaced(q, r.writes[st-slotPlaced]) {
				return
			}
			continue
		}
		rq := *r.held[r.epsn]
		ok := r.execute(q, &rq)
		if !ok {
			r.release(r.epsn)
			r.ranges.trim(r.epsn, r.epsn.Add(1))
			return
		}
	}
}

// release empties the window state of p.
func (r *responder) release(p psn.PSN) {
	if r.state == nil {
		return
	}
	if r.stateOf(p) == slotBuffered {
		r.buffered -= len(r.held[p].payload)
		delete(r.held, p)
	}
	r.setState(p, slotEmpty)
}

// advance moves the expected PSN past n PSNs.
func (r *responder) advance(n int) {
	old := r.epsn
	if r.state != nil {
		for k := range n {
			r.release(old.Add(k))
		}
	}
	r.epsn = old.Add(n)
	r.ranges.trim(old, r.epsn)
	r.nakSent = false
	if r.highest.Before(r.epsn.Add(-1)) {
		r.highest = r.epsn.Add(-1)
	}
}

// passPlaced moves past a WRITE packet of wc that is already in memory.
func (r *responder) passPlaced(q *QP, wc *wctx) bool {
	if wc == nil {
		panic("rc: a placed PSN names no WRITE message") // writes are removed only once walked past
	}
	rq := request{p: r.epsn, op: roce.OpWriteMiddle}
	k := int(wc.first.Forward(rq.p))
	if k == wc.n-1 {
		rq.op, rq.imm = wc.lastOp, wc.lastImm
	}
	if k == 0 {
		if r.inSend || r.inWrite {
			r.sendNAK(q, roce.NAK(roce.NAKInvalidRequest, r.msn), rq.p)
			q.stats.InvalidNAKs++
			r.release(rq.p)
			r.ranges.trim(r.epsn, r.epsn.Add(1))
			return false
		}
		r.inWrite, r.wc = true, wc
	} else if !r.inWrite || r.wc != wc {
		r.release(rq.p)
		r.ranges.trim(r.epsn, r.epsn.Add(1))
		return false
	}
	if k == wc.n-1 {
		if rq.op.Info().Headers&roce.HasImmDt != 0 && len(r.rq) == 0 {
			r.rnr(q, rq.p)
			r.release(rq.p)
			r.ranges.trim(r.epsn, r.epsn.Add(1))
			return false
		}
		r.finishWrite(q, &rq)
	}
	r.advance(1)
	return true
}

// execute runs the request at the expected PSN. It reports false when it NAKed.
func (r *responder) execute(q *QP, rq *request) bool {
	switch r.exec(q, rq) {
	case execOK:
		r.advance(r.psnsOf(rq))
		if rq.op == roce.OpCompareSwap || rq.op == roce.OpFetchAdd {
			// Answered once the PSN is passed, so its T/C AETH counts it (T9).
			a := r.atomics[(r.atomicN-1)%len(r.atomics)]
			r.sendAtomicAck(q, a.p, a.orig)
		}
		return true
	case execRNR:
		r.rnr(q, rq.p)
	}
	return false
}

func (r *responder) nak(q *QP, code roce.NAKCode, p psn.PSN) int {
	if code == roce.NAKRemoteAccessError {
		q.stats.AccessNAKs++
	} else {
		q.stats.InvalidNAKs++
	}
	r.sendNAK(q, roce.NAK(code, r.msn), p)
	return execNAK
}

func (r *responder) rnr(q *QP, p psn.PSN) {
	q.stats.RNRNAKs++
	r.sendNAK(q, roce.RNRNAK(r.cfg.RNRTimer, r.msn), p)
}

// exec carries out one request in order: the kind of its opcode does.
func (r *responder) exec(q *QP, rq *request) int {
	switch rq.op {
	case roce.OpSendFirst, roce.OpSendOnly, roce.OpSendOnlyWithImmediate:
		if r.inSend || r.inWrite {
			return r.nak(q, roce.NAKInvalidRequest, rq.p)
		}
		if len(r.rq) == 0 {
			return execRNR
		}
		r.recv, r.off, r.inSend = r.rq[0], 0, true
		r.rq = r.rq[1:]
		return r.sendData(q, rq)
	case roce.OpSendMiddle, roce.OpSendLast, roce.OpSendLastWithImmediate:
		if !r.inSend {
			return r.nak(q, roce.NAKInvalidRequest, rq.p)
		}
		return r.sendData(q, rq)
	case roce.OpWriteFirst, roce.OpWriteOnly, roce.OpWriteOnlyWithImmediate:
		return r.execWriteFirst(q, rq)
	case roce.OpWriteMiddle, roce.OpWriteLast, roce.OpWriteLastWithImmediate:
		return r.execWriteNext(q, rq)
	case roce.OpReadRequest:
		return r.execRead(q, rq)
	case roce.OpCompareSwap, roce.OpFetchAdd:
		return r.execAtomic(q, rq)
	}
	return r.nak(q, roce.NAKInvalidRequest, rq.p)
}

// execWriteFirst starts a WRITE message (FIRST), or carries out one of a single packet (ONLY).
func (r *responder) execWriteFirst(q *QP, rq *request) int {
	op := rq.op
	if r.inSend || r.inWrite {
		return r.nak(q, roce.NAKInvalidRequest, rq.p)
	}
	if op == roce.OpWriteOnlyWithImmediate && len(r.rq) == 0 {
		return execRNR
	}
	wc, err := r.newWrite(q, rq)
	if err != nil {
		if errors.Is(err, errAccess) {
			return r.nak(q, roce.NAKRemoteAccessError, rq.p)
		}
		return r.nak(q, roce.NAKInvalidRequest, rq.p)
	}
	wc.dst.place(0, rq.payload)
	if op == roce.OpWriteFirst {
		r.inWrite, r.wc = true, wc
		r.addWrite(wc) // when full, later packets wait in the buffer instead
		return execOK
	}
	r.wc = wc
	r.finishWrite(q, rq)
	return execOK
}

// execWriteNext places a WRITE message's MIDDLE or LAST packet.
func (r *responder) execWriteNext(q *QP, rq *request) int {
	if !r.inWrite {
		return r.nak(q, roce.NAKInvalidRequest, rq.p)
	}
	wc := r.wc
	k := int(wc.first.Forward(rq.p))
	if k >= wc.n || !r.fits(wc, k, rq) {
		return r.nak(q, roce.NAKInvalidRequest, rq.p)
	}
	if rq.op == roce.OpWriteLastWithImmediate && len(r.rq) == 0 {
		return execRNR
	}
	wc.dst.place(k*r.cfg.MTU, rq.payload)
	if k == wc.n-1 {
		r.finishWrite(q, rq)
	}
	return execOK
}

// execRead takes a READ request: its responses are sent as the pacing allows.
func (r *responder) execRead(q *QP, rq *request) int {
	if r.inSend || r.inWrite {
		return r.nak(q, roce.NAKInvalidRequest, rq.p)
	}
	buf, err := q.mrs.lookup(rq.reth.RKey, rq.reth.VA, uint64(rq.reth.DMALength), AccessRemoteRead)
	if err != nil {
		return r.nak(q, roce.NAKRemoteAccessError, rq.p)
	}
	r.msn = (r.msn + 1) & psn.Mask
	q.stats.ReadsExecuted++
	n := r.psnsOf(rq)
	r.reads = append(r.reads, readJob{p: rq.p, buf: buf, n: n, end: n})
	return execOK
}

// execAtomic carries out a COMPARE_SWAP or FETCH_ADD; execute answers it.
func (r *responder) execAtomic(q *QP, rq *request) int {
	if r.inSend || r.inWrite {
		return r.nak(q, roce.NAKInvalidRequest, rq.p)
	}
	a := rq.atomic
	if a.VA%8 != 0 {
		return r.nak(q, roce.NAKInvalidRequest, rq.p)
	}
	buf, err := q.mrs.lookup(a.RKey, a.VA, 8, AccessRemoteAtomic)
	if err != nil {
		return r.nak(q, roce.NAKRemoteAccessError, rq.p)
	}
	orig := binary.LittleEndian.Uint64(buf)
	if rq.op == roce.OpFetchAdd {
		binary.LittleEndian.PutUint64(buf, orig+a.SwapAdd)
	} else if orig == a.Compare {
		binary.LittleEndian.PutUint64(buf, a.SwapAdd)
	}
	r.msn = (r.msn + 1) & psn.Mask
	q.stats.AtomicsExecuted++
	r.atomics[r.atomicN%len(r.atomics)] = atomicResult{p: rq.p, orig: orig, valid: true}
	r.atomicN++
	return execOK
}

// sendData copies a SEND packet into the receive buffer and completes it on its last packet.
func (r *responder) sendData(q *QP, rq *request) int {
	if r.off+len(rq.payload) > len(r.recv.Buf) {
		r.inSend = false
		q.complete(Completion{ID: r.recv.ID, Kind: KindRecv, Status: StatusLocalLengthError})
		return r.nak(q, roce.NAKInvalidRequest, rq.p)
	}
	copy(r.recv.Buf[r.off:], rq.payload)
	r.off += len(rq.payload)
	switch rq.op {
	case roce.OpSendLast, roce.OpSendLastWithImmediate, roce.OpSendOnly, roce.OpSendOnlyWithImmediate:
		c := Completion{ID: r.recv.ID, Kind: KindRecv, Len: r.off}
		if rq.op == roce.OpSendLastWithImmediate || rq.op == roce.OpSendOnlyWithImmediate {
			c.Imm, c.HasImm = rq.imm, true
		}
		r.inSend = false
		r.msn = (r.msn + 1) & psn.Mask
		q.complete(c)
	}
	return execOK
}

// finishWrite ends a WRITE message whose last packet is placed.
func (r *responder) finishWrite(q *QP, rq *request) {
	wc := r.wc
	if rq.op == roce.OpWriteLastWithImmediate || rq.op == roce.OpWriteOnlyWithImmediate {
		rv := r.rq[0]
		r.rq = r.rq[1:]
		q.complete(Completion{ID: rv.ID, Kind: KindRecvWriteImm, Len: wc.dst.n, Imm: rq.imm, HasImm: true})
	}
	if r.cfg.NotifyWrites {
		q.complete(Completion{Kind: KindWritePlaced, Len: wc.dst.n, Addr: wc.va})
	}
	r.msn = (r.msn + 1) & psn.Mask
	r.inWrite, r.wc = false, nil
	r.removeWrite(wc)
}

// duplicate answers a request already received: READs run again, atomics repeat their saved
// answer, anything else is acknowledged at once.
func (r *responder) duplicate(q *QP, rq *request, behind int) {
	q.stats.DuplicatePackets++
	switch {
	case behind > 0 && rq.op == roce.OpReadRequest:
		buf, err := q.mrs.lookup(rq.reth.RKey, rq.reth.VA, uint64(rq.reth.DMALength), AccessRemoteRead)
		if err != nil {
			r.sendNAK(q, roce.NAK(roce.NAKRemoteAccessError, r.msn), rq.p)
			q.stats.AccessNAKs++
			return
		}
		// Its responses never run past what the responder has passed.
		n := min(r.psnsOf(rq), behind)
		if n*r.cfg.MTU < len(buf) {
			buf = buf[:n*r.cfg.MTU]
		}
		q.stats.DuplicateReads++
		r.rerun(readJob{p: rq.p, buf: buf, n: n, end: n, retx: true})
	case behind > 0 && (rq.op == roce.OpCompareSwap || rq.op == roce.OpFetchAdd):
		for _, a := range r.atomics {
			if a.valid && a.p == rq.p {
				r.sendAtomicAck(q, a.p, a.orig)
				return
			}
		}
		q.stats.Unexpected++
	default:
		if r.hasImm && q.now-r.lastImm < r.cfg.DupAckInterval {
			// One immediate ACK per T_thresh answers a burst of duplicates: the others would
			// carry the same state (protocol notes R23).
			q.stats.DuplicateAcksHeld++
			return
		}
		r.lastImm, r.hasImm = q.now, true
		q.stats.AckTriggerImmediate++
		r.sendAck(q, true)
	}
}

// rerun queues a re-issued READ (IBTA 9.9.2): ahead of every original READ still sending and of
// the re-issued ones of later PSNs, so that the oldest READ's recovery never waits for the
// responses of the READs after it. It takes over the responses it covers that other jobs have
// still to send, which so go out once (protocol notes R17).
func (r *responder) rerun(j readJob) {
	lo, hi := j.p, j.p.Add(j.end)
	at := 0
	keep := r.reads[:0]
	for _, o := range r.reads {
		a, b := o.p.Add(o.next), o.p.Add(o.end)
		took := func(from, to psn.PSN) {
			if !o.retx {
				j.fresh = append(j.fresh, psnRun{from, int(from.Forward(to))})
				return
			}
			n := int32(from.Forward(to))
			for _, f := range o.fresh { // what o took over, it hands on
				l := max(psn.Diff(from, f.p), 0)
				h := min(psn.Diff(from, f.p.Add(f.n)), n)
				if l < h {
					j.fresh = append(j.fresh, psnRun{from.Add(int(l)), int(h - l)})
				}
			}
		}
		switch {
		case !lo.After(a) && !hi.Before(b): // all that is left of o
			took(a, b)
			continue
		case lo.After(a) && lo.Before(b) && !hi.Before(b): // o's tail
			took(lo, b)
			o.end = int(o.p.Forward(lo))
		case !lo.After(a) && hi.After(a) && hi.Before(b): // o's head
			took(a, hi)
			o.next = int(o.p.Forward(hi))
		}
		keep = append(keep, o)
		if o.retx && len(keep) == at+1 && o.p.Before(lo) {
			at++
		}
	}
	r.reads = append(keep, readJob{})
	copy(r.reads[at+1:], r.reads[at:])
	r.reads[at] = j
}
