package lab

import (
	"strings"
	"testing"

	"github.com/crem-project/crem/psn"
)

// A soak cut short from outside is not judged on its duration, heap, goroutines or flows,
// nothing in it is called lost or corrupted, and it does not pass; what failed before the
// cancel still fails it.
func TestInterruptedSoakIsNotJudged(t *testing.T) {
	ivs := []Interval{{HeapBytes: 1 << 20, Goroutines: 10, Flows: 4}, {HeapBytes: 8 << 20, Goroutines: 40, Flows: 9}}
	r := Run{Name: "crem+tcaeth", Interrupted: true, Cancelled: 12}
	v := judgeSoak(&r, ivs, 0, "context canceled")
	if v.Pass || !v.Interrupted || len(v.Failures) != 0 {
		t.Fatalf("verdict %+v", v)
	}
	if s := v.String(); !strings.HasPrefix(s, "interrupted") || strings.Contains(s, "FAIL") || strings.Contains(s, "lost") {
		t.Errorf("verdict %q", s)
	}
	r.Error = "3 of 40 messages completed, 2 checked, 1 bad"
	v = judgeSoak(&r, ivs, 1, "context canceled")
	if v.Pass || !v.Interrupted || len(v.Failures) != 2 || !strings.Contains(v.String(), "1 bad") || !strings.Contains(v.String(), "1 CLOSE") {
		t.Errorf("verdict %+v: %s", v, v)
	}
	// Not interrupted, the same run fails as before: ended early, bytes lost or corrupted.
	r = Run{Name: "crem+tcaeth", Error: "3 of 40 messages completed, 3 checked, 0 bad"}
	if v := judgeSoak(&r, ivs, 0, "context deadline exceeded"); v.Pass || v.Interrupted || !strings.Contains(v.String(), "lost or corrupted") {
		t.Errorf("verdict %s", v)
	}
}

// The path's tally of a QP's data packets: every loss, and the transmissions delivered after
// the packet had been delivered once (what go-back-N resends), kept through pruning.
func TestPathTallyCountsDataLossesAndResentDelivered(t *testing.T) {
	tl := &qpTally{psns: map[uint32][2]uint32{}}
	send := func(p uint32, lost ...bool) {
		for _, l := range lost {
			tl.count(psn.Of(p), l)
		}
	}
	send(10, true, false)         // lost once, retransmitted: no resend of a delivered packet
	send(11, false, false, false) // delivered, then twice more: 2 resent though delivered
	send(12, true, true, false)   // lost twice
	send(13, false, true, false)  // delivered, its resend lost, then delivered again: 1
	send(14, true)                // lost every time (restored by CREM)
	if tl.dataDropped != 5 {
		t.Errorf("data losses %d, want 5", tl.dataDropped)
	}
	var resent uint64
	for _, c := range tl.psns {
		resent += resentDelivered(c)
	}
	if resent != 3 {
		t.Errorf("resent though delivered %d, want 3", resent)
	}
	send(5000, false)
	tl.prune(100) // 10..14 are final
	if len(tl.psns) != 1 || tl.resentDone != 3 || tl.onlyDone != 1 || tl.dataDropped != 5 {
		t.Errorf("after pruning: %d PSNs, resent %d, only restored %d, losses %d", len(tl.psns), tl.resentDone, tl.onlyDone, tl.dataDropped)
	}
}
