package rc

import (
	"testing"
	"time"

	"github.com/crem-project/crem/roce"
)

// R38: with ReorderTail, the long reorder window holds back only the packets sent within
// ReorderTail of their message's last one (the blocks a cost-rule CSF repairs); a hole earlier in
// the message is retransmitted after the default window, T_thresh, as without CREM. Without
// ReorderTail the long window holds both.
func TestReorderTailHoldsOnlyTheMessageTail(t *testing.T) {
	for _, tail := range []time.Duration{0, 100 * 1024 * 8 * time.Nanosecond} { // 100 packets at 1 Gbit/s
		cfg := testCfg(ModeTCAETH)
		cfg.ReorderWindow = 5 * time.Millisecond // longer than the whole message takes
		cfg.ReorderTail = tail
		q := newTestQP(t, cfg)
		pr := peerOf(q)
		q.PostSend(SendWR{Op: OpWrite, Local: make([]byte, 500*1024)}) // PSNs 100..599
		var now time.Duration
		sendAll(q, &now)
		drain(t, q)
		now += 20 * time.Millisecond
		// Lost: 200..209, 390 packets before the end, and 560..569, 30 before it.
		q.Handle(now, pr.extAck(t, 199, roce.Segment{Left: 210, Right: 559}, roce.Segment{Left: 570, Right: 599}))
		sendAll(q, &now)
		re := sentPSNs(drain(t, q))
		var early, late int
		for _, x := range re {
			switch {
			case x >= 200 && x < 210:
				early++
			case x >= 560 && x < 570:
				late++
			default:
				t.Fatalf("tail %v: retransmitted %v, which was reported received", tail, x)
			}
		}
		wantEarly := 0
		if tail > 0 {
			wantEarly = 10
		}
		if early != wantEarly || late != 0 {
			t.Fatalf("tail %v: retransmitted %d of the early hole and %d of the tail's, want %d and 0 (%v)",
				tail, early, late, wantEarly, re)
		}
	}
}
