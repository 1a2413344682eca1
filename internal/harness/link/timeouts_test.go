package link

import (
	"fmt"
	"testing"
	"time"

	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/rc"
)

// dropList is a loss model that drops the packets of the given ordinals (0 first) and no
// other.
type dropList map[int]bool

type dropModel struct {
	drop dropList
	n    int
}

func (d *dropModel) Drop() bool { d.n++; return d.drop[d.n-1] || d.drop[-1] }
func (d *dropModel) MeanLoss() float64 {
	return 0
}
func (d *dropModel) String() string { return "droplist" }

// A QP whose path has a 20 ms round trip and that is not told it (Config.RTT zero: the 10 ms
// default estimate; or a 1 ms estimate marked provisional, as one taken on a setup exchange
// over loopback) runs no timer before the first ACK can return: the local ACK timeout holds
// every timer until the first RTT sample (protocol notes R33). Every mode, WRITE and READ;
// before R33 tcaeth's fallback fired at 10.5 ms and every mode's at about 1.3 to 3 ms with the
// 1 ms estimate.
func TestUnstatedRTTNoTimeoutBeforeFirstAck(t *testing.T) {
	estimates := []struct {
		name string
		set  func(c *rc.Config)
	}{
		{"rtt-unset", func(c *rc.Config) { c.RTT = 0 }},
		{"rtt-1ms-provisional", func(c *rc.Config) { c.RTT, c.RTTProvisional = time.Millisecond, true }},
	}
	for _, m := range modes {
		for _, est := range estimates {
			for _, op := range []rc.Op{rc.OpWrite, rc.OpRead} {
				t.Run(fmt.Sprintf("%s/%s/%v", m.name, est.name, op), func(t *testing.T) {
					p := newPair(t, setup{mode: m.mode, noNAK: m.noNAK, mtu: 1024, rate: 1e9,
						delay: 10 * time.Millisecond, tweak: est.set})
					a, b := p.QP[0], p.QP[1]
					if a.Sampled() {
						t.Fatal("the QP claims an RTT sample before any ACK")
					}
					const size, iters = 1 << 20, 2
					mem := make([]byte, size*iters)
					msg := randBytesSeed(5, size*iters)
					local := make([]byte, size*iters)
					if op == rc.OpRead {
						copy(mem, msg)
					} else {
						copy(local, msg)
					}
					mr, err := b.RegisterMR(mem, rc.AccessRemoteWrite|rc.AccessRemoteRead)
					if err != nil {
						t.Fatal(err)
					}
					for i := range iters {
						wr := rc.SendWR{ID: uint64(i), Op: op, Local: local[i*size : (i+1)*size],
							RemoteAddr: mr.Addr + uint64(i*size), RKey: mr.RKey}
						if err := a.PostSend(wr); err != nil {
							t.Fatal(err)
						}
					}
					var c poll
					if err := p.RunUntil(func() bool { c.collect(p); return len(c.a) == iters }, 60*time.Second); err != nil {
						t.Fatalf("%v; stats %+v", err, a.Stats())
					}
					for _, comp := range c.a {
						if comp.Status != rc.StatusSuccess {
							t.Fatalf("completion %+v; stats %+v", comp, a.Stats())
						}
					}
					if string(mem) != string(msg) || string(local) != string(msg) {
						t.Fatal("data differs")
					}
					st := a.Stats()
					if st.Timeouts != 0 || st.TimeoutRetransmissions != 0 || st.RetransmittedPackets != 0 {
						t.Errorf("on a clean 20 ms path: %d timeouts, %d timeout retransmissions, %d retransmissions; want none",
							st.Timeouts, st.TimeoutRetransmissions, st.RetransmittedPackets)
					}
					if !a.Sampled() || a.SRTT() < 20*time.Millisecond || a.SRTT() > 40*time.Millisecond {
						t.Errorf("after the transfer: sampled %v, SRTT %v; want a sample near the path's 20 ms", a.Sampled(), a.SRTT())
					}
				})
			}
		}
	}
}

// A dead peer (every request lost) fails the QP with retry exceeded only after the summed
// backoff: with RetryCount 7 and a timeout T, the timers fire at T, 2T, 4T, ... 64T, 64T
// after the last, and the eighth without progress fails the QP, 191 T after the request
// went (protocol notes R34). Every mode, WRITE and READ, with a stated RTT (T from it) and
// with none (T the local ACK timeout, 67.1 ms). Before R34 the QP failed after 8 T.
func TestDeadPeerFailsAfterSummedBackoff(t *testing.T) {
	const rtt = 20 * time.Millisecond
	lat, _ := rc.LocalAckTimeoutOf(rc.DefaultLocalAckTimeoutCode)
	for _, m := range modes {
		for _, stated := range []bool{true, false} {
			for _, op := range []rc.Op{rc.OpWrite, rc.OpRead} {
				t.Run(fmt.Sprintf("%s/stated=%v/%v", m.name, stated, op), func(t *testing.T) {
					p := newPair(t, setup{mode: m.mode, noNAK: m.noNAK, mtu: 1024, rate: 1e9, delay: rtt / 2,
						lossAB: &dropModel{drop: dropList{-1: true}},
						tweak: func(c *rc.Config) {
							c.RTT = 0
							if stated {
								c.RTT = rtt
							}
						}})
					a, b := p.QP[0], p.QP[1]
					mem := make([]byte, 1024)
					mr, err := b.RegisterMR(mem, rc.AccessRemoteWrite|rc.AccessRemoteRead)
					if err != nil {
						t.Fatal(err)
					}
					wr := rc.SendWR{ID: 1, Op: op, Local: make([]byte, 1024), RemoteAddr: mr.Addr, RKey: mr.RKey}
					if err := a.PostSend(wr); err != nil {
						t.Fatal(err)
					}
					var failedAt time.Duration
					for range 1 << 20 {
						now := p.Now
						more := p.Step()
						if a.Err() != nil {
							failedAt = now
							break
						}
						if !more || p.Now > time.Hour {
							t.Fatalf("the QP did not fail: now %v, stats %+v", p.Now, a.Stats())
						}
					}
					var c poll
					c.collect(p)
					if len(c.a) != 1 || c.a[0].Status != rc.StatusRetryExceeded {
						t.Fatalf("completions %+v, want one with retry exceeded", c.a)
					}
					T := 3 * rtt // gbn's and sr's RTO, and the READ retry
					if m.mode == rc.ModeTCAETH && op == rc.OpWrite {
						T = rtt + 3*max(100*time.Microsecond, rtt/64) // T7: SRTT + 3 T_thresh
					}
					if !stated {
						T = lat
					}
					want := 191 * T // (1 + 2 + 4 + 8 + 16 + 32 + 64 + 64) T
					if failedAt < want-time.Millisecond || failedAt > want+time.Millisecond {
						t.Errorf("failed at %v, want %v (191 x %v); stats %+v", failedAt, want, T, a.Stats())
					}
					if st := a.Stats(); st.TimeoutRetransmissions != 7 {
						t.Errorf("%d timeout retransmissions, want 7 (RetryCount)", st.TimeoutRetransmissions)
					}
				})
			}
		}
	}
}

// On a lossy path the timeouts without progress back off and progress resets them: a
// one-packet WRITE whose first three transmissions are lost is resent T, 2T and 4T after the
// previous; the next WRITE, whose first transmission is lost, is resent T after it went
// (protocol notes R34). Every mode. Before R34 the gaps were T, T, T.
func TestTimeoutBackoffResetsOnProgress(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			p := newPair(t, setup{mode: m.mode, noNAK: m.noNAK, mtu: 1024, rate: 1e9, delay: 10 * time.Millisecond,
				lossAB: &dropModel{drop: dropList{0: true, 1: true, 2: true, 4: true}}})
			a, b := p.QP[0], p.QP[1]
			var sends []time.Duration
			p.OnSend = func(now time.Duration, from Side, pkt []byte, v netem.Verdict) {
				if from == A {
					sends = append(sends, now)
				}
			}
			mem := make([]byte, 2048)
			mr, err := b.RegisterMR(mem, rc.AccessRemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			var c poll
			for i := range 2 {
				wr := rc.SendWR{ID: uint64(i), Op: rc.OpWrite, Local: make([]byte, 1024), RemoteAddr: mr.Addr + uint64(i*1024), RKey: mr.RKey}
				if err := a.PostSend(wr); err != nil {
					t.Fatal(err)
				}
				if err := p.RunUntil(func() bool { c.collect(p); return len(c.a) == i+1 }, time.Minute); err != nil {
					t.Fatalf("%v; stats %+v", err, a.Stats())
				}
				if c.a[i].Status != rc.StatusSuccess {
					t.Fatalf("completion %+v; stats %+v", c.a[i], a.Stats())
				}
			}
			if len(sends) != 6 {
				t.Fatalf("A sent at %v, want 6 transmissions (4 of WRITE 0, 2 of WRITE 1)", sends)
			}
			T := sends[1] - sends[0]
			near := func(got, want time.Duration, lo, hi float64) bool {
				return float64(got) >= lo*float64(want) && float64(got) <= hi*float64(want)
			}
			if g := sends[2] - sends[1]; !near(g, 2*T, 0.98, 1.02) {
				t.Errorf("second timeout %v after the first, want 2 x %v; sends %v", g, T, sends)
			}
			if g := sends[3] - sends[2]; !near(g, 4*T, 0.98, 1.02) {
				t.Errorf("third timeout %v after the second, want 4 x %v; sends %v", g, T, sends)
			}
			// The RTT sample of WRITE 0 may move T a little; the backoff is gone.
			if g := sends[5] - sends[4]; !near(g, T, 0.7, 1.3) {
				t.Errorf("after progress the timeout is %v, want about %v (reset); sends %v", g, T, sends)
			}
		})
	}
}
