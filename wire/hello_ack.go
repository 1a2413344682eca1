package wire

import "encoding/binary"

// helloAckLen is the fixed size of HELLO_ACK, which is never larger than a HELLO (draft,
// Security Considerations: no reflection amplification).
const helloAckLen = HeaderLen + capabilitiesLen + 8 + 4

// HelloAck is a HELLO_ACK message (type 3): the CRF accepts a flow, assigns its Flow ID and
// states its own schemes and limits.
type HelloAck struct {
	FlowID uint32 // the assigned Flow ID
	// Capabilities are the CRF's; RDMAMTU echoes the HELLO's.
	Capabilities
	AF            AF // echoed from the HELLO
	SenderNonce   uint64
	MaxOpenBlocks uint16 // blocks the CRF can hold at once
}

// Type returns TypeHelloAck.
func (m *HelloAck) Type() Type { return TypeHelloAck }

// Length returns the octets the message occupies on the wire: always 32.
func (m *HelloAck) Length() int { return helloAckLen }

func (m *HelloAck) validate() error {
	if err := m.Capabilities.validate(TypeHelloAck); err != nil {
		return err
	}
	if !m.AF.Valid() {
		return fieldErr(TypeHelloAck, "AF", "%d is neither 4 nor 6", uint8(m.AF))
	}
	if m.MaxOpenBlocks == 0 {
		return fieldErr(TypeHelloAck, "Max Open Blocks", "0: a CRF that can hold no block does not answer (RULINGS C3)")
	}
	return nil
}

// Append validates the message and appends it, common header included, to b.
func (m *HelloAck) Append(b []byte) ([]byte, error) {
	if err := m.validate(); err != nil {
		return b, err
	}
	b = appendHeader(b, TypeHelloAck, 0, helloAckLen, m.FlowID)
	b = m.Capabilities.append(b, m.AF)
	b = binary.BigEndian.AppendUint64(b, m.SenderNonce)
	b = binary.BigEndian.AppendUint16(b, m.MaxOpenBlocks)
	return append(b, 0, 0), nil // Reserved
}

// ParseHelloAck parses the datagram b as a HELLO_ACK message.
func ParseHelloAck(b []byte) (HelloAck, error) {
	var m HelloAck
	h, err := parseHeaderOf(b, TypeHelloAck)
	if err != nil {
		return m, err
	}
	m.FlowID = h.FlowID
	r := reader{b: b, off: HeaderLen, t: TypeHelloAck}
	m.AF = m.Capabilities.read(&r)
	m.SenderNonce = r.u64("Sender Nonce")
	m.MaxOpenBlocks = r.u16("Max Open Blocks")
	r.take(2, "Reserved")
	if err := r.finish(); err != nil {
		return m, err
	}
	return m, m.validate()
}
