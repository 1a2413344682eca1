package crf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
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
	open(t, r2, 0, cfg8)
	h2 := hello(2)
	h2.FlowLabel = 2
	r2.Handle(0, testCSF, msg(t, &h2), false)
	if len(drainMsgs(r2)) != 0 || len(r2.Flows()) != 1 || r2.Stats().HelloRefused != 1 {
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

// TestUnknownMessagesDiscarded: a message with an unknown Version or Type is discarded silently.
func TestUnknownMessagesDiscarded(t *testing.T) {
	r := newReceiver(t, Settings{})
	id := open(t, r, 0, cfg8)
	for _, b := range [][]byte{{0x21, 0, 0, 8, 0, 0, 0, byte(id)}, {0x1f, 0, 0, 8, 0, 0, 0, byte(id)}} {
		r.Handle(0, testCSF, b, false)
	}
	if len(drainMsgs(r)) != 0 || r.Stats().MessagesIgnored != 2 {
		t.Fatal("unknown message acted on")
	}
}

// TestManyFlowsDeterministic: one Receiver serves several flows, each with its own Flow ID and
// state; timers of flows due together run in the order the flows opened, so that the output is
// the same on every run.
func TestManyFlowsDeterministic(t *testing.T) {
	run := func() []uint32 {
		r := newReceiver(t, Settings{})
		var ids []uint32
		for n := range 4 {
			h := hello(uint64(n + 1))
			h.FlowLabel = uint32(0x20 + n)
			r.Handle(0, testCSF, msg(t, &h), false)
			id := drainMsgs(r)[0].(*wire.HelloAck).FlowID
			ids = append(ids, id)
			if k, ok := r.Lookup(flow.Key{Src: testFlow.Src, Dst: testFlow.Dst, DestQP: uint32(0x20 + n)}); !ok || k != id {
				t.Fatal("Lookup")
			}
			pu := wire.ParamUpdate{FlowID: id, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, M: 1, T: testT}
			r.Handle(0, testCSF, msg(t, &pu), false)
			drainMsgs(r)
			pk := packet(0x100, 100)
			pk[5], pk[6], pk[7] = 0, 0, byte(0x20+n)
			r.Observe(0, id, pk, false)
		}
		r.Tick(10 * time.Millisecond)
		var got []uint32
		for _, m := range drainMsgs(r) {
			got = append(got, m.(*wire.LossReport).FlowID)
		}
		for i := range ids {
			if got[i] != ids[i] {
				t.Fatalf("reports in order %x, flows opened %x", got, ids)
			}
		}
		return got
	}
	a, b := run(), run()
	if len(a) != 4 || len(b) != 4 {
		t.Fatal(a, b)
	}
}

// TestBeforeConfiguration: until its first configuration is acknowledged a flow holds no window:
// its sources pass through and a REPAIR is dropped as of an unknown configuration.
func TestBeforeConfiguration(t *testing.T) {
	r := newReceiver(t, Settings{})
	h := hello(9)
	r.Handle(0, testCSF, msg(t, &h), false)
	id := drainMsgs(r)[0].(*wire.HelloAck).FlowID
	if r.Observe(0, id, packet(0x100, 100), false) != Forward {
		t.Fatal("source not forwarded")
	}
	b := newBlock(0x100, 8)
	r.Handle(0, testCSF, b.repair(t, id, 0, psn.Bitmap{}, 0), false)
	r.Tick(time.Second)
	if st, _ := r.FlowStats(id); st.RepairUnknownConfig != 1 || st.Sources != 0 {
		t.Fatalf("%+v", st)
	}
}
