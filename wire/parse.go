package wire

// Message is implemented by the nine CREM messages (pointers to Repair, Hello, HelloAck,
// ParamUpdate, ParamAck, RepairRequest, LossReport, PathReport, Close).
type Message interface {
	// Type returns the message type of the common header.
	Type() Type
	// Append validates the message and appends it, common header included, to b. On error b
	// is returned unchanged.
	Append(b []byte) ([]byte, error)
	// Length returns the octets the message occupies on the wire.
	Length() int
}

var (
	_ Message = (*Repair)(nil)
	_ Message = (*Hello)(nil)
	_ Message = (*HelloAck)(nil)
	_ Message = (*ParamUpdate)(nil)
	_ Message = (*ParamAck)(nil)
	_ Message = (*RepairRequest)(nil)
	_ Message = (*LossReport)(nil)
	_ Message = (*PathReport)(nil)
	_ Message = (*Close)(nil)
)

// Parse parses the datagram b as whichever CREM message its header names. An unknown Version or
// Type yields an error matching ErrDiscard; any other malformed input, a *FieldError. Parse
// allocates the returned message; a caller on the packet path uses ParseHeader and the parser of
// the type instead (ParseRepair allocates nothing).
func Parse(b []byte) (Message, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return nil, err
	}
	switch h.Type {
	case TypeRepair:
		return wrap(ParseRepair(b))
	case TypeHello:
		return wrap(ParseHello(b))
	case TypeHelloAck:
		return wrap(ParseHelloAck(b))
	case TypeParamUpdate:
		return wrap(ParseParamUpdate(b))
	case TypeParamAck:
		return wrap(ParseParamAck(b))
	case TypeRepairRequest:
		return wrap(ParseRepairRequest(b))
	case TypeLossReport:
		return wrap(ParseLossReport(b))
	case TypePathReport:
		return wrap(ParsePathReport(b))
	default: // TypeClose: ParseHeader admits only the nine types
		return wrap(ParseClose(b))
	}
}

// wrap turns a parser's value result into a Message, or nil on error.
func wrap[T any, PT interface {
	*T
	Message
}](m T, err error) (Message, error) {
	if err != nil {
		return nil, err
	}
	return PT(&m), nil
}
