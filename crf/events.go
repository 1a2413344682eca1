package crf

// EventKind says what an Event reports.
type EventKind uint8

// The events a Receiver reports to its driver (WithEvents).
const (
	// EventFlowAssigned: the Receiver assigned Event.FlowID to a session (a HELLO it
	// answered); the peer's messages that carry it are this Receiver's.
	EventFlowAssigned EventKind = iota + 1
	// EventFlowReleased: Event.FlowID no longer names a session or flow of this Receiver
	// (CLOSE, idle, expired or superseded handshake, a new session of the flow). Messages
	// that still carry it are refused and counted by the Receiver, when they reach it.
	EventFlowReleased
)

// String names the kind as a log line would.
func (k EventKind) String() string {
	switch k {
	case EventFlowAssigned:
		return "flow assigned"
	case EventFlowReleased:
		return "flow released"
	}
	return "unknown"
}

// Event is what a Receiver tells its driver about the Flow IDs that route the peer's messages
// to it, so that the driver never parses the Receiver's own HELLO_ACKs, nor polls it, to learn
// them.
type Event struct {
	Kind   EventKind
	FlowID uint32
}

// WithEvents sets the function the Receiver reports its events to, called synchronously from
// the call that caused the event (Handle, Tick, Close...), before it returns. nil (the default)
// reports none.
func WithEvents(f func(Event)) Option {
	return func(o *options) error { o.events = f; return nil }
}

func (r *Receiver) emit(k EventKind, id uint32) {
	if r.o.events != nil {
		r.o.events(Event{Kind: k, FlowID: id})
	}
}

// dropPending forgets a pending session that will not become a flow: its Flow ID is released.
func (r *Receiver) dropPending(p *pending) {
	r.pend.drop(p)
	r.emit(EventFlowReleased, p.id)
}
