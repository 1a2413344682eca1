package soak

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/rc"
)

// Scenario is everything a seed decides before the run: the path, the queue pairs, the CREM
// configuration of the gateways and the phases (protocol notes K2, K3). Run draws it from the
// seed with NewScenario; a test may change it before running (a shorter bad minute, fewer QPs).
type Scenario struct {
	Seed uint64
	RTT  time.Duration // the path's round trip between the gateways
	MTU  int           // the RDMA MTU of every QP (a deployment's fabric has one)
	QPs  []QPSpec

	// The gateways' CREM configuration: the first (k, m) of every flow, the limits both
	// functions declare, adaptation of m by the policy.
	K, M          int
	MaxK, MaxM    int
	MaxOpenBlocks int

	// Routing says how the gateway finds a flow's reverse QP (K1): RouteConfigured, RouteCM
	// or RouteLearned.
	Routing string

	Phases []Phase

	// Budget is the octets of work the seed moves in all (K2); the work of one request is at
	// most MaxOp.
	Budget, MaxOp int64
	// Big is the one large request the seed posts in its first lossy phase (0: none).
	Big   int64
	BigOp rc.Op
	BigQP int

	// Script, when set, replaces the random work: exactly these requests, at these times (a
	// reproduction of a finding, K9).
	Script []ScriptOp
}

// ScriptOp is one request of a scripted scenario.
type ScriptOp struct {
	At   time.Duration
	QP   int
	Op   rc.Op
	Size int
}

// QPSpec is one RC queue pair between the requester host A and the responder host B.
type QPSpec struct {
	Mode       rc.Mode
	QPNA, QPNB uint32  // A's requester QP and B's responder QP
	PortA      uint16  // UDP source ports: each QP's own, as NICs derive them per QP
	PortB      uint16  //
	SendPSN    psn.PSN // A's first request PSN (B's expected PSN)
	BackPSN    psn.PSN // B's first request PSN (B sends none; A expects it)
	Rate       int64   // bit/s, both QPs' preset rate
	Depth      int     // requests outstanding at most
	NoReadWork bool    // this QP posts no READ until the probes (a flow of READ responses idle for long)
}

// Phase is one stretch of the path's behaviour (K3).
type Phase struct {
	Name string
	Dur  time.Duration // 0: until the phase's condition holds (Quiesce, Drain)
	// Loss is the mean loss probability of each direction; Burst > 1 makes it Gilbert-Elliott
	// with that mean burst length, otherwise Bernoulli.
	Loss, Burst float64
	// ReorderProb holds back that share of packets by ReorderDelay.
	ReorderProb  float64
	ReorderDelay time.Duration
	Jitter       time.Duration

	Bad     bool // the bad minute: the breaker must trip, and close the flows beyond a minute
	Quiesce bool // no new large request; ends once none is outstanding
	Drain   bool // no new request; ends once every request has completed
	Light   bool // only small requests (the bad minute and what precedes it)
	// Reconfigure forces this many configuration changes (to and from m = 0) during the phase,
	// through (*csf.Sender).Reconfigure, on top of the policy's own.
	Reconfigure int
	// Probe drops one first transmission of every active flow at this offset into the phase, to
	// see the repair that answers it (the protection that must have resumed after the bad minute).
	Probe time.Duration
}

// Clean reports whether the phase's path loses and reorders nothing.
func (p *Phase) Clean() bool { return p.Loss == 0 && p.ReorderProb == 0 }

func (p *Phase) String() string {
	var b strings.Builder
	b.WriteString(p.Name)
	switch {
	case p.Loss > 0 && p.Burst > 1:
		fmt.Fprintf(&b, " gilbert %.3g%% burst %.3g", 100*p.Loss, p.Burst)
	case p.Loss > 0:
		fmt.Fprintf(&b, " bernoulli %.3g%%", 100*p.Loss)
	default:
		b.WriteString(" lossless")
	}
	if p.ReorderProb > 0 {
		fmt.Fprintf(&b, " reorder %.3g%% by %v", 100*p.ReorderProb, p.ReorderDelay)
	}
	if p.Dur > 0 {
		fmt.Fprintf(&b, " for %v", p.Dur)
	}
	return b.String()
}

// How the gateways learn each flow's reverse QP (K1).
const (
	RouteConfigured = "configured" // every protect rule names the flow's reverse_qp
	RouteCM         = "cm"         // learned from the RDMA CM REQ and REP each QP's setup sends on QP 1
	RouteLearned    = "learned"    // learned by PSN correlation (no CM)
)

// Stream numbers of the seed's random sources: each part of the run draws from its own, so
// that changing one part of a scenario leaves the others' draws alone.
const (
	streamScenario = iota + 1
	streamWork
	streamGatewayA
	streamGatewayB
	streamLink
	streamRegions
	streamReconfig
)

// NewScenario draws the scenario of seed.
func NewScenario(seed uint64) *Scenario {
	r := rand.New(rand.NewPCG(seed, streamScenario))
	s := &Scenario{Seed: seed}
	s.RTT = []time.Duration{2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
		20 * time.Millisecond}[r.IntN(4)]
	s.MTU = []int{1024, 2048, 4096, 4096, 4096}[r.IntN(5)]
	s.K = []int{16, 32, 32, 64}[r.IntN(4)]
	s.M = []int{0, 0, 1, 2, 4}[r.IntN(5)]
	s.MaxK, s.MaxM = 64, 16
	s.MaxOpenBlocks = []int{16, 32, 32, 64}[r.IntN(4)]
	s.Routing = []string{RouteConfigured, RouteCM, RouteLearned, RouteLearned}[r.IntN(4)]

	n := 16 + r.IntN(9)
	modes := []rc.Mode{rc.ModeGBN, rc.ModeSR, rc.ModeTCAETH}
	used := map[uint32]bool{}
	qpn := func() uint32 {
		for {
			q := uint32(2 + r.IntN(psn.Mask-1))
			if !used[q] {
				used[q] = true
				return q
			}
		}
	}
	off := r.IntN(3)
	for i := range n {
		q := QPSpec{Mode: modes[(i+off)%3], QPNA: qpn(), QPNB: qpn(),
			PortA: uint16(49152 + 2*i), PortB: uint16(49153 + 2*i)}
		q.SendPSN, q.BackPSN = drawPSN(r), drawPSN(r)
		// 200 Mbit/s to 2 Gbit/s, log-uniform.
		q.Rate = int64(200e6 * math.Pow(10, r.Float64()))
		q.Depth = 1 + r.IntN(4)
		q.NoReadWork = r.IntN(8) == 0
		s.QPs = append(s.QPs, q)
	}
	r.Shuffle(len(s.QPs), func(i, j int) { s.QPs[i], s.QPs[j] = s.QPs[j], s.QPs[i] })

	// Requests of at most 2^18 packets each: 1 GiB at a 4 KiB MTU (K2).
	s.MaxOp = min(1<<30, int64(s.MTU)<<18)
	s.Budget = 256 << 20
	if r.IntN(2) == 0 {
		s.Big = s.MaxOp / int64(1+r.IntN(4))
		s.BigOp = rc.OpRead
		if r.IntN(4) == 0 {
			s.BigOp = rc.OpWrite
		}
		s.BigQP = r.IntN(n)
	}
	s.Phases = drawPhases(r)
	return s
}

// drawPSN draws an initial PSN over the whole 24-bit space: uniform, just below the wrap, or one
// of the values the first configuration's Effective PSN once compared wrongly (E27).
func drawPSN(r *rand.Rand) psn.PSN {
	switch r.IntN(8) {
	case 0:
		return psn.PSN(psn.Mask - r.IntN(4096)) // wraps within the first packets
	case 1:
		return psn.PSN([]uint32{0, 0x7fffff, 0x800000, 0x900000, 0xfffff0}[r.IntN(5)])
	default:
		return psn.PSN(r.Uint32() & psn.Mask)
	}
}

// drawPhases draws the phases: a clean warm-up, three to five phases of loss, reordering and
// clean path in a random order (at least one lossless), a quiesce before the bad minute, the
// bad minute (under or over sixty seconds), the clean path after it with its probes, and the
// drain (K3).
func drawPhases(r *rand.Rand) []Phase {
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+r.IntN(hi-lo+1)) * time.Millisecond }
	ps := []Phase{{Name: "warm-up", Dur: ms(200, 400)}}
	kinds := []string{"lossless", "bernoulli", "bursty", "reorder", "bernoulli", "bursty"}
	r.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	kinds = kinds[:3+r.IntN(3)]
	has := false
	for _, k := range kinds {
		has = has || k == "lossless"
	}
	if !has {
		kinds[r.IntN(len(kinds))] = "lossless"
	}
	for i, k := range kinds {
		p := Phase{Name: fmt.Sprintf("%s-%d", k, i+1), Dur: ms(1500, 3000)}
		switch k {
		case "bernoulli":
			p.Loss = math.Pow(10, -3+1.5*r.Float64()) // 0.1 to 3 percent
		case "bursty":
			p.Loss = math.Pow(10, -3+1.3*r.Float64())
			p.Burst = 2 + 6*r.Float64()
		case "reorder":
			p.Loss = 0
		}
		if k != "lossless" && r.IntN(2) == 0 || k == "reorder" {
			p.ReorderProb = 0.001 + 0.02*r.Float64()
			p.ReorderDelay = ms(1, 4)
		}
		if k != "lossless" && r.IntN(3) == 0 {
			p.Jitter = time.Duration(r.IntN(200)) * time.Microsecond
		}
		p.Reconfigure = r.IntN(3)
		ps = append(ps, p)
	}
	ps = append(ps, Phase{Name: "quiesce", Quiesce: true, Light: true})
	bad := Phase{Name: "bad-minute", Bad: true, Light: true, Loss: 0.15}
	if r.IntN(2) == 0 {
		bad.Dur = time.Duration(40+r.IntN(16)) * time.Second // trips, never closes
	} else {
		bad.Dur = time.Duration(62+r.IntN(6)) * time.Second // trips, then CLOSE reason 4
	}
	if r.IntN(3) == 0 {
		bad.Burst = 2 + 2*r.Float64()
	}
	ps = append(ps, bad)
	ps = append(ps, Phase{Name: "after", Dur: ms(15000, 16000), Light: true, Probe: ProtectionDeadline + 500*time.Millisecond,
		Reconfigure: 1 + r.IntN(2)})
	ps = append(ps, Phase{Name: "drain", Drain: true})
	return ps
}
