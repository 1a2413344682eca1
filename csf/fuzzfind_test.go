package csf

import (
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// Regression tests for what FuzzSender found; each names the corpus entry under
// testdata/fuzz/FuzzSender that found it.

// A packet whose PSN lies exactly half the PSN space from the next one expected is neither
// ahead nor behind. Taken for a new source, it skipped 2^23 PSNs and opened a block out of the
// order find relies on, and the flow's next genuine source skipped 2^23 - 1 more (E32: far from
// the flow's PSNs is a retransmission or a new PSN space, never a jump ahead). Corpus entry
// 7fe054ab798d84a4.
func TestHalfSpacePSNIsNotASourceFuzz(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 8, 2, 0))
	establish(t, s, 0, 3)
	for p := psn.PSN(0); p < 8; p++ {
		s.Observe(time.Millisecond, packet(p, 100))
	}
	s.Observe(time.Millisecond, packet(psn.PSN(8).Add(1<<23), 100))
	for p := psn.PSN(8); p < 16; p++ {
		s.Observe(time.Millisecond, packet(p, 100))
	}
	st := s.Stats()
	if st.Sources != 16 || st.Retransmissions != 1 || st.SkippedPSNs != 0 {
		t.Fatalf("sources %d, retransmissions %d, skipped PSNs %d; want 16, 1, 0", st.Sources, st.Retransmissions, st.SkippedPSNs)
	}
	if next, _ := s.NextPSN(); next != 16 {
		t.Fatalf("next PSN %v, want 16", next)
	}
	if i := s.find(12); i < 0 || s.blocks[i].start != 8 {
		t.Fatalf("PSN 12 found in slot %d, want the block at 8", i)
	}
}

// readPacket builds an RDMA READ request of dma octets at PSN p, sealed.
func readPacket(p psn.PSN, dma uint32) []byte {
	pk := roce.Packet{BTH: roce.BTH{OpCode: roce.OpReadRequest, DestQP: testFlow.DestQP, PSN: p},
		RETH: roce.RETH{DMALength: dma}}
	b, _ := pk.Append(nil)
	_ = testFlow.LogicalHeader().Seal(b)
	return b
}

// READ requests of 2 GiB at an RDMA MTU of 256 consume 2^23 PSNs each: after two, the flow's
// PSNs have wrapped past the block held before them. Kept, that block was taken for one ahead
// of the flow: a request for a PSN the second READ consumed found it and was answered with the
// old block's sources (REPAIR for PSNs 2^24 back), and no acknowledgement could release it.
// Blocks the flow's PSNs have moved half the space past are released (the RDMA window of
// outstanding PSNs is under half the space) and counted. Corpus entry 4b419fac120f7db8 (a READ
// whose DMA Length, beyond 2^31, consumed more than 2^22 PSNs at an MTU of 1024).
func TestBlocksFarBehindReleasedFuzz(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 8, 2, 0), WithRDMAMTU(256))
	establish(t, s, 0, 3)
	for p := psn.PSN(0); p < 4; p++ {
		s.Observe(time.Millisecond, packet(p, 100))
	}
	s.Observe(time.Millisecond, readPacket(4, 1<<31)) // block 0 closes full (k 8); next 4 + 2^23
	s.Observe(time.Millisecond, readPacket(psn.PSN(4).Add(1<<23), 1<<31))
	drain(s)
	if next, _ := s.NextPSN(); next != 4 {
		t.Fatalf("next PSN %v, want 4 (wrapped)", next)
	}
	if i := s.find(5); i >= 0 {
		t.Fatalf("PSN 5 (consumed by the second READ) found in the block at %v", s.blocks[i].start)
	}
	rr := wire.RepairRequest{FlowID: 3, RangeForm: true, RequestID: 9, Ranges: []psn.Range{{Start: 5, Count: 1}}}
	b, _ := rr.Append(nil)
	s.Handle(2*time.Millisecond, testCRF, b)
	for _, m := range drain(s) {
		if r, ok := m.(*wire.Repair); ok && !r.Info {
			t.Fatalf("answered PSN 5 with a symbol of the block at %v", r.BlockStartPSN)
		}
	}
	if st := s.Stats(); st.BlocksFarBehind != 1 {
		t.Fatalf("%d blocks released far behind, want 1", st.BlocksFarBehind)
	}
}
