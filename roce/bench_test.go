package roce

import (
	"bytes"
	"hash/crc32"
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

// The ICRC's building blocks: the precomputed prefix state is the CRC of eight 0xFF octets,
// and the slicing-by-8 header CRC agrees with hash/crc32 at every length and offset.
func TestICRCPrefixAndSlicingC12(t *testing.T) {
	if got := ^crc32.ChecksumIEEE(bytes.Repeat([]byte{0xff}, 8)); got != prefixState {
		t.Errorf("state after eight 0xFF octets %#08x, constant %#08x", got, prefixState)
	}
	data := make([]byte, 200)
	for i := range data {
		data[i] = byte(i*131 + 7)
	}
	for start := range 9 {
		for end := start; end <= len(data); end++ {
			seed := uint32(start*end) * 0x9e3779b9
			want := crc32.Update(seed, crc32.IEEETable, data[start:end])
			if got := ^crcUpdate(^seed, data[start:end]); got != want {
				t.Fatalf("[%d:%d]: %#08x, hash/crc32 %#08x", start, end, got, want)
			}
		}
	}
}
