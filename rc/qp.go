package rc

import (
	"errors"
	"fmt"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// QP is one RC queue pair: requester and responder of one connection. It is not safe for
// concurrent use: one driver owns it.
type QP struct {
	cfg     Config
	out     roce.LogicalHeader // what our packets are sealed under
	in      roce.LogicalHeader // what the peer's packets are checked under
	cthresh int
	mrs     regions

	now   time.Duration
	outq  [][]byte // packets ready for the driver
	arena []byte   // with ReuseBuffers: the buffer outq's packets live in until Drain returns
	comps []Completion
	stats Stats

	req  requester
	resp responder
	pace pacer
}

// ErrQPError is returned by Post calls on a QP in the error state.
var ErrQPError = errors.New("rc: QP is in the error state")

// NewQP returns a QP for cfg, or an error naming every invalid field.
func NewQP(cfg Config) (*QP, error) {
	stated := cfg.RTT > 0 && !cfg.RTTProvisional
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	q := &QP{cfg: cfg}
	q.out = roce.LogicalHeader{Src: cfg.LocalAddr, Dst: cfg.RemoteAddr, SrcPort: cfg.LocalPort}
	q.in = roce.LogicalHeader{Src: cfg.RemoteAddr, Dst: cfg.LocalAddr, SrcPort: cfg.RemotePort}
	q.cthresh = CThresh(cfg.PeerRate, cfg.MTU, cfg.TThresh)
	q.mrs.qpn = cfg.QPN
	q.req.init(&q.cfg, stated)
	q.resp.init(&q.cfg)
	return q, nil
}

// Config returns the QP's configuration with its defaults filled in.
func (q *QP) Config() Config { return q.cfg }

// CThresh returns the count threshold of this QP's tcaeth receiver (T6).
func (q *QP) CThresh() int { return q.cthresh }

// Stats returns the QP's counters.
func (q *QP) Stats() Stats { return q.stats }

// Err returns why the requester entered the error state, or nil.
func (q *QP) Err() error { return q.req.err }

// NextPSN returns the PSN the requester's next new request takes: its first PSN plus every PSN
// it has sent so far, modulo 2^24.
func (q *QP) NextPSN() psn.PSN { return q.req.nxt }

// SRTT returns the requester's smoothed round-trip time.
func (q *QP) SRTT() time.Duration { return q.req.srtt }

// Sampled reports whether the QP has an RTT sample: a stated RTT (Config.RTT) or an ACK's.
// Until it has, no timer runs shorter than Config.LocalAckTimeout.
func (q *QP) Sampled() bool { return q.req.sampled }

// PostRecv adds a receive buffer.
func (q *QP) PostRecv(wr RecvWR) error {
	q.resp.rq = append(q.resp.rq, wr)
	return nil
}

// PostSend queues a send work request. Packets go out from the next Tick (or Handle) on.
func (q *QP) PostSend(wr SendWR) error {
	if q.req.err != nil {
		return ErrQPError
	}
	switch {
	case wr.Op > OpFetchAdd:
		return fmt.Errorf("rc: post: unknown operation %d", wr.Op)
	case wr.Op.isAtomic() && len(wr.Local) < 8:
		return fmt.Errorf("rc: post: %v needs 8 local octets for the original value", wr.Op)
	case wr.Op.isAtomic() && wr.RemoteAddr%8 != 0:
		return fmt.Errorf("rc: post: %v address %#x is not 8-aligned", wr.Op, wr.RemoteAddr)
	case uint64(wr.size()) > 1<<31:
		return fmt.Errorf("rc: post: message of %d octets exceeds 2 GiB", wr.size())
	case wr.Length != 0 && wr.Length < len(wr.Local):
		return fmt.Errorf("rc: post: length %d shorter than the local buffer of %d octets", wr.Length, len(wr.Local))
	case wr.Length > len(wr.Local) && (!wr.Op.isWrite() || len(wr.Local) == 0 || len(wr.Local)%q.cfg.MTU != 0):
		return fmt.Errorf("rc: post: %v repeating %d local octets: only a WRITE repeats, and a whole number of MTUs (%d)",
			wr.Op, len(wr.Local), q.cfg.MTU)
	}
	w := &wqe{wr: wr, n: 1}
	switch {
	case wr.Op == OpRead:
		w.n = int(roce.OpReadRequest.PSNs(uint32(len(wr.Local)), uint32(q.cfg.MTU)))
		if w.n > MaxOutstandingPSNs {
			return fmt.Errorf("rc: post: %v of %d octets takes %d PSNs at MTU %d, more than the %d a QP may have outstanding (24-bit PSNs)",
				wr.Op, len(wr.Local), w.n, q.cfg.MTU, MaxOutstandingPSNs)
		}
		w.got, w.edges = make([]bool, w.n), make([]uint8, w.n)
		w.edges[0] |= readEdgeBegin
		w.edges[w.n-1] |= readEdgeEnd
	case !wr.Op.isAtomic():
		w.n = max(1, (wr.size()+q.cfg.MTU-1)/q.cfg.MTU)
	}
	q.req.post(w)
	return nil
}

// PollCompletions appends the completions that are ready to dst and returns it.
func (q *QP) PollCompletions(dst []Completion) []Completion {
	dst = append(dst, q.comps...)
	q.comps = q.comps[:0]
	return dst
}

// Pending reports how many send work requests have not completed.
func (q *QP) Pending() int { return len(q.req.sq) }

// Drain passes every packet the QP wants sent to out, in order, and forgets them. Each is a
// whole RoCEv2 UDP payload, owned by out from then on; with Config.ReuseBuffers it is valid
// only until out returns.
func (q *QP) Drain(out func(pkt []byte)) {
	for _, p := range q.outq {
		out(p)
	}
	clear(q.outq)
	q.outq = q.outq[:0]
	q.arena = q.arena[:0]
	if cap(q.arena) > maxArena {
		q.arena = nil // a burst's buffer is not kept for good
	}
}

// maxArena bounds the packet buffer a QP keeps from one Drain to the next.
const maxArena = 1 << 20

// Tick runs the timers and the pacer at now.
func (q *QP) Tick(now time.Duration) {
	q.advance(now)
	q.pump()
}

func (q *QP) advance(now time.Duration) {
	if now > q.now {
		q.now = now
	}
}

// NextDeadline returns when the QP next wants Tick, and false when it waits for nothing. A
// deadline at or before the last time it was given means at once.
func (q *QP) NextDeadline() (time.Duration, bool) {
	d, ok := q.req.deadline(q)
	if t, ok2 := q.resp.deadline(q); ok2 && (!ok || t < d) {
		d, ok = t, true
	}
	if q.havePaced() {
		t := q.pace.next
		if !ok || t < d {
			d, ok = t, true
		}
	}
	return d, ok
}

// Handle takes one received RoCEv2 UDP payload at now. Packets that fail the ICRC, do not
// parse, are not for this QP or break the rules are dropped and counted.
func (q *QP) Handle(now time.Duration, pkt []byte) {
	q.advance(now)
	q.stats.PacketsIn++
	if len(pkt) < roce.BTHLen+roce.ICRCLen {
		q.stats.Malformed++
		return
	}
	if !q.cfg.SkipICRC && !q.cfg.SkipICRCCheck {
		if err := q.in.Verify(pkt); err != nil {
			if errors.Is(err, roce.ErrICRC) {
				q.stats.BadICRC++
			} else {
				q.stats.Malformed++
			}
			return
		}
	}
	p, err := roce.ParsePacket(pkt)
	if err != nil {
		q.stats.Malformed++
		return
	}
	if p.BTH.DestQP != q.cfg.QPN {
		q.stats.WrongQP++
		return
	}
	info := p.BTH.OpCode.Info()
	if info.Transport != roce.TransportRC || p.BTH.PKey != q.cfg.PKey {
		q.stats.Malformed++
		return
	}
	if info.Request {
		q.resp.handle(q, &p)
	} else {
		q.req.handle(q, &p)
	}
	q.pump()
}

// emit seals a packet, queues it for the driver and returns its length.
func (q *QP) emit(p *roce.Packet) int {
	p.BTH.DestQP = q.cfg.RemoteQPN
	p.BTH.PKey = q.cfg.PKey
	var b []byte
	var err error
	if q.cfg.ReuseBuffers {
		// Packets are laid end to end in one buffer that Drain empties; an earlier packet
		// keeps the old array should this append move it.
		start := len(q.arena)
		q.arena, err = p.Append(q.arena)
		b = q.arena[start:len(q.arena):len(q.arena)]
	} else {
		b, err = p.Append(make([]byte, 0, p.Len()))
	}
	if err == nil && !q.cfg.SkipICRC {
		err = q.out.Seal(b)
	}
	if err != nil {
		// Every packet is built from validated state; this is a bug, not input.
		panic(fmt.Sprintf("rc: building %v: %v", p.BTH.OpCode, err))
	}
	q.stats.PacketsOut++
	q.outq = append(q.outq, b)
	return len(b)
}

func (q *QP) complete(c Completion) {
	q.stats.Completions++
	if c.Status != StatusSuccess {
		q.stats.CompletionErrors++
	}
	q.comps = append(q.comps, c)
}

// pump runs the timers that are due and sends what the pacer allows.
func (q *QP) pump() {
	q.resp.timers(q)
	q.req.timers(q)
	for q.havePaced() && q.pace.next <= q.now {
		n := q.sendOne()
		if n == 0 {
			break
		}
		q.pace.sent(q, n)
	}
}

// havePaced reports whether a paced packet is waiting: a retransmission, a READ response or
// new data with room in the send buffer.
func (q *QP) havePaced() bool {
	return q.req.ready(q) || len(q.resp.reads) > 0
}

// sendOne sends one paced packet, retransmissions first, and returns its length.
func (q *QP) sendOne() int {
	if n := q.req.sendRetx(q); n > 0 {
		return n
	}
	if n := q.resp.sendRead(q); n > 0 {
		return n
	}
	return q.req.sendNew(q)
}

// pacer spaces packets at the preset rate (T8): no window, only time.
type pacer struct {
	next time.Duration
}

func (p *pacer) sent(q *QP, n int) {
	if q.cfg.Rate <= 0 {
		p.next = q.now
		return
	}
	p.next = max(p.next, q.now-q.cfg.Burst)
	p.next += time.Duration(int64(wireLen(n)) * 8 * int64(time.Second) / q.cfg.Rate)
}

// psnIndex returns q's distance ahead of base when it lies within [0, n), else -1.
func psnIndex(base, q psn.PSN, n int) int {
	d := base.Forward(q)
	if d >= uint32(n) {
		return -1
	}
	return int(d)
}
