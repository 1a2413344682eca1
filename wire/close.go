package wire

const closeLen = HeaderLen + 4

// Close is a CLOSE message (type 9, RULINGS C2): either side ends the flow and both release it.
type Close struct {
	FlowID uint32
	Reason Reason
}

// Type returns TypeClose.
func (m *Close) Type() Type { return TypeClose }

// Length returns the octets the message occupies on the wire: always 12.
func (m *Close) Length() int { return closeLen }

// Append appends the message, common header included, to b. Every field value is valid.
func (m *Close) Append(b []byte) ([]byte, error) {
	b = appendHeader(b, TypeClose, 0, closeLen, m.FlowID)
	return append(b, uint8(m.Reason), 0, 0, 0), nil
}

// ParseClose parses the datagram b as a CLOSE message. Unassigned and private-use reasons are
// returned as they are: whatever the reason, the flow ends.
func ParseClose(b []byte) (Close, error) {
	var m Close
	h, err := parseHeaderOf(b, TypeClose)
	if err != nil {
		return m, err
	}
	m.FlowID = h.FlowID
	r := reader{b: b, off: HeaderLen, t: TypeClose}
	m.Reason = Reason(r.u8("Reason"))
	r.take(3, "Reserved")
	return m, r.finish()
}
