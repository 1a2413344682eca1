package roce

import (
	"encoding/binary"
	"fmt"
)

// Packet is a RoCEv2 packet (a UDP payload to port 4791) taken apart: its headers, its
// payload and its ICRC. A parsed Packet's Payload aliases the parsed buffer.
type Packet struct {
	BTH          BTH
	Headers      Headers // the parts present after the BTH
	DETH         DETH
	RETH         RETH
	AtomicETH    AtomicETH
	AETH         AETH
	TCAETH       TCAETH
	AtomicAckETH AtomicAckETH
	ImmDt        ImmDt
	IETH         IETH
	Payload      []byte // without pad
	ICRC         uint32 // the CRC value; on the wire least significant octet first
}

// Has reports whether the packet carries all of the given parts.
func (p *Packet) Has(h Headers) bool { return p.Headers&h == h }

// HeaderLen returns the length of the BTH and the extension headers of the encoded packet.
func (p *Packet) HeaderLen() int { return headerLen(p.parts()) }

// headerLen returns the length of the BTH and the parts in h.
func headerLen(h Headers) int {
	n := BTHLen
	if h&HasDETH != 0 {
		n += DETHLen
	}
	if h&HasRETH != 0 {
		n += RETHLen
	}
	if h&HasAtomicETH != 0 {
		n += AtomicETHLen
	}
	if h&HasAETH != 0 {
		n += AETHLen
	}
	if h&HasTCAETH != 0 {
		n += TCAETHLen
	}
	if h&HasAtomicAckETH != 0 {
		n += AtomicAckETHLen
	}
	if h&HasImmDt != 0 {
		n += ImmDtLen
	}
	if h&HasIETH != 0 {
		n += IETHLen
	}
	return n
}

// PadLen returns the pad that rounds a payload of n octets up to a multiple of 4.
func PadLen(n int) int { return -n & 3 }

// Len returns the length of the encoded packet: headers, payload, pad and ICRC.
func (p *Packet) Len() int {
	return p.HeaderLen() + len(p.Payload) + PadLen(len(p.Payload)) + ICRCLen
}

// ParsePacket takes apart a RoCEv2 UDP payload: BTH, the extension headers its opcode carries,
// payload, pad (BTH PadCount octets) and ICRC. An ACKNOWLEDGE or ATOMIC ACKNOWLEDGE that is
// exactly TCAETHLen octets longer than its plain form carries a T/C AETH after its AETH
// (RULINGS T2). On error the returned packet holds the BTH if there was one, so that callers
// can still name the packet. It does not check the ICRC (see VerifyICRC).
func ParsePacket(b []byte) (Packet, error) {
	var p Packet
	if len(b) < BTHLen+ICRCLen {
		return p, errShort("packet", BTHLen+ICRCLen, len(b))
	}
	p.BTH, _, _ = ParseBTH(b)
	p.ICRC = binary.LittleEndian.Uint32(b[len(b)-ICRCLen:])
	body := b[BTHLen : len(b)-ICRCLen]
	info := p.BTH.OpCode.Info()
	if !info.Known {
		return p, fmt.Errorf("roce: packet: opcode %v: %w", p.BTH.OpCode, ErrUnknownOpcode)
	}
	p.Headers = info.Headers
	switch p.BTH.OpCode {
	case OpAcknowledge:
		if len(body) == AETHLen+TCAETHLen {
			p.Headers |= HasTCAETH
		}
	case OpAtomicAcknowledge:
		if len(body) == AETHLen+TCAETHLen+AtomicAckETHLen {
			p.Headers |= HasTCAETH
		}
	}
	var n int
	var err error
	if p.Has(HasDETH) {
		if p.DETH, n, err = ParseDETH(body); err != nil {
			return p, err
		}
		body = body[n:]
	}
	if p.Has(HasRETH) {
		if p.RETH, n, err = ParseRETH(body); err != nil {
			return p, err
		}
		body = body[n:]
	}
	if p.Has(HasAtomicETH) {
		if p.AtomicETH, n, err = ParseAtomicETH(body); err != nil {
			return p, err
		}
		body = body[n:]
	}
	if p.Has(HasAETH) {
		if p.AETH, n, err = ParseAETH(body); err != nil {
			return p, err
		}
		body = body[n:]
	}
	if p.Has(HasTCAETH) {
		if p.TCAETH, n, err = ParseTCAETH(body); err != nil {
			return p, err
		}
		body = body[n:]
	}
	if p.Has(HasAtomicAckETH) {
		if p.AtomicAckETH, n, err = ParseAtomicAckETH(body); err != nil {
			return p, err
		}
		body = body[n:]
	}
	if p.Has(HasImmDt) {
		if p.ImmDt, n, err = ParseImmDt(body); err != nil {
			return p, err
		}
		body = body[n:]
	}
	if p.Has(HasIETH) {
		if p.IETH, n, err = ParseIETH(body); err != nil {
			return p, err
		}
		body = body[n:]
	}
	pad := int(p.BTH.PadCount)
	switch {
	case !p.Has(HasPayload) && len(body) != 0:
		return p, fmt.Errorf("roce: packet: %v carries no payload but %d octets follow its headers: %w",
			p.BTH.OpCode, len(body), ErrInvalid)
	case pad > len(body):
		return p, fmt.Errorf("roce: packet: pad count %d exceeds the %d octets after the headers: %w",
			pad, len(body), ErrInvalid)
	}
	p.Payload = body[:len(body)-pad]
	return p, nil
}

// parts returns the parts an encoded p carries: those of its opcode, and the T/C AETH when
// p.Headers asks for it on an ACKNOWLEDGE or ATOMIC ACKNOWLEDGE.
func (p *Packet) parts() Headers {
	h := opInfos[p.BTH.OpCode].Headers
	if p.Headers&HasTCAETH != 0 && (p.BTH.OpCode == OpAcknowledge || p.BTH.OpCode == OpAtomicAcknowledge) {
		h |= HasTCAETH
	}
	return h
}

// Append appends the encoded packet to b: the BTH with PadCount set to PadLen(len(Payload))
// (p.BTH.PadCount is ignored), the extension headers of the opcode in wire order (and the
// T/C AETH when p.Headers has HasTCAETH on an ACKNOWLEDGE or ATOMIC ACKNOWLEDGE), the payload,
// zero pad and p.ICRC. Compute the real ICRC afterwards with SealICRC or LogicalHeader.Seal.
// On error b is returned unchanged.
func (p *Packet) Append(b []byte) ([]byte, error) {
	if !opInfos[p.BTH.OpCode].Known {
		return b, fmt.Errorf("roce: packet: opcode %v: %w", p.BTH.OpCode, ErrUnknownOpcode)
	}
	h := p.parts()
	if len(p.Payload) > 0 && h&HasPayload == 0 {
		return b, fmt.Errorf("roce: packet: %v carries no payload, got %d octets: %w",
			p.BTH.OpCode, len(p.Payload), ErrInvalid)
	}
	start := len(b)
	bth := p.BTH
	bth.PadCount = uint8(PadLen(len(p.Payload)))
	b, err := bth.Append(b)
	if err == nil && h&HasDETH != 0 {
		b, err = p.DETH.Append(b)
	}
	if err == nil && h&HasRETH != 0 {
		b, err = p.RETH.Append(b)
	}
	if err == nil && h&HasAtomicETH != 0 {
		b, err = p.AtomicETH.Append(b)
	}
	if err == nil && h&HasAETH != 0 {
		b, err = p.AETH.Append(b)
	}
	if err == nil && h&HasTCAETH != 0 {
		b, err = p.TCAETH.Append(b)
	}
	if err == nil && h&HasAtomicAckETH != 0 {
		b, err = p.AtomicAckETH.Append(b)
	}
	if err == nil && h&HasImmDt != 0 {
		b, err = p.ImmDt.Append(b)
	}
	if err == nil && h&HasIETH != 0 {
		b, err = p.IETH.Append(b)
	}
	if err != nil {
		return b[:start], err
	}
	b = append(b, p.Payload...)
	for range bth.PadCount {
		b = append(b, 0)
	}
	return binary.LittleEndian.AppendUint32(b, p.ICRC), nil
}
