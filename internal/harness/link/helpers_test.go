package link

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/rc"
)

// setup describes a test connection.
type setup struct {
	mode    rc.Mode
	noNAK   bool
	mtu     int
	rate    int64
	delay   time.Duration // one way
	loss    float64       // each direction
	reorder float64
	jitter  time.Duration // spread of each direction's delay (never reorders): uniform, or
	normal  bool          // normal with jitter the standard deviation
	seed    uint64
	lossAB  netem.LossModel // overrides loss for A to B
	lossBA  netem.LossModel // overrides loss for B to A
	tweak   func(c *rc.Config)
}

// newPair builds QPs A (QPN 0x11) and B (QPN 0x22) and the path between them.
func newPair(t testing.TB, s setup) *Pair {
	t.Helper()
	if s.mtu == 0 {
		s.mtu = 1024
	}
	if s.rate == 0 {
		s.rate = 1e9
	}
	rtt := 2*s.delay + 100*time.Microsecond
	base := rc.Config{MTU: s.mtu, Mode: s.mode, SRNoNAK: s.noNAK, Rate: s.rate, RTT: rtt,
		SendPSN: 0xfffff0, RecvPSN: 0x000100}
	ca, cb := base, base
	ca.QPN, ca.RemoteQPN, cb.QPN, cb.RemoteQPN = 0x11, 0x22, 0x22, 0x11
	ca.SendPSN, ca.RecvPSN, cb.SendPSN, cb.RecvPSN = 0xfffff0, 0x000100, 0x000100, 0xfffff0
	ca.LocalAddr, ca.RemoteAddr = netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	cb.LocalAddr, cb.RemoteAddr = ca.RemoteAddr, ca.LocalAddr
	ca.LocalPort, ca.RemotePort, cb.LocalPort, cb.RemotePort = 49152, 49153, 49153, 49152
	if s.tweak != nil {
		s.tweak(&ca)
		s.tweak(&cb)
	}
	a, err := rc.NewQP(ca)
	if err != nil {
		t.Fatal(err)
	}
	b, err := rc.NewQP(cb)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(seed uint64, lm netem.LossModel) netem.Config {
		c := netem.Config{Delay: s.delay, Jitter: s.jitter, Seed: seed}
		if s.normal {
			c.JitterDist = netem.JitterNormal
		}
		if lm != nil {
			c.Loss = lm
		} else if s.loss > 0 {
			m, err := netem.NewBernoulli(s.loss, seed)
			if err != nil {
				t.Fatal(err)
			}
			c.Loss = m
		}
		if s.reorder > 0 {
			c.ReorderProb, c.ReorderDelay = s.reorder, 200*time.Microsecond
		}
		return c
	}
	p, err := New(a, b, mk(s.seed*2+1, s.lossAB), mk(s.seed*2+2, s.lossBA))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// randBytes returns n seeded random octets.
func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// poll collects the completions of both QPs.
type poll struct {
	a, b []rc.Completion
}

func (c *poll) collect(p *Pair) {
	c.a = p.QP[0].PollCompletions(c.a)
	c.b = p.QP[1].PollCompletions(c.b)
}
