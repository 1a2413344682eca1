package csf

import (
	"testing"
	"time"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// BenchmarkSender measures the CSF's whole per-packet path (crem: Observe, block bookkeeping,
// encoding m = 4 repair symbols per k = 32 block with T = 1058, building the REPAIR messages,
// Drain) against the bare encoding cost per packet (encode-only), in one run.
func BenchmarkSender(b *testing.B) {
	const k, m, T, payload = 32, 4, 1058, 1024
	b.Run("crem", func(b *testing.B) {
		s := newSender(b, WithConfig(wire.SchemeCauchy, k, m, T), WithAdaptation(false), WithRepairFraction(1))
		establish(b, s, 0, 0xBEEF)
		pkt := packet(0, payload)
		sink := 0
		out := func(d flow.Datagram) { sink += len(d.Payload) }
		now := time.Duration(0)
		b.SetBytes(int64(len(pkt)))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			setPSN(pkt, psn.PSN(i))
			now += time.Microsecond
			s.Observe(now, pkt)
			s.Drain(out)
		}
		if st := s.Stats(); b.N >= 2*k && st.RepairSent == 0 {
			b.Fatalf("no repair sent: %+v", st)
		}
	})
	b.Run("encode-only", func(b *testing.B) {
		enc, err := fec.NewEncoder()
		if err != nil {
			b.Fatal(err)
		}
		src := make([][]byte, k)
		for j := range src {
			src[j], _ = fec.AppendSymbol(nil, packet(psn.PSN(j), payload), T)
		}
		dst := make([][]byte, m)
		for r := range dst {
			dst[r] = make([]byte, T)
		}
		idx := []int{0, 1, 2, 3}
		all := psn.FirstK(k)
		b.SetBytes(int64(payload + 16))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if i%k == k-1 {
				if err := enc.Encode(dst, idx, all, src); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
