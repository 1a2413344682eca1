package wire

import (
	"encoding/binary"
	"fmt"
)

// Version is the only CREM version this package speaks.
const Version = 1

// HeaderLen is the size of the common header: Version, Type, Flags, Length, Flow ID.
const HeaderLen = 8

// MaxLength is the largest message the 16-bit Length field can describe.
const MaxLength = 0xffff

// Type is the 4-bit message type of the common header.
type Type uint8

// The message types of the draft's common header.
const (
	TypeRepair        Type = 1
	TypeHello         Type = 2
	TypeHelloAck      Type = 3
	TypeParamUpdate   Type = 4
	TypeParamAck      Type = 5
	TypeRepairRequest Type = 6
	TypeLossReport    Type = 7
	TypePathReport    Type = 8
	TypeClose         Type = 9
)

var typeNames = [...]string{
	TypeRepair:        "REPAIR",
	TypeHello:         "HELLO",
	TypeHelloAck:      "HELLO_ACK",
	TypeParamUpdate:   "PARAM_UPDATE",
	TypeParamAck:      "PARAM_ACK",
	TypeRepairRequest: "REPAIR_REQUEST",
	TypeLossReport:    "LOSS_REPORT",
	TypePathReport:    "PATH_REPORT",
	TypeClose:         "CLOSE",
}

// Known reports whether t is one of the nine types of the draft.
func (t Type) Known() bool { return t >= TypeRepair && t <= TypeClose }

// String returns the draft's name of the type, e.g. "HELLO_ACK".
func (t Type) String() string {
	if t.Known() {
		return typeNames[t]
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// Flag bits. Each message defines its own; undefined bits are written as zero and ignored on
// parse, like reserved fields.
const (
	FlagRepairRetx      = 0x80 // REPAIR: coded retransmission, Lost Source Bitmap present
	FlagRepairLast      = 0x40 // REPAIR: last symbol the CSF intends to send for the block this round
	FlagRepairInfo      = 0x20 // REPAIR: block information only, no symbol
	FlagRequestFallback = 0x20 // REPAIR_REQUEST: answer with Source Copy symbols
	FlagRequestRanges   = 0x10 // REPAIR_REQUEST: PSN-range form
	FlagPathTruncated   = 0x80 // PATH_REPORT: dropped-PSN lists were cut to fit the path MTU
)

// Header is the common header every CREM message starts with.
type Header struct {
	Version uint8
	Type    Type
	Flags   uint8
	Length  uint16 // the whole message, header included
	FlowID  uint32
}

// ParseHeader reads the common header of the datagram b and checks its Length against len(b).
// An unknown Version or Type yields an error matching ErrDiscard; a datagram that is too short
// for the header or whose Length differs from its size yields a *FieldError.
//
// b must be the whole datagram: CREM puts one message in each UDP datagram, so a Length that
// disagrees with the datagram either way means the message was cut or padded by someone.
func ParseHeader(b []byte) (Header, error) {
	var h Header
	if len(b) == 0 {
		return h, fieldErr(0, "Version", "empty datagram")
	}
	h.Version = b[0] >> 4
	h.Type = Type(b[0] & 0x0f)
	if h.Version != Version {
		return h, &DiscardError{Field: "Version", Value: h.Version}
	}
	if !h.Type.Known() {
		return h, &DiscardError{Field: "Type", Value: uint8(h.Type)}
	}
	if len(b) < HeaderLen {
		field := "Flow ID"
		switch {
		case len(b) < 2:
			field = "Flags"
		case len(b) < 4:
			field = "Length"
		}
		return h, fieldErr(h.Type, field, "datagram of %d octets ends inside the %d-octet header", len(b), HeaderLen)
	}
	h.Flags = b[1]
	h.Length = binary.BigEndian.Uint16(b[2:])
	h.FlowID = binary.BigEndian.Uint32(b[4:])
	switch {
	case int(h.Length) > len(b):
		return h, fieldErr(h.Type, "Length", "%d exceeds the datagram's %d octets (truncated message)", h.Length, len(b))
	case int(h.Length) < len(b):
		return h, fieldErr(h.Type, "Length", "%d is less than the datagram's %d octets", h.Length, len(b))
	}
	return h, nil
}

// parseHeaderOf parses the header of b and insists on type t, for the per-message parsers.
func parseHeaderOf(b []byte, t Type) (Header, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return h, err
	}
	if h.Type != t {
		return h, fieldErr(h.Type, "Type", "is %v, not %v", h.Type, t)
	}
	return h, nil
}

// appendHeader appends the common header of a message of length octets.
func appendHeader(b []byte, t Type, flags uint8, length int, flowID uint32) []byte {
	b = append(b, Version<<4|uint8(t), flags)
	b = binary.BigEndian.AppendUint16(b, uint16(length))
	return binary.BigEndian.AppendUint32(b, flowID)
}

// checkLength refuses a message that the 16-bit Length field cannot describe.
func checkLength(t Type, n int) error {
	if n > MaxLength {
		return fieldErr(t, "Length", "%d octets exceeds the maximum of %d", n, MaxLength)
	}
	return nil
}

// reader walks a message body. The first field that does not fit records an error naming that
// field; later reads return zero, so a parser can read everything and check r.err once.
type reader struct {
	b   []byte
	off int
	t   Type
	err error
}

func (r *reader) take(n int, field string) []byte {
	if r.err != nil || len(r.b)-r.off < n {
		r.short(n, field)
		return nil
	}
	s := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return s
}

// short records that field does not fit, unless an earlier field already failed. It is kept out
// of take so that take stays small enough to inline.
func (r *reader) short(n int, field string) {
	if r.err == nil {
		r.err = fieldErr(r.t, field, "the %d-octet message ends inside this field (octets %d to %d)", len(r.b), r.off, r.off+n-1)
	}
}

func (r *reader) u8(field string) uint8 {
	if s := r.take(1, field); s != nil {
		return s[0]
	}
	return 0
}

func (r *reader) u16(field string) uint16 {
	if s := r.take(2, field); s != nil {
		return binary.BigEndian.Uint16(s)
	}
	return 0
}

func (r *reader) u24(field string) uint32 {
	if s := r.take(3, field); s != nil {
		return uint32(s[0])<<16 | uint32(s[1])<<8 | uint32(s[2])
	}
	return 0
}

func (r *reader) u32(field string) uint32 {
	if s := r.take(4, field); s != nil {
		return binary.BigEndian.Uint32(s)
	}
	return 0
}

func (r *reader) u64(field string) uint64 {
	if s := r.take(8, field); s != nil {
		return binary.BigEndian.Uint64(s)
	}
	return 0
}

// finish reports the first error, or octets left over after the last field.
func (r *reader) finish() error {
	if r.err == nil && r.off != len(r.b) {
		r.err = fieldErr(r.t, "Length", "%d octets, but the %v ends at octet %d", len(r.b), r.t, r.off)
	}
	return r.err
}

func appendU24(b []byte, v uint32) []byte {
	return append(b, byte(v>>16), byte(v>>8), byte(v))
}
