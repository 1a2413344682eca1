package link

import (
	"testing"
	"time"

	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/rc"
)

// R26 (refines R20): a QP whose packets arrive further apart than T_thresh, as each of several
// QPs sharing a path at its part of the rate (50 Mbit/s, MTU 4096: one packet per 0.66 ms,
// T_thresh 0.33 ms, C_thresh 1), gets its ACKs by Condition B, one per packet; those are not
// repeated (before, each was repeated twice before the next packet came: three ACKs per data
// packet). The ACK that completes a message still is, so a lost one costs T_thresh, not the
// fallback timeout.
func TestTCAETHSlowFlowRepeatsOnlyLastAckR26(t *testing.T) {
	const size = 4 << 20 // 1024 packets
	for _, loseLast := range []bool{false, true} {
		s := setup{mode: rc.ModeTCAETH, mtu: 4096, rate: 50e6, delay: 10 * time.Millisecond,
			tweak: func(c *rc.Config) { c.RTT = 21 * time.Millisecond }}
		if loseLast {
			// B's ACKs, one per packet: index 1023 is the ACK of the last, AckReq, packet.
			script, err := netem.NewScript([]int{1023})
			if err != nil {
				t.Fatal(err)
			}
			s.lossBA = script
		}
		p := newPair(t, s)
		a, b := p.QP[0], p.QP[1]
		if c := b.CThresh(); c != 1 {
			t.Fatalf("C_thresh %d, want 1", c)
		}
		mem := make([]byte, size)
		mr, _ := b.RegisterMR(mem, rc.AccessRemoteWrite)
		msg := randBytesSeed(4, size)
		if err := a.PostSend(rc.SendWR{Op: rc.OpWrite, Local: msg, RemoteAddr: mr.Addr, RKey: mr.RKey}); err != nil {
			t.Fatal(err)
		}
		var lastSent time.Duration
		p.OnSend = func(now time.Duration, from Side, _ []byte, _ netem.Verdict) {
			if from == A {
				lastSent = now
			}
		}
		done := runUntilDone(t, p, 1, 60*time.Second)
		p.RunUntil(func() bool { return false }, 60*time.Second)
		if string(mem) != string(msg) {
			t.Fatal("data differs")
		}
		sa, sb := a.Stats(), b.Stats()
		tt := b.Config().TThresh
		ideal := lastSent + 2*10*time.Millisecond
		t.Logf("lose last ACK %v: completed %v (last packet sent at %v), %d ACKs (%d repeats) for %d data packets, %d retransmissions",
			loseLast, done, lastSent, sb.AckPackets, sb.AckRepeats, sa.DataPackets, sa.RetransmittedPackets)
		if sb.AckRepeats != rc.AckRepeats || sb.AckPackets != sa.DataPackets+rc.AckRepeats {
			t.Errorf("%d ACKs, %d of them repeats, for %d data packets: want one per packet and %d repeats of the last",
				sb.AckPackets, sb.AckRepeats, sa.DataPackets, rc.AckRepeats)
		}
		if sa.RetransmittedPackets != 0 || done > ideal+tt {
			t.Errorf("completed at %v (ideal %v, T_thresh %v) with %d retransmissions", done, ideal, tt, sa.RetransmittedPackets)
		}
	}
}
