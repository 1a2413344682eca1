package wire

import (
	"encoding/binary"

	"github.com/crem-project/crem/psn"
)

const (
	requestBlockFixedLen = HeaderLen + 12 // up to the Lost Source Bitmap
	requestRangeFixedLen = HeaderLen + 4  // up to the first range
)

// MaxRanges is the most ranges a PSN-range REPAIR_REQUEST can carry within the 16-bit Length.
const MaxRanges = (MaxLength - requestRangeFixedLen) / 4

// RepairRequest is a REPAIR_REQUEST message (type 6): the CRF asks for coded retransmission (or,
// with Fallback, Source Copy symbols) for one block, or, in the PSN-range form, for lost PSNs of
// blocks it knows nothing about.
//
// The form is chosen by RangeForm (the RANGES flag). Append ignores the fields of the other form;
// ParseRepairRequest leaves them zero.
type RepairRequest struct {
	FlowID    uint32
	RangeForm bool   // RANGES: the PSN-range form
	Fallback  bool   // FALLBACK: answer with Source Copy symbols for the lost sources
	RequestID uint16 // never 0 (RULINGS C4)

	// Block form.
	ConfigID      uint8
	Scheme        Scheme
	K             uint8 // 1..255
	RepairsHeld   uint8 // r: repair symbols the CRF holds for the block
	BlockStartPSN psn.PSN
	SuggestedM    uint8      // M_s; at most X, the number of lost sources
	Lost          psn.Bitmap // the set L

	// PSN-range form: each range has a Count of 1..255.
	Ranges []psn.Range
}

// Type returns TypeRepairRequest.
func (m *RepairRequest) Type() Type { return TypeRepairRequest }

// Length returns the octets the message occupies on the wire.
func (m *RepairRequest) Length() int {
	if m.RangeForm {
		return requestRangeFixedLen + 4*len(m.Ranges)
	}
	return requestBlockFixedLen + 4*psn.Words(int(m.K))
}

func (m *RepairRequest) flags() uint8 {
	var f uint8
	if m.RangeForm {
		f |= FlagRequestRanges
	}
	if m.Fallback {
		f |= FlagRequestFallback
	}
	return f
}

func (m *RepairRequest) validate() error {
	const t = TypeRepairRequest
	if m.RequestID == 0 {
		return fieldErr(t, "Request ID", "0 is never a Request ID (RULINGS C4)")
	}
	if m.RangeForm {
		switch n := len(m.Ranges); {
		case n == 0:
			return fieldErr(t, "Range Count", "0 ranges")
		case n > MaxRanges:
			return fieldErr(t, "Range Count", "%d ranges exceed the %d a message can hold", n, MaxRanges)
		}
		for _, rg := range m.Ranges {
			if err := checkPSN(t, "Start PSN", rg.Start); err != nil {
				return err
			}
			if rg.Count == 0 || rg.Count > 255 {
				return fieldErr(t, "Count", "%d is out of range 1..255 (range starting at %v)", rg.Count, rg.Start)
			}
		}
		return nil
	}
	if err := checkK(t, m.K); err != nil {
		return err
	}
	if err := checkPSN(t, "Block Start PSN", m.BlockStartPSN); err != nil {
		return err
	}
	if err := checkBitmap(t, "Lost Source Bitmap", &m.Lost, m.K, false); err != nil {
		return err
	}
	// The draft: M_s MUST NOT exceed X.
	if x := m.Lost.Count(); int(m.SuggestedM) > x {
		return fieldErr(t, "Suggested M", "%d exceeds X = %d lost sources", m.SuggestedM, x)
	}
	return nil
}

// Append validates the message and appends it, common header included, to b.
func (m *RepairRequest) Append(b []byte) ([]byte, error) {
	if err := m.validate(); err != nil {
		return b, err
	}
	b = appendHeader(b, TypeRepairRequest, m.flags(), m.Length(), m.FlowID)
	if m.RangeForm {
		b = binary.BigEndian.AppendUint16(b, m.RequestID)
		b = binary.BigEndian.AppendUint16(b, uint16(len(m.Ranges)))
		for _, rg := range m.Ranges {
			b = appendU24(b, uint32(rg.Start))
			b = append(b, uint8(rg.Count))
		}
		return b, nil
	}
	b = append(b, m.ConfigID, uint8(m.Scheme), m.K, m.RepairsHeld)
	b = appendU24(b, uint32(m.BlockStartPSN))
	b = append(b, m.SuggestedM)
	b = binary.BigEndian.AppendUint16(b, m.RequestID)
	b = append(b, 0, 0) // Reserved
	return m.Lost.Append(b, int(m.K)), nil
}

// ParseRepairRequest parses the datagram b as a REPAIR_REQUEST message of either form.
func ParseRepairRequest(b []byte) (RepairRequest, error) {
	const t = TypeRepairRequest
	var m RepairRequest
	h, err := parseHeaderOf(b, t)
	if err != nil {
		return m, err
	}
	m.FlowID = h.FlowID
	m.RangeForm = h.Flags&FlagRequestRanges != 0
	m.Fallback = h.Flags&FlagRequestFallback != 0
	r := reader{b: b, off: HeaderLen, t: t}
	if m.RangeForm {
		m.RequestID = r.u16("Request ID")
		n := int(r.u16("Range Count"))
		if r.err == nil && n*4 != len(b)-r.off {
			return m, fieldErr(t, "Range Count", "%d ranges need %d octets, but %d follow", n, n*4, len(b)-r.off)
		}
		if n > 0 {
			m.Ranges = make([]psn.Range, n)
		}
		for i := range m.Ranges {
			m.Ranges[i].Start = psn.PSN(r.u24("Start PSN"))
			m.Ranges[i].Count = uint32(r.u8("Count"))
		}
	} else {
		m.ConfigID = r.u8("Config ID")
		m.Scheme = Scheme(r.u8("Scheme"))
		m.K = r.u8("k")
		m.RepairsHeld = r.u8("Repairs Held")
		m.BlockStartPSN = psn.PSN(r.u24("Block Start PSN"))
		m.SuggestedM = r.u8("Suggested M")
		m.RequestID = r.u16("Request ID")
		r.take(2, "Reserved")
		if r.err == nil {
			if err := checkK(t, m.K); err != nil {
				return m, err
			}
		}
		m.Lost = r.bitmap(m.K, "Lost Source Bitmap")
	}
	if err := r.finish(); err != nil {
		return m, err
	}
	return m, m.validate()
}
