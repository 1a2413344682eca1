package csf

import (
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
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
