package link

import (
	"testing"
	"time"

	"github.com/crem-project/crem/rc"
)

// A short path whose round trip varies by milliseconds, as a loaded host's scheduler stretches a
// loopback's (a read loop descheduled, a garbage collection): with the QP's own timers, T7's SRTT
// + 3 T_thresh and 3 x SRTT, a few hundred microseconds after the first samples, fire without a
// loss; with the host floor a driver on real sockets sets (Config.MinTimeout, protocol notes
// R37) none fires and nothing is resent. Every mode; virtual time, a fixed seed.
func TestHostFloorStopsSpuriousTimeouts(t *testing.T) {
	run := func(t *testing.T, mode rc.Mode, noNAK bool, floor time.Duration) rc.Stats {
		t.Helper()
		p := newPair(t, setup{mode: mode, noNAK: noNAK, mtu: 1024, rate: 200e6, seed: 7,
			delay: 1 * time.Millisecond, jitter: 2 * time.Millisecond, normal: true,
			tweak: func(c *rc.Config) { c.RTT, c.MinTimeout = 0, floor }})
		a, b := p.QP[0], p.QP[1]
		const size, iters = 256 << 10, 8
		mem := make([]byte, size*iters)
		msg := randBytesSeed(9, size*iters)
		mr, err := b.RegisterMR(mem, rc.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		for i := range iters {
			wr := rc.SendWR{ID: uint64(i), Op: rc.OpWrite, Local: msg[i*size : (i+1)*size],
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
		if string(mem) != string(msg) {
			t.Fatal("data differs")
		}
		return a.Stats()
	}
	spurious := 0
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			bare := run(t, m.mode, m.noNAK, 0)
			floored := run(t, m.mode, m.noNAK, 10*time.Millisecond)
			t.Logf("timeout retransmissions: %d with the QP's own timers, %d with a 10 ms floor",
				bare.TimeoutRetransmissions, floored.TimeoutRetransmissions)
			spurious += int(bare.TimeoutRetransmissions)
			if floored.TimeoutRetransmissions != 0 || floored.RetransmittedPackets != 0 {
				t.Errorf("with the host floor: %d retransmitted, %d by timeout, on a path that lost nothing",
					floored.RetransmittedPackets, floored.TimeoutRetransmissions)
			}
		})
	}
	if spurious == 0 {
		t.Error("the QP's own timers fired no spurious timeout on this path: the test no longer shows what the floor is for")
	}
}
