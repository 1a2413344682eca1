package crf

import (
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// TestOrderedRestoredAfterGapDeliveredE50 (C7 a; E50): in ordered mode a packet restored behind a
// gap that nothing fills is held like a source: it goes out when the hold ends, and every copy
// of it sent again meanwhile (held with it) is not lost for good. Before, a restored packet with
// no held source beside it had no hold timer: it waited for the gap forever and swallowed every
// retransmission, and the go-back-N requester never progressed.
func TestOrderedRestoredAfterGapDeliveredE50(t *testing.T) {
	r := newReceiver(t, Settings{Ordered: true})
	id := open(t, r, 0, flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: 2, M: 2, T: testT})
	var log trafficLog
	now := time.Millisecond
	first := writes(0x100, 2)
	r.Observe(now, id, first[0], false) // 0x100 in order; 0x101 is lost and never comes again
	log.take(now, r)
	b := mkBlock(0x102, 1, writes(0x102, 2)...) // both sources lost, both repairs arrive
	r.Handle(now, testCSF, b.ordinary(t, id, 0, false), false)
	r.Handle(now, testCSF, b.ordinary(t, id, 1, true), false)
	log.take(now, r)
	if st, _ := r.FlowStats(id); st.Restored != 2 {
		t.Fatalf("%d restored", st.Restored)
	}
	// The requester sends 0x102 again (go-back-N): held with the restored copy, not lost.
	if v := r.Observe(now+100*time.Microsecond, id, b.pkts[0], false); v != Held {
		t.Fatalf("the copy sent again: %v", v)
	}
	log.take(now, r)
	log.runUntil(r, now+50*time.Millisecond)
	got := map[psn.PSN]Kind{}
	for _, d := range log.dels {
		got[d.PSN] = d.Kind
	}
	if k, ok := got[0x102]; !ok || k != Restored {
		t.Fatalf("0x102 not delivered (%v): %+v", got, log.dels)
	}
	if k, ok := got[0x103]; !ok || k != Restored {
		t.Fatalf("0x103 not delivered (%v)", got)
	}
	if v := r.Observe(now+60*time.Millisecond, id, b.pkts[0], false); v != Forward {
		t.Fatalf("a copy after the hold ended: %v, want Forward", v)
	}
}

// TestRTTFromFirstParamUpdateE49 (C4; E49): the CRF takes HELLO_ACK to the first PARAM_UPDATE as
// a round trip, so a packet filling a gap later than half the path's round trip (the RDMA
// transport's retransmission) counts as lost, not received, even on a path much shorter than the
// initial RTT; a PARAM_UPDATE at the HELLO_ACK's own instant gives no sample.
func TestRTTFromFirstParamUpdateE49(t *testing.T) {
	for _, c := range []struct {
		name     string
		rtt      time.Duration
		samples  uint64
		received uint32 // of the three sources, once the gap fills 3 ms after it was seen
	}{
		{"2 ms path", 2 * time.Millisecond, 1, 2},
		{"same instant", 0, 0, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newReceiver(t, Settings{})
			h := hello(42)
			r.Handle(0, testCSF, msg(t, &h), false)
			var id uint32
			for _, m := range drainMsgs(r) {
				if a, ok := m.(*wire.HelloAck); ok {
					id = a.FlowID
				}
			}
			pu := wire.ParamUpdate{FlowID: id, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, M: 0, T: testT}
			r.Handle(c.rtt, testCSF, msg(t, &pu), false)
			drainMsgs(r)
			if st, _ := r.FlowStats(id); st.RTTSamples != c.samples {
				t.Fatalf("%d RTT samples, want %d", st.RTTSamples, c.samples)
			}
			var log trafficLog
			now := 10 * time.Millisecond
			pk := writes(0x10, 3)
			r.Observe(now, id, pk[0], false)
			r.Observe(now, id, pk[2], false) // 0x11 missing from here
			r.Observe(now+3*time.Millisecond, id, pk[1], false)
			log.take(now, r)
			log.runUntil(r, now+200*time.Millisecond)
			if e, rcv := log.sums(); e != 3 || rcv != c.received {
				t.Fatalf("LOSS_REPORTs: %d expected, %d received; want 3 and %d", e, rcv, c.received)
			}
		})
	}
}

// TestPassedBeforeConfigNotMissingE52 (E8, E42; E52): packets that go by before the flow's first
// configuration are not tracked; when the first source after it is one sent again, behind them,
// the window starts after the newest of them, and none of them is asked for or counted lost.
func TestPassedBeforeConfigNotMissingE52(t *testing.T) {
	r := newReceiver(t, Settings{Ordered: true})
	h := hello(42)
	r.Handle(0, testCSF, msg(t, &h), false)
	var id uint32
	for _, m := range drainMsgs(r) {
		if a, ok := m.(*wire.HelloAck); ok {
			id = a.FlowID
		}
	}
	pk := writes(0x10, 20)
	for _, p := range pk[:16] { // before the first PARAM_UPDATE
		if v := r.Observe(time.Millisecond, id, p, false); v != Forward {
			t.Fatal("a packet before the configuration held")
		}
	}
	pu := wire.ParamUpdate{FlowID: id, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, M: 0, T: testT}
	r.Handle(2*time.Millisecond, testCSF, msg(t, &pu), false)
	drainMsgs(r)
	var log trafficLog
	now := 3 * time.Millisecond
	if v := r.Observe(now, id, pk[2], false); v != Forward { // 0x12 sent again
		t.Fatalf("the copy sent again: %v", v)
	}
	for _, p := range pk[16:] {
		if v := r.Observe(now, id, p, false); v != Forward {
			t.Fatalf("a packet after the configuration held: %v", v)
		}
	}
	log.take(now, r)
	log.runUntil(r, now+time.Second)
	if reqs := log.rangeReqs(); len(reqs) != 0 {
		t.Fatalf("asked for PSNs that went by before the configuration: %+v", reqs)
	}
	if e, rcv := log.sums(); e != rcv {
		t.Fatalf("LOSS_REPORTs: %d expected, %d received", e, rcv)
	}
}
