package fec

import (
	"encoding/binary"
	"fmt"

	"github.com/crem-project/crem/psn"
)

// Decoder restores the lost sources of one block at a time from the sources and repair
// symbols that arrived: the bookkeeping of Block plus the symbol bytes. Reset reuses every
// buffer, so a Decoder serving blocks of one configuration allocates nothing once warm. It is
// not safe for concurrent use.
//
// Symbols are held in 64-octet aligned buffers of T rounded up to a multiple of 64, the
// octets beyond T kept zero: the SIMD kernels then run without a scalar tail, and a short
// source is multiplied only over the octets it fills. The sources' buffers lie side by side in
// one allocation SymbolStride(T) apart, and the repair symbols' in another, so that the solve's
// lockstep reads find no two in the same first-level cache set (layout.go).
type Decoder struct {
	blk     Block
	kernels Kernels // as configured; KernelsAuto follows useKernels
	symLen  int     // T
	stride  int     // T rounded up to 64

	src  [MaxK][]byte // source symbols by position, valid where the block knows them
	span [MaxK]int    // octets of src[j] that can be non-zero, a multiple of 64
	ref  [MaxK][]byte // payloads held by reference (AddSourceRef), whose symbol is not built
	refs psn.Bitmap   // positions held by reference
	rep  [][]byte     // repair symbols by row, as Block.Rows numbers them
	srcs symbolSlab   // src's buffers by position
	reps symbolSlab   // rep's buffers by row

	plan []int
	idx  []int // Repair Indices of the planned rows
	cols []int // unknown positions
	inv  []byte
	pos  []int // known positions the planned rows cover

	// The fused solve (solveFused): inputs and outputs from octet 2 of the symbols on, the
	// inputs' length prefixes, the u x n coefficients and the kernels' scratch.
	ins, outs   [][]byte
	tins, touts [][]byte
	pre         []byte
	coef        []byte
	lh          []int
	scratch     fusedScratch
	tail        []byte
}

// NewDecoder returns a Decoder; call Reset before use. Without options the zero Decoder is as
// good.
func NewDecoder(opts ...Option) (*Decoder, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	return &Decoder{kernels: o.kernels}, nil
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
	d.symLen = T
	d.stride = roundUp64(T)
	d.srcs.reset(k, T)
	d.reps.reset(0, T)
	d.refs.Each(func(j int) { d.ref[j] = nil }) // let the caller's buffers go
	d.refs = psn.Bitmap{}
	return nil
}

func roundUp64(n int) int { return (n + 63) &^ 63 }

// AddSource records the received source packet with UDP payload P at position j; the
// Decoder keeps its own copy of the source symbol.
func (d *Decoder) AddSource(j int, payload []byte) error {
	if err := d.blk.checkSource(j); err != nil {
		return err
	}
	if len(payload) > d.symLen-2 {
		return fmt.Errorf("fec: source %d: payload of %d octets with T = %d: %w", j, len(payload), d.symLen, ErrPayloadLong)
	}
	b := d.srcs.at(j)
	binary.BigEndian.PutUint16(b, uint16(len(payload)))
	n := 2 + copy(b[2:], payload)
	clear(b[n:])
	d.src[j], d.span[j] = b, roundUp64(n)
	return d.blk.AddSource(j)
}

// AddSourceRef is AddSource without the copy: the Decoder keeps payload itself and reads it
// when it decodes, so the caller must leave it unchanged until the next Reset. A receiver that
// holds its packets until the block ends anyway saves a copy of every packet.
func (d *Decoder) AddSourceRef(j int, payload []byte) error {
	if err := d.blk.checkSource(j); err != nil {
		return err
	}
	if len(payload) > d.symLen-2 {
		return fmt.Errorf("fec: source %d: payload of %d octets with T = %d: %w", j, len(payload), d.symLen, ErrPayloadLong)
	}
	d.ref[j] = payload
	d.refs.Set(j)
	return d.blk.AddSource(j)
}

// AddSourceSymbol records a whole source symbol for position j: a Source Copy repair symbol
// (scheme 0, Repair Index j), which is source symbol j unmodified. It must be T octets and
// carry a valid length prefix and zero padding.
func (d *Decoder) AddSourceSymbol(j int, sym []byte) error {
	if err := d.blk.checkSource(j); err != nil {
		return err
	}
	if len(sym) != d.symLen {
		return fmt.Errorf("fec: source symbol %d of %d octets, block T = %d: %w", j, len(sym), d.symLen, ErrSymbolLength)
	}
	p, err := Payload(sym)
	if err != nil {
		return fmt.Errorf("fec: source symbol %d: %w", j, err)
	}
	b := d.srcs.at(j)
	clear(b[copy(b, sym):])
	d.src[j], d.span[j] = b, roundUp64(2+len(p))
	return d.blk.AddSource(j)
}

// AddRepair records the repair symbol with Repair Index i computed over the set L (the present
// positions for an ordinary symbol, the request's lost set for a coded retransmission). A
// Repair Index already held yields an error wrapping ErrDuplicate and is ignored.
func (d *Decoder) AddRepair(i int, over psn.Bitmap, sym []byte) error {
	if len(sym) != d.symLen {
		return fmt.Errorf("fec: repair symbol %d of %d octets, block T = %d: %w", i, len(sym), d.symLen, ErrSymbolLength)
	}
	if err := d.blk.AddRepair(i, over); err != nil {
		return err
	}
	r := len(d.blk.rows) - 1
	if r == len(d.rep) {
		d.rep = append(d.rep, nil)
	}
	b := d.reps.at(r)
	clear(b[copy(b, sym):])
	d.rep[r] = b
	return nil
}

// SymbolLength returns the block's symbol length T.
func (d *Decoder) SymbolLength() int { return d.symLen }

// Status says which sources are unknown and how many further repair symbols the block needs.
func (d *Decoder) Status() Status { return d.blk.Status() }

// Present returns the block's present positions.
func (d *Decoder) Present() psn.Bitmap { return d.blk.present }

// Known returns the present positions whose source is held or restored.
func (d *Decoder) Known() psn.Bitmap { return d.blk.known }

// Rows returns the held repair rows in arrival order (read only).
func (d *Decoder) Rows() []Row { return d.blk.rows }

// Symbol returns source symbol j (T octets) if it is known. The slice is the Decoder's until
// Reset.
func (d *Decoder) Symbol(j int) ([]byte, error) {
	if j < 0 || j >= d.blk.k || !d.blk.known.Has(j) {
		return nil, fmt.Errorf("fec: source symbol %d is not known: %w", j, ErrIndex)
	}
	if d.refs.Has(j) {
		d.buildRef(j)
	}
	return d.src[j][:d.symLen], nil
}

// Payload returns the UDP payload of source j if it is known; an error if a restored symbol
// does not parse (which only a wrong repair symbol can cause).
func (d *Decoder) Payload(j int) ([]byte, error) {
	if j >= 0 && j < d.blk.k && d.refs.Has(j) {
		return d.ref[j], nil
	}
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
// The u unknowns U come from u rows whose sets contain U: the u x u Cauchy submatrix (rows =
// Repair Indices, columns = U) is inverted in closed form, and the known sources in the rows'
// sets are taken out of them. On a processor with AVX-512 and GFNI, or with AVX2, both steps
// are one fused pass over the known sources and the rows (solveFused), which leaves the repair
// symbols as they are; elsewhere the known sources are subtracted from the held repair
// symbols, which are consumed, and the inverse is applied with the single-row kernels
// (mulSlice, mulAddSlice). Either way a warm Decoder allocates nothing.
func (d *Decoder) Decode() (psn.Bitmap, error) {
	plan, s, err := d.blk.Plan(d.plan[:0])
	d.plan = plan
	if err != nil || s.U == 0 {
		return psn.Bitmap{}, err
	}
	d.cols = s.Unknown.Positions(d.cols[:0])
	if d.blk.scheme == SchemeXOR {
		d.subtractKnown(plan)
		j := d.cols[0]
		d.src[j] = d.srcs.at(j)
		copy(d.src[j], d.rep[plan[0]])
		d.span[j] = d.stride
		return d.blk.Restore()
	}
	u := s.U
	d.idx = d.idx[:0]
	for _, r := range plan {
		d.idx = append(d.idx, d.blk.rows[r].Index)
	}
	if cap(d.inv) < u*u {
		d.inv = make([]byte, u*u)
	}
	inv := d.inv[:u*u]
	cauchyInverse(inv, d.idx, d.cols)
	if k := resolve(d.kernels); k != KernelsPortable {
		d.solveFused(k, plan, inv)
		return d.blk.Restore()
	}
	d.subtractKnown(plan)
	// S_U = inv * R', one row of R' at a time, so each is read once while the u outputs stay
	// in the first-level cache.
	for _, j := range d.cols {
		d.src[j] = d.srcs.at(j)
		d.span[j] = d.stride
	}
	for n, r := range plan {
		in := d.rep[r]
		for c, j := range d.cols {
			if n == 0 {
				mulSlice(inv[c*u+n], in, d.src[j])
			} else {
				mulAddSlice(inv[c*u+n], in, d.src[j])
			}
		}
	}
	return d.blk.Restore()
}

// solveFused computes the unknowns in one pass over everything they depend on. With R the
// planned rows, K the known sources in their sets and C_K their coefficients (zero where a
// row's set leaves a source out),
//
//	S_U = inv * (R - C_K * S_K) = inv * R + (inv * C_K) * S_K
//
// so the u x (|K| + u) coefficients [inv * C_K | inv] are formed first, O(u |K|) in closed form
// where every row covers the source, O(u^2) per source otherwise, and the fused kernel then
// reads every input once for all u outputs. The repair symbols are left as they are.
//
// The kernel runs over whole 64-octet columns from octet 2 of the symbols, where a payload
// held by reference lines up with the symbols; the last partial column and the 2-octet length
// prefixes go through a small zero-padded copy. A payload held by reference that is shorter
// than T - 2 does not fill the columns and is first built into a symbol of the Decoder's own,
// as Symbol would. Beyond the widest kernel's outputs (16 for GFNI, 4 for AVX2) the kernels
// pass over the inputs once per that many outputs.
func (d *Decoder) solveFused(k Kernels, plan []int, inv []byte) {
	u := len(plan)
	T := d.symLen
	L := T - 2
	var over, all psn.Bitmap
	all = d.blk.rows[plan[0]].Over
	for _, r := range plan {
		o := d.blk.rows[r].Over
		over = over.Or(o)
		all = all.And(o)
	}
	over = over.And(d.blk.known)

	// Inputs: the known sources in ascending position, then the planned rows.
	d.ins, d.pre = d.ins[:0], d.pre[:0]
	d.pos = over.Positions(d.pos[:0])
	for _, j := range d.pos {
		if d.refs.Has(j) && len(d.ref[j]) < L {
			d.buildRef(j) // a short payload does not fill the columns: pad it
		}
		if d.refs.Has(j) {
			p := d.ref[j]
			d.ins = append(d.ins, p)
			d.pre = append(d.pre, byte(len(p)>>8), byte(len(p)))
		} else {
			d.ins = append(d.ins, d.src[j][2:])
			d.pre = append(d.pre, d.src[j][0], d.src[j][1])
		}
	}
	for _, r := range plan {
		d.ins = append(d.ins, d.rep[r][2:])
		d.pre = append(d.pre, d.rep[r][0], d.rep[r][1])
	}
	nk, nin := len(d.pos), len(d.ins)

	// Coefficients, row c = output c: [inv * C_K | inv].
	if cap(d.coef) < u*nin {
		d.coef = make([]byte, u*nin)
	}
	m := d.coef[:u*nin]
	if cap(d.lh) < u {
		d.lh = make([]int, u)
	}
	lh := d.lh[:u]
	for c := range u {
		lh[c] = cauchyLogH(d.idx, d.cols, c)
	}
	for t, j := range d.pos {
		if all.Has(j) {
			cauchyProject(m[t:], nin, d.idx, d.cols, lh, j)
			continue
		}
		for c := range u {
			var z byte
			for n, r := range plan {
				if d.blk.rows[r].Over.Has(j) {
					z ^= mulLog(inv[c*u+n], coef(d.idx[n], j))
				}
			}
			m[c*nin+t] = z
		}
	}
	for c := range u {
		copy(m[c*nin+nk:(c+1)*nin], inv[c*u:(c+1)*u])
	}

	d.outs = d.outs[:0]
	for _, j := range d.cols {
		d.src[j] = d.srcs.at(j)
		d.span[j] = d.stride
		d.outs = append(d.outs, d.src[j][2:])
	}
	d.scratch.prepare(k, m, nin, u)
	n64 := L &^ 63
	if n64 > 0 {
		d.scratch.mul(d.ins, d.outs, n64)
	}

	// The rest of the last column and the length prefixes, from a zero-padded copy.
	tl := L - n64
	w := 64
	if tl+2 > 64 {
		w = 128
	}
	if need := (nin + u) * w; cap(d.tail) < need {
		d.tail = make([]byte, need)
	}
	tail := d.tail[:(nin+u)*w]
	d.tins, d.touts = d.tins[:0], d.touts[:0]
	for i, in := range d.ins {
		b := tail[i*w : (i+1)*w]
		copy(b, in[n64:L])
		b[tl], b[tl+1] = d.pre[2*i], d.pre[2*i+1]
		clear(b[tl+2:])
		d.tins = append(d.tins, b)
	}
	for c := range u {
		d.touts = append(d.touts, tail[(nin+c)*w:(nin+c+1)*w])
	}
	d.scratch.mul(d.tins, d.touts, w)
	for c, j := range d.cols {
		s, b := d.src[j], d.touts[c]
		copy(s[2+n64:T], b[:tl])
		s[0], s[1] = b[tl], b[tl+1]
		clear(s[T:])
	}
	clear(d.ins) // hold no payload beyond the call
	d.ins = d.ins[:0]
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
	xor := d.blk.scheme == SchemeXOR
	touched.Each(func(j int) {
		byRef := d.refs.Has(j)
		var s []byte
		if byRef {
			s = d.ref[j]
		} else {
			s = d.src[j][:d.span[j]]
		}
		for _, r := range plan {
			row := &d.blk.rows[r]
			if !row.Over.Has(j) {
				continue
			}
			c := byte(1)
			if !xor {
				c = coef(row.Index, j)
			}
			acc := d.rep[r]
			if byRef {
				// The symbol is uint16(len(P)) || P || zeros: the prefix by hand, P by kernel.
				acc[0] ^= mulLog(c, byte(len(s)>>8))
				acc[1] ^= mulLog(c, byte(len(s)))
				acc = acc[2:]
			}
			mulAddSlice(c, s, acc)
		}
	})
}

// buildRef turns a source held by reference into a symbol of the Decoder's own.
func (d *Decoder) buildRef(j int) {
	p := d.ref[j]
	b := d.srcs.at(j)
	binary.BigEndian.PutUint16(b, uint16(len(p)))
	n := 2 + copy(b[2:], p)
	clear(b[n:])
	d.src[j], d.span[j] = b, roundUp64(n)
	d.ref[j] = nil
	d.refs.Clear(j)
}
