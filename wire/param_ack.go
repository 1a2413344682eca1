package wire

const paramAckLen = HeaderLen + 4

// ParamAck is a PARAM_ACK message (type 5): the CRF's answer to PARAM_UPDATE ConfigID. A CSF
// that receives a nonzero Status keeps its current configuration.
type ParamAck struct {
	FlowID   uint32
	ConfigID uint8
	Status   Status
}

// Type returns TypeParamAck.
func (m *ParamAck) Type() Type { return TypeParamAck }

// Length returns the octets the message occupies on the wire: always 12.
func (m *ParamAck) Length() int { return paramAckLen }

// Append appends the message, common header included, to b. Every field value is valid.
func (m *ParamAck) Append(b []byte) ([]byte, error) {
	b = appendHeader(b, TypeParamAck, 0, paramAckLen, m.FlowID)
	return append(b, m.ConfigID, uint8(m.Status), 0, 0), nil
}

// ParseParamAck parses the datagram b as a PARAM_ACK message. Unassigned and private-use
// statuses are returned as they are; they are all "not accepted".
func ParseParamAck(b []byte) (ParamAck, error) {
	var m ParamAck
	h, err := parseHeaderOf(b, TypeParamAck)
	if err != nil {
		return m, err
	}
	m.FlowID = h.FlowID
	r := reader{b: b, off: HeaderLen, t: TypeParamAck}
	m.ConfigID = r.u8("Config ID")
	m.Status = Status(r.u8("Status"))
	r.take(2, "Reserved")
	return m, r.finish()
}
