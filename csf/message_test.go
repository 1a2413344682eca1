package csf

import (
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// writeFirst builds the first packet of an RDMA WRITE of dma octets at PSN p.
func writeFirst(p psn.PSN, dma uint32) []byte {
	pk := roce.Packet{BTH: roce.BTH{OpCode: roce.OpWriteFirst, DestQP: testFlow.DestQP, PSN: p},
		RETH: roce.RETH{DMALength: dma}, Payload: make([]byte, 1024)}
	b, _ := pk.Append(nil)
	return b
}

// TestMessagePolicyC6C16: the message policy gets each WRITE's length in packets and the loss
// estimate (seeded by WithInitialLoss); the message's blocks close at its k, below the
// configuration's (no PARAM_UPDATE, C7 c), and carry its extra ordinary symbols (fresh indices,
// LAST on the last, C16); blocks after the message go back to the configuration.
func TestMessagePolicyC6C16(t *testing.T) {
	type call struct {
		packets int
		p       float64
	}
	var calls []call
	s := newSender(t, WithConfig(wire.SchemeCauchy, 16, 1, 0), WithAdaptation(false), WithRepairFraction(16),
		WithInitialLoss(0.01), WithLongMessageRepair(5, 1), // replaced by the message policy
		WithMessagePolicy(func(packets int, p float64) (int, int) {
			calls = append(calls, call{packets, p})
			return 4, 2
		}))
	establish(t, s, 0, 3)
	now := time.Millisecond
	s.Observe(now, writeFirst(0x100, 8*1024)) // a message of 8 packets: 0x100..0x107
	for p := psn.PSN(0x101); p < 0x10c; p++ { // then 4 packets of no known message
		s.Observe(now, packet(p, 1000))
	}
	now += time.Millisecond
	s.Tick(now) // the burst gap closes the last block
	if len(calls) != 1 || calls[0] != (call{8, 0.01}) {
		t.Fatalf("policy called %+v, want once with 8 packets and p = 0.01", calls)
	}
	perBlock := map[psn.PSN][]*wire.Repair{}
	for _, r := range repairs(drain(s)) {
		perBlock[r.BlockStartPSN] = append(perBlock[r.BlockStartPSN], r)
	}
	for start, want := range map[psn.PSN]struct{ k, n int }{0x100: {4, 3}, 0x104: {4, 3}, 0x108: {4, 1}} {
		rs := perBlock[start]
		if len(rs) != want.n {
			t.Fatalf("block %v: %d symbols, want %d", start, len(rs), want.n)
		}
		for i, r := range rs {
			if int(r.K) != want.k || int(r.RepairIndex) != i || r.Last != (i == want.n-1) || r.ConfigID != 1 {
				t.Fatalf("block %v symbol %d: %+v", start, i, r)
			}
		}
	}
	st := s.Stats()
	if len(perBlock) != 3 || st.MessagesChosen != 1 || st.MessagePolicyBlocks != 2 || st.LongMessageBlocks != 0 ||
		st.ParamUpdateSent != 1 || st.BlocksClosedFull != 2 || st.BlocksClosedBurst != 1 {
		t.Fatalf("%d blocks: %+v", len(perBlock), st)
	}
}

// TestMessagePolicyClipped: a k beyond the configuration's keeps the configuration's (a larger
// k needs a PARAM_UPDATE), and extra repair stops at Max m.
func TestMessagePolicyClipped(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 16, 1, 0), WithAdaptation(false), WithRepairFraction(16),
		WithMessagePolicy(func(int, float64) (int, int) { return 200, 100 }))
	establish(t, s, 0, 3) // Max m 16 (the default limits); the budget holds one block, 16 x T
	s.Observe(time.Millisecond, writeFirst(0x100, 16*1024))
	for p := psn.PSN(0x101); p < 0x110; p++ {
		s.Observe(time.Millisecond, packet(p, 1000))
	}
	for range 20 {
		d, _ := s.NextDeadline()
		s.Tick(min(d, 50*time.Millisecond))
	}
	rs := repairs(drain(s))
	if len(rs) != 16 || rs[0].K != 16 || s.Stats().RepairDeniedBudget != 0 {
		t.Fatalf("%d symbols (k %d), want 16 of k = 16: %+v", len(rs), rs[0].K, s.Stats())
	}
	if _, err := New(WithMessagePolicy(nil)); err == nil {
		t.Fatal("WithMessagePolicy(nil) accepted")
	}
	if _, err := New(WithInitialLoss(1)); err == nil {
		t.Fatal("WithInitialLoss(1) accepted")
	}
}
