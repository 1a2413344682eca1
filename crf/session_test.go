package crf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/wire"
)

// TestFlowIDRandomUnused: Flow IDs come from the random source, are never 0 and never one in use.
func TestFlowIDRandomUnused(t *testing.T) {
	vals := []uint64{0, 77, 77, 77, 78}
	i := 0
	r, err := New(WithRandom(func() uint64 { v := vals[i%len(vals)]; i++; return v }), WithFirstRequestID(1))
	if err != nil {
		t.Fatal(err)
	}
	ids := map[uint32]bool{}
	for n := range 2 {
		h := hello(uint64(n + 1))
		h.FlowLabel = uint32(n + 1)
		r.Handle(0, testCSF, msg(t, &h), false)
		for _, m := range drainMsgs(r) {
			ids[m.(*wire.HelloAck).FlowID] = true
		}
	}
	if !ids[77] || !ids[78] || len(ids) != 2 {
		t.Fatalf("Flow IDs %v", ids)
	}
}

// TestDuplicateHelloSameAnswerC3: a retransmitted HELLO gets the same HELLO_ACK.
func TestDuplicateHelloSameAnswerC3(t *testing.T) {
	r := newReceiver(t, Settings{})
	h := hello(5)
	var acks [][]byte
	for range 2 {
		r.Handle(0, testCSF, msg(t, &h), false)
		r.Drain(func(d flow.Datagram) { acks = append(acks, append([]byte(nil), d.Payload...)) })
	}
	if len(acks) != 2 || string(acks[0]) != string(acks[1]) || r.Stats().HelloDuplicate != 1 {
		t.Fatalf("answers %x", acks)
	}
	a, _ := wire.ParseHelloAck(acks[0])
	if a.SenderNonce != 5 || a.MaxOpenBlocks != 64 || a.RDMAMTU != 1024 {
		t.Fatalf("HELLO_ACK %+v", a)
	}
	if len(acks[0]) > h.Length() {
		t.Fatal("HELLO_ACK larger than HELLO")
	}
}

// TestHelloRefusedSilentlyC3: a HELLO the CRF cannot serve gets no reply, no state, a counter.
func TestHelloRefusedSilentlyC3(t *testing.T) {
	r, _ := New(WithRandom(counter()), WithSettings(func(flow.Descriptor) (Settings, bool) { return Settings{}, false }))
	h := hello(5)
	r.Handle(0, testCSF, msg(t, &h), false)
	if len(drainMsgs(r)) != 0 || len(r.Flows()) != 0 || r.Stats().HelloRefused != 1 {
		t.Fatal("refused HELLO answered or kept")
	}
	r2 := newReceiver(t, Settings{}, WithMaxFlows(1))
	for n := range 2 {
		h := hello(uint64(n + 1))
		h.FlowLabel = uint32(n + 1)
		r2.Handle(0, testCSF, msg(t, &h), false)
	}
	if len(r2.Flows()) != 1 || r2.Stats().HelloRefused != 1 {
		t.Fatal("HELLO beyond Max flows served")
	}
}

// TestParamAckStatuses: PARAM_ACK statuses 0 to 3, and a redefined Config ID is a protocol error
// (CLOSE reason 5).
func TestParamAckStatuses(t *testing.T) {
	r := newReceiver(t, Settings{}, WithMemory(64*32*1100))
	id := open(t, r, 0, flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: 32, M: 4, T: 1058})
	cases := []struct {
		pu   wire.ParamUpdate
		want wire.Status
	}{
		{wire.ParamUpdate{ConfigID: 2, Scheme: 7, K: 8, M: 1, T: 100}, wire.StatusUnsupportedScheme},
		{wire.ParamUpdate{ConfigID: 3, Scheme: wire.SchemeCauchy, K: 200, M: 1, T: 100}, wire.StatusLimitsExceeded},
		{wire.ParamUpdate{ConfigID: 4, Scheme: wire.SchemeCauchy, K: 64, M: 1, T: 4000}, wire.StatusResourcesExhausted},
		{wire.ParamUpdate{ConfigID: 1, Scheme: wire.SchemeCauchy, K: 32, M: 4, T: 1058}, wire.StatusAccepted},
	}
	for _, c := range cases {
		c.pu.FlowID = id
		r.Handle(0, testCSF, msg(t, &c.pu), false)
		ms := drainMsgs(r)
		if len(ms) != 1 || ms[0].(*wire.ParamAck).Status != c.want {
			t.Fatalf("%+v: %+v", c.pu, ms)
		}
	}
	pu := wire.ParamUpdate{FlowID: id, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 16, M: 4, T: 1058}
	r.Handle(0, testCSF, msg(t, &pu), false)
	ms := drainMsgs(r)
	if c, ok := ms[len(ms)-1].(*wire.Close); !ok || c.Reason != wire.ReasonProtocolError || len(r.Flows()) != 0 {
		t.Fatalf("redefinition of Config ID 1: %+v", ms)
	}
}

// TestCloseBothWaysC2: the CRF sends CLOSE with any reason and releases; a CLOSE from the CSF
// releases the flow; the idle timeout sends reason 1 (C15).
func TestCloseBothWaysC2(t *testing.T) {
	for reason := wire.Reason(0); reason <= wire.ReasonProtocolError; reason++ {
		r := newReceiver(t, Settings{})
		id := open(t, r, 0, flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: 8, M: 1, T: 1100})
		if err := r.Close(0, id, reason); err != nil {
			t.Fatal(err)
		}
		ms := drainMsgs(r)
		if c, ok := ms[0].(*wire.Close); !ok || c.Reason != reason || len(r.Flows()) != 0 {
			t.Fatalf("reason %v: %+v", reason, ms)
		}
		r2 := newReceiver(t, Settings{})
		id = open(t, r2, 0, flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: 8, M: 1, T: 1100})
		c := wire.Close{FlowID: id, Reason: reason}
		r2.Handle(0, netip.MustParseAddrPort("10.7.7.7:1"), msg(t, &c), false)
		if len(r2.Flows()) != 1 {
			t.Fatal("CLOSE from a stranger accepted")
		}
		r2.Handle(0, testCSF, msg(t, &c), false)
		if len(r2.Flows()) != 0 || r2.Stats().CloseReceivedByReason[reason] != 1 {
			t.Fatal("CLOSE from the CSF did not release the flow")
		}
	}
	r := newReceiver(t, Settings{})
	open(t, r, 0, flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: 8, M: 1, T: 1100})
	for d, ok := r.NextDeadline(); ok && d <= 31*time.Second; d, ok = r.NextDeadline() {
		r.Tick(d)
	}
	if r.Stats().CloseSentByReason[wire.ReasonIdle] != 1 {
		t.Fatal("no idle CLOSE")
	}
}
