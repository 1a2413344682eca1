package lab

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/crem-project/crem/rc"
)

// workload posts the messages at the requester, checks every one where it lands and times
// each from its post to its completion at the requester.
type workload struct {
	o      *Options
	name   string
	qa, qb *rc.QP
	slots  int
	bufs   [][]byte // requester's messages (WRITE, SEND) or READ targets, one per slot
	mem    []byte   // responder's memory
	mr     *rc.MR
	start  time.Time

	mu        sync.Mutex
	posted    int
	completed int
	checked   int
	bad       int
	writes    int
	recvs     int
	postedAt  []time.Time
	durations []time.Duration
	err       error
	done      chan struct{}
	closed    bool
}

func newWorkload(o *Options, name string, qa, qb *rc.QP) *workload {
	slots := max(1, min(o.Messages, (64<<20)/o.Size, 64))
	w := &workload{o: o, name: name, qa: qa, qb: qb, slots: slots, done: make(chan struct{}),
		postedAt: make([]time.Time, o.Messages)}
	w.bufs = make([][]byte, slots)
	for j := range w.bufs {
		w.bufs[j] = make([]byte, o.Size)
	}
	return w
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

// prepareResponder registers the responder's memory (READ: filled with the messages) and
// posts its receive buffers (SEND).
func (w *workload) prepareResponder() error {
	size := w.o.Size
	w.mem = make([]byte, size*w.slots)
	mr, err := w.qb.RegisterMR(w.mem, rc.AccessRemoteWrite|rc.AccessRemoteRead|rc.AccessLocalWrite)
	if err != nil {
		return fmt.Errorf("lab: responder memory: %w", err)
	}
	w.mr = mr
	switch w.o.Op {
	case "read":
		for i := range w.o.Messages {
			if i < w.slots {
				pattern(w.mem[i*size:(i+1)*size], w.o.Seed, i)
			}
		}
	case "send":
		for j := range w.slots {
			if err := w.qb.PostRecv(rc.RecvWR{ID: uint64(j), Buf: w.mem[j*size : (j+1)*size]}); err != nil {
				return fmt.Errorf("lab: responder receive: %w", err)
			}
		}
	}
	return nil
}

// postAll posts the first slots' worth of messages (under the requester host's lock).
func (w *workload) postAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for range w.slots {
		w.post()
	}
}

func (w *workload) post() {
	if w.posted >= w.o.Messages || w.err != nil {
		return
	}
	i := w.posted
	j := i % w.slots
	wr := rc.SendWR{ID: uint64(i), Local: w.bufs[j], RKey: w.mr.RKey, RemoteAddr: w.mr.Addr + uint64(j*w.o.Size)}
	switch w.o.Op {
	case "write":
		wr.Op = rc.OpWrite
		pattern(w.bufs[j], w.o.Seed, i)
	case "send":
		wr.Op = rc.OpSend
		pattern(w.bufs[j], w.o.Seed, i)
	case "read":
		wr.Op = rc.OpRead
		clear(w.bufs[j])
	}
	w.postedAt[i] = time.Now()
	if err := w.qa.PostSend(wr); err != nil {
		w.fail(fmt.Errorf("lab: post message %d: %w", i, err))
		return
	}
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

// requesterDone runs under the requester host's lock for each completion.
func (w *workload) requesterDone(c rc.Completion) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.Kind != rc.KindSend {
		return
	}
	if c.Status != rc.StatusSuccess {
		w.fail(fmt.Errorf("lab: message %d: %v (%v)", c.ID, c.Status, w.qa.Err()))
		return
	}
	i := int(c.ID)
	w.durations = append(w.durations, time.Since(w.postedAt[i]))
	if w.o.Op == "read" {
		j := i % w.slots
		if matches(w.bufs[j], w.o.Seed, j) {
			w.checked++
		} else {
			w.bad++
		}
	}
	w.completed++
	if w.o.Progress != nil {
		w.o.Progress(w.name, w.completed, w.o.Messages)
	}
	w.post()
	if w.completed == w.o.Messages && w.checked+w.bad >= w.o.Messages {
		w.finish()
	}
}

// responderDone runs under the responder host's lock: it checks each WRITE as it is placed
// and each SEND as it fills a receive buffer.
func (w *workload) responderDone(c rc.Completion) {
	w.mu.Lock()
	defer w.mu.Unlock()
	size := w.o.Size
	switch c.Kind {
	case rc.KindWritePlaced:
		i := w.writes
		w.writes++
		j := i % w.slots
		if c.Len == size && matches(w.mem[j*size:(j+1)*size], w.o.Seed, i) {
			w.checked++
		} else {
			w.bad++
		}
	case rc.KindRecv:
		i := w.recvs
		w.recvs++
		j := int(c.ID)
		if c.Status == rc.StatusSuccess && c.Len == size && matches(w.mem[j*size:(j+1)*size], w.o.Seed, i) {
			w.checked++
		} else {
			w.bad++
		}
		w.qb.PostRecv(rc.RecvWR{ID: c.ID, Buf: w.mem[j*size : (j+1)*size]})
	default:
		return
	}
	if w.completed == w.o.Messages && w.checked+w.bad >= w.o.Messages {
		w.finish()
	}
}
