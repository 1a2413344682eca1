package csf

import (
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/wire"
)

// routesSeen keeps what a driver learns from a Sender's events alone.
type routesSeen struct {
	nonce   uint64
	flowID  uint32
	inForce bool
	events  []Event
}

func (r *routesSeen) take(e Event) {
	r.events = append(r.events, e)
	switch e.Kind {
	case EventNonceSent:
		r.nonce = e.Nonce
	case EventFlowAssigned:
		r.flowID = e.FlowID
	case EventFlowReleased:
		if r.flowID == e.FlowID {
			r.flowID = 0
		}
		r.inForce = false
	case EventConfigInForce:
		r.inForce = true
	}
}

// agrees fails unless the events told the driver what the Sender's state says.
func (r *routesSeen) agrees(t *testing.T, s *Sender, step string) {
	t.Helper()
	_, inForce := s.Config()
	if r.flowID != s.FlowID() || r.inForce != inForce || s.State() == StateHello && r.nonce != s.nonce {
		t.Fatalf("%s: events say Flow ID %#x, in force %v, nonce %#x; the Sender has %#x, %v, %#x (%v); events %+v",
			step, r.flowID, r.inForce, r.nonce, s.FlowID(), inForce, s.nonce, s.State(), r.events)
	}
}

// TestEventsNameTheRoutes: through a session's whole life (HELLO, HELLO_ACK, configuration,
// CLOSE, a new session, one that goes silent) the events alone tell the driver the nonce to
// route HELLO_ACKs by, the Flow ID to route the peer's messages by, and whether a configuration
// is in force.
func TestEventsNameTheRoutes(t *testing.T) {
	var seen routesSeen
	s := newSender(t, WithEvents(seen.take))
	now := time.Duration(0)
	s.Start(now)
	seen.agrees(t, s, "HELLO sent")
	if len(seen.events) != 1 || seen.events[0].Kind != EventNonceSent || seen.events[0].Nonce == 0 {
		t.Fatalf("after Start: events %+v, want one nonce sent", seen.events)
	}
	first := seen.nonce
	drain(s)

	// A HELLO_ACK that echoes another nonce is ignored: no event.
	stale := wire.HelloAck{FlowID: 77, Capabilities: flow.DefaultLimits().Capabilities(1024), AF: wire.AF4,
		SenderNonce: first + 1, MaxOpenBlocks: 64}
	b, _ := stale.Append(nil)
	s.Handle(now, testCRF, b)
	seen.agrees(t, s, "stale HELLO_ACK")

	s = newSender(t, WithEvents(seen.take))
	seen = routesSeen{}
	establish(t, s, now, 0x1234)
	seen.agrees(t, s, "established")
	var kinds []EventKind
	for _, e := range seen.events {
		kinds = append(kinds, e.Kind)
	}
	if len(kinds) != 3 || kinds[0] != EventNonceSent || kinds[1] != EventFlowAssigned || kinds[2] != EventConfigInForce {
		t.Fatalf("establishing: events %v, want nonce sent, flow assigned, configuration in force", kinds)
	}
	if seen.events[2].Config.ID == 0 && seen.events[2].Config.K == 0 {
		t.Fatalf("configuration in force carries no configuration: %+v", seen.events[2])
	}

	now += time.Millisecond
	s.Close(now, wire.ReasonNormal)
	seen.agrees(t, s, "closed")
	if last := seen.events[len(seen.events)-1]; last.Kind != EventFlowReleased || last.FlowID != 0x1234 {
		t.Fatalf("after Close: last event %+v, want flow 0x1234 released", last)
	}

	// A new session: a new nonce, then a new Flow ID.
	seen.events = nil
	s.Start(now)
	seen.agrees(t, s, "new session's HELLO")
	if seen.nonce == first || len(seen.events) != 1 {
		t.Fatalf("new session: events %+v (first nonce %#x)", seen.events, first)
	}

	// HELLO retransmissions repeat the nonce; the routes stay as they are.
	for range 3 {
		now += 100 * time.Millisecond
		s.Tick(now)
		seen.agrees(t, s, "HELLO retransmitted")
	}
	drain(s)
}
