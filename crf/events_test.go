package crf

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/wire"
)

// TestEventsNameTheRoutes: the Flow IDs a driver holds from the Receiver's events alone are
// exactly those the Receiver serves (a pending session or a flow), through handshakes that
// succeed, expire or are superseded, a CSF's restart and CLOSE.
func TestEventsNameTheRoutes(t *testing.T) {
	routed := map[uint32]bool{}
	var events []Event
	take := func(e Event) {
		events = append(events, e)
		switch e.Kind {
		case EventFlowAssigned:
			if routed[e.FlowID] {
				t.Fatalf("Flow ID %#x assigned twice", e.FlowID)
			}
			routed[e.FlowID] = true
		case EventFlowReleased:
			if !routed[e.FlowID] {
				t.Fatalf("Flow ID %#x released but never assigned", e.FlowID)
			}
			delete(routed, e.FlowID)
		}
	}
	r := newReceiver(t, Settings{}, WithEvents(take), WithHandshakes(64, 8, 300*time.Millisecond))
	agrees := func(step string) {
		t.Helper()
		for id := range routed {
			if _, ok := r.FlowStats(id); !ok {
				t.Fatalf("%s: Flow ID %#x routed, but the Receiver serves no such session or flow", step, id)
			}
		}
		for _, id := range r.Flows() {
			if !routed[id] {
				t.Fatalf("%s: the Receiver serves flow %#x, which no event routed (routed %v)", step, id, slices.Sorted(maps.Keys(routed)))
			}
		}
	}
	cfg := flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: 8, M: 2, T: 1100}
	now := time.Duration(0)
	id := open(t, r, now, cfg)
	agrees("flow open")
	if len(routed) != 1 || !routed[id] {
		t.Fatalf("after the handshake routed %v, want only %#x", routed, id)
	}

	// The CSF restarts: a new session from the flow's own address takes the flow over once
	// it proves itself; the old Flow ID is released then.
	restart := hello(7)
	r.Handle(now, testCSF, msg(t, &restart), false)
	var newID uint32
	for _, m := range drainMsgs(r) {
		if a, ok := m.(*wire.HelloAck); ok {
			newID = a.FlowID
		}
	}
	agrees("restart HELLO")
	pu := wire.ParamUpdate{FlowID: newID, ConfigID: cfg.ID, Scheme: cfg.Scheme, K: uint8(cfg.K), M: uint8(cfg.M), T: uint16(cfg.T)}
	r.Handle(now, testCSF, msg(t, &pu), false)
	drainMsgs(r)
	agrees("restart proven")
	if routed[id] || !routed[newID] {
		t.Fatalf("after the restart: routed %v, want %#x and not %#x", routed, newID, id)
	}

	// A HELLO that never proves itself: assigned, then released when its handshake time ends
	// (and the flow, which has had no source, with it: E54).
	h := hello(99)
	h.FlowLabel = testFlow.DestQP + 1
	r.Handle(now, testCSF, msg(t, &h), false)
	drainMsgs(r)
	agrees("second HELLO")
	if len(routed) != 2 {
		t.Fatalf("a pending session: routed %v, want 2 Flow IDs", routed)
	}
	for range 100 {
		now += 50 * time.Millisecond
		if d, ok := r.NextDeadline(); ok && d <= now {
			r.Tick(now)
		}
		agrees("timers")
	}
	if len(routed) != 0 {
		t.Fatalf("after the handshake time: routed %v, want none (events %+v)", routed, events)
	}

	id = open(t, r, now, cfg)
	agrees("flow opened again")
	cl := wire.Close{FlowID: id, Reason: wire.ReasonNormal}
	r.Handle(now, testCSF, msg(t, &cl), false)
	agrees("closed")
	if len(routed) != 0 {
		t.Fatalf("after CLOSE: routed %v, want none (events %+v)", routed, events)
	}
}
