package fec

import (
	"fmt"
	"math/bits"

	"github.com/crem-project/crem/psn"
)

// Row is one held repair symbol as the bookkeeping sees it: its Repair Index and the set L it
// was computed over.
type Row struct {
	Index int
	Over  psn.Bitmap
}

// Status says where a block stands.
type Status struct {
	Unknown psn.Bitmap // present positions whose source is neither held nor restored
	U       int        // |Unknown|
	Held    int        // repair rows held
	Usable  int        // held rows whose set L contains every unknown
	Missing int        // further usable repair symbols needed: max(0, U - Usable)
}

// Complete reports whether every present source is known.
func (s Status) Complete() bool { return s.U == 0 }

// Solvable reports whether the held symbols determine every unknown source.
func (s Status) Solvable() bool { return s.Missing == 0 }

// Block is the receiver's bookkeeping for one source block, with no symbol bytes: which
// positions are present and known, which repair rows are held over which sets L, and whether
// the unknowns can be solved. A simulator can run it on its own; Decoder runs it beside the
// bytes.
//
// The solve follows the draft: the u unknown sources U come from u repair rows of distinct
// Repair Indices whose sets L all contain U. A row whose L misses an unknown (a coded
// retransmission answering an older, different request) is kept but not used while it does:
// a source that arrives late may shrink U into its L and make it usable.
type Block struct {
	scheme  Scheme
	k       int
	present psn.Bitmap
	known   psn.Bitmap
	held    psn.Bitmap // Repair Indices held
	rows    []Row
	sorted  bool // rows are in ascending Repair Index order, as ordinary repair arrives
}

// Reset starts a new block of k positions with the given present positions, reusing storage.
// scheme is the block's configuration: SchemeCauchy or SchemeXOR take repair rows;
// SchemeSourceCopy takes none. Source Copy symbols are sources and are accepted under any scheme.
func (b *Block) Reset(s Scheme, k int, present psn.Bitmap) error {
	if err := CheckScheme(s); err != nil {
		return err
	}
	if err := CheckK(k); err != nil {
		return err
	}
	if present.Beyond(k) {
		return fmt.Errorf("fec: Present Bitmap names a position at or beyond k = %d: %w", k, ErrSet)
	}
	b.scheme, b.k, b.present = s, k, present
	b.known, b.held = psn.Bitmap{}, psn.Bitmap{}
	b.rows = b.rows[:0]
	b.sorted = true
	return nil
}

// Scheme returns the block's scheme.
func (b *Block) Scheme() Scheme { return b.scheme }

// K returns the block's number of positions.
func (b *Block) K() int { return b.k }

// Present returns the positions that carry a source packet.
func (b *Block) Present() psn.Bitmap { return b.present }

// Known returns the present positions whose source is held or restored.
func (b *Block) Known() psn.Bitmap { return b.known }

// Rows returns the held repair rows in arrival order. The slice is the block's own; read only.
func (b *Block) Rows() []Row { return b.rows }

// checkSource reports whether source j may be added: in the block, present and not yet known,
// tested on one word of the bitmaps; sourceError says what is wrong otherwise.
func (b *Block) checkSource(j int) error {
	if uint(j) < uint(b.k) {
		w, bit := (j>>5)&(len(b.present)-1), uint32(0x80000000)>>uint(j&31)
		if b.present[w]&^b.known[w]&bit != 0 {
			return nil
		}
	}
	return b.sourceError(j)
}

// sourceError is the error of checkSource for a source j it refused.
func (b *Block) sourceError(j int) error {
	if b.k == 0 {
		return fmt.Errorf("fec: source %d before Reset: %w", j, ErrArgs)
	}
	if j < 0 || j >= b.k {
		return fmt.Errorf("fec: source position %d with k = %d: %w", j, b.k, ErrIndex)
	}
	if !b.present.Has(j) {
		return fmt.Errorf("fec: source position %d is absent in the block: %w", j, ErrSet)
	}
	return fmt.Errorf("fec: source position %d already known: %w", j, ErrDuplicate)
}

// AddSource records that source j is held. A source already held or restored yields an error
// wrapping ErrDuplicate and changes nothing. A source that arrives after repair rows is
// subtracted from them when the block is solved, coded retransmissions included.
func (b *Block) AddSource(j int) error {
	if err := b.checkSource(j); err != nil {
		return err
	}
	b.known.Set(j)
	return nil
}

// checkRepair reports whether repair row (i, over) may be added.
func (b *Block) checkRepair(i int, over psn.Bitmap) error {
	if b.k == 0 {
		return fmt.Errorf("fec: repair %d before Reset: %w", i, ErrArgs)
	}
	switch b.scheme {
	case SchemeSourceCopy:
		return fmt.Errorf("fec: repair row %d in a Source Copy block: %w", i, ErrScheme)
	case SchemeXOR:
		if i != 0 {
			return fmt.Errorf("fec: XOR repair with Repair Index %d (only 0 exists): %w", i, ErrIndex)
		}
		if over != b.present {
			return fmt.Errorf("fec: XOR repair over a set other than the present positions (no coded retransmission in scheme 2): %w", ErrSet)
		}
	}
	if i < 0 || i+b.k > MaxK {
		return CheckIndex(i, b.k)
	}
	if over.Empty() {
		return fmt.Errorf("fec: repair %d over an empty set: %w", i, ErrSet)
	}
	if !b.present.Contains(&over) {
		return fmt.Errorf("fec: repair %d over a set that names absent positions: %w", i, ErrSet)
	}
	if b.held.Has(i) {
		return fmt.Errorf("fec: Repair Index %d already held for the block: %w", i, ErrDuplicate)
	}
	return nil
}

// AddRepair records a repair row with Repair Index i over the set L. An ordinary repair symbol
// has L = the present positions, a coded retransmission the lost set named in its request. A
// Repair Index already held yields an error wrapping ErrDuplicate and changes nothing: two rows
// with one index cannot both help, their coefficients on the unknowns are equal.
func (b *Block) AddRepair(i int, over psn.Bitmap) error {
	if err := b.checkRepair(i, over); err != nil {
		return err
	}
	b.held.Set(i)
	if n := len(b.rows); n > 0 && b.rows[n-1].Index > i {
		b.sorted = false
	}
	b.rows = append(b.rows, Row{Index: i, Over: over})
	return nil
}

// Status says which sources are unknown and how many further repair symbols the block needs.
func (b *Block) Status() Status {
	s := Status{Unknown: b.present.AndNot(b.known), Held: len(b.rows)}
	s.U = s.Unknown.Count()
	for r := range b.rows {
		if b.rows[r].Over.Contains(&s.Unknown) {
			s.Usable++
		}
	}
	s.Missing = max(0, s.U-s.Usable)
	return s
}

// Plan appends to dst the rows (indices into Rows) that solve the unknowns, in ascending
// Repair Index order, and returns them with the status. When the block is not solvable it
// returns the status and an error wrapping ErrNotSolvable that names what is missing.
//
// It takes the status in the same pass over the rows as the choice: the lowest indices first,
// as ordinary rows are 0..m-1 and the solve then tends to meet the same few row sets. Rows that
// arrived in ascending index order are taken in that order; others are sorted (planSorted).
func (b *Block) Plan(dst []int) ([]int, Status, error) {
	start := len(dst)
	s := Status{Unknown: b.present.AndNot(b.known), Held: len(b.rows)}
	s.U = s.Unknown.Count()
	for r := range b.rows {
		if b.rows[r].Over.Contains(&s.Unknown) {
			s.Usable++
			if b.sorted && s.Usable <= s.U {
				dst = append(dst, r)
			}
		}
	}
	s.Missing = max(0, s.U-s.Usable)
	if s.U == 0 {
		return dst[:start], s, nil
	}
	if s.Missing > 0 {
		return dst[:start], s, fmt.Errorf("fec: %d unknown sources %v, %d usable repair symbols: %d more needed: %w",
			s.U, s.Unknown.Positions(nil), s.Usable, s.Missing, ErrNotSolvable)
	}
	if !b.sorted {
		dst = b.planSorted(dst, &s)
	}
	return dst, s, nil
}

// planSorted appends to dst the first s.U usable rows in ascending Repair Index order, for rows
// that did not arrive in that order.
func (b *Block) planSorted(dst []int, s *Status) []int {
	var slot [MaxK + 1]uint8
	for r := range b.rows {
		slot[b.rows[r].Index] = uint8(r)
	}
	n := 0
	for w, v := range b.held {
		for v != 0 && n < s.U {
			lz := bits.LeadingZeros32(v)
			v &^= 0x80000000 >> uint(lz)
			r := int(slot[w<<5|lz])
			if b.rows[r].Over.Contains(&s.Unknown) {
				dst = append(dst, r)
				n++
			}
		}
	}
	return dst
}

// Restore marks every unknown source as restored once the block is solvable, and returns them.
// Decoder calls it after the byte work; a symbolic simulator calls it alone.
func (b *Block) Restore() (psn.Bitmap, error) {
	s := b.Status()
	if !s.Solvable() {
		_, _, err := b.Plan(nil)
		return psn.Bitmap{}, err
	}
	b.known = b.known.Or(s.Unknown)
	return s.Unknown, nil
}

// restored marks the unknowns of s, the status of a solvable block, as restored and returns
// them: Restore for a caller that has just planned the solve.
func (b *Block) restored(s *Status) psn.Bitmap {
	b.known = b.known.Or(s.Unknown)
	return s.Unknown
}
