package link

import (
	"testing"
	"time"

	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/rc"
	"github.com/crem-project/crem/roce"
)

// The draft's example (section 6), end to end: PSNs 100..599 are sent, 200..299 and 400..499
// are lost; the sender retransmits exactly those 200 PSNs, each once, and nothing else.
func TestDraftExampleEndToEnd(t *testing.T) {
	var drops []int
	for i := 100; i < 200; i++ {
		drops = append(drops, i, i+200)
	}
	script, err := netem.NewScript(drops)
	if err != nil {
		t.Fatal(err)
	}
	p := newPair(t, setup{mode: rc.ModeTCAETH, delay: 10 * time.Millisecond, lossAB: script,
		tweak: func(c *rc.Config) {
			c.RTT = 20 * time.Millisecond
			if c.QPN == 0x11 {
				c.SendPSN = 100
			} else {
				c.RecvPSN = 100
			}
		}})
	sends := map[psn.PSN]int{}
	p.OnSend = func(_ time.Duration, from Side, pkt []byte, _ netem.Verdict) {
		if from == A {
			h, _, _ := roce.ParseBTH(pkt)
			sends[h.PSN]++
		}
	}
	a, b := p.QP[0], p.QP[1]
	mem := make([]byte, 500*1024)
	mr, _ := b.RegisterMR(mem, rc.AccessRemoteWrite)
	msg := randBytesSeed(7, len(mem))
	if err := a.PostSend(rc.SendWR{Op: rc.OpWrite, Local: msg, RemoteAddr: mr.Addr, RKey: mr.RKey}); err != nil {
		t.Fatal(err)
	}
	var c poll
	if err := p.RunUntil(func() bool { c.collect(p); return len(c.a) == 1 }, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if c.a[0].Status != rc.StatusSuccess || string(mem) != string(msg) {
		t.Fatalf("completion %+v, data equal %v", c.a[0], string(mem) == string(msg))
	}
	for q := psn.PSN(100); q < 600; q++ {
		want := 1
		if q >= 200 && q < 300 || q >= 400 && q < 500 {
			want = 2
		}
		if sends[q] != want {
			t.Errorf("PSN %d sent %d times, want %d", q, sends[q], want)
		}
	}
	if len(sends) != 500 {
		t.Errorf("%d distinct PSNs sent, want 500", len(sends))
	}
	st := a.Stats()
	if st.RetransmittedPackets != 200 || st.LossRetransmissions != 200 || st.TimeoutRetransmissions != 0 {
		t.Errorf("retransmissions %d (loss decision %d, timeout %d), want 200, 200, 0",
			st.RetransmittedPackets, st.LossRetransmissions, st.TimeoutRetransmissions)
	}
}

func randBytesSeed(seed uint64, n int) []byte {
	b := make([]byte, n)
	x := seed
	for i := range b {
		x = x*6364136223846793005 + 1442695040888963407
		b[i] = byte(x >> 56)
	}
	return b
}
