package lab

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/crem-project/crem/rc"
)

// workload posts the messages of a run over its queue pairs, checks every one where it lands
// and times each from its post to its completion at the requester. Message g goes over QP
// g mod QPs. A soak's workload (Options.Duration) posts messages until it is stopped.
type workload struct {
	o     *Options
	name  string
	qps   []*qpWork
	start time.Time
	soak  bool

	mu        sync.Mutex
	posted    int
	completed int
	checked   int
	bad       int
	durations durations
	err       error
	done      chan struct{}
	closed    bool
	stopped   bool // a soak posts no more
}

// durations sums completion times: a soak's run has no bound on their number.
type durations struct {
	n        int
	sum, max time.Duration
}

func (d *durations) add(x time.Duration) {
	d.n++
	d.sum += x
	d.max = max(d.max, x)
}

// meanMax returns the mean and the largest in seconds.
func (d durations) meanMax() (mean, maxS float64) {
	if d.n > 0 {
		mean = d.sum.Seconds() / float64(d.n)
	}
	return mean, d.max.Seconds()
}

// qpWork is one queue pair's part of a run: a requester QP and its responder.
type qpWork struct {
	w      *workload
	q      int
	qa, qb *rc.QP
	seed   uint64   // of its messages (qpSeed)
	n      int      // messages over this QP
	slots  int      // of them in flight at once, each with its memory
	bufs   [][]byte // requester's messages (WRITE, SEND) or READ targets, one per slot
	mem    []byte   // responder's memory
	mr     *rc.MR

	posted, completed, checked, bad, writes, recvs int
	postedAt                                       []time.Time // of the message in each slot
	durations                                      durations
}

func newWorkload(o *Options, name string, pairs [][2]*rc.QP) *workload {
	n := len(pairs)
	w := &workload{o: o, name: name, done: make(chan struct{}), soak: o.Duration > 0}
	for q, p := range pairs {
		k := &qpWork{w: w, q: q, qa: p[0], qb: p[1], seed: qpSeed(o.Seed, q), n: (o.Messages - q + n - 1) / n}
		if w.soak {
			k.n = math.MaxInt
		}
		k.slots = min(k.n, slotsPerQP(o))
		k.postedAt = make([]time.Time, k.slots)
		k.bufs = make([][]byte, k.slots)
		for j := range k.bufs {
			k.bufs[j] = make([]byte, o.Size)
		}
		w.qps = append(w.qps, k)
	}
	return w
}

// slotsPerQP is how many messages a QP has in flight at most, each with its memory: 64, and
// 64 MiB shared by the QPs.
func slotsPerQP(o *Options) int { return max(1, min((64<<20)/o.QPs/o.Size, 64)) }

// qpSeed is the seed of QP q's messages: the run's own for the first, so that a run of one QP
// moves the same data as before there were several; the others' differ, so that a message
// landing on another QP's memory fails its check.
func qpSeed(seed uint64, q int) uint64 {
	if q == 0 {
		return seed
	}
	return mix(seed, uint64(q))
}

// mix derives a stream's value from a seed.
func mix(seed, stream uint64) uint64 {
	x := seed ^ stream*0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// pattern fills b with message i of the run: random octets from the seed.
func pattern(b []byte, seed uint64, i int) {
	r := rand.NewPCG(seed, uint64(i)+0x51ed27)
	for k := 0; k < len(b); k += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && k+j < len(b); j++ {
			b[k+j] = byte(v >> (8 * j))
		}
	}
}

func matches(b []byte, seed uint64, i int) bool {
	r := rand.NewPCG(seed, uint64(i)+0x51ed27)
	for k := 0; k < len(b); k += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && k+j < len(b); j++ {
			if b[k+j] != byte(v>>(8*j)) {
				return false
			}
		}
	}
	return true
}

// prepareResponders registers each responder's memory (READ: filled with the messages) and
// posts its receive buffers (SEND).
func (w *workload) prepareResponders() error {
	size := w.o.Size
	for _, k := range w.qps {
		k.mem = make([]byte, size*k.slots)
		mr, err := k.qb.RegisterMR(k.mem, rc.AccessRemoteWrite|rc.AccessRemoteRead|rc.AccessLocalWrite)
		if err != nil {
			return fmt.Errorf("lab: QP %d: responder memory: %w", k.q, err)
		}
		k.mr = mr
		switch w.o.Op {
		case "read":
			for j := range k.slots {
				pattern(k.mem[j*size:(j+1)*size], k.seed, j)
			}
		case "send":
			for j := range k.slots {
				if err := k.qb.PostRecv(rc.RecvWR{ID: uint64(j), Buf: k.mem[j*size : (j+1)*size]}); err != nil {
					return fmt.Errorf("lab: QP %d: responder receive: %w", k.q, err)
				}
			}
		}
	}
	return nil
}

// postAll posts QP k's first slots' worth of messages (under the requester host's lock).
func (k *qpWork) postAll() {
	k.w.mu.Lock()
	defer k.w.mu.Unlock()
	for range k.slots {
		k.post()
	}
}

// post posts k's next message; its ID is the message's number in the run.
func (k *qpWork) post() {
	w := k.w
	if k.posted >= k.n || w.err != nil || w.stopped {
		return
	}
	i := k.posted
	g := k.q + i*len(w.qps)
	j := i % k.slots
	wr := rc.SendWR{ID: uint64(g), Local: k.bufs[j], RKey: k.mr.RKey, RemoteAddr: k.mr.Addr + uint64(j*w.o.Size)}
	switch w.o.Op {
	case "write":
		wr.Op = rc.OpWrite
		pattern(k.bufs[j], k.seed, i)
	case "send":
		wr.Op = rc.OpSend
		pattern(k.bufs[j], k.seed, i)
	case "read":
		wr.Op = rc.OpRead
		clear(k.bufs[j])
	}
	k.postedAt[j] = time.Now()
	if err := k.qa.PostSend(wr); err != nil {
		w.fail(fmt.Errorf("lab: QP %d: post message %d: %w", k.q, g, err))
		return
	}
	k.posted++
	w.posted++
}

func (w *workload) fail(err error) {
	if w.err == nil {
		w.err = err
	}
	w.finish()
}

func (w *workload) finish() {
	if !w.closed {
		w.closed = true
		close(w.done)
	}
}

// maybeDone ends the run once every message completed and was checked: all of them, or in a
// soak every one posted before it was stopped.
func (w *workload) maybeDone() {
	want := w.o.Messages
	if w.soak {
		if !w.stopped {
			return
		}
		want = w.posted
	}
	if w.completed == want && w.checked+w.bad >= want {
		w.finish()
	}
}

// stop ends a soak's posting; the run ends when the messages in flight have completed.
func (w *workload) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.maybeDone()
}

// want is the number of messages the run must complete and check: in a soak, those posted.
func (w *workload) want() int {
	if w.soak {
		return w.posted
	}
	return w.o.Messages
}

// requesterDone runs under the requester host's lock for each completion of QP k.
func (k *qpWork) requesterDone(c rc.Completion) {
	w := k.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.Kind != rc.KindSend {
		return
	}
	if c.Status != rc.StatusSuccess {
		w.fail(fmt.Errorf("lab: QP %d: message %d: %v (%v)", k.q, c.ID, c.Status, k.qa.Err()))
		return
	}
	g := int(c.ID)
	// RC completes a QP's messages in order, and a slot takes its next message only after
	// its last one completed: the slot's time is this message's.
	j := (g - k.q) / len(w.qps) % k.slots
	d := time.Since(k.postedAt[j])
	w.durations.add(d)
	k.durations.add(d)
	if w.o.Op == "read" {
		if matches(k.bufs[j], k.seed, j) {
			k.checked++
			w.checked++
		} else {
			k.bad++
			w.bad++
		}
	}
	k.completed++
	w.completed++
	if w.o.Progress != nil {
		total := w.o.Messages
		if w.soak {
			total = 0 // no end known: the soak ends at its duration
		}
		w.o.Progress(w.name, w.completed, total)
	}
	k.post()
	w.maybeDone()
}

// responderDone runs under the responder host's lock: it checks each WRITE of QP k as it is
// placed and each SEND as it fills a receive buffer.
func (k *qpWork) responderDone(c rc.Completion) {
	w := k.w
	w.mu.Lock()
	defer w.mu.Unlock()
	size := w.o.Size
	good := false
	switch c.Kind {
	case rc.KindWritePlaced:
		i := k.writes
		k.writes++
		j := i % k.slots
		good = c.Len == size && matches(k.mem[j*size:(j+1)*size], k.seed, i)
	case rc.KindRecv:
		i := k.recvs
		k.recvs++
		j := int(c.ID)
		good = c.Status == rc.StatusSuccess && c.Len == size && matches(k.mem[j*size:(j+1)*size], k.seed, i)
		k.qb.PostRecv(rc.RecvWR{ID: c.ID, Buf: k.mem[j*size : (j+1)*size]})
	default:
		return
	}
	if good {
		k.checked++
		w.checked++
	} else {
		k.bad++
		w.bad++
	}
	w.maybeDone()
}
