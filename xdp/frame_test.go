package xdp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
)

// TestParseUDP checks ParseUDP's verdict on each crafted frame against the program's intent,
// and the fields and payload it finds in the whole frames.
func TestParseUDP(t *testing.T) {
	for _, f := range testFrames() {
		d, err := ParseUDP(f.frame)
		match := (err == nil || errors.Is(err, ErrLength)) && (d.DstPort == 4791 || d.DstPort == cremPort)
		if match != f.redirect {
			t.Errorf("%s: parser match %v (err %v), want %v", f.name, match, err, f.redirect)
		}
	}
	pl := rocePayload(9, 80)
	for _, c := range []struct{ src, dst string }{{"10.1.2.3", "10.4.5.6"}, {"fd00::7", "fd00::8"}} {
		f := udpFrame(c.src, c.dst, 4791, pl)
		f = append(f, make([]byte, 10)...) // Ethernet padding after the datagram
		d, err := ParseUDP(f)
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		if d.Src != netip.MustParseAddr(c.src) || d.Dst != netip.MustParseAddr(c.dst) || d.SrcPort != 50000 || d.DstPort != 4791 ||
			d.SrcMAC != macA || d.DstMAC != macB || !bytes.Equal(d.Payload, pl) {
			t.Errorf("%s: parsed %+v", c.src, d)
		}
		if !d.Checksum() {
			t.Errorf("%s: checksums do not hold", c.src)
		}
		f[len(f)-11] ^= 1 // the payload's last octet
		if d, _ := ParseUDP(f); d.Checksum() {
			t.Errorf("%s: a flipped payload bit passes the checksum", c.src)
		}
	}
	if _, err := ParseUDP(udpFrame("10.0.0.1", "10.0.0.2", 4791, pl)[:60]); !errors.Is(err, ErrLength) {
		t.Errorf("datagram cut short: %v, want ErrLength", err)
	}
}

// TestAppendUDPChecksums checks AppendUDP's checksums against the kernel's rule (a header with
// its checksum sums to 0xffff), a zero checksum written as 0xffff, and its refusals.
func TestAppendUDPChecksums(t *testing.T) {
	for size := 0; size < 70; size++ {
		for _, a := range [][2]string{{"192.0.2.1", "198.51.100.2"}, {"2001:db8::1", "2001:db8::2"}} {
			f := udpFrame(a[0], a[1], 4791, rocePayload(uint32(size), size+12)[:size])
			d, err := ParseUDP(f)
			if err != nil || !d.Checksum() || len(d.Payload) != size {
				t.Fatalf("%s size %d: err %v, checksum %v", a[0], size, err, d.Checksum())
			}
			if d.Src.Is4() && binary.BigEndian.Uint16(d.IPHeader[2:]) != uint16(len(f)-14) {
				t.Errorf("IPv4 total length %d, frame %d", binary.BigEndian.Uint16(d.IPHeader[2:]), len(f))
			}
		}
	}
	if _, err := AppendUDP(nil, Header{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("fd00::1")}, nil); !errors.Is(err, ErrAddr) {
		t.Errorf("mixed families: %v", err)
	}
	if _, err := AppendUDP(nil, Header{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")}, make([]byte, 65530)); !errors.Is(err, ErrTooLong) {
		t.Errorf("65530 octets: %v", err)
	}
	buf := make([]byte, 0, 256)
	h := Header{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), DstPort: 4791}
	pl := make([]byte, 100)
	if n := testing.AllocsPerRun(100, func() { buf, _ = AppendUDP(buf[:0], h, pl) }); n != 0 {
		t.Errorf("AppendUDP into a buffer with room: %.1f allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseUDP(buf) }); n != 0 {
		t.Errorf("ParseUDP: %.1f allocations", n)
	}
}

// FuzzParseUDP: ParseUDP never panics, what it returns lies within the frame, and a datagram it
// finds rebuilt by AppendUDP parses back to the same addresses, ports and payload.
func FuzzParseUDP(f *testing.F) {
	for _, c := range testFrames() {
		f.Add(c.frame)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		d, err := ParseUDP(frame)
		if err != nil {
			return
		}
		if len(d.IPHeader)+udpLen+len(d.Payload) > len(frame)-ethLen {
			t.Fatalf("header %d and payload %d exceed a frame of %d", len(d.IPHeader), len(d.Payload), len(frame))
		}
		d.Checksum()
		h := Header{SrcMAC: d.SrcMAC, DstMAC: d.DstMAC, Src: d.Src, Dst: d.Dst, SrcPort: d.SrcPort, DstPort: d.DstPort}
		re, err := AppendUDP(nil, h, d.Payload)
		if err != nil {
			if d.Src.Is4In6() || d.Dst.Is4In6() {
				return // an IPv4-mapped IPv6 address: AppendUDP will not write those
			}
			t.Fatalf("rebuilding: %v", err)
		}
		d2, err := ParseUDP(re)
		if err != nil || d2.Src != d.Src || d2.Dst != d.Dst || d2.SrcPort != d.SrcPort || d2.DstPort != d.DstPort ||
			!bytes.Equal(d2.Payload, d.Payload) || !d2.Checksum() {
			t.Fatalf("rebuilt %+v (err %v) from %+v", d2, err, d)
		}
	})
}
