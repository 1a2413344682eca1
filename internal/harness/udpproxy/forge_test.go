package udpproxy

import (
	"bytes"
	"testing"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

func repairBytes(t *testing.T, start psn.PSN, index uint8) []byte {
	t.Helper()
	m := wire.Repair{FlowID: 0x1234, ConfigID: 3, Scheme: wire.SchemeCauchy, K: 8, RepairIndex: index,
		BlockStartPSN: start, Present: psn.FirstK(8), Symbol: bytes.Repeat([]byte{0xab}, 64)}
	b, err := m.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestForgerDefinesEachBlockAnotherWay: the forger answers the first REPAIR of each block, and
// only that, with one of the same flow and configuration that defines a block another way (by
// turns: a present position cleared, the next block's with half its k, half its k), with other
// symbol octets; anything that is not a REPAIR passes untouched.
func TestForgerDefinesEachBlockAnotherWay(t *testing.T) {
	f := newForger(1)
	if f.forge([]byte{0x40, 0, 0, 0}) != nil || f.forge(nil) != nil {
		t.Error("forged against a datagram that is not a REPAIR")
	}
	for i := range 6 {
		start := psn.PSN(0xfffff0).Add(8 * i) // across the wrap
		genuine := repairBytes(t, start, 8)
		b := f.forge(genuine)
		if b == nil {
			t.Fatalf("block %d: nothing forged", i)
		}
		if f.forge(repairBytes(t, start, 9)) != nil {
			t.Errorf("block %d: forged again for its second REPAIR", i)
		}
		m, err := wire.ParseRepair(b)
		if err != nil {
			t.Fatalf("block %d: the forgery does not parse: %v", i, err)
		}
		if m.FlowID != 0x1234 || m.ConfigID != 3 || len(m.Symbol) != 64 || bytes.Equal(m.Symbol, bytes.Repeat([]byte{0xab}, 64)) {
			t.Errorf("block %d: forged flow %#x config %d symbol %x", i, m.FlowID, m.ConfigID, m.Symbol[:4])
		}
		var want string
		switch {
		case m.BlockStartPSN == start.Add(8) && m.K == 4 && m.Present == psn.FirstK(4):
			want = "next block, half k"
		case m.BlockStartPSN == start && m.K == 8 && m.Present.Count() == 7:
			want = "a position cleared"
		case m.BlockStartPSN == start && m.K == 4 && m.Present == psn.FirstK(4):
			want = "half k"
		default:
			t.Errorf("block %d: the forgery defines start %v k %d present %d as the genuine does", i, m.BlockStartPSN, m.K, m.Present.Count())
		}
		if kinds := []string{"a position cleared", "next block, half k", "half k"}; want != "" && want != kinds[i%3] {
			t.Errorf("block %d: forged %q, want %q by turns", i, want, kinds[i%3])
		}
		if !bytes.Equal(genuine, repairBytes(t, start, 8)) {
			t.Errorf("block %d: the genuine datagram changed", i)
		}
	}
	if len(f.seen) != 6 {
		t.Errorf("%d blocks remembered, want 6", len(f.seen))
	}
}
