package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// Errors of DecodeUDP. ErrNotUDP is the everyday answer for other traffic and carries no
// context, so that skipping it costs nothing; the others wrap with the reason.
var (
	ErrNotUDP          = errors.New("capture: not a UDP datagram")
	ErrFragment        = errors.New("capture: IP fragment")
	ErrTruncated       = errors.New("frame ends before its headers say")
	ErrMalformed       = errors.New("malformed header")
	ErrUnsupportedLink = errors.New("capture: unsupported link type")
)

// EtherTypes met on the way to IP.
const (
	etherIPv4  = 0x0800
	etherIPv6  = 0x86dd
	etherVLAN  = 0x8100 // 802.1Q C-tag
	etherQinQ  = 0x88a8 // 802.1ad S-tag
	etherQinQ1 = 0x9100 // pre-standard Q-in-Q
)

// Datagram is a UDP datagram found in a frame. Its slices alias the frame.
type Datagram struct {
	VLANs     int    // 802.1Q/802.1ad tags passed on the way
	IPHeader  []byte // IPv4 header with options, or IPv6 header with extension headers
	UDPHeader []byte // 8 octets
	Payload   []byte // the UDP payload, cut to the UDP length (link padding removed)
	Src, Dst  netip.AddrPort
}

// IPVersion returns 4 or 6.
func (d *Datagram) IPVersion() int {
	if len(d.IPHeader) == 0 {
		return 0
	}
	return int(d.IPHeader[0] >> 4)
}

func truncated(layer string, need, have int) error {
	return fmt.Errorf("capture: %s: need %d octets, have %d: %w", layer, need, have, ErrTruncated)
}

// DecodeUDP takes a frame of the given link type apart down to UDP. Frames that carry no UDP
// (other EtherTypes, other IP protocols) yield ErrNotUDP; non-first fragments and fragments
// still to be reassembled ErrFragment.
func DecodeUDP(link LinkType, frame []byte) (Datagram, error) {
	var d Datagram
	var etherType uint16
	b := frame
	switch link {
	case LinkEthernet:
		if len(b) < 14 {
			return d, truncated("Ethernet", 14, len(b))
		}
		etherType, b = binary.BigEndian.Uint16(b[12:]), b[14:]
	case LinkLinuxSLL:
		if len(b) < 16 {
			return d, truncated("Linux cooked header", 16, len(b))
		}
		etherType, b = binary.BigEndian.Uint16(b[14:]), b[16:]
	case LinkLinuxSLL2:
		if len(b) < 20 {
			return d, truncated("Linux cooked header v2", 20, len(b))
		}
		etherType, b = binary.BigEndian.Uint16(b), b[20:]
	case LinkRaw, LinkRawDLT12, LinkRawDLT14:
		if len(b) == 0 {
			return d, truncated("raw IP", 1, 0)
		}
		switch b[0] >> 4 {
		case 4:
			etherType = etherIPv4
		case 6:
			etherType = etherIPv6
		}
	case LinkIPv4:
		etherType = etherIPv4
	case LinkIPv6:
		etherType = etherIPv6
	default:
		return d, fmt.Errorf("%w %d", ErrUnsupportedLink, link)
	}
	for etherType == etherVLAN || etherType == etherQinQ || etherType == etherQinQ1 {
		if len(b) < 4 {
			return d, truncated("VLAN tag", 4, len(b))
		}
		d.VLANs++
		etherType, b = binary.BigEndian.Uint16(b[2:]), b[4:]
	}
	var udp []byte
	var err error
	switch etherType {
	case etherIPv4:
		udp, err = d.ipv4(b)
	case etherIPv6:
		udp, err = d.ipv6(b)
	default:
		return d, ErrNotUDP
	}
	if err != nil {
		return d, err
	}
	if len(udp) < 8 {
		return d, truncated("UDP", 8, len(udp))
	}
	n := int(binary.BigEndian.Uint16(udp[4:]))
	switch {
	case n < 8:
		return d, fmt.Errorf("capture: UDP length %d: %w", n, ErrMalformed)
	case n > len(udp):
		return d, truncated("UDP datagram", n, len(udp))
	}
	d.UDPHeader, d.Payload = udp[:8], udp[8:n]
	d.Src = netip.AddrPortFrom(d.Src.Addr(), binary.BigEndian.Uint16(udp))
	d.Dst = netip.AddrPortFrom(d.Dst.Addr(), binary.BigEndian.Uint16(udp[2:]))
	return d, nil
}

// ipv4 records the header and addresses and returns the IP payload, cut to the total length.
func (d *Datagram) ipv4(b []byte) ([]byte, error) {
	if len(b) < 20 {
		return nil, truncated("IPv4", 20, len(b))
	}
	if b[0]>>4 != 4 {
		return nil, fmt.Errorf("capture: IPv4 header with version %d: %w", b[0]>>4, ErrMalformed)
	}
	ihl, total := int(b[0]&0x0f)*4, int(binary.BigEndian.Uint16(b[2:]))
	switch {
	case ihl < 20 || total < ihl:
		return nil, fmt.Errorf("capture: IPv4 header length %d, total length %d: %w", ihl, total, ErrMalformed)
	case total > len(b):
		return nil, truncated("IPv4 packet", total, len(b))
	case b[9] != 17:
		return nil, ErrNotUDP
	case binary.BigEndian.Uint16(b[6:])&0x3fff != 0: // More Fragments or an offset
		return nil, ErrFragment
	}
	d.IPHeader = b[:ihl]
	d.Src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[12:16])), 0)
	d.Dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[16:20])), 0)
	return b[ihl:total], nil
}

// ipv6 records the header (with extension headers) and addresses and returns the UDP datagram,
// cut to the payload length.
func (d *Datagram) ipv6(b []byte) ([]byte, error) {
	if len(b) < 40 {
		return nil, truncated("IPv6", 40, len(b))
	}
	if b[0]>>4 != 6 {
		return nil, fmt.Errorf("capture: IPv6 header with version %d: %w", b[0]>>4, ErrMalformed)
	}
	plen := int(binary.BigEndian.Uint16(b[4:]))
	if plen == 0 {
		return nil, fmt.Errorf("capture: IPv6 payload length 0 (jumbogram): %w", ErrMalformed)
	}
	if 40+plen > len(b) {
		return nil, truncated("IPv6 packet", 40+plen, len(b))
	}
	b = b[:40+plen]
	next, off := b[6], 40
	for next != 17 {
		if len(b) < off+8 {
			if isExtension(next) {
				return nil, truncated("IPv6 extension header", off+8, len(b))
			}
			return nil, ErrNotUDP
		}
		var n int
		switch next {
		case 0, 43, 60: // hop-by-hop, routing, destination options
			n = (int(b[off+1]) + 1) * 8
		case 51: // authentication header
			n = (int(b[off+1]) + 2) * 4
		case 44: // fragment
			if binary.BigEndian.Uint16(b[off+2:])&0xfff9 != 0 { // an offset or More Fragments
				return nil, ErrFragment
			}
			n = 8
		default:
			return nil, ErrNotUDP
		}
		if off+n > len(b) {
			return nil, truncated("IPv6 extension header", off+n, len(b))
		}
		next, off = b[off], off+n
	}
	d.IPHeader = b[:off]
	d.Src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), 0)
	d.Dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[24:40])), 0)
	return b[off:], nil
}

func isExtension(next byte) bool {
	return next == 0 || next == 43 || next == 60 || next == 51 || next == 44
}
