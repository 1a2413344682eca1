package soak

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/crem-project/crem/internal/harness/sim"
	"github.com/crem-project/crem/rc"
)

// workload posts the requests of every QP and checks their completions (K2, K4 data).
type workload struct {
	w       *world
	pattern []byte // a seeded pattern the small sources are cut from
	spent   int64  // octets of requests above smallMax posted so far
	qs      []*qpWork
	nextID  uint64
	bigDone bool
	posted  uint64
	octets  int64
	largest int64
	byOp    [rc.OpFetchAdd + 1]uint64
	script  []ScriptOp    // what is left of a scripted scenario's requests
	regions []*sim.Region // released, unmapped at the end of the run
}

// qpWork is one QP's requests.
type qpWork struct {
	p       *qpPair
	rng     *rand.Rand
	out     []*op // posted and not completed at A, in post order
	recvs   []*op // SENDs and WRITEs with immediate whose receive B has not completed, in order
	writes  []*op // WRITEs B has not reported placed, in order
	next    time.Duration
	atomic  *rc.MR
	counter uint64 // the value B's atomic counter holds once every atomic has run
	err     bool
	stalled bool // a request of it broke the progress bound (reported once)
}

// op is one work request and its memory.
type op struct {
	id       uint64
	kind     rc.Op
	size     int
	posted   time.Duration
	src, dst []byte
	srcR     *sim.Region
	dstR     *sim.Region
	mr       *rc.MR // B's region: WRITE target, READ source
	imm      uint32
	recvDone bool
	placed   bool
	orig     uint64 // atomics: the value the counter held before this one
	local    []byte // atomics: the 8 octets of the original value
}

// Sizes (K2).
const (
	smallMax   = 1 << 16 // requests up to this many octets are outside the budget
	realMax    = 1 << 20 // up to this many octets, ordinary memory, checked at every offset
	patternLen = 2 << 20
)

func newWorkload(w *world) *workload {
	wl := &workload{w: w, pattern: make([]byte, patternLen), script: w.sc.Script}
	r := rand.New(rand.NewPCG(w.sc.Seed, streamRegions))
	for i := 0; i < patternLen; i += 8 {
		binary.LittleEndian.PutUint64(wl.pattern[i:], r.Uint64())
	}
	for i, p := range w.qps {
		q := &qpWork{p: p, rng: rand.New(rand.NewPCG(w.sc.Seed, uint64(streamWork)<<32|uint64(i)))}
		buf := make([]byte, 8)
		mr, err := p.b.RegisterMR(buf, rc.AccessRemoteAtomic|rc.AccessLocalWrite)
		if err != nil {
			w.fail(fmt.Errorf("soak: %s: atomic region: %w", p.name, err))
		}
		q.atomic = mr
		wl.qs = append(wl.qs, q)
	}
	return wl
}

func (wl *workload) enterPhase(i int) {
	ph := &wl.w.sc.Phases[i]
	if wl.w.sc.Script != nil {
		return
	}
	for _, q := range wl.qs {
		q.next = wl.w.now + q.think(ph)
	}
	if !wl.bigDone && wl.w.sc.Big > 0 && (ph.Loss > 0 || i == len(wl.w.sc.Phases)-4) && !ph.Light {
		// The seed's one large request, in its first lossy phase (K2).
		wl.bigDone = true
		q := wl.qs[wl.w.sc.BigQP]
		wl.post(q, wl.w.sc.BigOp, int(wl.w.sc.Big))
	}
}

// think is the pause before a QP's next request.
func (q *qpWork) think(ph *Phase) time.Duration {
	mean := 20 * time.Millisecond
	if ph.Light {
		mean = 100 * time.Millisecond
	}
	return time.Duration(q.rng.ExpFloat64() * float64(mean))
}

func (wl *workload) nextDeadline() (time.Duration, bool) {
	if wl.w.sc.Script != nil {
		if len(wl.script) > 0 {
			return wl.script[0].At, true
		}
		return 0, false
	}
	ph := &wl.w.sc.Phases[wl.w.phase]
	if ph.Drain {
		return 0, false
	}
	var d time.Duration
	ok := false
	for _, q := range wl.qs {
		if !q.err && len(q.out) < q.p.spec.Depth && (!ok || q.next < d) {
			d, ok = q.next, true
		}
	}
	return d, ok
}

// due posts what is due at now.
func (wl *workload) due(now time.Duration) {
	if wl.w.sc.Script != nil {
		for len(wl.script) > 0 && wl.script[0].At <= now {
			o := wl.script[0]
			wl.script = wl.script[1:]
			wl.post(wl.qs[o.QP], o.Op, o.Size)
		}
		return
	}
	ph := &wl.w.sc.Phases[wl.w.phase]
	if ph.Drain {
		return
	}
	for _, q := range wl.qs {
		if q.err || q.next > now || len(q.out) >= q.p.spec.Depth {
			continue
		}
		kind, size := wl.draw(q, ph)
		wl.post(q, kind, size)
		q.next = now + q.think(ph)
	}
}

// draw chooses a request's operation and size (K2).
func (wl *workload) draw(q *qpWork, ph *Phase) (rc.Op, int) {
	r := q.rng
	sc := wl.w.sc
	var kind rc.Op
	switch x := r.IntN(100); {
	case x < 35 && !q.p.spec.NoReadWork:
		kind = rc.OpRead
	case x < 65:
		kind = rc.OpWrite
	case x < 70:
		kind = rc.OpWriteImm
	case x < 90:
		kind = rc.OpSend
	case x < 95:
		kind = rc.OpSendImm
	case x < 98:
		kind = rc.OpFetchAdd
	default:
		kind = rc.OpCompareSwap
	}
	if kind == rc.OpFetchAdd || kind == rc.OpCompareSwap {
		return kind, 8
	}
	logU := func(lo, hi float64) int { return int(math.Exp(math.Log(lo) + r.Float64()*(math.Log(hi)-math.Log(lo)))) }
	mtu := sc.MTU
	var size int
	if ph.Light {
		hi := 16 << 10
		if q.p.spec.Mode == modeGBN {
			hi = 4 << 10
		}
		size = logU(1, float64(hi)+1)
	} else {
		switch x := r.IntN(100); {
		case x < 3:
			size = 1
		case x < 8:
			size = []int{mtu - 1, mtu, mtu + 1, 2 * mtu, 2*mtu + 1}[r.IntN(5)]
		case x < 40:
			size = logU(2, 4096)
		case x < 75:
			size = logU(4096, smallMax)
		case x < 93:
			size = logU(smallMax, realMax)
		default:
			size = logU(realMax, float64(max(2*realMax, sc.MaxOp/16)))
		}
		if ph.Quiesce || size > smallMax && wl.spent+int64(size) > sc.Budget {
			size = min(size, smallMax)
		}
	}
	return kind, max(size, 1)
}

// post posts one request on q's QP, with its memory and B's receive or region.
func (wl *workload) post(q *qpWork, kind rc.Op, size int) {
	w := wl.w
	p := q.p
	wl.nextID++
	o := &op{id: wl.nextID, kind: kind, size: size, posted: w.now, imm: uint32(q.rng.Uint32())}
	if size > smallMax {
		wl.spent += int64(size)
	}
	wl.posted++
	wl.octets += int64(size)
	wl.largest = max(wl.largest, int64(size))
	wl.byOp[kind]++
	var err error
	switch kind {
	case rc.OpFetchAdd, rc.OpCompareSwap:
		o.local = make([]byte, 8)
		o.orig = q.counter
		wr := rc.SendWR{ID: o.id, Op: kind, Local: o.local, RemoteAddr: q.atomic.Addr, RKey: q.atomic.RKey}
		if kind == rc.OpFetchAdd {
			wr.SwapAdd = q.rng.Uint64() >> 8
			q.counter += wr.SwapAdd
		} else {
			wr.Compare = q.counter
			if q.rng.IntN(4) == 0 {
				wr.Compare++ // fails: the counter keeps its value
			} else {
				wr.SwapAdd = q.rng.Uint64()
				q.counter = wr.SwapAdd
			}
		}
		err = p.a.PostSend(wr)
		q.out = append(q.out, o)
	default:
		if err = wl.memory(q, o); err != nil {
			break
		}
		wr := rc.SendWR{ID: o.id, Op: kind, Local: o.src, Imm: o.imm}
		switch kind {
		case rc.OpRead:
			wr.Local = o.dst
			wr.RemoteAddr, wr.RKey = o.mr.Addr, o.mr.RKey
		case rc.OpWrite, rc.OpWriteImm:
			wr.RemoteAddr, wr.RKey = o.mr.Addr, o.mr.RKey
			q.writes = append(q.writes, o)
		}
		if kind == rc.OpSend || kind == rc.OpSendImm || kind == rc.OpWriteImm {
			var buf []byte
			if kind != rc.OpWriteImm {
				buf = o.dst
			}
			if err = p.b.PostRecv(rc.RecvWR{ID: o.id, Buf: buf}); err != nil {
				break
			}
			q.recvs = append(q.recvs, o)
			w.markQP(p, sideB)
		}
		if err = p.a.PostSend(wr); err == nil {
			q.out = append(q.out, o)
		}
	}
	if err != nil {
		w.fail(fmt.Errorf("soak: %s: post %v of %d octets: %w", p.name, kind, size, err))
		return
	}
	w.markQP(p, sideA)
}

// memory gives o its source and destination: ordinary memory up to realMax, synthetic regions
// above (S5), and B's region for a WRITE or READ.
func (wl *workload) memory(q *qpWork, o *op) error {
	p := q.p
	n := o.size
	if n <= realMax {
		off := q.rng.IntN(patternLen - n + 1)
		o.src = wl.pattern[off : off+n : off+n]
		o.dst = make([]byte, n)
	} else {
		period := sim.DefaultPeriod / 4 * (1 + q.rng.IntN(4))
		var err error
		if o.srcR, err = sim.NewSource(n, period, q.rng.Uint64()); err != nil {
			return err
		}
		if o.dstR, err = sim.NewSink(n, period); err != nil {
			o.srcR.Free()
			return err
		}
		o.src, o.dst = o.srcR.Bytes(), o.dstR.Bytes()
	}
	var err error
	switch o.kind {
	case rc.OpRead:
		o.mr, err = p.b.RegisterMR(o.src, rc.AccessRemoteRead)
	case rc.OpWrite, rc.OpWriteImm:
		o.mr, err = p.b.RegisterMR(o.dst, rc.AccessRemoteWrite|rc.AccessLocalWrite)
	}
	return err
}

// release frees o's memory.
//
// A synthetic region is unmapped only at the end of the run: a responder may still be sending
// READ responses from it after the READ completed (a re-issued READ it runs again, R17), as a
// NIC would read from memory the application has freed; with ordinary memory that is harmless,
// with an unmapped region it would be a fault. The regions cost their period each (K2).
func (wl *workload) release(q *qpWork, o *op) {
	if o.mr != nil {
		q.p.b.DeregisterMR(o.mr)
	}
	for _, r := range []*sim.Region{o.srcR, o.dstR} {
		if r != nil {
			wl.regions = append(wl.regions, r)
		}
	}
	o.src, o.dst, o.srcR, o.dstR = nil, nil, nil, nil
}

// poll takes the completions of host s's QP of p and checks each (K4 data).
func (wl *workload) poll(p *qpPair, s int) {
	q := wl.qs[p.idx]
	var buf [16]rc.Completion
	comps := p.qp(s).PollCompletions(buf[:0])
	for i := range comps {
		wl.complete(q, s, &comps[i])
	}
	if s == sideA && !q.err && p.a.Err() != nil {
		q.err = true
		wl.w.chk.failf(InvData, p.flows[sideA], "the requester entered the error state: %v", p.a.Err())
	}
}

func (wl *workload) complete(q *qpWork, s int, c *rc.Completion) {
	chk := wl.w.chk
	f := q.p.flows[sideA]
	bad := func(format string, a ...any) {
		chk.failf(InvData, f, format, a...)
	}
	switch c.Kind {
	case rc.KindSend:
		if s != sideA {
			bad("B's QP completed a send request %d of its own", c.ID)
			return
		}
		if len(q.out) == 0 || q.out[0].id != c.ID {
			bad("A completed request %d out of order or twice (%d outstanding)", c.ID, len(q.out))
			return
		}
		o := q.out[0]
		q.out = q.out[1:]
		if q.next < wl.w.now {
			q.next = wl.w.now // room for the next request
		}
		if c.Status != rc.StatusSuccess || c.Op != o.kind {
			bad("%v %d of %d octets completed with %v (op %v) after %v", o.kind, o.id, o.size, c.Status, c.Op, wl.w.now-o.posted)
			wl.release(q, o)
			return
		}
		want := o.size
		if c.Len != want {
			bad("%v %d completed with length %d, want %d", o.kind, o.id, c.Len, want)
		}
		switch o.kind {
		case rc.OpFetchAdd, rc.OpCompareSwap:
			if c.Orig != o.orig || binary.LittleEndian.Uint64(o.local) != o.orig {
				bad("%v %d returned %#x (local %#x), want %#x", o.kind, o.id, c.Orig, binary.LittleEndian.Uint64(o.local), o.orig)
			}
		case rc.OpSend, rc.OpSendImm, rc.OpWriteImm:
			if !o.recvDone {
				bad("%v %d completed at A before B completed its receive", o.kind, o.id)
			}
		}
		if (o.kind == rc.OpWrite || o.kind == rc.OpWriteImm) && !o.placed {
			bad("%v %d completed at A before B placed it", o.kind, o.id)
		}
		if o.kind != rc.OpFetchAdd && o.kind != rc.OpCompareSwap {
			if ft := wl.w.faults; ft != nil && ft.corrupt && len(o.dst) > 0 {
				o.dst[len(o.dst)/2] ^= 0x40 // overwritten after placement: the check must see it
			}
			if err := wl.compare(o); err != nil {
				bad("%v %d of %d octets: %v", o.kind, o.id, o.size, err)
			}
		}
		wl.release(q, o)
	case rc.KindRecv, rc.KindRecvWriteImm:
		if len(q.recvs) == 0 || q.recvs[0].id != c.ID {
			bad("B completed receive %d out of order or twice", c.ID)
			return
		}
		o := q.recvs[0]
		q.recvs = q.recvs[1:]
		o.recvDone = true
		if c.Status != rc.StatusSuccess || c.Len != o.size {
			bad("B's receive for %v %d: %v, %d octets, want %d", o.kind, o.id, c.Status, c.Len, o.size)
		}
		hasImm := o.kind == rc.OpSendImm || o.kind == rc.OpWriteImm
		if c.HasImm != hasImm || hasImm && c.Imm != o.imm {
			bad("B's receive for %v %d: immediate %v %#x, want %v %#x", o.kind, o.id, c.HasImm, c.Imm, hasImm, o.imm)
		}
		if c.Kind == rc.KindRecvWriteImm && o.kind != rc.OpWriteImm || c.Kind == rc.KindRecv && o.kind == rc.OpWriteImm {
			bad("B's receive for %v %d completed as kind %d", o.kind, o.id, c.Kind)
		}
	case rc.KindWritePlaced:
		if len(q.writes) == 0 {
			bad("B placed a WRITE at %#x nobody posted", c.Addr)
			return
		}
		o := q.writes[0]
		q.writes = q.writes[1:]
		o.placed = true
		if c.Addr != o.mr.Addr || c.Len != o.size {
			bad("B placed WRITE of %d octets at %#x, want %v %d of %d octets at %#x", c.Len, c.Addr, o.kind, o.id, o.size, o.mr.Addr)
		}
	}
}

// compare checks o's destination against its source.
func (wl *workload) compare(o *op) error {
	if o.dstR != nil {
		return o.dstR.Matches(o.srcR, o.size)
	}
	if !bytes.Equal(o.dst, o.src) {
		i := 0
		for i < len(o.dst) && o.dst[i] == o.src[i] {
			i++
		}
		return fmt.Errorf("the destination differs from the source from octet %d on", i)
	}
	return nil
}

// largeOutstanding reports whether a request above smallMax is still outstanding.
func (wl *workload) largeOutstanding() bool {
	for _, q := range wl.qs {
		for _, o := range q.out {
			if o.size > smallMax {
				return true
			}
		}
	}
	return false
}

// allDone reports whether every request has completed.
func (wl *workload) allDone() bool {
	if len(wl.script) > 0 {
		return false
	}
	for _, q := range wl.qs {
		if len(q.out) > 0 && !q.err {
			return false
		}
	}
	return true
}

// probe posts on every QP a READ and a WRITE, so that every flow carries a source packet for the
// probe drops (K6).
func (wl *workload) probe() {
	if wl.w.sc.Script != nil {
		return
	}
	for _, q := range wl.qs {
		if q.err {
			continue
		}
		mtu := wl.w.sc.MTU
		wl.post(q, rc.OpWrite, probePackets*mtu+q.rng.IntN(probePackets*mtu))
		wl.post(q, rc.OpRead, probePackets*mtu+q.rng.IntN(probePackets*mtu))
	}
}

// outstanding describes what has not completed, for the end of the run.
func (wl *workload) outstanding() string {
	var s string
	n := 0
	for _, q := range wl.qs {
		for _, o := range q.out {
			if n < 4 {
				s += fmt.Sprintf("; %s %v %d of %d octets posted at %v", q.p.name, o.kind, o.id, o.size, o.posted)
			}
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d requests outstanding%s", n, s)
}

const modeGBN = rc.ModeGBN

// freeAll releases the memory of every request still outstanding.
func (wl *workload) freeAll() {
	for _, q := range wl.qs {
		for _, o := range q.out {
			wl.release(q, o)
		}
		q.out = nil
	}
	for _, r := range wl.regions {
		r.Free()
	}
	wl.regions = nil
}
