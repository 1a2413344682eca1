package crf

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// TestOrderedDeliveryC7a: for a go-back-N receiver the CRF delivers in PSN order: packets after
// a gap are held until the gap is restored, then released in order.
func TestOrderedDeliveryC7a(t *testing.T) {
	r := newReceiver(t, Settings{Ordered: true})
	id := open(t, r, 0, cfg8)
	b := newBlock(0x100, 8)
	var v []Verdict
	for j := range 8 {
		if j != 2 {
			v = append(v, r.Observe(0, id, b.pkts[j], false))
		}
	}
	if v[0] != Forward || v[1] != Forward || v[2] != Held || v[6] != Held {
		t.Fatalf("verdicts %v", v)
	}
	r.Handle(0, testCSF, b.repair(t, id, 0, psn.Bitmap{}, 0), false)
	ds := drainDel(r)
	if len(ds) != 6 {
		t.Fatalf("%d deliveries", len(ds))
	}
	for i, d := range ds {
		if d.PSN != psn.PSN(0x102+i) || (i == 0) != (d.Kind == Restored) {
			t.Fatalf("delivery %d: %v %v", i, d.PSN, d.Kind)
		}
	}
	if st, _ := r.FlowStats(id); st.HeldPackets != 5 || st.Released != 5 {
		t.Fatalf("%+v", st)
	}
}

// TestOrderedHoldTimeoutC7a: when the hold time passes, the held packets go out in order and
// the gap is left to the RDMA transport.
func TestOrderedHoldTimeoutC7a(t *testing.T) {
	r := newReceiver(t, Settings{Ordered: true, Reorder: 2 * time.Millisecond})
	id := open(t, r, 0, cfg8)
	b := newBlock(0x100, 8)
	r.Observe(0, id, b.pkts[0], false)
	r.Observe(time.Millisecond, id, b.pkts[2], false)
	r.Observe(time.Millisecond, id, b.pkts[3], false)
	if len(drainDel(r)) != 0 {
		t.Fatal("released early")
	}
	r.Tick(3 * time.Millisecond)
	ds := drainDel(r)
	if len(ds) != 2 || ds[0].PSN != 0x102 || ds[1].PSN != 0x103 {
		t.Fatalf("%+v", ds)
	}
	if st, _ := r.FlowStats(id); st.GapsSkipped != 1 {
		t.Fatalf("gaps %d", st.GapsSkipped)
	}
}

// TestOrderedHoldBoundC15: the hold is bounded in packets; beyond it everything goes out.
func TestOrderedHoldBoundC15(t *testing.T) {
	r := newReceiver(t, Settings{Ordered: true, HoldPackets: 3})
	id := open(t, r, 0, cfg8)
	r.Observe(0, id, packet(0x100, 100), false)
	for p := psn.PSN(0x102); p < 0x106; p++ {
		r.Observe(0, id, packet(p, 100), false)
	}
	if st, _ := r.FlowStats(id); st.HoldOverflows != 1 {
		t.Fatalf("%+v", st)
	}
	ds := drainDel(r)
	if len(ds) != 4 || ds[0].PSN != 0x102 || ds[3].PSN != 0x105 {
		t.Fatalf("released %+v", ds)
	}
}

// TestLossReportEverySRTT: LOSS_REPORT goes once per SRTT while the flow is active, with the
// interval's counters before restoration.
func TestLossReportEverySRTT(t *testing.T) {
	r := newReceiver(t, Settings{})
	id := open(t, r, 0, cfg8)
	b := newBlock(0x100, 8)
	for j := range 8 {
		if j != 4 {
			r.Observe(time.Millisecond, id, b.pkts[j], j == 1)
		}
	}
	r.Handle(time.Millisecond, testCSF, b.repair(t, id, 0, psn.Bitmap{}, 0), true)
	r.Tick(10 * time.Millisecond)
	var lr *wire.LossReport
	for _, m := range drainMsgs(r) {
		if l, ok := m.(*wire.LossReport); ok {
			lr = l
		}
	}
	want := wire.LossReport{FlowID: id, IntervalUS: 10000, Expected: 8, Received: 7, Restored: 1, CEMarked: 1,
		RepairsReceived: 1, RepairsCEMarked: 1}
	if lr == nil || *lr != want {
		t.Fatalf("LOSS_REPORT %+v, want %+v", lr, want)
	}
	r.Tick(20 * time.Millisecond) // idle interval: nothing to report
	if len(drainMsgs(r)) != 0 {
		t.Fatal("report for an empty interval")
	}
}

// TestTransparentTemplateC12: in transparent mode a restored packet is verified under the
// header template of the latest received source packet.
func TestTransparentTemplateC12(t *testing.T) {
	r := newReceiver(t, Settings{Verify: VerifyTemplate})
	id := open(t, r, 0, cfg8)
	b := newBlock(0x100, 8)
	hdr, err := testFlow.LogicalHeader().AppendIPUDP(nil, len(b.pkts[1]))
	if err != nil {
		t.Fatal(err)
	}
	for j := 1; j < 8; j++ {
		r.Observe(0, id, b.pkts[j], false)
	}
	// No template yet: the restored packet cannot be checked and is not delivered.
	r.Handle(0, testCSF, b.repair(t, id, 0, psn.Bitmap{}, 0), false)
	if st, _ := r.FlowStats(id); st.ICRCMismatch != 1 {
		t.Fatalf("%+v", st)
	}
	r2 := newReceiver(t, Settings{Verify: VerifyTemplate})
	id = open(t, r2, 0, cfg8)
	binary.BigEndian.PutUint16(hdr[4:], 0x1234) // a real sender's Identification: masked? no, kept
	if err := r2.SetTemplate(id, hdr[:20], hdr[20:]); err != nil {
		t.Fatal(err)
	}
	for j := 1; j < 8; j++ {
		r2.Observe(0, id, b.pkts[j], false)
	}
	r2.Handle(0, testCSF, b.repair(t, id, 0, psn.Bitmap{}, 0), false)
	if st, _ := r2.FlowStats(id); st.ICRCMismatch != 1 {
		t.Fatal("packet sealed with Identification 0 verified under a template with another one")
	}
	r3 := newReceiver(t, Settings{Verify: VerifyTemplate})
	id = open(t, r3, 0, cfg8)
	binary.BigEndian.PutUint16(hdr[4:], 0)
	_ = r3.SetTemplate(id, hdr[:20], hdr[20:])
	for j := 1; j < 8; j++ {
		r3.Observe(0, id, b.pkts[j], false)
	}
	r3.Handle(0, testCSF, b.repair(t, id, 0, psn.Bitmap{}, 0), false)
	if ds := drainDel(r3); len(ds) != 1 || ds[0].Kind != Restored {
		t.Fatalf("%+v", ds)
	}
}

// TestConfigReleasedBehindWindowE44: an older configuration is released once every PSN a block
// of it could hold is behind the window (E44), not when the first REPAIR of a newer one comes;
// a REPAIR of it is then dropped, counted late: its block is behind the window (C7 c).
func TestConfigReleasedBehindWindowE44(t *testing.T) {
	r := newReceiver(t, Settings{}, WithLimits(smallLimits()))
	id := open(t, r, 0, cfg8m1)
	a := mkBlock(0x100, 1, writes(0x100, 8)...)
	for _, p := range a.pkts {
		r.Observe(0, id, p, false)
	}
	r.Handle(0, testCSF, a.ordinary(t, id, 0, true), false)
	if st := paramUpdate(t, r, 0, id, flow.Config{ID: 2, Scheme: wire.SchemeCauchy, K: 8, M: 1, T: testT}, 0x108); st != wire.StatusAccepted {
		t.Fatalf("status %v", st)
	}
	b := mkBlock(0x108, 2, writes(0x108, 8)...)
	for _, p := range b.pkts {
		r.Observe(0, id, p, false)
	}
	r.Handle(0, testCSF, b.ordinary(t, id, 0, true), false)
	r.Tick(10 * time.Millisecond)
	old := mkBlock(0x0f8, 1, writes(0x0f8, 8)...)
	r.Handle(10*time.Millisecond, testCSF, old.ordinary(t, id, 0, true), false)
	if st, _ := r.FlowStats(id); r.Stats().ConfigsReleased != 0 || st.RepairUnknownConfig != 0 {
		t.Fatalf("configuration 1 released while its blocks are in the window: %+v", st)
	}
	for _, p := range writes(0x110, 40) {
		r.Observe(10*time.Millisecond, id, p, false)
	}
	r.Tick(20 * time.Millisecond)
	late := func() uint64 { st, _ := r.FlowStats(id); return st.RepairLate }()
	r.Handle(20*time.Millisecond, testCSF, a.ordinary(t, id, 0, true), false)
	if st, _ := r.FlowStats(id); r.Stats().ConfigsReleased != 1 || st.RepairUnknownConfig != 0 || st.RepairLate != late+1 {
		t.Fatalf("configuration 1 not released once its PSNs left the window, or its late REPAIR not counted late: %+v", st)
	}
}

// TestReceiverNoAllocs: the per-packet path without loss allocates nothing once warm.
func TestReceiverNoAllocs(t *testing.T) {
	r := newReceiver(t, Settings{})
	id := open(t, r, 0, flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: 32, M: 4, T: 1058})
	pkt := packet(0, 1024)
	rep := wire.Repair{FlowID: id, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 32, Present: psn.FirstK(32), Symbol: make([]byte, 1058)}
	rb := msg(t, &rep)
	i := 0
	step := func() {
		p := psn.PSN(i)
		pkt[9], pkt[10], pkt[11] = byte(p>>16), byte(p>>8), byte(p)
		r.Observe(time.Duration(i), id, pkt, false)
		if i%32 == 31 {
			s := p.Add(-31)
			rb[12], rb[13], rb[14] = byte(s>>16), byte(s>>8), byte(s)
			r.Handle(time.Duration(i), testCSF, rb, false)
		}
		i++
	}
	block := func() { // 32 packets and their REPAIR, so that a per-block allocation shows
		for range 32 {
			step()
		}
	}
	for range 3000 {
		block()
	}
	if a := testing.AllocsPerRun(500, block); a != 0 {
		t.Fatalf("%s: %v allocations per block", fec.CodecPath(), a)
	}
}

// TestReceiverNoAllocsWithLoss: with one loss per block, the lossy path (window, block, decode,
// ICRC verification, delivery, reports) allocates nothing once warm.
func TestReceiverNoAllocsWithLoss(t *testing.T) {
	r := newReceiver(t, Settings{})
	id := open(t, r, 0, cfg8)
	enc, _ := fec.NewEncoder()
	pkts := make([][]byte, 8)
	syms := make([][]byte, 8)
	for j := range pkts {
		pkts[j] = packet(psn.PSN(j), 200+j)
	}
	dst := [][]byte{make([]byte, testT)}
	idx := []int{0}
	var rep []byte
	base := psn.PSN(0)
	now := time.Duration(0)
	lh := testFlow.LogicalHeader()
	block := func() {
		for j := range 8 {
			p := base.Add(j)
			pk := pkts[j]
			pk[9], pk[10], pk[11] = byte(p>>16), byte(p>>8), byte(p)
			_ = lh.Seal(pk)
			syms[j], _ = fec.AppendSymbol(syms[j][:0], pk, testT)
		}
		_ = enc.Encode(dst, idx, psn.FirstK(8), syms)
		m := wire.Repair{FlowID: id, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, BlockStartPSN: base,
			Present: psn.FirstK(8), Symbol: dst[0]}
		rep, _ = m.Append(rep[:0])
		for j := 1; j < 8; j++ {
			r.Observe(now, id, pkts[j], false)
		}
		r.Handle(now, testCSF, rep, false)
		r.DrainDeliveries(func(Delivery) {})
		now += 100 * time.Microsecond
		if d, ok := r.NextDeadline(); ok && d <= now {
			r.Tick(now)
		}
		r.Drain(func(flow.Datagram) {})
		base = base.Add(8)
	}
	for range 2000 {
		block()
	}
	a := testing.AllocsPerRun(500, block)
	st, _ := r.FlowStats(id)
	if st.Restored < 2000 || st.ICRCMismatch != 0 {
		t.Fatalf("not restoring: %+v", st)
	}
	if a != 0 {
		t.Fatalf("%s: %v allocations per lossy block", fec.CodecPath(), a)
	}
}

// TestTransparentInterpolatedIDC12: a sender that numbers its packets (IPv4 Identification +1
// per packet): the restored packet's Identification is interpolated from its PSN neighbours, so
// its ICRC checks and the header the driver delivers it with carries the right number.
func TestTransparentInterpolatedIDC12(t *testing.T) {
	r := newReceiver(t, Settings{Verify: VerifyTemplate})
	id := open(t, r, 0, cfg8)
	b := newBlock(0x100, 8)
	hdrs := make([][]byte, 8)
	for j := range b.pkts {
		h, err := testFlow.LogicalHeader().AppendIPUDP(nil, len(b.pkts[j]))
		if err != nil {
			t.Fatal(err)
		}
		binary.BigEndian.PutUint16(h[4:], uint16(0x4000+j))
		if err := roce.SealICRC(h[:20], h[20:], b.pkts[j]); err != nil {
			t.Fatal(err)
		}
		hdrs[j] = h
		b.syms[j], _ = fec.AppendSymbol(b.syms[j][:0], b.pkts[j], testT)
	}
	for j := range 8 {
		if j != 3 {
			r.ObserveIP(0, id, hdrs[j][:20], hdrs[j][20:], b.pkts[j], false)
		}
	}
	r.Handle(0, testCSF, b.repair(t, id, 0, psn.Bitmap{}, 0), false)
	ds := drainDel(r)
	if len(ds) != 1 || ds[0].Kind != Restored || ds[0].PSN != 0x103 {
		st, _ := r.FlowStats(id)
		t.Fatalf("%+v %+v", ds, st)
	}
	ip, _, err := r.Template(id, 0x103, len(b.pkts[3]))
	if err != nil || binary.BigEndian.Uint16(ip[4:]) != 0x4003 {
		t.Fatalf("delivered Identification %#x, %v", binary.BigEndian.Uint16(ip[4:]), err)
	}
	if ipChecksumOK(ip) != true {
		t.Fatal("header checksum of the delivered header")
	}
}

func ipChecksumOK(h []byte) bool {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return sum == 0xffff
}

// TestTransparentLogicalPortFromPacketsC12: in transparent mode with the logical check and no
// configured source port, a restored packet is checked under the logical header with the UDP
// source port of the flow's own packets; their real Identification (the kernel's, not the 0
// the endpoint sealed under) does not enter the check. Before, the port was taken as 0 and
// every restoration failed.
func TestTransparentLogicalPortFromPacketsC12(t *testing.T) {
	r, err := New(WithRandom(counter()), WithSettings(func(flow.Descriptor) (Settings, bool) {
		return Settings{Verify: VerifyLogical}, true
	}))
	if err != nil {
		t.Fatal(err)
	}
	id := open(t, r, 0, cfg8)
	b := newBlock(0x100, 8) // sealed under testFlow's logical header
	for j := range b.pkts {
		if j == 5 {
			continue
		}
		h, err := testFlow.LogicalHeader().AppendIPUDP(nil, len(b.pkts[j]))
		if err != nil {
			t.Fatal(err)
		}
		binary.BigEndian.PutUint16(h[4:], uint16(0x0615+j)) // the kernel numbers its packets
		r.ObserveIP(0, id, h[:20], h[20:], b.pkts[j], false)
	}
	r.Handle(0, testCSF, b.repair(t, id, 0, psn.Bitmap{}, 0), false)
	ds := drainDel(r)
	st, _ := r.FlowStats(id)
	if len(ds) != 1 || ds[0].Kind != Restored || ds[0].PSN != 0x105 || st.ICRCMismatch != 0 {
		t.Fatalf("deliveries %+v, ICRC mismatches %d", ds, st.ICRCMismatch)
	}
}
