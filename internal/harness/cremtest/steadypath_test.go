package cremtest

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// steadyRun is what a steady path did to the configuration in a virtual minute.
type steadyRun struct {
	sent, proposed, refused, retried uint64 // PARAM_UPDATEs sent (with copies), proposed (Config IDs), refused
	configsFull                      uint64 // the CRF's refusals for want of a configuration slot
	retired, unknownConfig           uint64 // configurations the CRF retired for room (E81), REPAIRs it dropped for an unknown configuration
	deferred, olderHeld              uint64 // the CSF's waits for older blocks, and proposals made with one still held (E80)
	applied                          uint64
	restored, lost                   int
	ms                               []int // the m in force after each change
}

// runSteadyPath plays a minute of a steady path: 10 ms each way, independent loss of every
// datagram toward the CRF at loss, the packet rate of 40 Mbit/s in 4 KiB packets (1,220 a second,
// in 1 KiB packets here: the CRF's window is counted in packets, the codec's work in octets), the
// gateway's policy (k 32, first m 4, epsilon 1e-4, rho 0.01, Max k 64, Max Open Blocks 64) under
// rule. The RDMA receiver acknowledges every 16th packet (its ACK passes the CSF one RTT after the
// packet was sent), so the CSF releases blocks as a real flow's do.
func runSteadyPath(t *testing.T, rule policy.Rule, loss float64, seed uint64, d time.Duration) steadyRun {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	p, err := NewPair(Config{Delay: 10 * time.Millisecond, Seed: seed,
		Sender: []csf.Option{csf.WithConfig(wire.SchemeCauchy, 32, 4, 0), csf.WithRDMAMTU(1024),
			csf.WithPolicy(1e-4, 0.01), csf.WithRule(rule), csf.WithReverseQP(0x22),
			csf.WithInitialRTT(10 * time.Millisecond), csf.WithPathRate(40e6, true)}})
	if err != nil {
		t.Fatal(err)
	}
	p.Link.Filter = func(pk *Packet) Fate {
		return Fate{Drop: pk.Dir == Forward && rng.Float64() < loss}
	}
	p.Start()
	p.RunFor(50 * time.Millisecond)
	if p.Sender.State() != csf.StateEstablished {
		t.Fatalf("seed %d: no session", seed)
	}
	const gap = 820 * time.Microsecond
	end := p.Clock.Now() + d
	var first psn.PSN = p.Synth.PSN
	for i := 0; p.Clock.Now() < end; i++ {
		p.Send(p.Synth.Next(1024))
		// The ACK of the packet sent 10 ms ago leaves the RDMA receiver now.
		if back := 13; i%16 == 0 && i >= back {
			p.Ack(p.Synth.PSN.Add(-back - 1))
		}
		p.RunFor(gap)
	}
	p.RunFor(time.Second)
	ss, rs := p.Sender.Stats(), p.Receiver.Stats()
	run := steadyRun{sent: ss.ParamUpdateSent, proposed: ss.ParamUpdateSent - ss.ParamUpdateRetransmitted,
		refused: ss.ParamRejected, retried: ss.ParamRetried, configsFull: rs.ConfigsFull, applied: ss.ConfigsApplied,
		retired: rs.ConfigsRetired, deferred: ss.ParamDeferred, olderHeld: ss.ParamOlderBlocksHeld}
	if fs, ok := p.Receiver.FlowStats(p.FlowID()); ok {
		run.unknownConfig = fs.RepairUnknownConfig
	}
	for _, k := range p.Sender.KMTimeline() {
		run.ms = append(run.ms, k.M)
	}
	for q := first; q != p.Synth.PSN; q = q.Add(1) {
		o := p.Outcomes[q]
		switch {
		case o == nil || o.Received+o.Restored == 0:
			run.lost++
		case o.Received == 0:
			run.restored++
		}
	}
	return run
}

// TestSteadyPathKeepsItsConfiguration: a steady path (3 percent independent loss, 20 ms RTT) keeps
// its configuration for a virtual minute under both rules, and no PARAM_UPDATE is refused. Before
// P15, E80 and E81 the draft's rule proposed 131 to 136 configurations in this minute (m moving
// between 5 and 9 with each LOSS_REPORT), and the CRF refused 82 to 84 of them for want of a
// configuration slot: it keeps a configuration until its blocks are behind the window (E44),
// 4,096 packets, 3.4 s at this rate, and it has four. Now: the draft's rule 10 to 15 (the first
// configuration among them; seeds 1 to 8), bounded by 20; the cost rule 2, bounded by 3 (the
// first, and at most two changes, as P12's bound).
func TestSteadyPathKeepsItsConfiguration(t *testing.T) {
	bound := map[policy.Rule]uint64{policy.RuleDraft: 20, policy.RuleCost: 3}
	for _, rule := range []policy.Rule{policy.RuleDraft, policy.RuleCost} {
		t.Run(string(rule), func(t *testing.T) {
			for _, seed := range []uint64{1, 2, 3, 4} {
				r := runSteadyPath(t, rule, 0.03, seed, time.Minute)
				t.Logf("%v seed %d: %+v", rule, seed, r)
				if r.proposed > bound[rule] || r.refused != 0 || r.configsFull != 0 || r.lost > r.restored/20 {
					t.Errorf("%v seed %d: %d configurations proposed (want at most %d), %d refused, %d for want of a slot; %d restored, %d lost",
						rule, seed, r.proposed, bound[rule], r.refused, r.configsFull, r.restored, r.lost)
				}
			}
		})
	}
}
