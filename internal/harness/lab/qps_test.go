package lab

import (
	"context"
	"testing"
	"time"

	"github.com/crem-project/crem/internal/testenv"
	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/policy"
)

// TestCREMRestoresEveryQP: a run's messages go over four QPs between the same two hosts,
// each with its own initial PSNs, and one protect rule per direction covers them all (many QPs
// between one pair of hosts, as deployments run them). Every message of every QP is verified; the path lost
// packets of every QP; without CREM none of a QP's packets lost every time it was sent arrives
// (restored_only 0, which checks the measure), and in both CREM runs the CRF restored packets
// on every QP. With one repair symbol per block to start with and 3 percent loss, blocks need
// coded retransmissions, which a CSF can send only while it holds the block's sources (C9: an
// ACK of another QP must not release them): at least a quarter of the REPAIR_REQUESTs name a
// block still held. (Measured: when every ACK between the hosts released every flow's sources,
// 77 of 88 and 86 of 99 named a block already released; with the reverse QP unknown, so that
// ACKs release nothing, 9 of 86 and 18 of 86, the requests for PSNs relayed before the flow's
// first configuration among them; with the purego codec on a loaded machine, 14 of 23 for
// crem+gbn, whose go-back-N retransmissions had delivered and acknowledged the blocks first.) The gateways run the draft's rule, which repairs every block: the
// cost rule repairs a message's critical tail only (P9), and a QP whose tail lost nothing then
// restores nothing, protected or not.
func TestCREMRestoresEveryQP(t *testing.T) {
	loss, _ := netem.ParseLossSpec("0.03")
	o := Options{RTT: 4 * time.Millisecond, Loss: loss, Rate: 200e6, Messages: 8, Size: 512 << 10, MTU: 1024, QPs: 4,
		M: 1, Rule: string(policy.RuleDraft), Seed: 3, Runs: []string{"tcaeth", "crem+gbn", "crem+tcaeth"}, Timeout: 30 * time.Second,
		RetryCount: stallRetries}
	res, err := Lab(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Runs {
		t.Logf("%s: %+v", r.Name, r)
		if !r.Verified || r.QPs != 4 || len(r.PerQP) != 4 {
			t.Fatalf("%s: verified %v (%s), %d QPs, %d per QP", r.Name, r.Verified, r.Error, r.QPs, len(r.PerQP))
		}
		psns := map[uint32]bool{}
		var lost, only uint64
		for i, q := range r.PerQP {
			psns[q.InitialPSN] = true
			lost += q.Lost
			only += q.RestoredOnly
			if q.QP != i || !q.Verified || q.Messages != 2 || q.Lost == 0 || q.MeanS <= 0 || q.MaxS < q.MeanS {
				t.Errorf("%s QP %d: %+v", r.Name, i, q)
			}
			switch {
			case r.Name == "tcaeth" && q.RestoredOnly != 0:
				t.Errorf("tcaeth QP %d: %d packets lost on every transmission arrived without CREM", i, q.RestoredOnly)
			case r.Name != "tcaeth" && q.RestoredOnly == 0 && !testenv.Race:
				// (The race detector slows the engines past the QPs' timers: a loss is
				// retransmitted before CREM restores it.)
				t.Errorf("%s QP %d: no packet restored (%d lost on the path, %d RDMA retransmissions)", r.Name, i, q.Lost, q.RDMARetx)
			}
		}
		if len(psns) != 4 || lost > r.Lost || only > r.Restored {
			t.Errorf("%s: initial PSNs %v; per QP %d lost of %d, %d restored only of %d restored", r.Name, psns, lost, r.Lost, only, r.Restored)
		}
		if r.Name != "tcaeth" && (r.RepairRequests == 0 || r.CodedRetx == 0 || 4*r.RequestsUnknownBlock > 3*r.RepairRequests) {
			t.Errorf("%s: %d REPAIR_REQUESTs, %d for blocks no longer held, %d coded retransmissions", r.Name,
				r.RepairRequests, r.RequestsUnknownBlock, r.CodedRetx)
		}
	}
}
