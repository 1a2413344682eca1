package crf

import (
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
)

// TestRecoveryTimeFromFirstGapPR18: a block's recovery time runs from the first gap the CRF saw
// among the sources a solve restored to that solve, and counts as beyond m when the solve
// restored more sources than the block's m. Blocks restored with no repair at all, and sources
// that arrive late, count nothing.
func TestRecoveryTimeFromFirstGapPR18(t *testing.T) {
	ms := time.Millisecond
	r := newReceiver(t, Settings{})
	id := open(t, r, 0, cfg8) // k = 8, m = 2

	// Block one loses 1 and 2; the gap of 1 is seen at 10 ms (source 2 missing too, and 3
	// arrives), its repair comes at 17 ms: 7 ms, within m.
	b1 := newBlock(0x100, 8)
	r.Observe(9*ms, id, b1.pkts[0], false)
	for j := 3; j < 8; j++ {
		r.Observe(10*ms, id, b1.pkts[j], false)
	}
	r.Handle(16*ms, testCSF, b1.repair(t, id, 0, psn.Bitmap{}, 0), false)
	r.Handle(17*ms, testCSF, b1.repair(t, id, 1, psn.Bitmap{}, 0), false)

	// Block two loses 0, 1 and 2 (more than m = 2): the gap is seen at 20 ms (source 3 arrives);
	// two ordinary symbols at 21 ms cannot solve it, a third (a coded retransmission) at 45 ms
	// does: 25 ms, beyond m.
	b2 := newBlock(0x108, 8)
	for j := 3; j < 8; j++ {
		r.Observe(20*ms, id, b2.pkts[j], false)
	}
	r.Handle(21*ms, testCSF, b2.repair(t, id, 0, psn.Bitmap{}, 0), false)
	r.Handle(21*ms, testCSF, b2.repair(t, id, 1, psn.Bitmap{}, 0), false)
	r.Handle(45*ms, testCSF, b2.repair(t, id, 2, psn.Bitmap{}, 0), false)

	// Block three loses nothing; block four's only gap is filled by the late source.
	b3 := newBlock(0x110, 8)
	for j := range 8 {
		r.Observe(50*ms, id, b3.pkts[j], false)
	}
	r.Handle(50*ms, testCSF, b3.repair(t, id, 0, psn.Bitmap{}, 0), false)
	b4 := newBlock(0x118, 8)
	for j := 1; j < 8; j++ {
		r.Observe(60*ms, id, b4.pkts[j], false)
	}
	r.Observe(61*ms, id, b4.pkts[0], false)
	r.Handle(62*ms, testCSF, b4.repair(t, id, 0, psn.Bitmap{}, 0), false)

	if n := len(drainDel(r)); n == 0 {
		t.Fatal("nothing delivered")
	}
	st := r.Stats()
	if st.Flows.Restored != 5 || st.Flows.BlocksDecoded != 2 {
		t.Fatalf("restored %d, decoded %d: want 5 and 2", st.Flows.Restored, st.Flows.BlocksDecoded)
	}
	check := func(name string, h Recovery, want time.Duration) {
		t.Helper()
		if n := h.Count(); n != 1 {
			t.Fatalf("%s: %d recoveries, want 1", name, n)
		}
		if h.SumMicros != uint64(want/time.Microsecond) {
			t.Errorf("%s: sum %d us, want %v", name, h.SumMicros, want)
		}
		med, _ := h.Quantile(0.5)
		if med < want*9/10 || med > want*11/10 {
			t.Errorf("%s: median %v, want %v within its bucket (9 percent)", name, med, want)
		}
	}
	check("within m", st.RecoveryWithinM, 7*ms)
	check("beyond m", st.RecoveryBeyondM, 25*ms)
}

// TestRecoveryHistogramBuckets: the buckets' bounds are 100 us times 2^(i/8); each recovery
// lands in the first bucket whose bound is not below it; quantiles interpolate within a bucket
// and Minus leaves the recoveries between two readings.
func TestRecoveryHistogramBuckets(t *testing.T) {
	if RecoveryBound(0) != 100*time.Microsecond || RecoveryBound(8) != 200*time.Microsecond || RecoveryBound(80) != 102400*time.Microsecond {
		t.Fatalf("bounds %v %v %v", RecoveryBound(0), RecoveryBound(8), RecoveryBound(80))
	}
	for i := 1; i < RecoveryBuckets; i++ {
		if r := float64(RecoveryBound(i)) / float64(RecoveryBound(i-1)); r < 1.08 || r > 1.10 {
			t.Fatalf("bound %d / bound %d = %.3f", i, i-1, r)
		}
	}
	var h Recovery
	h.add(0)
	h.add(100 * time.Microsecond)
	h.add(101 * time.Microsecond)
	h.add(time.Hour)
	if h.Buckets[0] != 2 || h.Buckets[1] != 1 || h.Buckets[RecoveryBuckets] != 1 {
		t.Fatalf("buckets 0, 1, last: %d %d %d", h.Buckets[0], h.Buckets[1], h.Buckets[RecoveryBuckets])
	}
	before := h
	var want []time.Duration
	for i := 1; i <= 99; i++ {
		d := time.Duration(i) * time.Millisecond
		h.add(d)
		want = append(want, d)
	}
	d := h.Minus(before)
	if d.Count() != 99 || d.SumMicros != 4950*1000 {
		t.Fatalf("after Minus: %d recoveries, sum %d us", d.Count(), d.SumMicros)
	}
	for _, q := range []float64{0.1, 0.5, 0.9} {
		got, ok := d.Quantile(q)
		exact := want[int(q*99+0.5)-1]
		if !ok || got < exact*90/100 || got > exact*110/100 {
			t.Errorf("quantile %.1f: %v, exact %v", q, got, exact)
		}
	}
	var empty Recovery
	if _, ok := empty.Quantile(0.5); ok {
		t.Error("a quantile of nothing")
	}
}
