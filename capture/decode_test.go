package capture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// withIPv4Options rebuilds an Ethernet/IPv4 frame with n words of IPv4 options (NOPs).
func withIPv4Options(t *testing.T, eth []byte, words int) []byte {
	t.Helper()
	ip := eth[14:]
	out := append([]byte{}, eth[:14]...)
	hdr := append([]byte{}, ip[:20]...)
	hdr[0] = 0x45 + byte(words)
	binary.BigEndian.PutUint16(hdr[2:], binary.BigEndian.Uint16(hdr[2:])+uint16(4*words))
	hdr = append(hdr, bytes.Repeat([]byte{1}, 4*words)...)
	out = append(out, hdr...)
	return append(out, ip[20:]...)
}

// withIPv6Extensions inserts extension headers (each 8 octets, given by next-header value)
// between the IPv6 header and UDP of an Ethernet/IPv6 frame.
func withIPv6Extensions(t *testing.T, eth []byte, kinds ...byte) []byte {
	t.Helper()
	ip := eth[14:]
	hdr := append([]byte{}, ip[:40]...)
	plen := binary.BigEndian.Uint16(hdr[4:])
	binary.BigEndian.PutUint16(hdr[4:], plen+uint16(8*len(kinds)))
	var ext []byte
	for i, k := range kinds {
		next := byte(17)
		if i+1 < len(kinds) {
			next = kinds[i+1]
		}
		e := make([]byte, 8)
		e[0] = next
		if k == 51 {
			e[1] = 0 // AH length in 4-octet units minus 2: 8 octets
		}
		ext = append(ext, e...)
	}
	if len(kinds) > 0 {
		hdr[6] = kinds[0]
	}
	out := append(append(append([]byte{}, eth[:14]...), hdr...), ext...)
	return append(out, ip[40:40+int(plen)]...)
}

// Section 6 (pcap verify finds RoCEv2 over IPv4 and IPv6 with VLAN tags): Ethernet with zero to
// three VLAN tags, IPv4 with and without options, IPv6 with and without extension headers, and
// the other link types, all yield the IP header, UDP header and payload, link padding cut off.
func TestDecodeUDPFindsTheDatagramSection6(t *testing.T) {
	payload := []byte("RoCE!")
	v4 := FrameHeader{SrcMAC: macA, DstMAC: macB, Src: v4A, Dst: v4B}
	v6 := FrameHeader{SrcMAC: macA, DstMAC: macB, Src: v6A, Dst: v6B}
	cases := []struct {
		name  string
		link  LinkType
		frame []byte
		vlans int
		ipLen int
	}{
		{"IPv4", LinkEthernet, frame(t, v4, payload), 0, 20},
		{"IPv4 one VLAN", LinkEthernet, frame(t, FrameHeader{Src: v4A, Dst: v4B, VLANs: []uint16{100}}, payload), 1, 20},
		{"IPv4 Q-in-Q", LinkEthernet, frame(t, FrameHeader{Src: v4A, Dst: v4B, VLANs: []uint16{10, 20}}, payload), 2, 20},
		{"IPv4 three tags", LinkEthernet, frame(t, FrameHeader{Src: v4A, Dst: v4B, VLANs: []uint16{1, 2, 3}}, payload), 3, 20},
		{"IPv4 options", LinkEthernet, withIPv4Options(t, frame(t, v4, payload), 3), 0, 32},
		{"IPv6", LinkEthernet, frame(t, v6, payload), 0, 40},
		{"IPv6 VLAN", LinkEthernet, frame(t, FrameHeader{Src: v6A, Dst: v6B, VLANs: []uint16{7}}, payload), 1, 40},
		{"IPv6 extensions", LinkEthernet, withIPv6Extensions(t, frame(t, v6, payload), 0, 60, 43, 44, 51), 0, 80},
		{"raw IPv4", LinkRaw, frame(t, v4, payload)[14 : 14+20+8+len(payload)], 0, 20},
		{"raw IPv6 (DLT 12)", LinkRawDLT12, frame(t, v6, payload)[14:], 0, 40},
		{"IPv4 link type", LinkIPv4, frame(t, v4, payload)[14:], 0, 20},
		{"IPv6 link type", LinkIPv6, frame(t, v6, payload)[14:], 0, 40},
		{"Linux SLL", LinkLinuxSLL, append(append(make([]byte, 14), 0x86, 0xdd), frame(t, v6, payload)[14:]...), 0, 40},
		{"Linux SLL2", LinkLinuxSLL2, append(append([]byte{0x08, 0}, make([]byte, 18)...), frame(t, v4, payload)[14:]...), 0, 20},
	}
	for _, c := range cases {
		d, err := DecodeUDP(c.link, c.frame)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		src, dst := v4A, v4B
		if d.IPVersion() == 6 {
			src, dst = v6A, v6B
		}
		if !bytes.Equal(d.Payload, payload) || d.VLANs != c.vlans || len(d.IPHeader) != c.ipLen || len(d.UDPHeader) != 8 || d.Src != src || d.Dst != dst {
			t.Errorf("%s: %+v", c.name, d)
		}
	}
}

// Section 6: frames that carry no UDP are skipped cheaply; fragments, truncated frames and
// malformed headers are told apart; nothing panics.
func TestDecodeUDPRefusesSection6(t *testing.T) {
	v4 := frame(t, FrameHeader{Src: v4A, Dst: v4B}, []byte("0123456789"))
	v6 := frame(t, FrameHeader{Src: v6A, Dst: v6B}, []byte("0123456789"))
	set := func(b []byte, i int, v ...byte) []byte {
		b = append([]byte{}, b...)
		copy(b[i:], v)
		return b
	}
	cases := []struct {
		name  string
		link  LinkType
		frame []byte
		want  error
	}{
		{"ARP", LinkEthernet, set(v4, 12, 0x08, 0x06), ErrNotUDP},
		{"TCP", LinkEthernet, set(v4, 14+9, 6), ErrNotUDP},
		{"IPv6 ICMP", LinkEthernet, set(v6, 14+6, 58), ErrNotUDP},
		{"IPv4 more fragments", LinkEthernet, set(v4, 14+6, 0x20), ErrFragment},
		{"IPv4 later fragment", LinkEthernet, set(v4, 14+6, 0x40, 0x10), ErrFragment},
		{"IPv6 later fragment", LinkEthernet, func() []byte {
			f := withIPv6Extensions(t, v6, 44)
			return set(f, 14+40+2, 0x00, 0x08)
		}(), ErrFragment},
		{"short Ethernet", LinkEthernet, v4[:13], ErrTruncated},
		{"VLAN tag cut", LinkEthernet, frame(t, FrameHeader{Src: v4A, Dst: v4B, VLANs: []uint16{1}}, nil)[:16], ErrTruncated},
		{"IPv4 cut", LinkEthernet, v4[:14+19], ErrTruncated},
		{"IPv4 total length beyond frame", LinkEthernet, set(v4, 14+2, 0x05, 0xdc), ErrTruncated},
		{"IPv4 IHL 4", LinkEthernet, set(v4, 14, 0x44), ErrMalformed},
		{"IPv4 version 6 under 0x0800", LinkEthernet, set(v4, 14, 0x65), ErrMalformed},
		{"UDP length 7", LinkEthernet, set(v4, 14+20+4, 0, 7), ErrMalformed},
		{"UDP length beyond IP", LinkEthernet, set(v4, 14+20+4, 0, 99), ErrTruncated},
		{"IPv6 cut", LinkEthernet, v6[:14+39], ErrTruncated},
		{"IPv6 jumbogram", LinkEthernet, set(v6, 14+4, 0, 0), ErrMalformed},
		{"IPv6 extension overruns", LinkEthernet, func() []byte {
			f := withIPv6Extensions(t, v6, 60)
			return set(f, 14+40+1, 200)
		}(), ErrTruncated},
		{"raw empty", LinkRaw, nil, ErrTruncated},
		{"raw not IP", LinkRaw, []byte{0x10, 0, 0}, ErrNotUDP},
		{"SLL cut", LinkLinuxSLL, make([]byte, 15), ErrTruncated},
		{"SLL2 cut", LinkLinuxSLL2, make([]byte, 19), ErrTruncated},
		{"802.11", LinkType(105), v4, ErrUnsupportedLink},
	}
	for _, c := range cases {
		if _, err := DecodeUDP(c.link, c.frame); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// Decoding allocates nothing, whether it finds UDP or skips the frame.
func TestDecodeUDPAllocatesNothingSection6(t *testing.T) {
	v6 := frame(t, FrameHeader{Src: v6A, Dst: v6B, VLANs: []uint16{1, 2}}, make([]byte, 1000))
	tcp := frame(t, FrameHeader{Src: v4A, Dst: v4B}, nil)
	tcp[14+9] = 6
	n := testing.AllocsPerRun(100, func() {
		if _, err := DecodeUDP(LinkEthernet, v6); err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeUDP(LinkEthernet, tcp); err != ErrNotUDP {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("%v allocations per decode", n)
	}
}
