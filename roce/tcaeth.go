package roce

import "github.com/crem-project/crem/psn"

// TCAETHLen is the T/C AETH fragment on the wire: ten 24-bit fields (30 octets) and two octets
// of zero padding, because InfiniBand headers are whole multiples of 4 octets (RULINGS T1).
const TCAETHLen = 32

// TCAETHMaxSegments is how many received ranges beyond the cumulative one a T/C AETH carries.
const TCAETHMaxSegments = 3

// Segment is a range of received PSNs, Left through Right inclusive.
type Segment struct {
	Left, Right psn.PSN
}

// TCAETH is the T/C AETH fragment of an extended ACK: the cumulative Last Finished PSN and up
// to three further received ranges, ascending and non-overlapping (RULINGS T1, T3).
type TCAETH struct {
	LastFinished psn.PSN
	NumSegs      int // Seg fields used, 0..3; SegmentNum on the wire is 1 + NumSegs
	Segs         [TCAETHMaxSegments]Segment
}

// SegmentNum returns the SegmentNum field: the blocks reported, the cumulative one included.
func (t TCAETH) SegmentNum() uint32 { return uint32(t.NumSegs) + 1 }

// Used returns the Seg fields in use.
func (t *TCAETH) Used() []Segment {
	if t.NumSegs < 0 || t.NumSegs > TCAETHMaxSegments {
		return nil
	}
	return t.Segs[:t.NumSegs]
}

// validate checks T3: each segment lies after what precedes it and Left <= Right, in serial
// arithmetic; every PSN fits 24 bits.
func (t TCAETH) validate() error {
	if t.NumSegs < 0 || t.NumSegs > TCAETHMaxSegments {
		return errField("T/C AETH", "SegmentNum", uint64(t.NumSegs)+1, "outside 1..4")
	}
	if t.LastFinished > psn.Mask {
		return errField("T/C AETH", "Last Finished PSN", uint64(t.LastFinished), "exceeds 24 bits")
	}
	prev := t.LastFinished
	for i, s := range t.Segs[:t.NumSegs] {
		if s.Left > psn.Mask || s.Right > psn.Mask {
			return errField("T/C AETH", segName(i, "Left"), uint64(max(s.Left, s.Right)), "exceeds 24 bits")
		}
		if !s.Left.After(prev) {
			return errField("T/C AETH", segName(i, "Left"), uint64(s.Left), "not after the previous block")
		}
		if s.Right.Before(s.Left) {
			return errField("T/C AETH", segName(i, "Right"), uint64(s.Right), "before its Left")
		}
		// The whole report must lie within half the PSN space of Last Finished, or serial
		// order is ambiguous.
		if !t.LastFinished.Before(s.Right) {
			return errField("T/C AETH", segName(i, "Right"), uint64(s.Right), "wraps past Last Finished PSN")
		}
		prev = s.Right
	}
	return nil
}

func segName(i int, side string) string {
	return [...]string{"Seg1 ", "Seg2 ", "Seg3 "}[i] + side
}

// ParseTCAETH decodes a T/C AETH from the start of b and reports how many octets it read (32).
// Reserved fields and padding are ignored; unused Seg fields are ignored too, as receivers
// ignore what they were not told to read.
func ParseTCAETH(b []byte) (TCAETH, int, error) {
	if len(b) < TCAETHLen {
		return TCAETH{}, 0, errShort("T/C AETH", TCAETHLen, len(b))
	}
	n := get24(b)
	if n < 1 || n > TCAETHMaxSegments+1 {
		return TCAETH{}, 0, errField("T/C AETH", "SegmentNum", uint64(n), "outside 1..4")
	}
	t := TCAETH{LastFinished: psn.PSN(get24(b[3:])), NumSegs: int(n) - 1}
	for i := range t.NumSegs {
		t.Segs[i] = Segment{Left: psn.PSN(get24(b[6+6*i:])), Right: psn.PSN(get24(b[9+6*i:]))}
	}
	if err := t.validate(); err != nil {
		return TCAETH{}, 0, err
	}
	return t, TCAETHLen, nil
}

// Len returns the encoded length of the fragment.
func (t TCAETH) Len() int { return TCAETHLen }

// Append appends the encoded fragment to b; unused Seg fields, reserved fields and padding are
// zero.
func (t TCAETH) Append(b []byte) ([]byte, error) {
	if err := t.validate(); err != nil {
		return b, err
	}
	b = append(b, make([]byte, TCAETHLen)...)
	f := b[len(b)-TCAETHLen:]
	put24(f, t.SegmentNum())
	put24(f[3:], uint32(t.LastFinished))
	for i, s := range t.Segs[:t.NumSegs] {
		put24(f[6+6*i:], uint32(s.Left))
		put24(f[9+6*i:], uint32(s.Right))
	}
	return b, nil
}
