package xdp

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// Frame layout constants: the program and ParseUDP read the same offsets.
const (
	ethLen   = 14
	ipv4Min  = 20
	ipv6Len  = 40
	udpLen   = 8
	typeIPv4 = 0x0800
	typeIPv6 = 0x86dd
	protoUDP = 17
)

// Why ParseUDP refused a frame. The XDP program passes each of these to the kernel's own stack
// (ErrLength aside: the program does not read the UDP length, see ParseUDP).
var (
	ErrShort     = errors.New("xdp: frame shorter than its headers")
	ErrNotIP     = errors.New("xdp: not IPv4 or IPv6 (VLAN-tagged frames included)")
	ErrVersion   = errors.New("xdp: IP version does not match the EtherType")
	ErrHeaderLen = errors.New("xdp: IPv4 header length under 20 octets")
	ErrFragment  = errors.New("xdp: IPv4 fragment")
	ErrNotUDP    = errors.New("xdp: not UDP (IPv6 extension headers included)")
	ErrLength    = errors.New("xdp: UDP length outside the frame")
)

// Datagram is a UDP datagram found in an Ethernet frame. Its slices alias the frame.
type Datagram struct {
	SrcMAC, DstMAC   [6]byte
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
	// IPHeader is the IP header (options included); Payload the UDP payload, cut to the UDP
	// length (an Ethernet frame may carry padding after it).
	IPHeader []byte
	Payload  []byte
}

// ParseUDP reads an Ethernet frame as the XDP program does: Ethernet II with EtherType IPv4 or
// IPv6 (a VLAN tag is refused), IPv4 of any header length and not a fragment, IPv6 whose next
// header is UDP (extension headers are refused), then the UDP header. Unlike the program, which
// only chooses where a frame goes, ParseUDP also requires the UDP length to fit in the frame.
// It does not allocate.
func ParseUDP(frame []byte) (Datagram, error) {
	var d Datagram
	if len(frame) < ethLen {
		return d, ErrShort
	}
	copy(d.DstMAC[:], frame[0:6])
	copy(d.SrcMAC[:], frame[6:12])
	var udp []byte
	switch binary.BigEndian.Uint16(frame[12:]) {
	case typeIPv4:
		ip := frame[ethLen:]
		if len(ip) < ipv4Min {
			return d, ErrShort
		}
		if ip[0]>>4 != 4 {
			return d, ErrVersion
		}
		ihl := int(ip[0]&0x0f) * 4
		if ihl < ipv4Min {
			return d, ErrHeaderLen
		}
		if binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 {
			return d, ErrFragment
		}
		if ip[9] != protoUDP {
			return d, ErrNotUDP
		}
		if len(ip) < ihl+udpLen {
			return d, ErrShort
		}
		d.Src = netip.AddrFrom4([4]byte(ip[12:16]))
		d.Dst = netip.AddrFrom4([4]byte(ip[16:20]))
		d.IPHeader = ip[:ihl]
		udp = ip[ihl:]
	case typeIPv6:
		ip := frame[ethLen:]
		if len(ip) < ipv6Len+udpLen {
			return d, ErrShort
		}
		if ip[0]>>4 != 6 {
			return d, ErrVersion
		}
		if ip[6] != protoUDP {
			return d, ErrNotUDP
		}
		d.Src = netip.AddrFrom16([16]byte(ip[8:24]))
		d.Dst = netip.AddrFrom16([16]byte(ip[24:40]))
		d.IPHeader = ip[:ipv6Len]
		udp = ip[ipv6Len:]
	default:
		return d, ErrNotIP
	}
	d.SrcPort = binary.BigEndian.Uint16(udp[0:])
	d.DstPort = binary.BigEndian.Uint16(udp[2:])
	n := int(binary.BigEndian.Uint16(udp[4:]))
	if n < udpLen || n > len(udp) {
		return d, ErrLength
	}
	d.Payload = udp[udpLen:n]
	return d, nil
}

// Header is what AppendUDP writes before a payload.
type Header struct {
	SrcMAC, DstMAC   [6]byte
	Src, Dst         netip.Addr // both IPv4 or both IPv6
	SrcPort, DstPort uint16
	TTL              uint8 // 64 when zero
	TOS              uint8 // IPv4 TOS or IPv6 traffic class (ECN bits included)
}

// ErrAddr is AppendUDP's answer to addresses of different families or invalid ones.
var ErrAddr = errors.New("xdp: source and destination must both be IPv4 or both IPv6")

// ErrTooLong is AppendUDP's answer to a payload that does not fit one UDP datagram.
var ErrTooLong = errors.New("xdp: payload longer than one UDP datagram")

// AppendUDP appends to dst an Ethernet frame carrying payload in one UDP datagram, with the
// IPv4 header checksum and the UDP checksum computed (IPv4: identification 0, don't fragment).
// It does not allocate when dst has the room.
func AppendUDP(dst []byte, h Header, payload []byte) ([]byte, error) {
	v4 := h.Src.Is4() && h.Dst.Is4()
	if !v4 && !(h.Src.Is6() && h.Dst.Is6() && !h.Src.Is4In6() && !h.Dst.Is4In6()) {
		return dst, ErrAddr
	}
	ulen := udpLen + len(payload)
	if ulen > 0xffff || (v4 && ulen+ipv4Min > 0xffff) {
		return dst, ErrTooLong
	}
	ttl := h.TTL
	if ttl == 0 {
		ttl = 64
	}
	dst = append(dst, h.DstMAC[:]...)
	dst = append(dst, h.SrcMAC[:]...)
	var sum uint32 // the UDP pseudo-header
	if v4 {
		dst = binary.BigEndian.AppendUint16(dst, typeIPv4)
		ip := len(dst)
		src, d := h.Src.As4(), h.Dst.As4()
		dst = append(dst, 0x45, h.TOS)
		dst = binary.BigEndian.AppendUint16(dst, uint16(ipv4Min+ulen))
		dst = append(dst, 0, 0, 0x40, 0, ttl, protoUDP, 0, 0)
		dst = append(dst, src[:]...)
		dst = append(dst, d[:]...)
		binary.BigEndian.PutUint16(dst[ip+10:], ^fold(sumWords(0, dst[ip:ip+ipv4Min])))
		sum = sumWords(sumWords(0, src[:]), d[:])
	} else {
		dst = binary.BigEndian.AppendUint16(dst, typeIPv6)
		src, d := h.Src.As16(), h.Dst.As16()
		dst = append(dst, 0x60|h.TOS>>4, h.TOS<<4, 0, 0)
		dst = binary.BigEndian.AppendUint16(dst, uint16(ulen))
		dst = append(dst, protoUDP, ttl)
		dst = append(dst, src[:]...)
		dst = append(dst, d[:]...)
		sum = sumWords(sumWords(0, src[:]), d[:])
	}
	sum += protoUDP + uint32(ulen)
	u := len(dst)
	dst = binary.BigEndian.AppendUint16(dst, h.SrcPort)
	dst = binary.BigEndian.AppendUint16(dst, h.DstPort)
	dst = binary.BigEndian.AppendUint16(dst, uint16(ulen))
	dst = append(dst, 0, 0)
	dst = append(dst, payload...)
	c := ^fold(sumWords(sum, dst[u:]))
	if c == 0 {
		c = 0xffff // zero means "no checksum" in IPv4 and is forbidden in IPv6
	}
	binary.BigEndian.PutUint16(dst[u+6:], c)
	return dst, nil
}

// sumWords adds b as big-endian 16-bit words (an odd last octet padded with zero) to sum.
func sumWords(sum uint32, b []byte) uint32 {
	for len(b) >= 2 {
		sum += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
		if sum >= 1<<31 {
			sum = uint32(fold(sum))
		}
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	return sum
}

// fold reduces a 32-bit one's complement sum to 16 bits.
func fold(sum uint32) uint16 {
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return uint16(sum)
}

// Checksum reports whether the checksums of d's frame hold: the IPv4 header checksum, and the
// UDP checksum unless it is zero in IPv4 (no checksum). d must come from ParseUDP.
func (d Datagram) Checksum() bool {
	var sum uint32
	udpStart := len(d.IPHeader)
	ip := d.IPHeader
	if d.Src.Is4() {
		if fold(sumWords(0, ip)) != 0xffff {
			return false
		}
		sum = sumWords(sumWords(0, ip[12:16]), ip[16:20])
	} else {
		sum = sumWords(sumWords(0, ip[8:24]), ip[24:40])
	}
	// The UDP header sits between the IP header and the payload in the same frame.
	udp := ip[:udpStart+udpLen+len(d.Payload)][udpStart:]
	if d.Src.Is4() && binary.BigEndian.Uint16(udp[6:]) == 0 {
		return true
	}
	sum += protoUDP + uint32(len(udp))
	return fold(sumWords(sum, udp)) == 0xffff
}
