package wire

import (
	"encoding/binary"

	"github.com/crem-project/crem/psn"
)

const paramUpdateLen = HeaderLen + 12

// ParamUpdate is a PARAM_UPDATE message (type 4): the CSF proposes configuration ConfigID,
// to take effect for blocks that start at or after EffectivePSN once acknowledged.
type ParamUpdate struct {
	FlowID       uint32
	ConfigID     uint8
	Scheme       Scheme
	K            uint8  // 1..255
	M            uint8  // repair symbols per block; k + m <= 255 (RULINGS C6 a)
	T            uint16 // symbol length
	EffectivePSN psn.PSN
}

// Type returns TypeParamUpdate.
func (m *ParamUpdate) Type() Type { return TypeParamUpdate }

// Length returns the octets the message occupies on the wire: always 20.
func (m *ParamUpdate) Length() int { return paramUpdateLen }

func (m *ParamUpdate) validate() error {
	const t = TypeParamUpdate
	if err := checkK(t, m.K); err != nil {
		return err
	}
	if int(m.K)+int(m.M) > 255 {
		return fieldErr(t, "m", "%d with k = %d: k + m exceeds 255 (RULINGS C6 a)", m.M, m.K)
	}
	if m.Scheme == SchemeXOR && m.M > 1 {
		return fieldErr(t, "m", "%d, but the XOR scheme has a single repair symbol", m.M)
	}
	if m.T < 2 {
		return fieldErr(t, "T", "%d is less than 2, a symbol's own length prefix", m.T)
	}
	// The configuration is useless if its coded retransmissions cannot be sent.
	if maxT := MaxLength - repairFixedLen - 2*4*psn.Words(int(m.K)); int(m.T) > maxT {
		return fieldErr(t, "T", "%d does not fit a REPAIR message with k = %d (at most %d)", m.T, m.K, maxT)
	}
	return checkPSN(t, "Effective PSN", m.EffectivePSN)
}

// Append validates the message and appends it, common header included, to b.
func (m *ParamUpdate) Append(b []byte) ([]byte, error) {
	if err := m.validate(); err != nil {
		return b, err
	}
	b = appendHeader(b, TypeParamUpdate, 0, paramUpdateLen, m.FlowID)
	b = append(b, m.ConfigID, uint8(m.Scheme), m.K, m.M)
	b = binary.BigEndian.AppendUint16(b, m.T)
	b = append(b, 0, 0) // Reserved
	b = appendU24(b, uint32(m.EffectivePSN))
	return append(b, 0), nil // Reserved
}

// ParseParamUpdate parses the datagram b as a PARAM_UPDATE message.
func ParseParamUpdate(b []byte) (ParamUpdate, error) {
	var m ParamUpdate
	h, err := parseHeaderOf(b, TypeParamUpdate)
	if err != nil {
		return m, err
	}
	m.FlowID = h.FlowID
	r := reader{b: b, off: HeaderLen, t: TypeParamUpdate}
	m.ConfigID = r.u8("Config ID")
	m.Scheme = Scheme(r.u8("Scheme"))
	m.K = r.u8("k")
	m.M = r.u8("m")
	m.T = r.u16("T")
	r.take(2, "Reserved")
	m.EffectivePSN = psn.PSN(r.u24("Effective PSN"))
	r.take(1, "Reserved")
	if err := r.finish(); err != nil {
		return m, err
	}
	return m, m.validate()
}
