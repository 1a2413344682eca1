package vnethdr

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// superPacket builds an IPv4 or IPv6 TCP or UDP packet with payload n octets of a pattern,
// checksum fields holding the pseudo-header sum as the kernel leaves them for NEEDS_CSUM.
func superPacket(v6, tcp bool, n int) ([]byte, Header) {
	be := binary.BigEndian
	l4 := 20
	if v6 {
		l4 = 40
	}
	th := 8
	if tcp {
		th = 20
	}
	b := make([]byte, l4+th+n)
	for i := range n {
		b[l4+th+i] = byte(i*7 + i>>8)
	}
	proto := byte(17)
	if tcp {
		proto = 6
	}
	if v6 {
		b[0] = 0x60
		be.PutUint16(b[4:], uint16(th+n))
		b[6], b[7] = proto, 64
		b[8], b[23] = 0xfd, 1
		b[24], b[39] = 0xfd, 2
	} else {
		b[0] = 0x45
		be.PutUint16(b[2:], uint16(len(b)))
		be.PutUint16(b[4:], 0xfff0) // wraps within the segments
		b[6] = 0x40                 // DF
		b[8], b[9] = 64, proto
		copy(b[12:20], []byte{198, 18, 1, 1, 198, 18, 2, 1})
	}
	t := b[l4:]
	be.PutUint16(t[0:], 4791)
	be.PutUint16(t[2:], 4791)
	at := 6
	if tcp {
		be.PutUint32(t[4:], 0xfffff000) // wraps too
		t[12] = 5 << 4
		t[13] = 0x80 | 0x10 | 0x08 | 0x01 // CWR ACK PSH FIN
		at = 16
	} else {
		be.PutUint16(t[4:], uint16(len(t)))
	}
	l := layout{v6: v6, tcp: tcp}
	binary.BigEndian.PutUint16(t[at:], fold(pseudo(b, l, len(t))))
	h := Header{Flags: FlagNeedsCsum, HdrLen: uint16(l4 + th), CsumStart: uint16(l4), CsumOffset: uint16(at)}
	switch {
	case tcp && v6:
		h.GSOType = GSOTCPv6
	case tcp:
		h.GSOType = GSOTCPv4
	default:
		h.GSOType = GSOUDPL4
	}
	return b, h
}

// verify checks a packet's IPv4 header checksum and its transport checksum.
func verify(t *testing.T, b []byte, v6, tcp bool) {
	t.Helper()
	l4 := 20
	if !v6 {
		if Checksum(b[:20]) != 0 {
			t.Fatalf("IPv4 header checksum does not verify")
		}
		if int(binary.BigEndian.Uint16(b[2:4])) != len(b) {
			t.Fatalf("IPv4 total length %d, packet %d", binary.BigEndian.Uint16(b[2:4]), len(b))
		}
	} else {
		l4 = 40
		if int(binary.BigEndian.Uint16(b[4:6])) != len(b)-40 {
			t.Fatalf("IPv6 payload length wrong")
		}
	}
	if ^fold(sum(b[l4:], pseudo(b, layout{v6: v6, tcp: tcp}, len(b)-l4))) != 0 {
		t.Fatalf("transport checksum does not verify")
	}
}

func TestSplit(t *testing.T) {
	for _, c := range []struct {
		name    string
		v6, tcp bool
		n, gso  int
	}{
		{"udp4", false, false, 4096*15 + 100, 4096}, {"udp4-even", false, false, 4096 * 4, 4096},
		{"tcp4", false, true, 65000, 1448}, {"tcp6", true, true, 30000, 1428}, {"udp6", true, false, 9000, 1000},
		{"udp4-one", false, false, 500, 1000},
	} {
		t.Run(c.name, func(t *testing.T) {
			pkt, h := superPacket(c.v6, c.tcp, c.n)
			h.GSOSize = uint16(c.gso)
			orig := bytes.Clone(pkt)
			n, segLen, err := Segments(h, pkt)
			if err != nil {
				t.Fatal(err)
			}
			if want := (c.n + c.gso - 1) / c.gso; n != want {
				t.Fatalf("%d segments, want %d", n, want)
			}
			bufs := make([][]byte, n)
			for i := range bufs {
				bufs[i] = make([]byte, segLen)
			}
			sizes := make([]int, n)
			got, err := Split(h, pkt, bufs, sizes)
			if err != nil || got != n {
				t.Fatalf("Split: %d, %v", got, err)
			}
			if !bytes.Equal(pkt, orig) {
				t.Fatal("Split modified its input")
			}
			hdr := int(h.HdrLen)
			var payload []byte
			for i := range n {
				s := bufs[i][:sizes[i]]
				verify(t, s, c.v6, c.tcp)
				payload = append(payload, s[hdr:]...)
				if i < n-1 && len(s) != hdr+c.gso {
					t.Fatalf("segment %d: %d octets, want %d", i, len(s), hdr+c.gso)
				}
				if !c.v6 {
					if id := binary.BigEndian.Uint16(s[4:6]); id != 0xfff0+uint16(i) {
						t.Fatalf("segment %d: IPv4 ID %#x", i, id)
					}
				}
				l4 := int(h.CsumStart)
				if c.tcp {
					if seq := binary.BigEndian.Uint32(s[l4+4:]); seq != 0xfffff000+uint32(i*c.gso) {
						t.Fatalf("segment %d: seq %#x", i, seq)
					}
					fl := s[l4+13]
					if (fl&0x80 != 0) != (i == 0) || (fl&0x09 != 0) != (i == n-1) || fl&0x10 == 0 {
						t.Fatalf("segment %d of %d: flags %#x", i, n, fl)
					}
				} else if ul := int(binary.BigEndian.Uint16(s[l4+4:])); ul != len(s)-l4 {
					t.Fatalf("segment %d: UDP length %d, want %d", i, ul, len(s)-l4)
				}
			}
			if !bytes.Equal(payload, pkt[hdr:]) {
				t.Fatal("the segments' payloads are not the super-packet's")
			}
		})
	}
}

func TestComplete(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		pkt, h := superPacket(false, tcp, 1001)
		h.GSOType = GSONone
		if err := Complete(h, pkt); err != nil {
			t.Fatal(err)
		}
		binary.BigEndian.PutUint16(pkt[10:12], Checksum(pkt[:20]))
		verify(t, pkt, false, tcp)
	}
	pkt, h := superPacket(false, false, 10)
	h.CsumOffset = 100
	if Complete(h, pkt) == nil {
		t.Fatal("a checksum beyond the packet was accepted")
	}
}

func TestRefused(t *testing.T) {
	pkt, h := superPacket(false, false, 9000)
	h.GSOSize = 1000
	for name, bad := range map[string]func(*Header, []byte) []byte{
		"ufo":          func(h *Header, b []byte) []byte { h.GSOType = GSOUDP; return b },
		"gso size 0":   func(h *Header, b []byte) []byte { h.GSOSize = 0; return b },
		"tcp over udp": func(h *Header, b []byte) []byte { h.GSOType = GSOTCPv4; return b },
		"csum start":   func(h *Header, b []byte) []byte { h.CsumStart = 24; return b },
		"fragment":     func(h *Header, b []byte) []byte { b[7] = 1; return b },
		"short":        func(h *Header, b []byte) []byte { return b[:24] },
		"version 5":    func(h *Header, b []byte) []byte { b[0] = 0x55; return b },
	} {
		hh, b := h, bytes.Clone(pkt)
		b = bad(&hh, b)
		if _, _, err := Segments(hh, b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	h := Header{Flags: 1, GSOType: GSOTCPv4 | GSOECN, HdrLen: 54, GSOSize: 1448, CsumStart: 34, CsumOffset: 16}
	var b [Len]byte
	h.Encode(b[:])
	got, err := Decode(b[:])
	if err != nil || got != h {
		t.Fatalf("%+v, %v", got, err)
	}
	if _, err := Decode(b[:9]); err == nil {
		t.Fatal("a short header decoded")
	}
}

// FuzzSplit: any header and packet either are refused or split into packets whose checksums
// verify and whose payloads make up the super-packet's.
func FuzzSplit(f *testing.F) {
	for _, c := range []struct{ v6, tcp bool }{{false, false}, {false, true}, {true, true}, {true, false}} {
		pkt, h := superPacket(c.v6, c.tcp, 3000)
		h.GSOSize = 1000
		var hb [Len]byte
		h.Encode(hb[:])
		f.Add(append(hb[:], pkt...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Decode(b)
		if err != nil {
			return
		}
		pkt := b[Len:]
		if !h.GSO() {
			Complete(h, pkt)
			return
		}
		n, segLen, err := Segments(h, pkt)
		if err != nil || n > 1000 {
			return
		}
		bufs := make([][]byte, n)
		for i := range bufs {
			bufs[i] = make([]byte, segLen)
		}
		sizes := make([]int, n)
		got, err := Split(h, pkt, bufs, sizes)
		if err != nil {
			t.Fatalf("Segments accepted what Split refused: %v", err)
		}
		l, _ := parse(h, pkt)
		total := 0
		for i := range got {
			s := bufs[i][:sizes[i]]
			if !l.v6 && Checksum(s[:l.l4]) != 0 {
				t.Fatalf("segment %d: IPv4 header checksum does not verify", i)
			}
			if ^fold(sum(s[l.l4:], pseudo(s, l, len(s)-l.l4))) != 0 {
				t.Fatalf("segment %d: transport checksum does not verify", i)
			}
			total += len(s) - l.hdr
		}
		if got != n || total != len(pkt)-l.hdr {
			t.Fatalf("%d segments carrying %d octets of %d", got, total, len(pkt)-l.hdr)
		}
	})
}

func TestIPv4UDPChecksum(t *testing.T) {
	pkt, h := superPacket(false, false, 1001)
	h.GSOType = GSONone
	if err := Complete(h, pkt); err != nil {
		t.Fatal(err)
	}
	want := binary.BigEndian.Uint16(pkt[26:28])
	pkt[26], pkt[27] = 0x12, 0x34 // a stale checksum is not counted
	if got, ok := IPv4UDPChecksum(pkt); !ok || got != want {
		t.Fatalf("%#x, %v; want %#x", got, ok, want)
	}
	pkt[9] = 6
	if _, ok := IPv4UDPChecksum(pkt); ok {
		t.Fatal("a TCP packet got a UDP checksum")
	}
}

// BenchmarkSplitUDP cuts a 15-packet USO super-packet of 4,112-octet RoCEv2 payloads.
func BenchmarkSplitUDP(b *testing.B) {
	pkt, h := superPacket(false, false, 15*4112)
	h.GSOSize = 4112
	n, segLen, _ := Segments(h, pkt)
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, segLen)
	}
	sizes := make([]int, n)
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	b.ResetTimer()
	for range b.N {
		if _, err := Split(h, pkt, bufs, sizes); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/packet")
}
