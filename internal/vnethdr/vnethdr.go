// Package vnethdr reads the virtio_net_hdr that a Linux TUN device opened with IFF_VNET_HDR
// puts in front of every packet, and undoes the offloads it describes: a packet whose
// transport checksum the kernel left for the device to finish (NEEDS_CSUM), and a TCP or UDP
// segmentation offload super-packet (TSO, USO), which Split cuts into the packets a wire
// would have carried. It is plain byte work, no system calls: the gateway's TUN reader uses
// it, and its fuzz target feeds it anything.
package vnethdr

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Len is the size of the header (struct virtio_net_hdr, without num_buffers).
const Len = 10

// Header flags.
const (
	FlagNeedsCsum = 1 // the checksum at CsumStart+CsumOffset is to be finished
	FlagDataValid = 2 // the kernel checked the checksum
)

// GSO types (gso_type, without GSOECN).
const (
	GSONone  = 0
	GSOTCPv4 = 1
	GSOUDP   = 3 // UFO, fragmentation: never asked for, refused
	GSOTCPv6 = 4
	GSOUDPL4 = 5 // USO: UDP segmentation
	GSOECN   = 0x80
)

// Header is a virtio_net_hdr. TUN devices use the host's byte order for its fields unless
// told otherwise (TUNSETVNETLE/BE), which this package never asks for.
type Header struct {
	Flags      uint8
	GSOType    uint8
	HdrLen     uint16
	GSOSize    uint16
	CsumStart  uint16
	CsumOffset uint16
}

// Decode reads a header from the first Len octets of b.
func Decode(b []byte) (Header, error) {
	if len(b) < Len {
		return Header{}, errors.New("vnethdr: short header")
	}
	e := binary.NativeEndian
	return Header{Flags: b[0], GSOType: b[1], HdrLen: e.Uint16(b[2:]), GSOSize: e.Uint16(b[4:]),
		CsumStart: e.Uint16(b[6:]), CsumOffset: e.Uint16(b[8:])}, nil
}

// Encode writes h into the first Len octets of b.
func (h Header) Encode(b []byte) {
	_ = b[Len-1]
	e := binary.NativeEndian
	b[0], b[1] = h.Flags, h.GSOType
	e.PutUint16(b[2:], h.HdrLen)
	e.PutUint16(b[4:], h.GSOSize)
	e.PutUint16(b[6:], h.CsumStart)
	e.PutUint16(b[8:], h.CsumOffset)
}

// GSO reports whether the packet behind h is a super-packet that Split must cut.
func (h Header) GSO() bool { return h.GSOType&^GSOECN != GSONone }

// Complete finishes the checksum a NEEDS_CSUM packet carries only the pseudo-header sum of:
// the ones' complement sum from CsumStart to the end, written at CsumStart+CsumOffset. A
// header without the flag leaves pkt alone.
func Complete(h Header, pkt []byte) error {
	if h.Flags&FlagNeedsCsum == 0 {
		return nil
	}
	start, at := int(h.CsumStart), int(h.CsumStart)+int(h.CsumOffset)
	if start >= len(pkt) || at+2 > len(pkt) {
		return fmt.Errorf("vnethdr: checksum at %d+%d beyond a packet of %d octets", h.CsumStart, h.CsumOffset, len(pkt))
	}
	c := ^fold(sum(pkt[start:], 0))
	if c == 0 {
		c = 0xffff // a computed 0 is sent as all ones (RFC 768; the kernel's CSUM_MANGLED_0)
	}
	binary.BigEndian.PutUint16(pkt[at:], c)
	return nil
}

// layout is where a super-packet's headers end and how it is cut.
type layout struct {
	v6       bool
	tcp      bool
	l4       int // the transport header's offset
	hdr      int // the headers' length (IP and transport)
	gsoSize  int
	segments int
}

// parse checks a super-packet against its header: IP version and transport matching the GSO
// type, headers within the packet, a segment size.
func parse(h Header, pkt []byte) (layout, error) {
	var l layout
	switch h.GSOType &^ GSOECN {
	case GSOTCPv4:
		l.tcp = true
	case GSOTCPv6:
		l.tcp, l.v6 = true, true
	case GSOUDPL4:
		// either version
	default:
		return l, fmt.Errorf("vnethdr: GSO type %d not supported", h.GSOType)
	}
	if len(pkt) < 20 {
		return l, errors.New("vnethdr: super-packet shorter than an IP header")
	}
	proto := byte(0)
	switch pkt[0] >> 4 {
	case 4:
		if l.v6 {
			return l, errors.New("vnethdr: TCPv6 segmentation of an IPv4 packet")
		}
		l.l4 = int(pkt[0]&0x0f) * 4
		if l.l4 < 20 {
			return l, errors.New("vnethdr: IPv4 header length below 20")
		}
		if binary.BigEndian.Uint16(pkt[6:8])&0x3fff != 0 {
			return l, errors.New("vnethdr: fragmented super-packet")
		}
		proto = pkt[9]
	case 6:
		if h.GSOType&^GSOECN == GSOTCPv4 {
			return l, errors.New("vnethdr: TCPv4 segmentation of an IPv6 packet")
		}
		l.v6, l.l4 = true, 40
		if len(pkt) < 40 {
			return l, errors.New("vnethdr: super-packet shorter than an IPv6 header")
		}
		proto = pkt[6] // extension headers are not cut through: the kernel offloads none
	default:
		return l, fmt.Errorf("vnethdr: IP version %d", pkt[0]>>4)
	}
	if int(h.CsumStart) != l.l4 {
		return l, fmt.Errorf("vnethdr: checksum start %d is not the transport header at %d", h.CsumStart, l.l4)
	}
	if l.tcp {
		if proto != 6 || len(pkt) < l.l4+20 {
			return l, errors.New("vnethdr: TCP segmentation of a packet without a TCP header")
		}
		th := int(pkt[l.l4+12]>>4) * 4
		if th < 20 {
			return l, errors.New("vnethdr: TCP header length below 20")
		}
		l.hdr = l.l4 + th
	} else {
		if proto != 17 {
			return l, errors.New("vnethdr: UDP segmentation of a packet without a UDP header")
		}
		l.hdr = l.l4 + 8
	}
	if len(pkt) < l.hdr {
		return l, errors.New("vnethdr: headers beyond the packet")
	}
	if h.GSOSize == 0 {
		return l, errors.New("vnethdr: GSO size 0")
	}
	l.gsoSize = int(h.GSOSize)
	l.segments = max(1, (len(pkt)-l.hdr+l.gsoSize-1)/l.gsoSize)
	return l, nil
}

// Segments is how many packets Split cuts pkt into, each at most SegmentLen octets.
func Segments(h Header, pkt []byte) (n, segmentLen int, err error) {
	l, err := parse(h, pkt)
	if err != nil {
		return 0, 0, err
	}
	return l.segments, l.hdr + l.gsoSize, nil
}

// Split cuts the super-packet pkt into the packets segmentation would have sent, one into
// each of bufs (as many as Segments says, each of its segmentLen octets or more), and stores
// their lengths in sizes. Each packet gets the headers of pkt with its own lengths, IPv4
// Identification (consecutive from pkt's), TCP sequence number and flags (FIN and PSH on the
// last only, CWR on the first only), and complete checksums. pkt is not modified.
func Split(h Header, pkt []byte, bufs [][]byte, sizes []int) (int, error) {
	l, err := parse(h, pkt)
	if err != nil {
		return 0, err
	}
	if len(bufs) < l.segments || len(sizes) < l.segments {
		return 0, fmt.Errorf("vnethdr: %d segments, room for %d", l.segments, min(len(bufs), len(sizes)))
	}
	be := binary.BigEndian
	payload := pkt[l.hdr:]
	var id uint16
	if !l.v6 {
		id = be.Uint16(pkt[4:6])
	}
	var seq uint32
	if l.tcp {
		seq = be.Uint32(pkt[l.l4+4:])
	}
	for i := range l.segments {
		chunk := payload[min(i*l.gsoSize, len(payload)):min((i+1)*l.gsoSize, len(payload))]
		n := l.hdr + len(chunk)
		b := bufs[i]
		if len(b) < n {
			return 0, fmt.Errorf("vnethdr: segment %d needs %d octets, buffer has %d", i, n, len(b))
		}
		copy(b, pkt[:l.hdr])
		copy(b[l.hdr:], chunk)
		b = b[:n]
		if l.v6 {
			be.PutUint16(b[4:6], uint16(n-40))
		} else {
			be.PutUint16(b[2:4], uint16(n))
			be.PutUint16(b[4:6], id+uint16(i))
			b[10], b[11] = 0, 0
			be.PutUint16(b[10:12], ^fold(sum(b[:l.l4], 0)))
		}
		t := b[l.l4:]
		var at int
		if l.tcp {
			be.PutUint32(t[4:8], seq+uint32(i*l.gsoSize))
			if i != l.segments-1 {
				t[13] &^= 0x09 // FIN, PSH
			}
			if i != 0 {
				t[13] &^= 0x80 // CWR
			}
			at = 16
		} else {
			be.PutUint16(t[4:6], uint16(len(t)))
			at = 6
		}
		t[at], t[at+1] = 0, 0
		c := ^fold(sum(t, pseudo(b, l, len(t))))
		if c == 0 {
			c = 0xffff
		}
		be.PutUint16(t[at:], c)
		sizes[i] = n
	}
	return l.segments, nil
}

// pseudo is the sum of the pseudo-header of a transport segment of n octets in packet b.
func pseudo(b []byte, l layout, n int) uint64 {
	proto := uint64(17)
	if l.tcp {
		proto = 6
	}
	if l.v6 {
		return sum(b[8:40], proto+uint64(n))
	}
	return sum(b[12:20], proto+uint64(n))
}

// sum adds b as big-endian 16-bit words to acc (not folded).
func sum(b []byte, acc uint64) uint64 {
	for len(b) >= 32 {
		acc += uint64(binary.BigEndian.Uint32(b[0:])) + uint64(binary.BigEndian.Uint32(b[4:])) +
			uint64(binary.BigEndian.Uint32(b[8:])) + uint64(binary.BigEndian.Uint32(b[12:])) +
			uint64(binary.BigEndian.Uint32(b[16:])) + uint64(binary.BigEndian.Uint32(b[20:])) +
			uint64(binary.BigEndian.Uint32(b[24:])) + uint64(binary.BigEndian.Uint32(b[28:]))
		b = b[32:]
	}
	for len(b) >= 4 {
		acc += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		acc += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint64(b[0]) << 8
	}
	return acc
}

// fold reduces a sum to 16 bits of ones' complement.
func fold(acc uint64) uint16 {
	for acc>>16 != 0 {
		acc = acc&0xffff + acc>>16
	}
	return uint16(acc)
}

// Checksum is the Internet checksum (RFC 1071) of b: the complement of its ones' complement
// sum.
func Checksum(b []byte) uint16 { return ^fold(sum(b, 0)) }

// IPv4UDPChecksum is the UDP checksum an IPv4 packet's UDP header is to carry (its own
// checksum field counted as zero), and false when pkt is no IPv4 UDP packet.
func IPv4UDPChecksum(pkt []byte) (uint16, bool) {
	if len(pkt) < 20 || pkt[0]>>4 != 4 || pkt[9] != 17 {
		return 0, false
	}
	l4 := int(pkt[0]&0x0f) * 4
	if l4 < 20 || len(pkt) < l4+8 {
		return 0, false
	}
	t := pkt[l4:]
	acc := sum(t[:6], sum(t[8:], 0)) // without the checksum field
	c := ^fold(sum(pkt[12:20], acc+17+uint64(len(t))))
	if c == 0 {
		c = 0xffff
	}
	return c, true
}

// PseudoSum is what a NEEDS_CSUM packet carries in its transport checksum field: the folded,
// uncomplemented sum of its pseudo-header (addrs: source and destination address, as they
// follow each other in the IP header; n: the transport segment's length).
func PseudoSum(addrs []byte, proto uint8, n int) uint16 {
	return fold(sum(addrs, uint64(proto)+uint64(n)))
}
