package roce

import "fmt"

// AETH is the ACK Extended Transport Header: a syndrome and the responder's message sequence
// number.
type AETH struct {
	Syndrome uint8
	MSN      uint32 // 24 bits
}

// AckType is the kind of acknowledgement a syndrome encodes (its bits 6..5).
type AckType uint8

// The AETH syndrome types.
const (
	AckTypeACK      AckType = 0 // positive ACK; the low 5 bits are a credit count
	AckTypeRNRNAK   AckType = 1 // receiver not ready; the low 5 bits are a timer code
	AckTypeReserved AckType = 2
	AckTypeNAK      AckType = 3 // negative ACK; the low 5 bits are a NAK code
)

func (t AckType) String() string {
	switch t {
	case AckTypeACK:
		return "ACK"
	case AckTypeRNRNAK:
		return "RNR NAK"
	case AckTypeNAK:
		return "NAK"
	}
	return "reserved"
}

// NAKCode is the value of a NAK syndrome (syndromes 0x60..0x64).
type NAKCode uint8

// The NAK codes of RC.
const (
	NAKPSNSequenceError       NAKCode = 0
	NAKInvalidRequest         NAKCode = 1
	NAKRemoteAccessError      NAKCode = 2
	NAKRemoteOperationalError NAKCode = 3
	NAKInvalidRDRequest       NAKCode = 4
)

func (c NAKCode) String() string {
	switch c {
	case NAKPSNSequenceError:
		return "PSN sequence error"
	case NAKInvalidRequest:
		return "invalid request"
	case NAKRemoteAccessError:
		return "remote access error"
	case NAKRemoteOperationalError:
		return "remote operational error"
	case NAKInvalidRDRequest:
		return "invalid RD request"
	}
	return fmt.Sprintf("reserved NAK code %d", uint8(c))
}

// CreditInvalid is the credit count that says the responder does not report credits.
const CreditInvalid = 0x1f

// ACK returns the AETH of a positive acknowledgement with a 5-bit credit count.
func ACK(credit uint8, msn uint32) AETH { return AETH{Syndrome: credit & 0x1f, MSN: msn} }

// RNRNAK returns the AETH of a receiver-not-ready NAK with a 5-bit timer code.
func RNRNAK(timer uint8, msn uint32) AETH { return AETH{Syndrome: 0x20 | timer&0x1f, MSN: msn} }

// NAK returns the AETH of a NAK with the given code.
func NAK(code NAKCode, msn uint32) AETH { return AETH{Syndrome: 0x60 | uint8(code)&0x1f, MSN: msn} }

// Type returns the kind of acknowledgement.
func (a AETH) Type() AckType { return AckType(a.Syndrome >> 5 & 3) }

// Credit returns the credit count of a positive ACK.
func (a AETH) Credit() (uint8, bool) { return a.Syndrome & 0x1f, a.Type() == AckTypeACK }

// RNRTimer returns the timer code of an RNR NAK.
func (a AETH) RNRTimer() (uint8, bool) { return a.Syndrome & 0x1f, a.Type() == AckTypeRNRNAK }

// NAKCode returns the code of a NAK.
func (a AETH) NAKCode() (NAKCode, bool) { return NAKCode(a.Syndrome & 0x1f), a.Type() == AckTypeNAK }

func (a AETH) String() string {
	v := a.Syndrome & 0x1f
	switch a.Type() {
	case AckTypeACK:
		return fmt.Sprintf("ACK credit %d msn %d", v, a.MSN)
	case AckTypeRNRNAK:
		return fmt.Sprintf("RNR NAK timer %d msn %d", v, a.MSN)
	case AckTypeNAK:
		return fmt.Sprintf("NAK %v msn %d", NAKCode(v), a.MSN)
	}
	return fmt.Sprintf("reserved syndrome %#02x msn %d", a.Syndrome, a.MSN)
}

// ParseAETH decodes an AETH from the start of b and reports how many octets it read.
func ParseAETH(b []byte) (AETH, int, error) {
	if len(b) < AETHLen {
		return AETH{}, 0, errShort("AETH", AETHLen, len(b))
	}
	return AETH{Syndrome: b[0], MSN: get24(b[1:])}, AETHLen, nil
}

// Len returns the encoded length of the header.
func (a AETH) Len() int { return AETHLen }

// Append appends the encoded header to b.
func (a AETH) Append(b []byte) ([]byte, error) {
	if a.MSN > max24 {
		return b, errField("AETH", "MSN", uint64(a.MSN), "exceeds 24 bits")
	}
	return append(b, a.Syndrome, byte(a.MSN>>16), byte(a.MSN>>8), byte(a.MSN)), nil
}
