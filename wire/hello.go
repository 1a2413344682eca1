package wire

import (
	"encoding/binary"
	"net/netip"
)

// capabilitiesLen is the size of the twelve octets HELLO and HELLO_ACK share.
const capabilitiesLen = 12

// Capabilities are what HELLO and HELLO_ACK both state in their first twelve octets: the flow
// kind, the schemes and limits of the sender of the message, and the RDMA MTU (HELLO_ACK echoes
// it). The address family, which sits among them on the wire, belongs to the flow descriptor.
type Capabilities struct {
	FlowKind FlowKind
	Schemes  SchemeSet
	MaxK     uint8
	MaxM     uint8
	MaxT     uint16
	// RDMAMTU is the RDMA connection's payload octets per packet; the CRF divides READ lengths
	// by it (RULINGS C13), so it is never zero.
	RDMAMTU uint16
}

func (c *Capabilities) validate(t Type) error {
	switch {
	case c.MaxK == 0:
		return fieldErr(t, "Max k", "0 allows no block at all (k is at least 1)")
	case c.MaxT < 2:
		return fieldErr(t, "Max T", "%d allows no symbol (a symbol holds at least its 2-octet length prefix)", c.MaxT)
	case c.RDMAMTU == 0:
		return fieldErr(t, "RDMA MTU", "0 octets per packet")
	}
	return nil
}

func (c *Capabilities) append(b []byte, af AF) []byte {
	b = append(b, uint8(c.FlowKind), uint8(af))
	b = binary.BigEndian.AppendUint16(b, uint16(c.Schemes))
	b = append(b, c.MaxK, c.MaxM)
	b = binary.BigEndian.AppendUint16(b, c.MaxT)
	b = binary.BigEndian.AppendUint16(b, c.RDMAMTU)
	return append(b, 0, 0) // Reserved
}

// read reads the twelve octets and returns the AF among them, checked to be 4 or 6.
func (c *Capabilities) read(r *reader) AF {
	c.FlowKind = FlowKind(r.u8("Flow Kind"))
	af := AF(r.u8("AF"))
	c.Schemes = SchemeSet(r.u16("Supported Schemes"))
	c.MaxK = r.u8("Max k")
	c.MaxM = r.u8("Max m")
	c.MaxT = r.u16("Max T")
	c.RDMAMTU = r.u16("RDMA MTU")
	r.take(2, "Reserved")
	if r.err == nil && !af.Valid() {
		r.err = fieldErr(r.t, "AF", "%d is neither 4 nor 6", uint8(af))
	}
	return af
}

// Hello is a HELLO message (type 2): the CSF asks the CRF to protect a flow. Its Flow ID is zero,
// since the CRF has not assigned one yet.
type Hello struct {
	Capabilities
	SenderNonce uint64
	// Source and Destination identify the flow; both IPv4 or both IPv6, which sets the AF octet.
	Source      netip.Addr
	Destination netip.Addr
	// FlowLabel holds, for RoCEv2, the destination queue pair number in its low 24 bits.
	FlowLabel uint32
}

// Type returns TypeHello.
func (m *Hello) Type() Type { return TypeHello }

// AF returns the address family of the flow's addresses (0 when they are unset or mixed).
func (m *Hello) AF() AF {
	af := afOf(m.Source)
	if afOf(m.Destination) != af {
		return 0
	}
	return af
}

// DestQP returns the destination queue pair number a RoCEv2 Flow Label carries.
func (m *Hello) DestQP() uint32 { return m.FlowLabel & 0xffffff }

// Length returns the octets the message occupies on the wire.
func (m *Hello) Length() int {
	return HeaderLen + capabilitiesLen + 8 + 2*afOf(m.Source).AddrLen() + 4
}

func (m *Hello) validate() error {
	if err := m.Capabilities.validate(TypeHello); err != nil {
		return err
	}
	return checkFlowAddrs(TypeHello, m.Source, m.Destination)
}

// checkFlowAddrs requires two addresses of one family, without zones, which the wire cannot carry.
func checkFlowAddrs(t Type, src, dst netip.Addr) error {
	af := afOf(src)
	if af == 0 {
		return fieldErr(t, "Source Address", "%q is not an IPv4 or IPv6 address without zone", src)
	}
	if d := afOf(dst); d != af {
		return fieldErr(t, "Destination Address", "%q is not an %v address like the Source Address", dst, af)
	}
	return nil
}

// Append validates the message and appends it, common header included, to b.
func (m *Hello) Append(b []byte) ([]byte, error) {
	if err := m.validate(); err != nil {
		return b, err
	}
	b = appendHeader(b, TypeHello, 0, m.Length(), 0)
	b = m.Capabilities.append(b, m.AF())
	b = binary.BigEndian.AppendUint64(b, m.SenderNonce)
	b = appendAddr(b, m.Source)
	b = appendAddr(b, m.Destination)
	return binary.BigEndian.AppendUint32(b, m.FlowLabel), nil
}

// ParseHello parses the datagram b as a HELLO message.
func ParseHello(b []byte) (Hello, error) {
	var m Hello
	h, err := parseHeaderOf(b, TypeHello)
	if err != nil {
		return m, err
	}
	if h.FlowID != 0 {
		return m, fieldErr(TypeHello, "Flow ID", "%d in HELLO, which precedes any assignment (must be 0)", h.FlowID)
	}
	r := reader{b: b, off: HeaderLen, t: TypeHello}
	af := m.Capabilities.read(&r)
	m.SenderNonce = r.u64("Sender Nonce")
	m.Source = r.addr(af, "Source Address")
	m.Destination = r.addr(af, "Destination Address")
	m.FlowLabel = r.u32("Flow Label")
	if err := r.finish(); err != nil {
		return m, err
	}
	return m, m.validate()
}

func appendAddr(b []byte, a netip.Addr) []byte {
	if a.Is4() {
		v := a.As4()
		return append(b, v[:]...)
	}
	v := a.As16()
	return append(b, v[:]...)
}

// addr reads an address of family af (already checked to be 4 or 6).
func (r *reader) addr(af AF, field string) netip.Addr {
	s := r.take(af.AddrLen(), field)
	switch {
	case s == nil:
		return netip.Addr{}
	case af == AF4:
		return netip.AddrFrom4([4]byte(s))
	default:
		return netip.AddrFrom16([16]byte(s))
	}
}
