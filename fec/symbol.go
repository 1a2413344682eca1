package fec

import (
	"encoding/binary"
	"fmt"
)

// Symbol lengths: the 2-octet length prefix at least, and at most what the REPAIR message's
// 16-bit Symbol Length field carries.
const (
	MinT = 2
	MaxT = 65535
)

// CheckT reports whether T is a symbol length CREM can carry.
func CheckT(T int) error {
	if T < MinT || T > MaxT {
		return fmt.Errorf("fec: T = %d (want %d to %d): %w", T, MinT, MaxT, ErrSymbolLength)
	}
	return nil
}

// AppendSymbol appends to dst the source symbol of payload P for symbol length T:
// uint16(len(P)) || P || zero padding to T octets. It allocates only when dst lacks capacity,
// so AppendSymbol(buf[:0], p, T) reuses buf.
func AppendSymbol(dst, payload []byte, T int) ([]byte, error) {
	if err := CheckT(T); err != nil {
		return dst, err
	}
	if len(payload) > T-2 {
		return dst, fmt.Errorf("fec: payload of %d octets with T = %d: %w", len(payload), T, ErrPayloadLong)
	}
	n := len(dst)
	if cap(dst)-n < T {
		dst = append(dst, make([]byte, T)...)
	} else {
		dst = dst[:n+T]
	}
	s := dst[n:]
	binary.BigEndian.PutUint16(s, uint16(len(payload)))
	copy(s[2:], payload)
	clear(s[2+len(payload):])
	return dst, nil
}

// Payload returns the payload P that the source symbol sym carries (a subslice of sym, not a
// copy). The symbol length T is len(sym). A length prefix beyond T - 2 or non-zero padding
// means the symbol was not built from a payload (a wrong decode, a corrupt or forged repair),
// and is an error.
func Payload(sym []byte) ([]byte, error) {
	if len(sym) < MinT || len(sym) > MaxT {
		return nil, fmt.Errorf("fec: symbol of %d octets (want %d to %d): %w", len(sym), MinT, MaxT, ErrSymbolLength)
	}
	n := int(binary.BigEndian.Uint16(sym))
	if n > len(sym)-2 {
		return nil, fmt.Errorf("fec: length prefix %d in a symbol of %d octets: %w", n, len(sym), ErrLengthPrefix)
	}
	for _, b := range sym[2+n:] {
		if b != 0 {
			return nil, fmt.Errorf("fec: payload of %d octets in a symbol of %d octets: %w", n, len(sym), ErrPadding)
		}
	}
	return sym[2 : 2+n], nil
}
