package capture

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
	"time"
)

// Writer: what it writes reads back frame for frame, timestamps to the nanosecond, and each
// datagram decodes to its addresses, ports and payload; the IPv4 header has DF, the given
// Identification, TTL 64 by default and a correct checksum, and UDP checksum 0; the IPv6
// datagram a correct UDP checksum; short frames are padded to 60 octets.
func TestWriterRoundTripSection6(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	headers := []FrameHeader{
		{SrcMAC: macA, DstMAC: macB, Src: v4A, Dst: v4B, ID: 0x1234, TOS: 0x02},
		{SrcMAC: macB, DstMAC: macA, Src: v6A, Dst: v6B, TOS: 0xb8, FlowLabel: 0xabcde, TTL: 9},
		{Src: v4B, Dst: v4A, VLANs: []uint16{0x0064, 0x2005}},
	}
	payloads := [][]byte{[]byte("a"), bytes.Repeat([]byte{7}, 1500), nil}
	t0 := time.Unix(1700000000, 123456789)
	for i, h := range headers {
		if err := w.WriteUDP(t0.Add(time.Duration(i)*time.Microsecond), h, payloads[i]); err != nil {
			t.Fatal(err)
		}
	}
	raw := frame(t, headers[0], []byte("raw"))
	if err := w.WriteFrame(t0, raw); err != nil {
		t.Fatal(err)
	}
	frames, r := readAll(t, bytes.NewReader(buf.Bytes()))
	if r.Format() != FormatPcap || r.LinkType() != LinkEthernet || len(frames) != 4 {
		t.Fatalf("%v link %d, %d frames", r.Format(), r.LinkType(), len(frames))
	}
	if !bytes.Equal(frames[3].Data, raw) {
		t.Error("WriteFrame did not keep the frame")
	}
	for i, h := range headers {
		f := frames[i]
		if !f.Time.Equal(t0.Add(time.Duration(i)*time.Microsecond)) || len(f.Data) < 60 {
			t.Errorf("frame %d: time %v, %d octets", i+1, f.Time, len(f.Data))
		}
		d, err := DecodeUDP(f.LinkType, f.Data)
		if err != nil {
			t.Fatalf("frame %d: %v", i+1, err)
		}
		if d.Src != h.Src || d.Dst != h.Dst || !bytes.Equal(d.Payload, payloads[i]) || d.VLANs != len(h.VLANs) {
			t.Errorf("frame %d: %+v", i+1, d)
		}
		ip := d.IPHeader
		switch d.IPVersion() {
		case 4:
			if ^uint16(sum16(0, ip)) != 0 {
				t.Errorf("frame %d: IPv4 header checksum does not check", i+1)
			}
			if ip[1] != h.TOS || binary.BigEndian.Uint16(ip[4:]) != h.ID || ip[6] != 0x40 || ip[8] != 64 || ip[9] != 17 {
				t.Errorf("frame %d: IPv4 header % x", i+1, ip)
			}
			if binary.BigEndian.Uint16(d.UDPHeader[6:]) != 0 {
				t.Errorf("frame %d: IPv4 UDP checksum not 0", i+1)
			}
		case 6:
			if ip[0] != 0x6b || ip[1] != 0x8a || ip[2] != 0xbc || ip[3] != 0xde || ip[7] != 9 {
				t.Errorf("frame %d: IPv6 header % x", i+1, ip[:8])
			}
			udpLen := uint32(8 + len(d.Payload))
			s := sum16(0, ip[8:40])
			s = sum16(s, []byte{0, 0, byte(udpLen >> 8), byte(udpLen), 0, 0, 0, 17})
			s = sum16(s, d.UDPHeader)
			if ^uint16(sum16(s, d.Payload)) != 0 {
				t.Errorf("frame %d: IPv6 UDP checksum does not check", i+1)
			}
		}
	}
	// The Ethernet header: MACs and, with two tags, 802.1ad outside 802.1Q.
	if !bytes.Equal(frames[0].Data[:6], macB[:]) || !bytes.Equal(frames[0].Data[6:12], macA[:]) {
		t.Errorf("MACs % x", frames[0].Data[:12])
	}
	if got := frames[2].Data[12:22]; !bytes.Equal(got, []byte{0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0x20, 0x05, 0x08, 0x00}) {
		t.Errorf("VLAN tags % x", got)
	}
}

// Writer refuses what it cannot write and reports the writer's errors.
func TestWriterRefusesSection6(t *testing.T) {
	if _, err := AppendUDPFrame([]byte{1}, FrameHeader{Src: v4A, Dst: v6B}, nil); err == nil {
		t.Error("mixed IP versions accepted")
	}
	if b, err := AppendUDPFrame([]byte{1}, FrameHeader{Src: v4A, Dst: v4B}, make([]byte, 65600)); err == nil || len(b) != 1 {
		t.Error("oversized datagram accepted")
	}
	if _, err := NewWriter(failWriter{}); err == nil {
		t.Error("header write error lost")
	}
	var buf bytes.Buffer
	w, _ := NewWriter(&buf)
	if err := w.WriteFrame(time.Now(), make([]byte, SnapLen+1)); err == nil {
		t.Error("frame above the snap length accepted")
	}
	w.w = failWriter{}
	if err := w.WriteUDP(time.Now(), FrameHeader{Src: v4A, Dst: v4B}, nil); err == nil {
		t.Error("write error lost")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }
