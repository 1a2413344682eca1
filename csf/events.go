package csf

import "github.com/crem-project/crem/flow"

// EventKind says what an Event reports.
type EventKind uint8

// The events a Sender reports to its driver (WithEvents).
const (
	// EventNonceSent: a HELLO with Event.Nonce went out. A HELLO_ACK that echoes this nonce
	// is this Sender's; the nonce of an earlier HELLO of the Sender no longer is.
	EventNonceSent EventKind = iota + 1
	// EventFlowAssigned: the peer's CRF assigned Event.FlowID to this Sender's session; the
	// peer's messages that carry it (PARAM_ACK, LOSS_REPORT, REPAIR_REQUEST, CLOSE) are this
	// Sender's.
	EventFlowAssigned
	// EventFlowReleased: Event.FlowID, assigned before, is no longer this Sender's (CLOSE,
	// idle, a new session).
	EventFlowReleased
	// EventConfigInForce: Event.Config is the configuration the Sender forms blocks under
	// from now on.
	EventConfigInForce
)

// String names the kind as a log line would.
func (k EventKind) String() string {
	switch k {
	case EventNonceSent:
		return "nonce sent"
	case EventFlowAssigned:
		return "flow assigned"
	case EventFlowReleased:
		return "flow released"
	case EventConfigInForce:
		return "configuration in force"
	}
	return "unknown"
}

// Event is what a Sender tells its driver about the keys that route the peer's messages to it
// and about the configuration in force, so that the driver never parses the Sender's own
// messages, nor polls it, to learn them.
type Event struct {
	Kind   EventKind
	Nonce  uint64      // EventNonceSent
	FlowID uint32      // EventFlowAssigned, EventFlowReleased
	Config flow.Config // EventConfigInForce
}

// WithEvents sets the function the Sender reports its events to, called synchronously from
// the call that caused the event (Start, Handle, Tick, Close...), before it returns. nil (the
// default) reports none.
func WithEvents(f func(Event)) Option {
	return func(o *options) error { o.events = f; return nil }
}

func (s *Sender) emit(e Event) {
	if s.o.events != nil {
		s.o.events(e)
	}
}
