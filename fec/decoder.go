package fec

import (
	"fmt"

	"github.com/crem-project/crem/psn"
	"github.com/klauspost/reedsolomon"
)

// Decoder restores the lost sources of one block at a time from the sources and repair
// symbols that arrived: the bookkeeping of Block plus the symbol bytes. Reset reuses every
// buffer, so a Decoder serving blocks of one configuration allocates nothing once warm. It is
// not safe for concurrent use.
type Decoder struct {
	blk Block
	T   int
	low reedsolomon.LowLevel

	src [MaxK][]byte // source symbols by position, valid where the block knows them
	rep [][]byte     // repair symbols by row, as Block.Rows numbers them

	plan []int
	idx  []int // Repair Indices of the planned rows
	cols []int // unknown positions
	inv  []byte
}

// NewDecoder returns a Decoder; call Reset before use.
func NewDecoder(opts ...Option) (*Decoder, error) {
	if _, err := buildOptions(opts); err != nil {
		return nil, err
	}
	return &Decoder{}, nil
}

// Reset starts a block of k positions with symbol length T and the given present positions,
// configured with scheme s (see Block.Reset).
func (d *Decoder) Reset(s Scheme, k, T int, present psn.Bitmap) error {
	if err := CheckT(T); err != nil {
		return err
	}
	if err := d.blk.Reset(s, k, present); err != nil {
		return err
	}
	d.T = T
	return nil
}

// AddSource records the received source packet with UDP payload P at position j.
func (d *Decoder) AddSource(j int, payload []byte) error {
	if err := d.blk.checkSource(j); err != nil {
		return err
	}
	sym, err := AppendSymbol(d.src[j][:0], payload, d.T)
	if err != nil {
		return fmt.Errorf("fec: source %d: %w", j, err)
	}
	d.src[j] = sym
	return d.blk.AddSource(j)
}

// AddSourceSymbol records a whole source symbol for position j: a Source Copy repair symbol
// (scheme 0, Repair Index j), which is source symbol j unmodified. It must be T octets and
// carry a valid length prefix and zero padding.
func (d *Decoder) AddSourceSymbol(j int, sym []byte) error {
	if err := d.blk.checkSource(j); err != nil {
		return err
	}
	if len(sym) != d.T {
		return fmt.Errorf("fec: source symbol %d of %d octets, block T = %d: %w", j, len(sym), d.T, ErrSymbolLength)
	}
	if _, err := Payload(sym); err != nil {
		return fmt.Errorf("fec: source symbol %d: %w", j, err)
	}
	d.src[j] = append(d.src[j][:0], sym...)
	return d.blk.AddSource(j)
}

// AddRepair records the repair symbol with Repair Index i computed over the set L (the present
// positions for an ordinary symbol, the request's lost set for a coded retransmission). A
// Repair Index already held yields an error wrapping ErrDuplicate and is ignored.
func (d *Decoder) AddRepair(i int, over psn.Bitmap, sym []byte) error {
	if len(sym) != d.T {
		return fmt.Errorf("fec: repair symbol %d of %d octets, block T = %d: %w", i, len(sym), d.T, ErrSymbolLength)
	}
	if err := d.blk.AddRepair(i, over); err != nil {
		return err
	}
	r := len(d.blk.rows) - 1
	if r == len(d.rep) {
		d.rep = append(d.rep, nil)
	}
	d.rep[r] = append(d.rep[r][:0], sym...)
	return nil
}

// Status says which sources are unknown and how many further repair symbols the block needs.
func (d *Decoder) Status() Status { return d.blk.Status() }

// Present returns the block's present positions.
func (d *Decoder) Present() psn.Bitmap { return d.blk.present }

// Known returns the present positions whose source is held or restored.
func (d *Decoder) Known() psn.Bitmap { return d.blk.known }

// Rows returns the held repair rows in arrival order (read only).
func (d *Decoder) Rows() []Row { return d.blk.rows }

// Symbol returns source symbol j if it is known. The slice is the Decoder's until Reset.
func (d *Decoder) Symbol(j int) ([]byte, error) {
	if j < 0 || j >= d.blk.k || !d.blk.known.Has(j) {
		return nil, fmt.Errorf("fec: source symbol %d is not known: %w", j, ErrIndex)
	}
	return d.src[j][:d.T], nil
}

// Payload returns the UDP payload of source j if it is known; an error if a restored symbol
// does not parse (which only a wrong repair symbol can cause).
func (d *Decoder) Payload(j int) ([]byte, error) {
	sym, err := d.Symbol(j)
	if err != nil {
		return nil, err
	}
	p, err := Payload(sym)
	if err != nil {
		return nil, fmt.Errorf("fec: restored source %d: %w", j, err)
	}
	return p, nil
}

// Decode solves the unknown sources when the block is solvable and returns the positions it
// restored (none when nothing was missing). When it is not, it changes nothing and returns an
// error wrapping ErrNotSolvable; Status says what is missing.
//
// The u unknowns U come from u rows whose sets contain U: each row's known sources are
// subtracted, then the u x u Cauchy submatrix (rows = Repair Indices, columns = U) is inverted
// in closed form and applied. The held repair symbols are consumed.
func (d *Decoder) Decode() (psn.Bitmap, error) {
	plan, s, err := d.blk.Plan(d.plan[:0])
	d.plan = plan
	if err != nil || s.U == 0 {
		return psn.Bitmap{}, err
	}
	T := d.T
	if d.blk.scheme == SchemeXOR {
		d.subtractKnown(plan)
		j := firstPosition(&s.Unknown)
		d.src[j] = append(d.src[j][:0], d.rep[plan[0]][:T]...)
		return d.blk.Restore()
	}
	u := s.U
	d.cols = s.Unknown.Positions(d.cols[:0])
	d.idx = d.idx[:0]
	for _, r := range plan {
		d.idx = append(d.idx, d.blk.rows[r].Index)
	}
	d.subtractKnown(plan)
	if cap(d.inv) < u*u {
		d.inv = make([]byte, u*u)
	}
	inv := d.inv[:u*u]
	cauchyInverse(inv, d.idx, d.cols)
	// S_U = inv * R': row by row of R', so each input is read once while the u outputs stay
	// in the first-level cache.
	for _, j := range d.cols {
		d.src[j] = growTo(d.src[j], T)
	}
	for n, r := range plan {
		in := d.rep[r][:T]
		for c, j := range d.cols {
			if n == 0 {
				d.low.GalMulSlice(inv[c*u+n], in, d.src[j])
			} else {
				d.low.GalMulSliceXor(inv[c*u+n], in, d.src[j])
			}
		}
	}
	return d.blk.Restore()
}

// subtractKnown removes from the planned rows the contribution of every known source in their
// sets, leaving in each the sum over the unknowns alone. Sources that arrived after a row are
// included. Source by source, so each is read once for all rows.
func (d *Decoder) subtractKnown(plan []int) {
	var touched psn.Bitmap
	for _, r := range plan {
		touched = touched.Or(d.blk.rows[r].Over)
	}
	touched = touched.And(d.blk.known)
	T := d.T
	xor := d.blk.scheme == SchemeXOR
	touched.Each(func(j int) {
		s := d.src[j][:T]
		for _, r := range plan {
			row := &d.blk.rows[r]
			if !row.Over.Has(j) {
				continue
			}
			c := byte(1)
			if !xor {
				c = coef(row.Index, j)
			}
			d.low.GalMulSliceXor(c, s, d.rep[r][:T])
		}
	})
}

// growTo returns b resized to n octets, reusing its storage when it can.
func growTo(b []byte, n int) []byte {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]byte, n)
}

// firstPosition returns the lowest position in b, or -1.
func firstPosition(b *psn.Bitmap) int {
	j := -1
	b.Each(func(p int) {
		if j < 0 {
			j = p
		}
	})
	return j
}
