package crf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// Receiver is a CREM receiver function serving many flows.
type Receiver struct {
	o      options
	flows  map[uint32]*rflow
	order  []*rflow // the flows in the order they opened: timers run in a fixed order
	byKey  map[flow.Key]uint32
	q      *flow.Queue
	dq     deliveries
	st     Stats
	closed FlowStats // counters of flows already released
	ops    [256]bool // opcodes that take a new PSN (C13), tabulated once
	last   *rflow
	decs   []flow.Decoder // decoders of ended blocks, for reuse
	prefix int            // octets of a source symbol the codec reads (0: all; flow.SourcePrefixer)
	pend   pendingTables  // sessions HELLO began, not yet proven (pending.go)
	syms   [][]byte       // buffers of repair symbols kept for another solve, for reuse
	order2 []int          // scratch: a block's kept symbols in the order a solve takes them
}

// New returns a Receiver. WithRandom is required.
func New(opts ...Option) (*Receiver, error) {
	o := defaults()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.rand == nil {
		return nil, errors.New("crf: New: WithRandom is required (no global randomness)")
	}
	r := &Receiver{o: o, flows: make(map[uint32]*rflow), byKey: make(map[flow.Key]uint32),
		q: flow.NewQueue(o.queue), dq: deliveries{max: o.deliveries}, pend: newPendingTables()}
	for op := range r.ops {
		info := roce.Opcode(op).Info()
		r.ops[op] = info.Known && info.Source
	}
	if o.decoders != nil {
		// The first decoder says how much of each source the codec reads; it joins the pool.
		d, err := o.decoders()
		if err != nil {
			return nil, fmt.Errorf("crf: New: decoder: %w", err)
		}
		r.prefix = flow.SourcePrefix(d)
		r.decs = append(r.decs, d)
	}
	return r, nil
}

// Lookup returns the Flow ID serving the flow with this key, if any: a driver finds the flow of
// an arriving RoCEv2 packet by its addresses and destination QP. Before any session of the key
// has proven itself, it returns the oldest pending one, which notes what goes by (E52).
func (r *Receiver) Lookup(k flow.Key) (uint32, bool) {
	if id, ok := r.byKey[k]; ok {
		return id, ok
	}
	if l := r.pend.byKey[k]; l != nil {
		return l.head.id, true
	}
	return 0, false
}

// Flows returns the Flow IDs of the established flows (allocates; for tests and tools); the
// sessions pending since their HELLO are not among them.
func (r *Receiver) Flows() []uint32 {
	out := make([]uint32, 0, len(r.order))
	for _, f := range r.order {
		out = append(out, f.id)
	}
	return out
}

// Drain hands every CREM message the Receiver wants sent to out; Payload is valid only during
// the call.
func (r *Receiver) Drain(out func(flow.Datagram)) { r.q.Drain(out) }

// DrainDeliveries hands every packet for the RDMA receiver (and every PSN abandoned to the RDMA
// transport) to out, in order; Packet is valid only during the call.
func (r *Receiver) DrainDeliveries(out func(Delivery)) { r.dq.drain(out) }

// Stats returns the Receiver's counters, the flows' summed.
func (r *Receiver) Stats() Stats {
	s := r.st
	s.Flows = r.closed
	for _, f := range r.order {
		s.Flows.add(&f.st)
	}
	return s
}

// FlowStats returns one flow's counters; a pending session has none yet (zero, true).
func (r *Receiver) FlowStats(id uint32) (FlowStats, bool) {
	f, ok := r.flows[id]
	if !ok {
		return FlowStats{}, r.pend.byID[id] != nil
	}
	return f.st, true
}

// Handle takes a CREM message that arrived from from; ce says whether it carried a CE mark.
func (r *Receiver) Handle(now time.Duration, from netip.AddrPort, msg []byte, ce bool) {
	r.st.Messages++
	if len(msg) >= wire.HeaderLen && msg[0] == wire.Version<<4|uint8(wire.TypeRepair) {
		// The common case, parsed once by ParseRepair.
		if f := r.sessionFor(now, binary.BigEndian.Uint32(msg[4:]), from); f != nil {
			r.onRepair(now, f, msg, ce)
		}
		return
	}
	h, err := wire.ParseHeader(msg)
	if err != nil {
		if errors.Is(err, wire.ErrDiscard) {
			r.st.MessagesIgnored++
		} else {
			r.st.MessagesMalformed++
		}
		return
	}
	if h.Type == wire.TypeHello {
		r.onHello(now, from, msg)
		return
	}
	if h.Type == wire.TypeClose {
		from = r.closeSource(h.FlowID, from)
		if p := r.pendingFor(h.FlowID); p != nil && p.from == from {
			// A session closed before it proved anything else: it never becomes a flow.
			if _, err := wire.ParseClose(msg); err != nil {
				r.st.MessagesMalformed++
				return
			}
			r.st.CloseReceived++
			r.st.HandshakesClosed++
			r.dropPending(p)
			return
		}
	}
	// C14: the flow's messages come from where HELLO came from.
	f := r.sessionFor(now, h.FlowID, from)
	if f == nil {
		return
	}
	switch h.Type {
	case wire.TypeRepair:
		r.onRepair(now, f, msg, ce)
	case wire.TypeParamUpdate:
		r.onParamUpdate(now, f, msg)
	case wire.TypeClose:
		m, err := wire.ParseClose(msg)
		if err != nil {
			r.st.MessagesMalformed++
			return
		}
		r.st.CloseReceived++
		r.st.CloseReceivedByReason[min(int(m.Reason), 5)]++
		r.release(f)
	default:
		r.st.MessagesIgnored++
	}
}

// flow returns flow id, remembering the last one looked up (packets come in runs).
func (r *Receiver) flow(id uint32) *rflow {
	if r.last != nil && r.last.id == id {
		return r.last
	}
	f := r.flows[id]
	if f != nil {
		r.last = f
	}
	return f
}

// send queues m for to; false (counted) when the queue is full. Messages sent per block go
// through sendRequest and sendReport instead: the interface would move them to the heap.
func (r *Receiver) send(to netip.AddrPort, m wire.Message) bool {
	b, ok := r.reserve()
	if !ok {
		return false
	}
	b, err := m.Append(b)
	return r.commit(to, b, err)
}

// sendRequest is send for REPAIR_REQUEST, without an allocation.
func (r *Receiver) sendRequest(to netip.AddrPort, m *wire.RepairRequest) bool {
	b, ok := r.reserve()
	if !ok {
		return false
	}
	b, err := m.Append(b)
	return r.commit(to, b, err)
}

// sendReport is send for LOSS_REPORT, without an allocation.
func (r *Receiver) sendReport(to netip.AddrPort, m *wire.LossReport) bool {
	b, ok := r.reserve()
	if !ok {
		return false
	}
	b, err := m.Append(b)
	return r.commit(to, b, err)
}

// reserve returns the queue's next free buffer; false (counted) when the queue is full.
func (r *Receiver) reserve() ([]byte, bool) {
	b := r.q.Next()
	if b == nil {
		r.st.QueueFull++
		return nil, false
	}
	return b, true
}

func (r *Receiver) commit(to netip.AddrPort, b []byte, err error) bool {
	if err != nil {
		r.st.EncodeErrors++
		return false
	}
	r.q.Commit(to, b)
	return true
}

// Close sends CLOSE with the reason for flow id, or for a pending session, and releases it
// (RULINGS C2).
func (r *Receiver) Close(now time.Duration, id uint32, reason wire.Reason) error {
	f := r.flows[id]
	if f == nil {
		p := r.pend.byID[id]
		if p == nil {
			return fmt.Errorf("crf: Close: no flow %#x", id)
		}
		if r.send(p.from, &wire.Close{FlowID: id, Reason: reason}) {
			r.st.CloseSent++
			r.st.CloseSentByReason[min(int(reason), 5)]++
		}
		r.st.HandshakesClosed++
		r.dropPending(p)
		return nil
	}
	if r.send(f.from, &wire.Close{FlowID: id, Reason: reason}) {
		r.st.CloseSent++
		r.st.CloseSentByReason[min(int(reason), 5)]++
	}
	r.release(f)
	return nil
}

// release forgets a flow and everything it held.
func (r *Receiver) release(f *rflow) {
	r.st.FlowsClosed++
	f.st.RepairAsideDropped += uint64(len(f.aside))
	f.aside = f.aside[:0]
	r.closed.add(&f.st)
	if r.last == f {
		r.last = nil
	}
	delete(r.flows, f.id)
	r.emit(EventFlowReleased, f.id)
	for i, g := range r.order {
		if g == f {
			r.order = append(r.order[:i], r.order[i+1:]...)
			break
		}
	}
	if r.byKey[f.key] == f.id {
		delete(r.byKey, f.key)
	}
}

// NextDeadline returns when Tick should next be called, if ever.
func (r *Receiver) NextDeadline() (time.Duration, bool) {
	var d time.Duration
	have := false
	if p := r.pend.all.head; p != nil {
		d, have = p.at+r.o.handshake, true
	}
	for _, f := range r.order {
		if t, ok := f.deadline(r.o.handshake); ok && (!have || t < d) {
			d, have = t, true
		}
	}
	return d, have
}

// Tick runs every timer due at now.
func (r *Receiver) Tick(now time.Duration) {
	r.expire(now)
	for i := 0; i < len(r.order); i++ {
		f := r.order[i]
		r.tickFlow(now, f)
		if i < len(r.order) && r.order[i] != f {
			i-- // f was released: the next flow took its place
		}
	}
}

// newDecoder returns a decoder for a block slot: the configured one, or package fec's.
func (r *Receiver) newDecoder() (flow.Decoder, error) {
	if r.o.decoders != nil {
		return r.o.decoders()
	}
	return fec.NewDecoder()
}

// Footprint is what a Receiver holds, in entries and octets: what its bounds apply to.
type Footprint struct {
	Flows, Pending         int // established flows; sessions pending since their HELLO
	Blocks, Decoders       int // block slots allocated over every flow; decoders in use or pooled
	KeptSymbols, KeptBytes int // repair symbols kept for another solve (E56), with their spare buffers
	HeldPackets, HeldBytes int // packets held for in-order delivery (C7 a)
	WindowSlots            int // source window slots over every flow
}

// Footprint returns what the Receiver holds now; it walks every flow's blocks (for tests,
// tools and gauges, not the data path).
func (r *Receiver) Footprint() Footprint {
	fp := Footprint{Flows: len(r.flows), Pending: r.pend.all.n, Decoders: len(r.decs)}
	for _, b := range r.syms {
		fp.KeptBytes += cap(b)
	}
	for _, f := range r.order {
		fp.Blocks += len(f.blocks)
		fp.WindowSlots += len(f.win)
		fp.HeldPackets += f.heldPkts
		fp.HeldBytes += f.heldBytes
		for i := range f.blocks {
			b := &f.blocks[i]
			if b.dec != nil {
				fp.Decoders++
			}
			fp.KeptSymbols += len(b.cands)
			for _, c := range b.cands {
				fp.KeptBytes += cap(c.sym)
			}
		}
	}
	return fp
}
