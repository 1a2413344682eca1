package capture

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"testing"
)

// The frame decoder never panics; what it returns lies inside the frame and is consistent:
// the UDP header's length covers exactly the payload, the ports and addresses match the headers.
func FuzzDecodeUDP(f *testing.F) {
	for _, h := range []FrameHeader{
		{Src: v4A, Dst: v4B}, {Src: v6A, Dst: v6B, VLANs: []uint16{1, 2}}, {Src: v4A, Dst: v4B, VLANs: []uint16{3}},
	} {
		b, _ := AppendUDPFrame(nil, h, []byte("seed payload"))
		f.Add(uint16(LinkEthernet), b)
		f.Add(uint16(LinkRaw), b[14+4*len(h.VLANs):])
	}
	if path, err := findCapture(); err == nil {
		data, _ := os.ReadFile(path)
		if r, err := NewReader(bytes.NewReader(data)); err == nil {
			for {
				fr, err := r.Next()
				if err != nil {
					break
				}
				f.Add(uint16(fr.LinkType), append([]byte(nil), fr.Data...))
			}
		}
	}
	f.Fuzz(func(t *testing.T, link uint16, frame []byte) {
		d, err := DecodeUDP(LinkType(link), frame)
		if err != nil {
			return
		}
		if len(d.UDPHeader) != 8 || int(binary.BigEndian.Uint16(d.UDPHeader[4:])) != 8+len(d.Payload) {
			t.Fatalf("UDP header % x with %d-octet payload", d.UDPHeader, len(d.Payload))
		}
		if d.Src.Port() != binary.BigEndian.Uint16(d.UDPHeader) || d.Dst.Port() != binary.BigEndian.Uint16(d.UDPHeader[2:]) {
			t.Fatalf("ports %v %v vs % x", d.Src, d.Dst, d.UDPHeader)
		}
		switch d.IPVersion() {
		case 4:
			if len(d.IPHeader) != int(d.IPHeader[0]&0xf)*4 || !d.Src.Addr().Is4() {
				t.Fatalf("IPv4 header of %d octets, IHL %d", len(d.IPHeader), d.IPHeader[0]&0xf)
			}
		case 6:
			if len(d.IPHeader) < 40 || !d.Src.Addr().Is6() {
				t.Fatalf("IPv6 header of %d octets", len(d.IPHeader))
			}
		default:
			t.Fatalf("IP version %d", d.IPVersion())
		}
		if len(d.IPHeader)+8+len(d.Payload) > len(frame) {
			t.Fatal("datagram longer than the frame")
		}
	})
}

// The capture reader never panics and never reads a frame that is not in the file.
func FuzzReader(f *testing.F) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf)
	_ = w.WriteUDP(testTime, FrameHeader{Src: v4A, Dst: v4B}, []byte("x"))
	f.Add(buf.Bytes())
	g := &ngWriter{o: binary.LittleEndian}
	g.shb()
	g.idb(LinkEthernet, 0, 9, []byte{9})
	g.epb(0, 5, []byte{1, 2, 3}, 3)
	g.spb([]byte{4, 5})
	f.Add(g.b)
	if path, err := findCapture(); err == nil {
		data, _ := os.ReadFile(path)
		f.Add(data[:min(len(data), 2000)])
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		r, err := NewReader(bytes.NewReader(file))
		if err != nil {
			return
		}
		for n := 1; ; n++ {
			fr, err := r.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				return
			}
			if fr.Number != n || len(fr.Data) > len(file) || fr.OrigLen < len(fr.Data) {
				t.Fatalf("frame %d: number %d, %d octets of a %d-octet file, orig %d", n, fr.Number, len(fr.Data), len(file), fr.OrigLen)
			}
		}
	})
}
