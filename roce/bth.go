package roce

import "github.com/crem-project/crem/psn"

// BTHLen is the length of the Base Transport Header.
const BTHLen = 12

// BTH is the Base Transport Header that starts every RoCEv2 packet.
type BTH struct {
	OpCode   Opcode
	SE       bool   // solicited event
	M        bool   // migration request
	PadCount uint8  // 0..3 octets of pad after the payload
	TVer     uint8  // transport header version, 0..15 (0 today)
	PKey     uint16 // partition key
	Resv8    uint8  // the reserved octet 4 before DestQP; the ICRC masks it (RULINGS C12)
	DestQP   uint32 // 24 bits
	AckReq   bool
	Resv7    uint8 // the 7 reserved bits after AckReq
	PSN      psn.PSN
}

// ParseBTH decodes a BTH from the start of b and reports how many octets it read.
func ParseBTH(b []byte) (BTH, int, error) {
	if len(b) < BTHLen {
		return BTH{}, 0, errShort("BTH", BTHLen, len(b))
	}
	return BTH{
		OpCode:   Opcode(b[0]),
		SE:       b[1]&0x80 != 0,
		M:        b[1]&0x40 != 0,
		PadCount: b[1] >> 4 & 3,
		TVer:     b[1] & 0x0f,
		PKey:     uint16(b[2])<<8 | uint16(b[3]),
		Resv8:    b[4],
		DestQP:   get24(b[5:]),
		AckReq:   b[8]&0x80 != 0,
		Resv7:    b[8] & 0x7f,
		PSN:      psn.PSN(get24(b[9:])),
	}, BTHLen, nil
}

// Len returns the encoded length of the header.
func (h BTH) Len() int { return BTHLen }

// Append appends the encoded header to b.
func (h BTH) Append(b []byte) ([]byte, error) {
	switch {
	case h.PadCount > 3:
		return b, errField("BTH", "PadCount", uint64(h.PadCount), "exceeds 3")
	case h.TVer > 15:
		return b, errField("BTH", "TVer", uint64(h.TVer), "exceeds 4 bits")
	case h.DestQP > max24:
		return b, errField("BTH", "DestQP", uint64(h.DestQP), "exceeds 24 bits")
	case h.Resv7 > 0x7f:
		return b, errField("BTH", "Resv7", uint64(h.Resv7), "exceeds 7 bits")
	case h.PSN > psn.Mask:
		return b, errField("BTH", "PSN", uint64(h.PSN), "exceeds 24 bits")
	}
	b1 := h.PadCount<<4 | h.TVer
	if h.SE {
		b1 |= 0x80
	}
	if h.M {
		b1 |= 0x40
	}
	b8 := h.Resv7
	if h.AckReq {
		b8 |= 0x80
	}
	qp, p := h.DestQP, uint32(h.PSN)
	return append(b, byte(h.OpCode), b1, byte(h.PKey>>8), byte(h.PKey), h.Resv8,
		byte(qp>>16), byte(qp>>8), byte(qp), b8, byte(p>>16), byte(p>>8), byte(p)), nil
}
