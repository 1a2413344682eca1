package conform

import (
	"testing"

	"github.com/crem-project/crem/wire"
)

// FuzzParseAck: the lenient HELLO_ACK parser never panics, and what it accepts is a HELLO_ACK
// whose first 32 octets parse (the rest only padding its Length owns).
func FuzzParseAck(f *testing.F) {
	ack, _ := (&wire.HelloAck{FlowID: 7, Capabilities: wire.Capabilities{FlowKind: wire.FlowKindRoCEv2, MaxK: 8, MaxM: 2, MaxT: 64, RDMAMTU: 4096},
		AF: wire.AF4, SenderNonce: 9, MaxOpenBlocks: 4}).Append(nil)
	f.Add(ack)
	long := append(append([]byte(nil), ack...), make([]byte, 16)...)
	long[3] = byte(len(long))
	f.Add(long)
	f.Add([]byte{0x13, 0, 0, 8, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseAck(b)
		if err != nil {
			return
		}
		if len(b) < helloAckLen || m.SenderNonce != uint64(b[20])<<56|uint64(b[21])<<48|uint64(b[22])<<40|uint64(b[23])<<32|uint64(b[24])<<24|uint64(b[25])<<16|uint64(b[26])<<8|uint64(b[27]) {
			t.Fatalf("accepted %x as nonce %x", b, m.SenderNonce)
		}
	})
}

// FuzzDescribe: naming any datagram for the capture never panics.
func FuzzDescribe(f *testing.F) {
	f.Add([]byte{0x11, 0x80, 0, 0x2c, 0, 0, 0xbe, 0xef})
	f.Add([]byte{0x07, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 2})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if describe(b) == "" {
			t.Fatal("empty description")
		}
	})
}
