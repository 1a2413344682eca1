package csf

import (
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// The policy's proposal waits while the CSF holds a block of a configuration before the one in
// force (E80): the CRF, its configuration slots full, retires every configuration older than the
// one in force to make room (E81). The wait ends when the RDMA transport acknowledges those
// blocks, or after two SRTT with one still held (counted).
func TestProposalWaitsForOlderBlocks(t *testing.T) {
	for _, acked := range []bool{true, false} {
		s := newSender(t, WithConfig(wire.SchemeCauchy, 8, 1, 0), WithInitialRTT(10*time.Millisecond))
		establish(t, s, 0, 3)
		now := time.Millisecond
		next := psn.PSN(0x100)
		send := func(n int) {
			for range n {
				s.Observe(now, packet(next, 200))
				next = next.Add(1)
			}
		}
		send(16) // two blocks of configuration 1
		report := func(lost uint32) []*wire.ParamUpdate {
			now += 10 * time.Millisecond
			lossReport(t, s, now, 10000, 10000-lost, 0, 0, 10*time.Millisecond)
			return paramUpdates(drain(s))
		}
		var pu []*wire.ParamUpdate
		for i := 0; i < 4 && len(pu) == 0; i++ {
			pu = report(500) // 5 percent: a raise
		}
		if len(pu) != 1 || pu[0].ConfigID != 2 {
			t.Fatalf("no raise proposed: %+v", pu)
		}
		paramAck(s, now, 3, 2, wire.StatusAccepted)
		for n := 0; n < 4096; n++ {
			if c, _ := s.Config(); c.ID == 2 {
				break
			}
			send(1)
		}
		if c, _ := s.Config(); c.ID != 2 {
			t.Fatalf("configuration 2 not in force: %+v", c)
		}
		first := s.Stats()
		// 12 percent: the rule wants more once the estimate follows, but blocks of configuration 1
		// are held.
		for i := 0; i < 40 && s.Stats().ParamDeferred == first.ParamDeferred; i++ {
			if pu := report(1200); len(pu) != 0 {
				t.Fatalf("acked %v: proposed %+v while blocks of configuration 1 were held", acked, pu)
			}
		}
		if s.Stats().ParamDeferred == first.ParamDeferred {
			t.Fatalf("acked %v: no wait counted", acked)
		}
		if acked {
			s.Acknowledge(next.Add(-1)) // every closed block goes, configuration 1's among them
			if pu := report(1200); len(pu) != 1 || pu[0].ConfigID != 3 || s.Stats().ParamOlderBlocksHeld != 0 {
				t.Fatalf("no proposal once the older blocks were acknowledged: %+v, %+v", pu, s.Stats())
			}
			continue
		}
		var got []*wire.ParamUpdate
		for i := 0; i < 4 && len(got) == 0; i++ {
			got = report(1200)
		}
		if len(got) != 1 || got[0].ConfigID != 3 || s.Stats().ParamOlderBlocksHeld != 1 {
			t.Fatalf("no proposal after the wait: %+v, %+v", got, s.Stats())
		}
	}
}
