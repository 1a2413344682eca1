package wire

import (
	"encoding/binary"

	"github.com/crem-project/crem/psn"
)

// repairFixedLen is the REPAIR header and fixed body: up to and including Symbol Length.
const repairFixedLen = HeaderLen + 12

// Repair is a REPAIR message (type 1): one repair symbol of a source block, or, with Info, only
// the block's description (Block Start PSN, k, Present Bitmap).
type Repair struct {
	FlowID uint32
	Retx   bool // coded retransmission over Lost; the Lost Source Bitmap is on the wire
	Last   bool // the last symbol the CSF intends to send for the block in this round
	Info   bool // block information only: Symbol Length 0, no symbol

	ConfigID    uint8
	Scheme      Scheme
	K           uint8 // positions in the block, 1..255
	RepairIndex uint8

	BlockStartPSN psn.PSN
	// RepairSessionID is zero for ordinary repair symbols; a coded retransmission carries the
	// Request ID it answers (RULINGS C4).
	RepairSessionID uint16

	Present psn.Bitmap // positions that carry a source packet
	Lost    psn.Bitmap // the set L; only with Retx

	// Symbol is the repair symbol; its length is the Symbol Length T. ParseRepair makes it alias
	// the datagram rather than copy it, so the caller must not reuse the datagram while the
	// symbol is in use.
	Symbol []byte
}

// Type returns TypeRepair.
func (m *Repair) Type() Type { return TypeRepair }

// Length returns the octets the message occupies on the wire.
func (m *Repair) Length() int {
	words := psn.Words(int(m.K))
	if m.Retx {
		words *= 2
	}
	return repairFixedLen + words*4 + len(m.Symbol)
}

func (m *Repair) flags() uint8 {
	var f uint8
	if m.Retx {
		f |= FlagRepairRetx
	}
	if m.Last {
		f |= FlagRepairLast
	}
	if m.Info {
		f |= FlagRepairInfo
	}
	return f
}

// validate holds the rules both Append and ParseRepair enforce.
func (m *Repair) validate() error {
	const t = TypeRepair
	if err := checkK(t, m.K); err != nil {
		return err
	}
	if err := checkPSN(t, "Block Start PSN", m.BlockStartPSN); err != nil {
		return err
	}
	// An INFO message may name PSNs of no block, none present (protocol notes W11).
	if err := checkBitmap(t, "Present Bitmap", &m.Present, m.K, m.Info); err != nil {
		return err
	}
	if m.Retx {
		if m.Info {
			return fieldErr(t, "Flags", "RETX and INFO together: a coded retransmission carries a symbol, INFO none")
		}
		if err := checkBitmap(t, "Lost Source Bitmap", &m.Lost, m.K, false); err != nil {
			return err
		}
		if !m.Present.Contains(&m.Lost) {
			j := firstOf(m.Lost.AndNot(m.Present))
			return fieldErr(t, "Lost Source Bitmap", "position %d is absent in the Present Bitmap", j)
		}
		if m.RepairSessionID == 0 {
			return fieldErr(t, "Repair Session ID", "0 in a coded retransmission, which carries its nonzero Request ID (RULINGS C4)")
		}
	} else {
		if !m.Lost.Empty() {
			return fieldErr(t, "Lost Source Bitmap", "set without the RETX flag")
		}
		// The draft: Repair Session ID is zero for ordinary repair symbols. The CRF tells
		// duplicates apart by (Repair Session ID, Repair Index) (RULINGS C7 d), so an ordinary
		// symbol with a session would be filed under the wrong round.
		if !m.Info && (m.Scheme == SchemeCauchy || m.Scheme == SchemeXOR) && m.RepairSessionID != 0 {
			return fieldErr(t, "Repair Session ID", "%d on an ordinary repair symbol, which carries 0", m.RepairSessionID)
		}
	}
	switch n := len(m.Symbol); {
	case m.Info && n != 0:
		return fieldErr(t, "Symbol Length", "%d with the INFO flag, which requires 0", n)
	case !m.Info && n < 2:
		return fieldErr(t, "Symbol Length", "%d is less than 2, the symbol's own length prefix", n)
	case n > MaxLength:
		return fieldErr(t, "Symbol Length", "%d exceeds %d", n, MaxLength)
	}
	if !m.Info {
		if err := checkRepairIndex(t, m.Scheme, m.RepairIndex, m.K, &m.Present); err != nil {
			return err
		}
	}
	return checkLength(t, m.Length())
}

// checkRepairIndex applies the index rules of the schemes of RULINGS C1. Unassigned and
// private-use schemes are left to whoever defines them.
func checkRepairIndex(t Type, s Scheme, i, k uint8, present *psn.Bitmap) error {
	switch s {
	case SchemeSourceCopy:
		if i >= k || !present.Has(int(i)) {
			return fieldErr(t, "Repair Index", "%d is not a present position of the block (Source Copy, k = %d)", i, k)
		}
	case SchemeCauchy:
		if int(i)+int(k) > 255 {
			return fieldErr(t, "Repair Index", "%d with k = %d: i + k exceeds 255 (Cauchy coefficient undefined)", i, k)
		}
	case SchemeXOR:
		if i != 0 {
			return fieldErr(t, "Repair Index", "%d, but the XOR scheme has only Repair Index 0", i)
		}
	}
	return nil
}

// firstOf returns the lowest position of b, or -1.
func firstOf(b psn.Bitmap) int {
	for j := 0; j < psn.MaxPositions; j++ {
		if b.Has(j) {
			return j
		}
	}
	return -1
}

// Append validates the message and appends it, common header included, to b. It does not
// allocate when b has room.
func (m *Repair) Append(b []byte) ([]byte, error) {
	if err := m.validate(); err != nil {
		return b, err
	}
	b = appendHeader(b, TypeRepair, m.flags(), m.Length(), m.FlowID)
	b = append(b, m.ConfigID, uint8(m.Scheme), m.K, m.RepairIndex)
	b = appendU24(b, uint32(m.BlockStartPSN))
	b = append(b, 0) // Reserved
	b = binary.BigEndian.AppendUint16(b, m.RepairSessionID)
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.Symbol)))
	b = m.Present.Append(b, int(m.K))
	if m.Retx {
		b = m.Lost.Append(b, int(m.K))
	}
	return append(b, m.Symbol...), nil
}

// ParseRepair parses the datagram b as a REPAIR message. It does not allocate: the returned
// Symbol aliases b.
func ParseRepair(b []byte) (Repair, error) {
	var m Repair
	h, err := parseHeaderOf(b, TypeRepair)
	if err != nil {
		return m, err
	}
	m.FlowID = h.FlowID
	m.Retx = h.Flags&FlagRepairRetx != 0
	m.Last = h.Flags&FlagRepairLast != 0
	m.Info = h.Flags&FlagRepairInfo != 0

	r := reader{b: b, off: HeaderLen, t: TypeRepair}
	m.ConfigID = r.u8("Config ID")
	m.Scheme = Scheme(r.u8("Scheme"))
	m.K = r.u8("k")
	m.RepairIndex = r.u8("Repair Index")
	m.BlockStartPSN = psn.PSN(r.u24("Block Start PSN"))
	r.take(1, "Reserved")
	m.RepairSessionID = r.u16("Repair Session ID")
	symLen := int(r.u16("Symbol Length"))
	if r.err == nil {
		// k sizes the bitmaps, so a bad k would otherwise surface as a misleading Length error.
		if err := checkK(TypeRepair, m.K); err != nil {
			return m, err
		}
	}
	m.Present = r.bitmap(m.K, "Present Bitmap")
	if m.Retx {
		m.Lost = r.bitmap(m.K, "Lost Source Bitmap")
	}
	if sym := r.take(symLen, "Repair Symbol"); len(sym) > 0 {
		m.Symbol = sym
	}
	if err := r.finish(); err != nil {
		return m, err
	}
	return m, m.validate()
}
