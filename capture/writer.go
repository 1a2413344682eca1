package capture

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"time"
)

// SnapLen is the snapshot length Writer declares: every frame it writes is kept whole.
const SnapLen = 262144

// minEthernet is the shortest Ethernet frame without FCS; NICs pad shorter ones with zeros.
const minEthernet = 60

// Writer writes a classic pcap file of Ethernet frames with nanosecond timestamps. It is not
// safe for concurrent use; give each writer one owner.
type Writer struct {
	w   io.Writer
	buf []byte // record header and frame, written with one Write
}

// NewWriter writes the pcap file header to w and returns a writer of frames. Wrap w in a
// bufio.Writer for many small frames, and flush it when done.
func NewWriter(w io.Writer) (*Writer, error) {
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], 0xa1b23c4d) // nanosecond resolution
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], SnapLen)
	binary.LittleEndian.PutUint32(h[20:], uint32(LinkEthernet))
	if _, err := w.Write(h[:]); err != nil {
		return nil, fmt.Errorf("capture: writing the pcap header: %w", err)
	}
	return &Writer{w: w}, nil
}

// WriteFrame appends one Ethernet frame captured at time t.
func (w *Writer) WriteFrame(t time.Time, frame []byte) error {
	if len(frame) > SnapLen {
		return fmt.Errorf("capture: frame of %d octets exceeds the snap length %d", len(frame), SnapLen)
	}
	b := w.buf[:0]
	ns := t.UnixNano()
	b = binary.LittleEndian.AppendUint32(b, uint32(ns/1e9))
	b = binary.LittleEndian.AppendUint32(b, uint32(ns%1e9))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(frame)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(frame)))
	b = append(b, frame...)
	w.buf = b
	if _, err := w.w.Write(b); err != nil {
		return fmt.Errorf("capture: writing a frame: %w", err)
	}
	return nil
}

// WriteUDP wraps payload in Ethernet, IP and UDP as h describes (see AppendUDPFrame) and
// appends the frame captured at time t.
func (w *Writer) WriteUDP(t time.Time, h FrameHeader, payload []byte) error {
	b := w.buf[:0]
	b = append(b, make([]byte, 16)...) // room for the record header
	b, err := AppendUDPFrame(b, h, payload)
	if err != nil {
		return err
	}
	n := len(b) - 16
	if n > SnapLen {
		return fmt.Errorf("capture: frame of %d octets exceeds the snap length %d", n, SnapLen)
	}
	ns := t.UnixNano()
	binary.LittleEndian.PutUint32(b[0:], uint32(ns/1e9))
	binary.LittleEndian.PutUint32(b[4:], uint32(ns%1e9))
	binary.LittleEndian.PutUint32(b[8:], uint32(n))
	binary.LittleEndian.PutUint32(b[12:], uint32(n))
	w.buf = b
	if _, err := w.w.Write(b); err != nil {
		return fmt.Errorf("capture: writing a frame: %w", err)
	}
	return nil
}

// FrameHeader says how to wrap a UDP payload into an Ethernet frame.
type FrameHeader struct {
	SrcMAC, DstMAC [6]byte
	VLANs          []uint16 // tag control information, outermost first; all but the innermost as 802.1ad
	Src, Dst       netip.AddrPort
	TOS            uint8  // IPv4 TOS, or IPv6 traffic class (DSCP and ECN)
	TTL            uint8  // IPv4 TTL or IPv6 hop limit; 0 means 64
	ID             uint16 // IPv4 Identification; DF is always set, as RoCE NICs send
	FlowLabel      uint32 // IPv6 flow label, 20 bits
}

// AppendUDPFrame appends an Ethernet frame carrying payload in UDP to b: IPv4 with DF set, a
// correct header checksum and UDP checksum 0, as RoCE NICs send; or IPv6 with a correct UDP
// checksum. Src and Dst must both be IPv4 or both IPv6. Frames shorter than 60 octets are
// padded with zeros, as a NIC would.
func AppendUDPFrame(b []byte, h FrameHeader, payload []byte) ([]byte, error) {
	src, dst := h.Src.Addr().Unmap(), h.Dst.Addr().Unmap()
	v4 := src.Is4() && dst.Is4()
	if !v4 && !(src.Is6() && dst.Is6()) {
		return b, fmt.Errorf("capture: frame addresses %v and %v are not of one IP version", h.Src, h.Dst)
	}
	udpLen := 8 + len(payload)
	if v4 && 20+udpLen > 0xffff || !v4 && udpLen > 0xffff {
		return b, fmt.Errorf("capture: UDP payload of %d octets does not fit an IP packet", len(payload))
	}
	ttl := h.TTL
	if ttl == 0 {
		ttl = 64
	}
	start := len(b)
	b = append(b, h.DstMAC[:]...)
	b = append(b, h.SrcMAC[:]...)
	for i, tci := range h.VLANs {
		tpid := uint16(etherQinQ)
		if i == len(h.VLANs)-1 {
			tpid = etherVLAN
		}
		b = binary.BigEndian.AppendUint16(b, tpid)
		b = binary.BigEndian.AppendUint16(b, tci)
	}
	var ip int
	if v4 {
		b = binary.BigEndian.AppendUint16(b, etherIPv4)
		ip = len(b)
		tot := 20 + udpLen
		s, d := src.As4(), dst.As4()
		b = append(b, 0x45, h.TOS, byte(tot>>8), byte(tot), byte(h.ID>>8), byte(h.ID), 0x40, 0, ttl, 17, 0, 0)
		b = append(b, s[:]...)
		b = append(b, d[:]...)
		c := ^uint16(sum16(0, b[ip:]))
		b[ip+10], b[ip+11] = byte(c>>8), byte(c)
	} else {
		b = binary.BigEndian.AppendUint16(b, etherIPv6)
		ip = len(b)
		fl := h.FlowLabel & 0xfffff
		s, d := src.As16(), dst.As16()
		b = append(b, 0x60|h.TOS>>4, h.TOS<<4|byte(fl>>16), byte(fl>>8), byte(fl),
			byte(udpLen>>8), byte(udpLen), 17, ttl)
		b = append(b, s[:]...)
		b = append(b, d[:]...)
	}
	udp := len(b)
	b = binary.BigEndian.AppendUint16(b, h.Src.Port())
	b = binary.BigEndian.AppendUint16(b, h.Dst.Port())
	b = binary.BigEndian.AppendUint16(b, uint16(udpLen))
	b = append(b, 0, 0)
	b = append(b, payload...)
	if !v4 {
		// The pseudo-header: addresses, upper-layer length, next header.
		s := sum16(0, b[ip+8:ip+40])
		s = sum16(s, []byte{0, 0, byte(udpLen >> 8), byte(udpLen), 0, 0, 0, 17})
		c := ^uint16(sum16(s, b[udp:]))
		if c == 0 {
			c = 0xffff // zero means "no checksum", which IPv6 forbids
		}
		b[udp+6], b[udp+7] = byte(c>>8), byte(c)
	}
	if n := len(b) - start; n < minEthernet {
		b = append(b, make([]byte, minEthernet-n)...)
	}
	return b, nil
}

// sum16 adds b to the one's complement sum s, folded to 16 bits.
func sum16(s uint32, b []byte) uint32 {
	for len(b) >= 2 {
		s += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return s
}
