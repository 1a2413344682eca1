package roce

import (
	"errors"
	"fmt"
)

// ErrShort is wrapped by every error about input that ends before a header or field does.
var ErrShort = errors.New("input too short")

// ErrInvalid is wrapped by every error about a field value outside its range or rules.
var ErrInvalid = errors.New("invalid field")

// ErrUnknownOpcode reports an opcode whose headers this package does not know.
var ErrUnknownOpcode = errors.New("unknown opcode")

// ErrICRC reports a packet whose ICRC does not match its contents.
var ErrICRC = errors.New("icrc mismatch")

func errShort(what string, need, have int) error {
	return fmt.Errorf("roce: %s: need %d octets, have %d: %w", what, need, have, ErrShort)
}

func errField(what, field string, v uint64, rule string) error {
	return fmt.Errorf("roce: %s: %s %#x %s: %w", what, field, v, rule, ErrInvalid)
}

// Big-endian 24-bit access, the width of QPs, PSNs and MSNs on the wire.
func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }

const max24 = 1<<24 - 1
