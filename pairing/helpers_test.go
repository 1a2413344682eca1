package pairing

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

var (
	hostA = netip.MustParseAddr("10.1.0.1") // the requesters' side: flows leave from here
	hostB = netip.MustParseAddr("10.2.0.1") // the responders' side: ACKs come back from here
)

// bth is a packet of op to qp at p: the BTH, the extension headers the learner reads, an
// ICRC's room.
func bth(op roce.Opcode, qp uint32, p psn.PSN) []byte {
	b := make([]byte, 12, 40)
	b[0] = byte(op)
	b[2], b[3] = 0xff, 0xff
	b[5], b[6], b[7] = byte(qp>>16), byte(qp>>8), byte(qp)
	b[9], b[10], b[11] = byte(p>>16), byte(p>>8), byte(p)
	switch op {
	case roce.OpAcknowledge, roce.OpReadResponseFirst, roce.OpReadResponseLast, roce.OpReadResponseOnly:
		b = append(b, 0, 0, 0, 0) // AETH
	case roce.OpReadRequest, roce.OpWriteOnly, roce.OpWriteFirst:
		b = append(b, make([]byte, 16)...) // RETH
	}
	return append(b, 0, 0, 0, 0)
}

func write(qp uint32, p psn.PSN) []byte { return bth(roce.OpWriteOnly, qp, p) }
func ack(qp uint32, p psn.PSN) []byte   { return bth(roce.OpAcknowledge, qp, p) }

func read(qp uint32, p psn.PSN, dma uint32) []byte {
	b := bth(roce.OpReadRequest, qp, p)
	binary.BigEndian.PutUint32(b[12+12:], dma)
	return b
}

func newLearner(t testing.TB, mod func(*Limits)) *Learner {
	t.Helper()
	l := DefaultLimits()
	if mod != nil {
		mod(&l)
	}
	x, err := New(l)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// events collects what the learner reports.
func events(x *Learner) []Event {
	var out []Event
	x.Events(func(e Event) { out = append(out, e) })
	return out
}

// qpPair is one RC connection between hostA and hostB: requests A->B to dest, their responses
// B->A to rev, from a random initial PSN.
type qpPair struct {
	dest, rev uint32
	next      psn.PSN // the next request PSN
	acked     psn.PSN // the last PSN acknowledged
	sent      []psn.PSN
}

func (q *qpPair) key() flow.Key { return flow.Key{Src: hostA, Dst: hostB, DestQP: q.dest} }

// workload drives QP pairs through a learner in steps of virtual time, checking after every
// response that the learner never names another flow than the packet's own.
type workload struct {
	t     testing.TB
	x     *Learner
	rng   *rand.Rand
	qps   []*qpPair
	now   time.Duration
	seed  uint64
	wrong int
	right map[uint32]int // responses offered to their own flow, per reverse QP
	// firstOK is the number of responses of each reverse QP seen before its first offer.
	firstOK map[uint32]int
	seen    map[uint32]int
}

func newWorkload(t testing.TB, x *Learner, seed uint64, n int, start func(i int, r *rand.Rand) psn.PSN) *workload {
	w := &workload{t: t, x: x, rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), seed: seed,
		right: map[uint32]int{}, firstOK: map[uint32]int{}, seen: map[uint32]int{}}
	used := map[uint32]bool{}
	for i := range n {
		q := &qpPair{}
		for q.dest == 0 || used[q.dest] || used[q.rev] || q.rev == 0 || q.dest == q.rev {
			q.dest, q.rev = w.rng.Uint32N(1<<24-2)+2, w.rng.Uint32N(1<<24-2)+2
		}
		used[q.dest], used[q.rev] = true, true
		q.next = start(i, w.rng)
		q.acked = q.next.Add(-1)
		w.qps = append(w.qps, q)
	}
	return w
}

// send sends n requests on q.
func (w *workload) send(q *qpPair, n int) {
	for range n {
		w.x.Forward(w.now, hostA, hostB, write(q.dest, q.next))
		q.sent = append(q.sent, q.next)
		q.next = q.next.Add(1)
	}
}

// respond acknowledges q's requests through some PSN between its last ACK and its last send.
func (w *workload) respond(q *qpPair) {
	if len(q.sent) == 0 {
		return
	}
	i := w.rng.IntN(len(q.sent))
	q.acked = q.sent[i]
	q.sent = q.sent[i+1:]
	w.deliver(q, ack(q.rev, q.acked))
}

// deliver hands a response of q to the learner and checks what it says.
func (w *workload) deliver(q *qpPair, pkt []byte) {
	w.t.Helper()
	w.seen[q.rev]++
	k, ok := w.x.Reverse(w.now, hostB, hostA, pkt)
	if !ok {
		return
	}
	if k != q.key() {
		w.wrong++
		w.t.Errorf("seed %d: a response to QP %#x (flow %#x) was offered to flow %#x", w.seed, q.rev, q.dest, k.DestQP)
		return
	}
	if w.right[q.rev] == 0 {
		w.firstOK[q.rev] = w.seen[q.rev]
	}
	w.right[q.rev]++
}

// step sends a burst on a random QP and lets a few random QPs respond.
func (w *workload) step() {
	q := w.qps[w.rng.IntN(len(w.qps))]
	w.send(q, 1+w.rng.IntN(8))
	for range 2 {
		w.respond(w.qps[w.rng.IntN(len(w.qps))])
	}
	w.now += 10 * time.Microsecond
}

// pairedAll reports whether every QP's flow is paired with its reverse QP (and checks no flow
// is paired with another's).
func (w *workload) pairedAll() bool {
	w.t.Helper()
	all := true
	for _, q := range w.qps {
		rq, ok := w.x.ReverseQP(q.key())
		if ok && rq != q.rev {
			w.t.Fatalf("seed %d: flow %#x paired with %#x, want %#x", w.seed, q.dest, rq, q.rev)
		}
		all = all && ok
	}
	return all
}
