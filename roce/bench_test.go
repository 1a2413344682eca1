package roce

import (
	"bytes"
	"testing"
)

// BenchmarkICRC computes the ICRC of a 4 KiB-payload RDMA WRITE under a real IPv4 header, a
// real IPv6 header and the relay's logical header (which builds its header first).
func BenchmarkICRC(b *testing.B) {
	p := samplePacket(OpWriteMiddle, bytes.Repeat([]byte{0xa5}, 4096))
	pkt, _ := p.Append(nil)
	body := pkt[:len(pkt)-ICRCLen]
	h4, _ := v4Flow.AppendIPUDP(nil, len(pkt))
	h6, _ := v6Flow.AppendIPUDP(nil, len(pkt))
	run := func(name string, f func() (uint32, error)) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(pkt)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	run("4KiB/IPv4", func() (uint32, error) { return ICRC(h4[:20], h4[20:], body) })
	run("4KiB/IPv6", func() (uint32, error) { return ICRC(h6[:40], h6[40:], body) })
	run("4KiB/logical-IPv4", func() (uint32, error) { return v4Flow.ICRC(body) })
	small := pkt[:BTHLen]
	run("BTH-only/IPv4", func() (uint32, error) { return ICRC(h4[:20], h4[20:], small) })
}
