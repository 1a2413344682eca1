package soak

import (
	"sort"
	"time"

	"github.com/crem-project/crem/rc"
)

// Minimal returns a scenario of one QP per mode given, a 2 ms path, a short clean warm-up, one
// clean phase of d and the drain, and no work: a reproduction adds its Script and changes what
// it needs (K9). Its QPs start their PSNs at 0x123456 and pace at 1 Gbit/s.
func Minimal(seed uint64, d time.Duration, modes ...rc.Mode) *Scenario {
	s := &Scenario{Seed: seed, RTT: 2 * time.Millisecond, MTU: 4096, K: 16, M: 2, MaxK: 64, MaxM: 16,
		MaxOpenBlocks: 64, Routing: RouteConfigured, MaxOp: 1 << 30, Budget: 1 << 40}
	for i, m := range modes {
		s.QPs = append(s.QPs, QPSpec{Mode: m, QPNA: uint32(0x100 + 2*i), QPNB: uint32(0x101 + 2*i),
			PortA: uint16(49152 + 2*i), PortB: uint16(49153 + 2*i), SendPSN: 0x123456, BackPSN: 0x654321,
			Rate: 1e9, Depth: 4})
	}
	s.Phases = []Phase{{Name: "warm-up", Dur: 50 * time.Millisecond}, {Name: "lossless", Dur: d}, {Name: "drain", Drain: true}}
	return s
}

// every returns requests of op and size on qp every gap from first to last.
func every(qp int, op rc.Op, size int, first, gap, last time.Duration) []ScriptOp {
	var out []ScriptOp
	for t := first; t <= last; t += gap {
		out = append(out, ScriptOp{At: t, QP: qp, Op: op, Size: size})
	}
	return out
}

func script(ops ...[]ScriptOp) []ScriptOp {
	var out []ScriptOp
	for _, o := range ops {
		out = append(out, o...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// Reproductions are the shortest scenarios found for faults the workload found in the engines,
// by name, each with what went wrong before it was fixed; they pass now, and
// TestReproductions keeps them passing. `go test ./internal/harness/soak -run TestWorkload -repro NAME -v` runs
// one with its log.
var Reproductions = map[string]func() *Scenario{
	// One QP: WRITE, READ, WRITE, READ on a clean path. The CRF beside A counts the WRITE PSNs
	// between the READs' responses as expected (fixed by crf E42, E43 and
	// csf E29).
	"read-gaps": func() *Scenario {
		s := Minimal(1, 500*time.Millisecond, rc.ModeSR)
		s.Script = script(every(0, rc.OpWrite, 3*4096, 20*time.Millisecond, 100*time.Millisecond, 420*time.Millisecond),
			every(0, rc.OpRead, 2*4096, 21*time.Millisecond, 100*time.Millisecond, 421*time.Millisecond))
		return s
	},
	// One QP, MTU 1024, Max Open Blocks 16 (a CRF window of 1024 PSNs): a READ of 2 MiB (2048
	// PSNs) between two WRITEs on a clean path. The CRF beside B counted the READ's PSNs beyond
	// its window as expected and lost (crf E40).
	"read-beyond-window": func() *Scenario {
		s := Minimal(1, 500*time.Millisecond, rc.ModeSR)
		s.MTU, s.MaxOpenBlocks = 1024, 16
		s.Script = []ScriptOp{{At: 20 * time.Millisecond, QP: 0, Op: rc.OpWrite, Size: 1024},
			{At: 100 * time.Millisecond, QP: 0, Op: rc.OpRead, Size: 2 << 20},
			{At: 300 * time.Millisecond, QP: 0, Op: rc.OpWrite, Size: 1024},
			{At: 310 * time.Millisecond, QP: 0, Op: rc.OpWrite, Size: 4096}}
		return s
	},
	// A go-back-N QP, whose CRF delivers in order (C7 a), MTU 1024, Max Open Blocks 16: a READ
	// of 5 MiB (5120 PSNs, five windows) and at once a READ of 1 KiB behind it. The CRF beside B
	// held the second READ and never released it, and held every retransmission of it too, so
	// the QP stalled until the CSF closed the flow as idle 30 s later (crf E40, E50).
	"gbn-stall": func() *Scenario {
		s := Minimal(1, 35*time.Second, rc.ModeGBN)
		s.MTU, s.MaxOpenBlocks = 1024, 16
		s.Script = []ScriptOp{{At: 20 * time.Millisecond, QP: 0, Op: rc.OpWrite, Size: 1024},
			{At: 100 * time.Millisecond, QP: 0, Op: rc.OpRead, Size: 5 << 20},
			{At: 101 * time.Millisecond, QP: 0, Op: rc.OpRead, Size: 1024}}
		return s
	},
	// One sr QP, MTU 1024, k 16, m 2, a 5 ms path losing 4 percent in bursts of 3, a READ of
	// 41947 octets every 3 ms: a re-sent READ response (FIRST where the original was MIDDLE)
	// joined a block's decoding, and the packet restored from it carried a valid ICRC and wrong
	// data, which the requester placed (RULINGS C12; crf E46, E48; rc R27).
	"read-wrong-data": func() *Scenario {
		s := Minimal(2, 0, rc.ModeSR)
		s.MTU, s.RTT = 1024, 5*time.Millisecond
		s.Phases = []Phase{{Name: "warm-up", Dur: 50 * time.Millisecond},
			{Name: "bursty", Dur: time.Second, Loss: 0.04, Burst: 3}, {Name: "drain", Drain: true}}
		s.Script = every(0, rc.OpRead, 41947, 20*time.Millisecond, 3*time.Millisecond, 950*time.Millisecond)
		return s
	},
	// One sr QP starting at m = 0, a WRITE of 256 KiB every 5 ms, 3 percent loss each way: the
	// policy raises m (a change away from m = 0), and the CRF dropped the coded retransmissions
	// of the blocks of the first configuration, which it had released (crf
	// E44).
	"change-from-m0": func() *Scenario {
		s := Minimal(1, 0, rc.ModeSR)
		s.M = 0
		s.Phases = []Phase{{Name: "warm-up", Dur: 50 * time.Millisecond},
			{Name: "bernoulli", Dur: time.Second, Loss: 0.03}, {Name: "drain", Drain: true}}
		s.Script = every(0, rc.OpWrite, 256<<10, 20*time.Millisecond, 5*time.Millisecond, time.Second)
		return s
	},
	// The same at m = 2: a block got a block-form REPAIR_REQUEST and two PSN-range requests
	// answered with coded retransmissions of it, three coded rounds (crf E45,
	// csf E34).
	"three-rounds": func() *Scenario {
		s := Minimal(1, 0, rc.ModeSR)
		s.Phases = []Phase{{Name: "warm-up", Dur: 50 * time.Millisecond},
			{Name: "bernoulli", Dur: time.Second, Loss: 0.03}, {Name: "drain", Drain: true}}
		s.Script = every(0, rc.OpWrite, 256<<10, 20*time.Millisecond, 5*time.Millisecond, time.Second)
		return s
	},
	// One selective-repeat QP, a WRITE of 64 KiB every 10 ms, 66 s of 15 percent loss: the
	// breaker never tripped. The LOSS_REPORTs said some 3 percent: a lost packet that the RDMA
	// transport resent, or whose original arrived after the CRF restored it, counted as
	// received (crf E42, E49).
	"breaker-blind": func() *Scenario {
		s := Minimal(1, 0, rc.ModeSR)
		s.Phases = []Phase{{Name: "warm-up", Dur: 50 * time.Millisecond},
			{Name: "bad-minute", Dur: 66 * time.Second, Loss: 0.15, Bad: true, Light: true},
			{Name: "after", Dur: 15 * time.Second}, {Name: "drain", Drain: true}}
		s.Script = every(0, rc.OpWrite, 64<<10, 20*time.Millisecond, 10*time.Millisecond, 80*time.Second)
		return s
	},
	// One QP, MTU 1024, READs of 64 KiB on a path losing 3 percent each way: a READ response
	// re-sent after a re-issued READ differs from the original (its AETH MSN, First instead of
	// Middle); the CRF beside A decoded with it, and the packets it restored failed their ICRC
	// (crf E46, E48).
	"read-resent-differs": func() *Scenario {
		s := Minimal(1, 0, rc.ModeSR)
		s.MTU = 1024
		s.Phases = []Phase{{Name: "warm-up", Dur: 50 * time.Millisecond},
			{Name: "bernoulli", Dur: 3 * time.Second, Loss: 0.03}, {Name: "drain", Drain: true}}
		s.Script = every(0, rc.OpRead, 64<<10, 20*time.Millisecond, 5*time.Millisecond, 2900*time.Millisecond)
		return s
	},
}
