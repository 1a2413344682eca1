package xdp

import (
	"encoding/binary"
	"net/netip"
)

// The CREM port the tests use (there is no default: the operator picks one).
const cremPort = 61234

var (
	macA = [6]byte{0x02, 0, 0, 0, 0, 0x0a}
	macB = [6]byte{0x02, 0, 0, 0, 0, 0x0b}
)

// rocePayload is a RoCEv2-shaped UDP payload: the BTH of an RC SEND only to qp with PSN seq,
// then octets that depend on seq, then four octets of ICRC room.
func rocePayload(seq uint32, size int) []byte {
	b := make([]byte, size)
	b[0] = 0x04
	b[1] = 0x40
	binary.BigEndian.PutUint16(b[2:], 0xffff)
	binary.BigEndian.PutUint32(b[4:], 0x000123)
	binary.BigEndian.PutUint32(b[8:], seq&0xffffff)
	for i := 12; i < size; i++ {
		b[i] = byte(seq*7 + uint32(i))
	}
	return b
}

// udpFrame builds an Ethernet/IP/UDP frame from a to b with AppendUDP.
func udpFrame(src, dst string, dport uint16, payload []byte) []byte {
	f, err := AppendUDP(nil, Header{SrcMAC: macA, DstMAC: macB, Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst),
		SrcPort: 50000, DstPort: dport}, payload)
	if err != nil {
		panic(err)
	}
	return f
}

// testFrames are crafted frames and whether the program sends each to the socket (ports 4791
// and cremPort).
func testFrames() []struct {
	name     string
	frame    []byte
	redirect bool
} {
	v4 := udpFrame("10.0.0.1", "10.0.0.2", 4791, rocePayload(1, 64))
	v6 := udpFrame("fd00::1", "fd00::2", 4791, rocePayload(2, 64))
	mod := func(f []byte, fn func(b []byte) []byte) []byte {
		return fn(append([]byte(nil), f...))
	}
	// IPv4 with 4 octets of options (IHL 6): insert them after the 20-octet header.
	opts := mod(v4, func(b []byte) []byte {
		out := append(append(append([]byte(nil), b[:34]...), 1, 1, 1, 0), b[34:]...)
		out[14] = 0x46
		return out
	})
	// IPv6 with a hop-by-hop header (next header 0) before UDP.
	ext := mod(v6, func(b []byte) []byte {
		out := append(append(append([]byte(nil), b[:54]...), protoUDP, 0, 1, 4, 0, 0, 0, 0), b[54:]...)
		out[20] = 0
		return out
	})
	vlan := mod(v4, func(b []byte) []byte {
		return append(append(append([]byte(nil), b[:12]...), 0x81, 0x00, 0x00, 0x05), b[12:]...)
	})
	return []struct {
		name     string
		frame    []byte
		redirect bool
	}{
		{"ipv4 to 4791", v4, true},
		{"ipv4 to the CREM port", udpFrame("10.0.0.1", "10.0.0.2", cremPort, rocePayload(3, 100)), true},
		{"ipv4 with options to 4791", opts, true},
		{"ipv6 to 4791", v6, true},
		{"ipv6 to the CREM port", udpFrame("fd00::1", "fd00::2", cremPort, rocePayload(4, 40)), true},
		{"ipv4 to 5000", udpFrame("10.0.0.1", "10.0.0.2", 5000, rocePayload(5, 64)), false},
		{"ipv6 to 5000", udpFrame("fd00::1", "fd00::2", 5000, rocePayload(6, 64)), false},
		{"ipv4 from 4791 to 4790", mod(v4, func(b []byte) []byte {
			binary.BigEndian.PutUint16(b[34:], 4791)
			binary.BigEndian.PutUint16(b[36:], 4790)
			return b
		}), false},
		{"ipv4 tcp", mod(v4, func(b []byte) []byte { b[23] = 6; return b }), false},
		{"ipv4 first fragment", mod(v4, func(b []byte) []byte { b[20] = 0x20; return b }), false},
		{"ipv4 later fragment", mod(v4, func(b []byte) []byte { b[20], b[21] = 0, 8; return b }), false},
		{"ipv4 ihl 4", mod(v4, func(b []byte) []byte { b[14] = 0x44; return b }), false},
		{"ipv4 version 6", mod(v4, func(b []byte) []byte { b[14] = 0x65; return b }), false},
		{"ipv6 version 4", mod(v6, func(b []byte) []byte { b[14] = 0x40; return b }), false},
		{"ipv6 hop-by-hop then udp", ext, false},
		{"vlan-tagged ipv4 to 4791", vlan, false},
		{"arp", mod(v4[:42], func(b []byte) []byte { b[12], b[13] = 0x08, 0x06; return b }), false},
		{"ethernet header only", v4[:14], false},
		{"ipv4 cut in its header", v4[:30], false},
		{"ipv4 cut in the udp header", v4[:40], false},
		{"ipv4 with options cut in the udp header", opts[:44], false},
		{"ipv6 cut in its header", v6[:50], false},
		{"ipv6 cut in the udp header", v6[:60], false},
		{"ipv4 udp header only", v4[:42], true},
	}
}
