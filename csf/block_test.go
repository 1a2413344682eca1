package csf

import (
	"github.com/crem-project/crem/flow"
	"testing"
	"time"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

func repairs(ms []wire.Message) []*wire.Repair {
	var out []*wire.Repair
	for _, m := range ms {
		if r, ok := m.(*wire.Repair); ok {
			out = append(out, r)
		}
	}
	return out
}

// TestSourcesAreNewPSNsC13: ACKs and CNPs are never sources; a retransmitted PSN keeps its old
// position and a differing copy is counted; a READ request consumes PSNs that are absent; a
// re-issued READ is left to the RDMA transport.
func TestSourcesAreNewPSNsC13(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 8, 1, 0), WithAdaptation(false), WithRepairFraction(16))
	establish(t, s, 0, 3)
	now := time.Millisecond
	s.Observe(now, packet(0, 100))
	ack := roce.Packet{BTH: roce.BTH{OpCode: roce.OpAcknowledge, DestQP: testFlow.DestQP, PSN: 0}, AETH: roce.ACK(1, 0)}
	b, _ := ack.Append(nil)
	s.Observe(now, b)
	cnp := []byte{0x81, 0, 0, 0, 0, 0, 0, 0x11, 0, 0, 0, 1, 0, 0, 0, 0}
	s.Observe(now, cnp)
	s.Observe(now, packet(0, 100)) // retransmission, identical
	other := packet(0, 100)
	other[20] ^= 1
	s.Observe(now, other) // retransmission that differs
	read := roce.Packet{BTH: roce.BTH{OpCode: roce.OpReadRequest, DestQP: testFlow.DestQP, PSN: 1},
		RETH: roce.RETH{DMALength: 3 * 1024}}
	b, _ = read.Append(nil)
	s.Observe(now, b) // PSNs 1, 2, 3: positions 2 and 3 absent
	reissue := read
	reissue.BTH.PSN = 2
	b, _ = reissue.Append(nil)
	s.Observe(now, b)
	for p := psn.PSN(4); p < 8; p++ {
		s.Observe(now, packet(p, 100))
	}
	st := s.Stats()
	if st.Sources != 6 || st.NonSource != 2 || st.Retransmissions != 3 || st.RetransmissionMismatch != 1 || st.ReadReissued != 1 {
		t.Fatalf("counters %+v", st)
	}
	rs := repairs(drain(s))
	if len(rs) != 1 || rs[0].Present[0] != 0b11001111<<24 || rs[0].K != 8 {
		t.Fatalf("REPAIR %+v: Present Bitmap should leave READ-consumed positions 2 and 3 absent", rs)
	}
}

// TestBlockClosesAtKOrBurstC5: a block closes when k positions are covered, or after the burst
// gap with the positions it covers; its k is carried in the REPAIR.
func TestBlockClosesAtKOrBurstC5(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 4, 2, 0), WithAdaptation(false), WithRepairFraction(16),
		WithBurstGap(100*time.Microsecond))
	establish(t, s, 0, 3)
	now := time.Millisecond
	for p := psn.PSN(0x100); p < 0x106; p++ {
		now += 10 * time.Microsecond
		s.Observe(now, packet(p, 200))
	}
	rs := repairs(drain(s))
	if len(rs) != 2 || rs[0].K != 4 || rs[0].BlockStartPSN != 0x100 {
		t.Fatalf("full block: %+v", rs)
	}
	for i, r := range rs {
		if int(r.RepairIndex) != i || r.RepairSessionID != 0 || r.Retx || r.ConfigID != 1 ||
			r.Scheme != wire.SchemeCauchy || r.Last != (i == 1) {
			t.Fatalf("ordinary symbol %d: %+v", i, r)
		}
	}
	d, ok := s.NextDeadline()
	if !ok || d > now+100*time.Microsecond {
		t.Fatalf("burst gap deadline %v (now %v)", d, now)
	}
	s.Tick(d)
	rs = repairs(drain(s))
	if len(rs) != 2 || rs[0].K != 2 || rs[0].BlockStartPSN != 0x104 || s.Stats().BlocksClosedBurst != 1 {
		t.Fatalf("burst end: %+v", rs)
	}
}

// TestRepairPacedBeyondFourC11c: of m = 8 symbols, 4 go at once and the rest are paced over at
// most the block's own duration, without waiting for later sources.
func TestRepairPacedBeyondFourC11c(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 8, 8, 0), WithAdaptation(false), WithRepairFraction(16))
	establish(t, s, 0, 3)
	start := time.Millisecond
	now := start
	for p := psn.PSN(0); p < 8; p++ {
		now += 100 * time.Microsecond
		s.Observe(now, packet(p, 1000))
	}
	if n := len(repairs(drain(s))); n != 4 {
		t.Fatalf("%d symbols at once, want 4", n)
	}
	closed := now
	got := 0
	var last time.Duration
	for got < 4 {
		d, ok := s.NextDeadline()
		if !ok || d > closed+(closed-start) {
			t.Fatalf("paced symbol %d due at %v, beyond the block's duration", got, d)
		}
		s.Tick(d)
		rs := repairs(drain(s))
		got += len(rs)
		for _, r := range rs {
			if r.Last != (r.RepairIndex == 7) {
				t.Fatalf("LAST on %d", r.RepairIndex)
			}
		}
		last = d
	}
	if last <= closed || s.Stats().RepairPaced != 4 {
		t.Fatalf("pacing: last at %v, paced %d", last, s.Stats().RepairPaced)
	}
}

// TestRepairOnlyToBoundAddressC14: every REPAIR goes to the address bound at HELLO_ACK.
func TestRepairOnlyToBoundAddressC14(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 4, 2, 0), WithAdaptation(false), WithRepairFraction(16))
	establish(t, s, 0, 3)
	for p := psn.PSN(0); p < 8; p++ {
		s.Observe(time.Millisecond, packet(p, 100))
	}
	n := 0
	s.Drain(func(d flow.Datagram) {
		n++
		if d.To != testCRF {
			t.Fatalf("REPAIR to %v", d.To)
		}
	})
	if n != 4 {
		t.Fatalf("%d datagrams", n)
	}
}

// TestSteadyStateNoAllocs: the per-packet path allocates nothing once warm.
func TestSteadyStateNoAllocs(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 32, 4, 1058), WithAdaptation(false), WithRepairFraction(1))
	establish(t, s, 0, 3)
	pkt := packet(0, 1024)
	i := 0
	out := func(flow.Datagram) {}
	step := func() { // one block of 32 packets, so that a per-block allocation shows
		for range 32 {
			setPSN(pkt, psn.PSN(i))
			i++
			s.Observe(time.Duration(i)*time.Microsecond, pkt)
			s.Drain(out)
		}
	}
	for range 300 {
		step()
	}
	if a := testing.AllocsPerRun(200, step); a != 0 {
		t.Fatalf("%s: %v allocations per block", fec.CodecPath(), a)
	}
}

// TestLongMessageExtraRepairC16: the blocks of a WRITE the RETH shows to be long get extra
// ordinary symbols (fresh indices, LAST on the last), without a PARAM_UPDATE; other blocks do not.
func TestLongMessageExtraRepairC16(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 4, 1, 0), WithAdaptation(false), WithRepairFraction(16),
		WithLongMessageRepair(2, 8*1024))
	establish(t, s, 0, 3)
	first := roce.Packet{BTH: roce.BTH{OpCode: roce.OpWriteFirst, DestQP: testFlow.DestQP, PSN: 0x100},
		RETH: roce.RETH{DMALength: 8 * 1024}, Payload: make([]byte, 1024)}
	b, _ := first.Append(nil)
	s.Observe(time.Millisecond, b)
	for p := psn.PSN(0x101); p < 0x10c; p++ { // 8 packets of the message, then 4 of another
		s.Observe(time.Millisecond, packet(p, 1000))
	}
	perBlock := map[psn.PSN][]*wire.Repair{}
	for _, r := range repairs(drain(s)) {
		perBlock[r.BlockStartPSN] = append(perBlock[r.BlockStartPSN], r)
	}
	for start, want := range map[psn.PSN]int{0x100: 3, 0x104: 3, 0x108: 1} {
		rs := perBlock[start]
		if len(rs) != want || !rs[len(rs)-1].Last || rs[len(rs)-1].RepairIndex != uint8(want-1) {
			t.Fatalf("block %v: %d symbols, want %d", start, len(rs), want)
		}
	}
	if s.Stats().LongMessageBlocks != 2 {
		t.Fatalf("long-message blocks %d", s.Stats().LongMessageBlocks)
	}
}
