package crf

import "github.com/crem-project/crem/psn"

// Kind says how a delivery came about.
type Kind uint8

const (
	// Received: a source packet the Receiver held for in-order delivery, now released.
	Received Kind = iota
	// Restored: a packet decoded from repair (or a Source Copy) whose ICRC checked. It never
	// carries CE.
	Restored
	// Abandoned: no packet; the PSN is explicitly left to the RDMA transport's recovery (C9 b).
	Abandoned
)

func (k Kind) String() string { return [...]string{"received", "restored", "abandoned"}[k] }

// Delivery is what the Receiver hands the RDMA receiver. Packet (the whole RoCEv2 UDP
// payload) is the Receiver's and valid only during the DrainDeliveries callback.
type Delivery struct {
	Flow   uint32
	PSN    psn.PSN
	Kind   Kind
	CE     bool // a released received packet keeps its mark; restored ones never have one
	Packet []byte
}

// deliveries is a bounded queue of deliveries whose buffers are reused.
type deliveries struct {
	items []Delivery
	n     int
	max   int
}

func (q *deliveries) push(d Delivery) bool {
	if q.n >= q.max {
		return false
	}
	if q.n == len(q.items) {
		q.items = append(q.items, Delivery{})
	}
	buf := q.items[q.n].Packet[:0]
	d.Packet = append(buf, d.Packet...)
	q.items[q.n] = d
	q.n++
	return true
}

func (q *deliveries) drain(out func(Delivery)) {
	for i := 0; i < q.n; i++ {
		out(q.items[i])
	}
	q.n = 0
}
