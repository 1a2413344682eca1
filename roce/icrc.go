package roce

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net/netip"
)

// ICRCLen is the length of the invariant CRC that ends every RoCEv2 packet.
const ICRCLen = 4

// UDPPort is the IANA UDP destination port of RoCEv2.
const UDPPort = 4791

// The ICRC is CRC-32 (IEEE 802.3, as hash/crc32's ChecksumIEEE: reflected, initial value all
// ones, final inversion) over eight 0xFF octets, the IP header, the UDP header and the packet
// from the BTH up to the ICRC, with the fields that routers may change masked to ones (RULINGS
// C12, as Linux Soft-RoCE): IPv4 TOS, TTL and header checksum; IPv6 traffic class, flow label
// and hop limit; the UDP checksum; BTH octet 4. It travels least significant octet first.
// The real capture confirms every one of these choices; see the tests. IPv4 options and IPv6
// extension headers, which RoCEv2 NICs do not send, are covered unmasked after the fixed header
// (Linux Soft-RoCE assumes neither is present).

// prefixState is the CRC state after the eight 0xFF octets, ^crc32.ChecksumIEEE(8 x 0xFF);
// Linux Soft-RoCE starts from the same constant. Starting from it skips the prefix.
const prefixState = 0xdebb20e3

// mask selects which of the C12 masks apply; the tests leave each out in turn.
type mask uint16

const (
	maskPrefix mask = 1 << iota // the eight 0xFF octets in front
	maskTOS
	maskTTL
	maskIPChecksum
	maskTrafficClass
	maskFlowLabel
	maskHopLimit
	maskUDPChecksum
	maskBTHResv8

	maskAll = 1<<iota - 1
)

// slicing8 holds the tables of the slicing-by-8 IEEE CRC. It is built once and never written
// again: a constant in all but syntax.
var slicing8 = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for i := range 256 {
		c := t[0][i]
		for k := 1; k < 8; k++ {
			c = t[0][byte(c)] ^ c>>8
			t[k][i] = c
		}
	}
	return t
}()

// crcUpdate runs the reflected IEEE CRC over b from the raw (inverted) state s, eight octets at
// a step. It stands in for crc32.Update over the short masked header: crc32.Update calls through
// a function value, which would make the header buffers escape to the heap.
func crcUpdate(s uint32, b []byte) uint32 {
	t := &slicing8
	for len(b) >= 8 {
		s ^= binary.LittleEndian.Uint32(b)
		hi := binary.LittleEndian.Uint32(b[4:])
		s = t[7][byte(s)] ^ t[6][byte(s>>8)] ^ t[5][byte(s>>16)] ^ t[4][s>>24] ^
			t[3][byte(hi)] ^ t[2][byte(hi>>8)] ^ t[1][byte(hi>>16)] ^ t[0][hi>>24]
		b = b[8:]
	}
	for _, v := range b {
		s = t[0][byte(s)^v] ^ s>>8
	}
	return s
}

// icrc computes the ICRC of payload (BTH up to the ICRC) under ip and udp with the masks m.
func icrc(ip, udp, payload []byte, m mask) (uint32, error) {
	if len(udp) != 8 {
		return 0, fmt.Errorf("roce: icrc: UDP header is %d octets, want 8: %w", len(udp), ErrInvalid)
	}
	if len(payload) < BTHLen {
		return 0, errShort("icrc: packet", BTHLen, len(payload))
	}
	if len(ip) == 0 {
		return 0, errShort("icrc: IP header", 20, 0)
	}
	s := uint32(0xffffffff)
	if m&maskPrefix != 0 {
		s = prefixState
	}
	// The fixed IP header is copied and masked; IPv4 options or IPv6 extension headers follow
	// as they are; then the UDP header and the BTH, copied and masked.
	var h [40]byte
	var fixed []byte
	switch ip[0] >> 4 {
	case 4:
		ihl := int(ip[0]&0x0f) * 4
		if ihl < 20 || len(ip) != ihl {
			return 0, fmt.Errorf("roce: icrc: IPv4 header is %d octets, IHL says %d: %w", len(ip), ihl, ErrInvalid)
		}
		fixed = h[:20]
		copy(fixed, ip)
		if m&maskTOS != 0 {
			fixed[1] = 0xff
		}
		if m&maskTTL != 0 {
			fixed[8] = 0xff
		}
		if m&maskIPChecksum != 0 {
			fixed[10], fixed[11] = 0xff, 0xff
		}
	case 6:
		if len(ip) < 40 {
			return 0, errShort("icrc: IPv6 header", 40, len(ip))
		}
		fixed = h[:40]
		copy(fixed, ip)
		// Traffic class spans the low nibble of octet 0 and the high nibble of octet 1; the
		// flow label the rest of octet 1 and octets 2 and 3.
		if m&maskTrafficClass != 0 {
			fixed[0] |= 0x0f
			fixed[1] |= 0xf0
		}
		if m&maskFlowLabel != 0 {
			fixed[1] |= 0x0f
			fixed[2], fixed[3] = 0xff, 0xff
		}
		if m&maskHopLimit != 0 {
			fixed[7] = 0xff
		}
	default:
		return 0, fmt.Errorf("roce: icrc: IP version %d: %w", ip[0]>>4, ErrInvalid)
	}
	s = crcUpdate(s, fixed)
	s = crcUpdate(s, ip[len(fixed):])
	var ub [8 + BTHLen]byte
	copy(ub[:], udp)
	copy(ub[8:], payload[:BTHLen])
	if m&maskUDPChecksum != 0 {
		ub[6], ub[7] = 0xff, 0xff
	}
	if m&maskBTHResv8 != 0 {
		ub[8+4] = 0xff
	}
	s = crcUpdate(s, ub[:])
	// The bulk goes to hash/crc32, which is SIMD-accelerated for the IEEE polynomial.
	return crc32.Update(^s, crc32.IEEETable, payload[BTHLen:]), nil
}

// ICRC computes the invariant CRC of a RoCEv2 packet. ip is the raw IP header (IPv4 with any
// options, exactly IHL octets; or the IPv6 header with any extension headers), udp the 8-octet
// UDP header, and payload the UDP payload from the BTH up to, not including, the ICRC.
func ICRC(ip, udp, payload []byte) (uint32, error) { return icrc(ip, udp, payload, maskAll) }

// CarriedICRC returns the ICRC at the end of a RoCEv2 UDP payload.
func CarriedICRC(pkt []byte) (uint32, error) {
	if len(pkt) < BTHLen+ICRCLen {
		return 0, errShort("packet", BTHLen+ICRCLen, len(pkt))
	}
	return binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:]), nil
}

// VerifyICRC checks the ICRC that ends pkt, a whole RoCEv2 UDP payload, under the given IP and
// UDP headers. It returns nil when it matches, an error wrapping ErrICRC when it does not, and
// another error when the input is malformed.
func VerifyICRC(ip, udp, pkt []byte) error {
	return verify(ip, udp, pkt, maskAll)
}

func verify(ip, udp, pkt []byte, m mask) error {
	got, err := CarriedICRC(pkt)
	if err != nil {
		return err
	}
	want, err := icrc(ip, udp, pkt[:len(pkt)-ICRCLen], m)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("roce: icrc: carried %#08x, computed %#08x: %w", got, want, ErrICRC)
	}
	return nil
}

// SealICRC computes the ICRC of pkt, a whole RoCEv2 UDP payload, under the given IP and UDP
// headers and writes it into pkt's last four octets.
func SealICRC(ip, udp, pkt []byte) error {
	if len(pkt) < BTHLen+ICRCLen {
		return errShort("packet", BTHLen+ICRCLen, len(pkt))
	}
	c, err := ICRC(ip, udp, pkt[:len(pkt)-ICRCLen])
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(pkt[len(pkt)-ICRCLen:], c)
	return nil
}

// LogicalHeader is the IP and UDP header that a flow's ICRC is computed under when no real one
// is at hand (RULINGS C12): in relay mode and in the project's own transport, both endpoints and
// the captures use it. It is IPv4 with DF set and Identification 0, or IPv6; the lengths follow
// from the packet; TOS, TTL, traffic class, flow label, hop limit and checksums are masked by
// the ICRC and so do not matter to it.
type LogicalHeader struct {
	Src, Dst netip.Addr // both IPv4 or both IPv6; IPv4-mapped IPv6 counts as IPv4
	SrcPort  uint16     // the flow's UDP source port
	DstPort  uint16     // 0 means UDPPort (4791)
}

// LogicalHeaderMaxLen bounds the IP and UDP header a LogicalHeader appends.
const LogicalHeaderMaxLen = 40 + 8

// AppendIPUDP appends the logical IP and UDP header of a UDP payload of n octets (ICRC
// included) to b. It is a real header: TTL 64, a correct IPv4 header checksum, UDP checksum 0.
func (h LogicalHeader) AppendIPUDP(b []byte, n int) ([]byte, error) {
	src, dst := h.Src.Unmap(), h.Dst.Unmap()
	dport := h.DstPort
	if dport == 0 {
		dport = UDPPort
	}
	udpLen := 8 + n
	switch {
	case src.Is4() && dst.Is4():
		if 20+udpLen > 0xffff {
			return b, fmt.Errorf("roce: logical header: %d-octet payload exceeds IPv4: %w", n, ErrInvalid)
		}
		start := len(b)
		tot := 20 + udpLen
		s, d := src.As4(), dst.As4()
		b = append(b, 0x45, 0, byte(tot>>8), byte(tot), 0, 0, 0x40, 0, 64, 17, 0, 0)
		b = append(b, s[:]...)
		b = append(b, d[:]...)
		c := ipv4Checksum(b[start:])
		b[start+10], b[start+11] = byte(c>>8), byte(c)
	case src.Is6() && dst.Is6():
		if udpLen > 0xffff {
			return b, fmt.Errorf("roce: logical header: %d-octet payload exceeds IPv6: %w", n, ErrInvalid)
		}
		s, d := src.As16(), dst.As16()
		b = append(b, 0x60, 0, 0, 0, byte(udpLen>>8), byte(udpLen), 17, 64)
		b = append(b, s[:]...)
		b = append(b, d[:]...)
	default:
		return b, fmt.Errorf("roce: logical header: addresses %v and %v are not of one IP version: %w",
			h.Src, h.Dst, ErrInvalid)
	}
	return append(b, byte(h.SrcPort>>8), byte(h.SrcPort), byte(dport>>8), byte(dport),
		byte(udpLen>>8), byte(udpLen), 0, 0), nil
}

// ipv4Checksum returns the Internet checksum of an IPv4 header whose checksum field is zero.
func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// headers builds the logical header for a UDP payload of n octets into buf.
func (h LogicalHeader) headers(buf *[LogicalHeaderMaxLen]byte, n int) (ip, udp []byte, err error) {
	b, err := h.AppendIPUDP(buf[:0], n)
	if err != nil {
		return nil, nil, err
	}
	return b[:len(b)-8], b[len(b)-8:], nil
}

// ICRC computes the ICRC of payload (BTH up to, not including, the ICRC) under the logical
// header.
func (h LogicalHeader) ICRC(payload []byte) (uint32, error) {
	var buf [LogicalHeaderMaxLen]byte
	ip, udp, err := h.headers(&buf, len(payload)+ICRCLen)
	if err != nil {
		return 0, err
	}
	return ICRC(ip, udp, payload)
}

// Seal writes the ICRC of pkt, a whole RoCEv2 UDP payload, under the logical header into its
// last four octets.
func (h LogicalHeader) Seal(pkt []byte) error {
	var buf [LogicalHeaderMaxLen]byte
	ip, udp, err := h.headers(&buf, len(pkt))
	if err != nil {
		return err
	}
	return SealICRC(ip, udp, pkt)
}

// Verify checks the ICRC of pkt, a whole RoCEv2 UDP payload, under the logical header, with
// the results of VerifyICRC.
func (h LogicalHeader) Verify(pkt []byte) error {
	var buf [LogicalHeaderMaxLen]byte
	ip, udp, err := h.headers(&buf, len(pkt))
	if err != nil {
		return err
	}
	return VerifyICRC(ip, udp, pkt)
}
