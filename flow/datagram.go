package flow

import "net/netip"

// Datagram is a CREM message an engine wants sent. Payload is the whole UDP payload; it belongs
// to the engine and is valid only during the Drain callback that hands it out, so a driver
// copies or sends it before returning.
type Datagram struct {
	To      netip.AddrPort
	Payload []byte
}

// Queue is a bounded queue of outgoing datagrams whose buffers are reused, so an engine sends
// without allocating once warm. A full queue refuses (the engine counts the drop).
type Queue struct {
	items []Datagram
	n     int
	max   int
}

// NewQueue returns a queue of at most max datagrams.
func NewQueue(max int) *Queue { return &Queue{max: max} }

// Next returns an empty buffer for a datagram to to, or nil when the queue is full. The caller
// appends to it and hands the result to Commit.
func (q *Queue) Next() []byte {
	if q.n >= q.max {
		return nil
	}
	if q.n == len(q.items) {
		q.items = append(q.items, Datagram{Payload: make([]byte, 0, 2048)})
	}
	return q.items[q.n].Payload[:0]
}

// Commit queues the buffer Next returned, filled, for to.
func (q *Queue) Commit(to netip.AddrPort, b []byte) {
	q.items[q.n] = Datagram{To: to, Payload: b}
	q.n++
}

// Len returns the datagrams waiting.
func (q *Queue) Len() int { return q.n }

// Drain hands every waiting datagram to out, in order, and empties the queue.
func (q *Queue) Drain(out func(Datagram)) {
	for i := 0; i < q.n; i++ {
		out(q.items[i])
	}
	q.n = 0
}
