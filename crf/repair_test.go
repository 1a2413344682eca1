package crf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

const testT = 1100

var cfg8 = flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: 8, M: 2, T: testT}

// block builds k source packets from PSN start and the REPAIR messages with the given Repair
// Indices over the set over (all present positions when over is empty; then ordinary).
type block struct {
	start psn.PSN
	k     int
	pkts  [][]byte
	syms  [][]byte
}

func newBlock(start psn.PSN, k int) *block {
	b := &block{start: start, k: k}
	for j := range k {
		p := packet(start.Add(j), 200+j)
		b.pkts = append(b.pkts, p)
		s, _ := fec.AppendSymbol(nil, p, testT)
		b.syms = append(b.syms, s)
	}
	return b
}

func (b *block) repair(t testing.TB, id uint32, idx int, over psn.Bitmap, session uint16) []byte {
	t.Helper()
	enc, _ := fec.NewEncoder()
	dst := [][]byte{make([]byte, testT)}
	retx := !over.Empty()
	if !retx {
		over = psn.FirstK(b.k)
	}
	if err := enc.Encode(dst, []int{idx}, over, b.syms); err != nil {
		t.Fatal(err)
	}
	m := wire.Repair{FlowID: id, ConfigID: 1, Scheme: wire.SchemeCauchy, K: uint8(b.k), RepairIndex: uint8(idx),
		BlockStartPSN: b.start, Present: psn.FirstK(b.k), Symbol: dst[0]}
	if retx {
		m.Retx, m.Lost, m.RepairSessionID = true, over, session
	}
	return msg(t, &m)
}

func drainDel(r *Receiver) []Delivery {
	var out []Delivery
	r.DrainDeliveries(func(d Delivery) {
		d.Packet = append([]byte(nil), d.Packet...)
		out = append(out, d)
	})
	return out
}

// TestDecodeVerifiedC7eC12: as soon as sources and repair cover the block it is decoded; each
// restored packet's ICRC is checked before delivery; restored packets are counted apart and
// never carry CE.
func TestDecodeVerifiedC7eC12(t *testing.T) {
	r := newReceiver(t, Settings{})
	id := open(t, r, 0, cfg8)
	b := newBlock(0x100, 8)
	for j := range 8 {
		if j != 2 && j != 5 {
			if v := r.Observe(time.Millisecond, id, b.pkts[j], true); v != Forward {
				t.Fatal("source held in immediate mode")
			}
		}
	}
	r.Handle(time.Millisecond, testCSF, b.repair(t, id, 0, psn.Bitmap{}, 0), false)
	if len(drainDel(r)) != 0 {
		t.Fatal("delivered before solvable")
	}
	r.Handle(time.Millisecond, testCSF, b.repair(t, id, 1, psn.Bitmap{}, 0), false)
	ds := drainDel(r)
	if len(ds) != 2 {
		t.Fatalf("%d deliveries", len(ds))
	}
	for _, d := range ds {
		j := int(b.start.Forward(d.PSN))
		if d.Kind != Restored || d.CE || string(d.Packet) != string(b.pkts[j]) {
			t.Fatalf("delivery %+v", d)
		}
	}
	st, _ := r.FlowStats(id)
	if st.Restored != 2 || st.Sources != 6 || st.SourcesCE != 6 || st.BlocksDecoded != 1 {
		t.Fatalf("counters %+v", st)
	}
}

// TestWrongRepairNeverDeliveredC12: a repair symbol with the right header and wrong bytes
// (corrupted, or blindly injected from the CSF's address) yields packets whose ICRC fails:
// nothing is delivered, the mismatch is counted, the block waits for other symbols through its
// rounds (E56) and, none coming, falls back to the RDMA transport. A REPAIR from any other
// address is dropped before it is looked at (C14).
func TestWrongRepairNeverDeliveredC12(t *testing.T) {
	for _, name := range []string{"corrupted", "injected"} {
		r := newReceiver(t, Settings{})
		id := open(t, r, 0, cfg8)
		b := newBlock(0x100, 8)
		for j := 1; j < 8; j++ {
			r.Observe(time.Millisecond, id, b.pkts[j], false)
		}
		rep := b.repair(t, id, 0, psn.Bitmap{}, 0)
		switch name {
		case "corrupted":
			rep[len(rep)-500] ^= 0x40
		case "injected":
			for i := 48; i < len(rep); i++ {
				rep[i] = byte(i * 31)
			}
		}
		r.Handle(time.Millisecond, netip.MustParseAddrPort("10.66.0.1:50000"), rep, false)
		if r.Stats().MessagesWrongSource != 1 {
			t.Fatal("REPAIR from a stranger not dropped")
		}
		r.Handle(time.Millisecond, testCSF, rep, false)
		if ds := drainDel(r); len(ds) != 0 {
			t.Fatalf("%s: delivered %+v", name, ds)
		}
		var ds []Delivery
		for d, ok := r.NextDeadline(); ok && d < time.Second; d, ok = r.NextDeadline() {
			r.Tick(d)
			drainMsgs(r)
			ds = append(ds, drainDel(r)...)
		}
		st, _ := r.FlowStats(id)
		if st.ICRCMismatch != 1 || st.Restored != 0 || st.BlocksAbandoned != 1 || st.BlocksMismatchAbandoned != 1 {
			t.Fatalf("%s: counters %+v", name, st)
		}
		if len(ds) != 1 || ds[0].Kind != Abandoned || ds[0].PSN != 0x100 {
			t.Fatalf("%s: deliveries %+v", name, ds)
		}
	}
}

// TestRepairAcceptanceC7c: only REPAIR of an acknowledged, unreleased Config ID, with its scheme
// or scheme 0, and k no larger than the configuration's; else dropped and counted.
func TestRepairAcceptanceC7c(t *testing.T) {
	r := newReceiver(t, Settings{})
	id := open(t, r, 0, cfg8)
	b := newBlock(0x100, 8)
	base := wire.Repair{FlowID: id, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, BlockStartPSN: 0x100,
		Present: psn.FirstK(8), Symbol: make([]byte, testT)}
	bad := []wire.Repair{base, base, base, base}
	bad[0].ConfigID = 9
	bad[1].Scheme = wire.SchemeXOR
	bad[2].K, bad[2].Present = 9, psn.FirstK(9)
	bad[3].Symbol = make([]byte, 100)
	for i := range bad {
		r.Handle(0, testCSF, msg(t, &bad[i]), false)
	}
	st, _ := r.FlowStats(id)
	if st.RepairUnknownConfig != 1 || st.RepairBadScheme != 1 || st.RepairBadK != 1 || st.RepairBadT != 1 || st.BlocksCreated != 0 {
		t.Fatalf("counters %+v", st)
	}
	// A Source Copy symbol (scheme 0) of position 3 is accepted under the configuration.
	sc := base
	sc.Scheme, sc.RepairIndex, sc.Symbol = wire.SchemeSourceCopy, 3, b.syms[3]
	r.Handle(0, testCSF, msg(t, &sc), false)
	ds := drainDel(r)
	if len(ds) != 1 || ds[0].Kind != Restored || string(ds[0].Packet) != string(b.pkts[3]) {
		t.Fatalf("Source Copy: %+v", ds)
	}
	// A block closed early carries a smaller k.
	small := newBlock(0x200, 5)
	r.Handle(0, testCSF, small.repair(t, id, 0, psn.Bitmap{}, 0), false)
	if st, _ := r.FlowStats(id); st.BlocksCreated != 2 {
		t.Fatal("REPAIR with a smaller k rejected")
	}
}

// TestDuplicatesIgnoredC7d: a duplicate source (same PSN) and a duplicate repair (same Repair
// Index) are ignored for decoding and counted.
func TestDuplicatesIgnoredC7d(t *testing.T) {
	r := newReceiver(t, Settings{})
	id := open(t, r, 0, cfg8)
	b := newBlock(0x100, 8)
	r.Observe(0, id, b.pkts[0], false)
	if r.Observe(0, id, b.pkts[0], false) != Forward {
		t.Fatal("duplicate source not passed to the RDMA receiver")
	}
	rep := b.repair(t, id, 0, psn.Bitmap{}, 0)
	r.Handle(0, testCSF, rep, false)
	r.Handle(0, testCSF, rep, false)
	st, _ := r.FlowStats(id)
	if st.Duplicates != 1 || st.RepairDuplicate != 1 || st.Sources != 1 {
		t.Fatalf("counters %+v", st)
	}
}

// requests returns the REPAIR_REQUESTs queued.
func requests(r *Receiver) []*wire.RepairRequest {
	var out []*wire.RepairRequest
	for _, m := range drainMsgs(r) {
		if q, ok := m.(*wire.RepairRequest); ok {
			out = append(out, q)
		}
	}
	return out
}

// TestRequestRetryFallbackC7fC9: the LAST symbol of the round leaves the block unsolved: a
// block-form request (L, r, M_s = X - r); no answer in 1.5 SRTT: again with a new Request ID
// (round two); then FALLBACK; then the block is abandoned to the RDMA transport.
func TestRequestRetryFallbackC7fC9(t *testing.T) {
	r := newReceiver(t, Settings{})
	id := open(t, r, 0, cfg8)
	b := newBlock(0x100, 8)
	for j := 3; j < 8; j++ {
		r.Observe(0, id, b.pkts[j], false)
	}
	r.Handle(0, testCSF, b.repair(t, id, 0, psn.Bitmap{}, 0), false)
	last := wire.Repair{}
	m, _ := wire.ParseRepair(b.repair(t, id, 1, psn.Bitmap{}, 0))
	last = m
	last.Last = true
	r.Handle(0, testCSF, msg(t, &last), false)
	qs := requests(r)
	if len(qs) != 1 || qs[0].Lost != lostSet(0, 1, 2) || qs[0].RepairsHeld != 2 || qs[0].SuggestedM != 1 || qs[0].Fallback {
		t.Fatalf("first request %+v", qs)
	}
	ids := []uint16{qs[0].RequestID}
	var at []time.Duration
	var fb []bool
	for now := time.Duration(0); now < 100*time.Millisecond; {
		d, _ := r.NextDeadline()
		now = d
		r.Tick(now)
		for _, q := range requests(r) {
			for _, prev := range ids {
				if q.RequestID == prev {
					t.Fatal("a retry reused a Request ID")
				}
			}
			ids = append(ids, q.RequestID)
			at, fb = append(at, now), append(fb, q.Fallback)
		}
	}
	// 1.5 x the initial 10 ms SRTT between rounds; the third request is the FALLBACK.
	if len(at) != 2 || at[0] != 15*time.Millisecond || at[1] != 30*time.Millisecond || fb[0] || !fb[1] {
		t.Fatalf("retries at %v, fallback %v", at, fb)
	}
	ds := drainDel(r)
	st, _ := r.FlowStats(id)
	if len(ds) != 3 || ds[0].Kind != Abandoned || st.BlocksAbandoned != 1 || st.FallbackRequests != 1 || st.RequestRetries != 1 {
		t.Fatalf("after fallback: %+v %+v", ds, st)
	}
}

func lostSet(js ...int) psn.Bitmap {
	var b psn.Bitmap
	for _, j := range js {
		b.Set(j)
	}
	return b
}

// TestLateSourceWithRetx: a source in L that arrives after the coded retransmission is
// subtracted from it; the block still decodes.
func TestLateSourceWithRetx(t *testing.T) {
	r := newReceiver(t, Settings{})
	id := open(t, r, 0, cfg8)
	b := newBlock(0x100, 8)
	for j := 3; j < 8; j++ {
		r.Observe(0, id, b.pkts[j], false)
	}
	r.Handle(0, testCSF, b.repair(t, id, 0, psn.Bitmap{}, 0), false)
	r.Handle(0, testCSF, b.repair(t, id, 2, lostSet(0, 1, 2), 7), false)
	r.Observe(0, id, b.pkts[1], false) // late: now U = {0, 2}, two usable rows
	ds := drainDel(r)
	if len(ds) != 2 || ds[0].Kind != Restored || string(ds[0].Packet) != string(b.pkts[ds[0].PSN-0x100]) {
		t.Fatalf("%+v", ds)
	}
}

// TestReorderAllowanceRequestC7f: without a LAST symbol the block is declared incomplete a
// reorder allowance (max(1 ms, SRTT/8)) after its first REPAIR.
func TestReorderAllowanceRequestC7f(t *testing.T) {
	r := newReceiver(t, Settings{})
	id := open(t, r, 0, cfg8)
	b := newBlock(0x100, 8)
	for j := 2; j < 8; j++ {
		r.Observe(0, id, b.pkts[j], false)
	}
	r.Handle(0, testCSF, b.repair(t, id, 0, psn.Bitmap{}, 0), false)
	if len(requests(r)) != 0 {
		t.Fatal("asked before the allowance")
	}
	d, _ := r.NextDeadline()
	if d != 1250*time.Microsecond {
		t.Fatalf("deadline %v, want SRTT/8 = 1.25 ms", d)
	}
	r.Tick(d)
	if qs := requests(r); len(qs) != 1 || qs[0].SuggestedM != 1 || qs[0].RepairsHeld != 1 {
		t.Fatalf("%+v", qs)
	}
}

// TestEvictOldestC7g: when Max Open Blocks would be exceeded the oldest open block falls back.
func TestEvictOldestC7g(t *testing.T) {
	l := flow.DefaultLimits()
	l.MaxOpenBlocks = 2
	r := newReceiver(t, Settings{}, WithLimits(l))
	id := open(t, r, 0, cfg8)
	for n := range 3 {
		b := newBlock(psn.PSN(0x100+8*n), 8)
		for j := 1; j < 8; j++ {
			r.Observe(0, id, b.pkts[j], false)
		}
		m, _ := wire.ParseRepair(b.repair(t, id, 0, psn.Bitmap{}, 0))
		m.Symbol = make([]byte, testT) // wrong, so that nothing decodes: the blocks stay open
		m.RepairIndex = 0
		// Use a row over a set that leaves the block unsolvable: a coded row over {1}.
		m.Retx, m.Lost, m.RepairSessionID = true, lostSet(1), 9
		r.Handle(0, testCSF, msg(t, &m), false)
	}
	st, _ := r.FlowStats(id)
	ds := drainDel(r)
	if st.BlocksEvicted != 1 || len(ds) != 1 || ds[0].PSN != 0x100 || ds[0].Kind != Abandoned {
		t.Fatalf("%+v %+v", st, ds)
	}
}

// TestReadAbsentC13: the CRF derives the PSNs a READ request consumes from its DMA Length and
// the RDMA MTU and never asks for them.
func TestReadAbsentC13(t *testing.T) {
	r := newReceiver(t, Settings{Reorder: time.Millisecond})
	id := open(t, r, 0, flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: 8, M: 0, T: testT})
	r.Observe(0, id, packet(0x0ff, 100), false)
	read := readRequest(0x100, 4*1024)
	r.Observe(0, id, read, false)
	r.Observe(0, id, packet(0x104, 100), false)
	for d, ok := r.NextDeadline(); ok && d < 5*time.Millisecond; d, ok = r.NextDeadline() {
		r.Tick(d)
	}
	if qs := requests(r); len(qs) != 0 {
		t.Fatalf("asked for READ-consumed PSNs: %+v", qs[0])
	}
	if st, _ := r.FlowStats(id); st.ReadAbsent != 3 {
		t.Fatalf("absent %d", st.ReadAbsent)
	}
}

// TestRangeRequestWithoutRepairC7: with no REPAIR for a block, lost PSNs are asked for in the
// PSN-range form after the reorder allowance; an INFO answer marks absent positions.
func TestRangeRequestWithoutRepairC7(t *testing.T) {
	r := newReceiver(t, Settings{Reorder: time.Millisecond})
	id := open(t, r, 0, flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: 8, M: 0, T: testT})
	r.Observe(0, id, packet(0x100, 100), false)
	r.Observe(0, id, packet(0x104, 100), false)
	d, _ := r.NextDeadline()
	r.Tick(d)
	qs := requests(r)
	if len(qs) != 1 || !qs[0].RangeForm || len(qs[0].Ranges) != 1 || qs[0].Ranges[0] != (psn.Range{Start: 0x101, Count: 3}) {
		t.Fatalf("%+v", qs)
	}
	info := wire.Repair{FlowID: id, Info: true, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 5, BlockStartPSN: 0x100,
		Present: lostSet(0, 4)}
	r.Handle(d, testCSF, msg(t, &info), false)
	for i := 0; i < 5; i++ {
		d, _ = r.NextDeadline()
		r.Tick(d)
	}
	if qs := requests(r); len(qs) != 0 {
		t.Fatalf("asked again after INFO: %+v", qs[0])
	}
	if st, _ := r.FlowStats(id); st.InfoReceived != 1 || st.BlocksComplete != 1 {
		t.Fatalf("%+v", st)
	}
}

// TestRequestDeltaAboveOnePercent: above one percent loss (the CRF's own estimate from its
// LOSS_REPORT intervals) M_s = X - r + 1, and never more than X.
func TestRequestDeltaAboveOnePercent(t *testing.T) {
	r := newReceiver(t, Settings{})
	id := open(t, r, 0, cfg8)
	// An interval at 25 percent loss: 8 expected, 6 received (the block's REPAIR confirms the
	// two missing PSNs as sources, E42).
	warm := newBlock(0x10, 8)
	for j := 0; j < 8; j++ {
		if j != 1 && j != 2 {
			r.Observe(0, id, warm.pkts[j], false)
		}
	}
	r.Handle(0, testCSF, warm.repair(t, id, 0, psn.Bitmap{}, 0), false)
	r.Tick(10 * time.Millisecond)
	drainMsgs(r)
	drainDel(r)
	b := newBlock(0x100, 8)
	for j := 3; j < 8; j++ {
		r.Observe(10*time.Millisecond, id, b.pkts[j], false)
	}
	m, _ := wire.ParseRepair(b.repair(t, id, 0, psn.Bitmap{}, 0))
	m.Last = true
	r.Handle(10*time.Millisecond, testCSF, msg(t, &m), false)
	qs := requests(r)
	if len(qs) != 1 || qs[0].SuggestedM != 3 || qs[0].RepairsHeld != 1 { // X = 3, r = 1, delta 1: 3
		for _, q := range qs {
			t.Logf("%+v", *q)
		}
		t.Fatal("delta not applied")
	}
	// X = 1, r = 0: X - r + delta = 2 is capped at X.
	c := newBlock(0x200, 8)
	for j := 1; j < 8; j++ {
		r.Observe(10*time.Millisecond, id, c.pkts[j], false)
	}
	m, _ = wire.ParseRepair(c.repair(t, id, 0, lostSet(1, 2), 5)) // a row that does not help
	m.Retx, m.RepairSessionID = true, 5
	r.Handle(10*time.Millisecond, testCSF, msg(t, &m), false)
	for d, ok := r.NextDeadline(); ok && d < 12*time.Millisecond; d, ok = r.NextDeadline() {
		r.Tick(d)
	}
	qs = qs[:0]
	for _, q := range requests(r) {
		if !q.RangeForm { // the synthetic gaps between the blocks are asked for by range
			qs = append(qs, q)
		}
	}
	if len(qs) != 1 || qs[0].SuggestedM != 1 {
		for _, q := range qs {
			t.Logf("%+v", *q)
		}
		t.Fatal("M_s above X")
	}
}

// TestExtraOrdinaryAcceptedC16: an ordinary REPAIR of an acknowledged configuration whose index
// is beyond m but unused for the block is accepted and used.
func TestExtraOrdinaryAcceptedC16(t *testing.T) {
	r := newReceiver(t, Settings{})
	id := open(t, r, 0, cfg8) // m = 2
	b := newBlock(0x100, 8)
	for j := 1; j < 8; j++ {
		r.Observe(0, id, b.pkts[j], false)
	}
	r.Handle(0, testCSF, b.repair(t, id, 5, psn.Bitmap{}, 0), false)
	if ds := drainDel(r); len(ds) != 1 || ds[0].Kind != Restored || string(ds[0].Packet) != string(b.pkts[0]) {
		t.Fatalf("%+v", ds)
	}
}
