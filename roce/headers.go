package roce

import "encoding/binary"

// Lengths of the fixed extension headers.
const (
	RETHLen         = 16
	AETHLen         = 4
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	DETHLen         = 8
)

// RETH is the RDMA Extended Transport Header of RDMA WRITE and READ requests.
type RETH struct {
	VA        uint64 // virtual address
	RKey      uint32 // remote key
	DMALength uint32 // octets the whole message moves
}

// ParseRETH decodes a RETH from the start of b and reports how many octets it read.
func ParseRETH(b []byte) (RETH, int, error) {
	if len(b) < RETHLen {
		return RETH{}, 0, errShort("RETH", RETHLen, len(b))
	}
	return RETH{
		VA:        binary.BigEndian.Uint64(b),
		RKey:      binary.BigEndian.Uint32(b[8:]),
		DMALength: binary.BigEndian.Uint32(b[12:]),
	}, RETHLen, nil
}

// Len returns the encoded length of the header.
func (h RETH) Len() int { return RETHLen }

// Append appends the encoded header to b; every value is valid.
func (h RETH) Append(b []byte) ([]byte, error) {
	b = binary.BigEndian.AppendUint64(b, h.VA)
	b = binary.BigEndian.AppendUint32(b, h.RKey)
	return binary.BigEndian.AppendUint32(b, h.DMALength), nil
}

// AtomicETH is the Atomic Extended Transport Header of COMPARE SWAP and FETCH ADD requests.
type AtomicETH struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64 // swap data (COMPARE SWAP) or add data (FETCH ADD)
	Compare uint64
}

// ParseAtomicETH decodes an AtomicETH from the start of b and reports how many octets it read.
func ParseAtomicETH(b []byte) (AtomicETH, int, error) {
	if len(b) < AtomicETHLen {
		return AtomicETH{}, 0, errShort("AtomicETH", AtomicETHLen, len(b))
	}
	return AtomicETH{
		VA:      binary.BigEndian.Uint64(b),
		RKey:    binary.BigEndian.Uint32(b[8:]),
		SwapAdd: binary.BigEndian.Uint64(b[12:]),
		Compare: binary.BigEndian.Uint64(b[20:]),
	}, AtomicETHLen, nil
}

// Len returns the encoded length of the header.
func (h AtomicETH) Len() int { return AtomicETHLen }

// Append appends the encoded header to b; every value is valid.
func (h AtomicETH) Append(b []byte) ([]byte, error) {
	b = binary.BigEndian.AppendUint64(b, h.VA)
	b = binary.BigEndian.AppendUint32(b, h.RKey)
	b = binary.BigEndian.AppendUint64(b, h.SwapAdd)
	return binary.BigEndian.AppendUint64(b, h.Compare), nil
}

// AtomicAckETH is the Atomic Acknowledge Extended Transport Header: the original remote data.
type AtomicAckETH struct {
	OrigRemData uint64
}

// ParseAtomicAckETH decodes an AtomicAckETH from the start of b and reports how many octets it
// read.
func ParseAtomicAckETH(b []byte) (AtomicAckETH, int, error) {
	if len(b) < AtomicAckETHLen {
		return AtomicAckETH{}, 0, errShort("AtomicAckETH", AtomicAckETHLen, len(b))
	}
	return AtomicAckETH{OrigRemData: binary.BigEndian.Uint64(b)}, AtomicAckETHLen, nil
}

// Len returns the encoded length of the header.
func (h AtomicAckETH) Len() int { return AtomicAckETHLen }

// Append appends the encoded header to b; every value is valid.
func (h AtomicAckETH) Append(b []byte) ([]byte, error) {
	return binary.BigEndian.AppendUint64(b, h.OrigRemData), nil
}

// ImmDt is the Immediate Data header of the *_WITH_IMMEDIATE opcodes.
type ImmDt uint32

// ParseImmDt decodes an ImmDt from the start of b and reports how many octets it read.
func ParseImmDt(b []byte) (ImmDt, int, error) {
	if len(b) < ImmDtLen {
		return 0, 0, errShort("ImmDt", ImmDtLen, len(b))
	}
	return ImmDt(binary.BigEndian.Uint32(b)), ImmDtLen, nil
}

// Len returns the encoded length of the header.
func (h ImmDt) Len() int { return ImmDtLen }

// Append appends the encoded header to b; every value is valid.
func (h ImmDt) Append(b []byte) ([]byte, error) {
	return binary.BigEndian.AppendUint32(b, uint32(h)), nil
}

// IETH is the Invalidate Extended Transport Header of the *_WITH_INVALIDATE opcodes: the R_Key
// to invalidate.
type IETH uint32

// ParseIETH decodes an IETH from the start of b and reports how many octets it read.
func ParseIETH(b []byte) (IETH, int, error) {
	if len(b) < IETHLen {
		return 0, 0, errShort("IETH", IETHLen, len(b))
	}
	return IETH(binary.BigEndian.Uint32(b)), IETHLen, nil
}

// Len returns the encoded length of the header.
func (h IETH) Len() int { return IETHLen }

// Append appends the encoded header to b; every value is valid.
func (h IETH) Append(b []byte) ([]byte, error) {
	return binary.BigEndian.AppendUint32(b, uint32(h)), nil
}

// DETH is the Datagram Extended Transport Header of UD packets.
type DETH struct {
	QKey  uint32
	Resv8 uint8
	SrcQP uint32 // 24 bits
}

// ParseDETH decodes a DETH from the start of b and reports how many octets it read.
func ParseDETH(b []byte) (DETH, int, error) {
	if len(b) < DETHLen {
		return DETH{}, 0, errShort("DETH", DETHLen, len(b))
	}
	return DETH{QKey: binary.BigEndian.Uint32(b), Resv8: b[4], SrcQP: get24(b[5:])}, DETHLen, nil
}

// Len returns the encoded length of the header.
func (h DETH) Len() int { return DETHLen }

// Append appends the encoded header to b.
func (h DETH) Append(b []byte) ([]byte, error) {
	if h.SrcQP > max24 {
		return b, errField("DETH", "SrcQP", uint64(h.SrcQP), "exceeds 24 bits")
	}
	b = binary.BigEndian.AppendUint32(b, h.QKey)
	return append(b, h.Resv8, byte(h.SrcQP>>16), byte(h.SrcQP>>8), byte(h.SrcQP)), nil
}
