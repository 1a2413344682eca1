package fec

import (
	"encoding/binary"
	"fmt"
	"math/bits"

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

	plan  []int
	idx   []int        // Repair Indices of the planned rows
	overs []psn.Bitmap // their sets L
	cols  []int        // unknown positions
	inv   []byte
	lg    []int // scratch of cauchyInverse
	lh    []int

	// The fused solve (solveFused): the plans of the last loss patterns solved, most recently
	// used first (fusedPlan); inputs and outputs from octet 2 of the symbols, the inputs' length
	// prefixes, and the tail's scratch.
	plans       mru[decodePlan]
	rplans      mru[rowPlan] // the row plans of the two-stage solve, most recently used first
	pos, gcols  []int        // two-stage: the known positions of L, the columns taken from the row plan
	mid         [][]byte     // two-stage: the u symbols R - C_K S_K
	mids        symbolSlab   // their buffers
	s1, s2      fusedScratch
	dst         [][]byte // the outputs' symbols
	ins, outs   [][]byte
	tins, touts [][]byte
	pre         []byte
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
	prevK := d.blk.k
	if err := d.blk.Reset(s, k, present); err != nil {
		return err
	}
	d.symLen = T
	d.stride = roundUp64(T)
	d.srcs.reset(k, T)
	d.reps.reset(0, T)
	d.mids.reset(0, T)
	if !d.refs.Empty() {
		clear(d.ref[:prevK]) // let the caller's buffers go; only the last block's k can hold one
		d.refs = psn.Bitmap{}
	}
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
	d.blk.known.Set(j) // checked above (checkSource)
	return nil
}

// AddSourceRef is AddSource without the copy: the Decoder keeps payload itself and reads it
// when it decodes, so the caller must leave it unchanged until the next Reset. A receiver that
// holds its packets until the block ends anyway saves a copy of every packet.
func (d *Decoder) AddSourceRef(j int, payload []byte) error {
	// checkSource's test on one word, here so that the call is made only for an error.
	b := &d.blk
	w, bit := (j>>5)&(len(b.known)-1), uint32(0x80000000)>>uint(j&31)
	if uint(j) >= uint(b.k) || b.present[w]&^b.known[w]&bit == 0 || len(payload) > d.symLen-2 {
		return d.sourceRefError(j, payload)
	}
	d.ref[j] = payload
	d.refs[w] |= bit
	b.known[w] |= bit
	return nil
}

// sourceRefError is the error of AddSourceRef for source j and its payload.
func (d *Decoder) sourceRefError(j int, payload []byte) error {
	if err := d.blk.checkSource(j); err != nil {
		return err
	}
	return fmt.Errorf("fec: source %d: payload of %d octets with T = %d: %w", j, len(payload), d.symLen, ErrPayloadLong)
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
	d.blk.known.Set(j) // checked above (checkSource)
	return nil
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
	if k := resolve(d.kernels); k != KernelsPortable && d.blk.scheme != SchemeXOR {
		d.solve(k, plan, &s.Unknown)
		return d.blk.restored(&s), nil
	}
	d.cols = s.Unknown.Positions(d.cols[:0])
	if d.blk.scheme == SchemeXOR {
		d.subtractKnown(plan)
		j := d.cols[0]
		d.src[j] = d.srcs.at(j)
		copy(d.src[j], d.rep[plan[0]])
		d.span[j] = d.stride
		return d.blk.restored(&s), nil
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
	d.lg, d.lh = growInts(d.lg, u), growInts(d.lh, u)
	cauchyInverse(inv, d.lg, d.lh, d.idx, d.cols)
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
	return d.blk.restored(&s), nil
}

// solveFused computes the unknowns with the fused kernels in one pass over everything they
// depend on, the known sources in the rows' sets and the planned rows, with the coefficients of
// plan p (decodePlan.build). The repair symbols are left as they are.
//
// The kernels run from octet 2 of the symbols, where a payload held by reference lines up with
// the symbols (columns): the GFNI kernels over the T - 2 octets in one pass, the nibble kernels
// over whole 64-octet columns, and when T - 2 >= 64 over the last 64 octets of every input in
// place for the rest (the products are bytewise, so the overlap with the columns already done
// gives the same octets), only the u outputs going through scratch. The 2-octet length
// prefixes are then summed in scalar (prefixes). Below that, a small zero-padded copy of every
// input carries both (tailPadded). A payload held by reference that is shorter than T - 2 does
// not fill the columns and is first built into a symbol of the Decoder's own, as Symbol would.
// Beyond the widest kernel's outputs (16 for GFNI, 4 for AVX2) the kernels pass over the inputs
// once per that many outputs.
func (d *Decoder) solveFused(p *decodePlan, plan []int) {
	T := d.symLen
	L := T - 2
	same := d.gatherInputs(p.pos, plan, L)
	d.dst = d.dst[:0]
	for _, j := range p.cols {
		d.src[j] = d.srcs.at(j)
		d.span[j] = d.stride
		d.dst = append(d.dst, d.src[j])
	}
	if d.columns(&p.scratch, L) {
		d.prefixes(p, same)
	}
	d.endColumns(T)
}

// endColumns ends a pass of the fused kernels: the outputs' octets beyond T zero again, and the
// inputs' list holding no payload beyond the call.
func (d *Decoder) endColumns(T int) {
	for _, b := range d.dst {
		clear(b[T:])
	}
	clear(d.ins)
	d.ins = d.ins[:0]
}

// columns computes octets 2 to T of the outputs d.dst from the inputs d.ins with the prepared
// coefficients s, and reports whether it left the length prefixes to the caller. The GFNI
// kernels take any length (a partial last column under a byte mask): one pass. The nibble
// kernels take whole 64-octet columns, and the rest is computed in place when T - 2 >= 64, else
// through a padded copy that carries the prefixes too.
func (d *Decoder) columns(s *fusedScratch, L int) (prefixes bool) {
	d.outs = d.outs[:0]
	for _, b := range d.dst {
		d.outs = append(d.outs, b[2:])
	}
	if s.k == KernelsGFNI && L > 0 {
		s.mul(d.ins, d.outs, L)
		return true
	}
	n64 := L &^ 63
	if n64 > 0 {
		s.mul(d.ins, d.outs, n64)
	}
	if L >= 64 {
		d.tailInPlace(s, n64, L)
		return true
	}
	d.tailPadded(s, n64, L)
	return false
}

// gatherInputs lists the fused solve's inputs from octet 2 of their symbols, the known sources
// at pos and then the planned rows, with their length prefixes in d.pre. It reports whether
// every known source has the first one's prefix (all full payloads, as a receiver of RDMA
// packets mostly sees).
func (d *Decoder) gatherInputs(pos, plan []int, L int) (same bool) {
	nk := len(pos)
	nin := nk + len(plan)
	if cap(d.ins) < nin {
		d.ins = make([][]byte, nin)
	}
	d.ins, d.pre = d.ins[:nin], grow(d.pre, 2*nin)
	ins, pre := d.ins, d.pre
	same = true
	pre = pre[:2*nin]
	for t, j := range pos {
		in, h, l := d.knownInput(j, L)
		ins[t] = in
		pre[2*t], pre[2*t+1] = h, l
		same = same && h == pre[0] && l == pre[1]
	}
	for n, r := range plan {
		s := d.rep[r]
		ins[nk+n] = s[2:]
		pre[2*(nk+n)], pre[2*(nk+n)+1] = s[0], s[1]
	}
	return same
}

// knownInput returns the input of the fused solve for known source j, from octet 2 of its
// symbol, and the symbol's length prefix: a payload held by reference that fills the T - 2
// octets is the input as it stands; a shorter one is first built into a symbol of the
// Decoder's own, as Symbol would.
func (d *Decoder) knownInput(j, L int) (in []byte, h, l byte) {
	byRef := d.refs.Has(j)
	if pl := d.ref[j]; byRef && len(pl) == L {
		return pl, byte(L >> 8), byte(L)
	}
	if byRef {
		d.buildRef(j) // a short payload does not fill the columns: pad it
	}
	s := d.src[j]
	return s[2:], s[0], s[1]
}

// gatherKnown is the two-stage solve's walk over the known positions of L on the GFNI path,
// with at most gfniMaxOut outputs (one pass of the kernels): in one pass over the set it copies
// their columns of the row plan's matrices into d.s1 (as gather does) and lists their inputs
// and prefixes followed by the planned rows' (as gatherInputs does). It reports whether every
// known source has the first one's prefix; only when not does the caller list the positions.
func (d *Decoder) gatherKnown(rp *rowPlan, known *psn.Bitmap, plan []int, L int) (same bool) {
	u, nk := len(plan), known.Count()
	nin := nk + u
	from, s := &rp.scratch, &d.s1
	if cap(s.mat) < nin*u {
		s.mat = make([]uint64, nin*u)
	}
	if cap(d.ins) < nin {
		d.ins = make([][]byte, nin)
	}
	mat, fmat := s.mat[:nin*u], from.mat
	d.ins, d.pre = d.ins[:nin], grow(d.pre, 2*nin)
	ins, pre := d.ins, d.pre[:2*nin]
	same = true
	t := 0
	for w, v := range known {
		for v != 0 {
			lz := bits.LeadingZeros32(v)
			bit := uint32(0x80000000) >> uint(lz)
			v &^= bit
			j := w<<5 | lz
			if u == 4 {
				// Word by word: an array assignment of this size becomes a call to memmove.
				to, fr := mat[4*t:4*t+4], fmat[4*j:4*j+4]
				to[0], to[1], to[2], to[3] = fr[0], fr[1], fr[2], fr[3]
			} else {
				moveMats(mat[t*u:(t+1)*u], fmat[j*u:(j+1)*u])
			}
			var in []byte
			var h, l byte
			if pl := d.ref[j]; d.refs[w]&bit != 0 && len(pl) == L {
				in, h, l = pl, byte(L>>8), byte(L) // knownInput's common case, inline
			} else {
				in, h, l = d.knownInput(j, L)
			}
			ins[t] = in
			pre[2*t], pre[2*t+1] = h, l
			same = same && h == pre[0] && l == pre[1]
			t++
		}
	}
	for n, r := range plan {
		i := rp.blockK + n
		moveMats(mat[(nk+n)*u:(nk+n+1)*u], fmat[i*u:(i+1)*u])
		sym := d.rep[r]
		ins[nk+n] = sym[2:]
		pre[2*(nk+n)], pre[2*(nk+n)+1] = sym[0], sym[1]
	}
	s.k, s.nin, s.nout, s.prepared = from.k, nin, u, true
	return same
}

// tailInPlace computes octets n64 to L of the outputs (from octet 2 of the symbols) from the
// last 64 octets of every input; L >= 64.
func (d *Decoder) tailInPlace(s *fusedScratch, n64, L int) {
	tl := L - n64
	if tl == 0 {
		return
	}
	u, nin := len(d.outs), len(d.ins)
	d.tail = grow(d.tail, u*64)
	if cap(d.tins) < nin {
		d.tins = make([][]byte, nin)
	}
	if cap(d.touts) < u {
		d.touts = make([][]byte, u)
	}
	d.tins, d.touts = d.tins[:nin], d.touts[:u]
	for i, in := range d.ins {
		d.tins[i] = in[L-64 : L]
	}
	for c := range d.touts {
		d.touts[c] = d.tail[c*64 : (c+1)*64]
	}
	s.mul(d.tins, d.touts, 64)
	for c, out := range d.outs {
		copy(out[n64:L], d.touts[c][64-tl:])
	}
	clear(d.tins)
}

// prefixes sets the outputs' 2-octet length prefixes, the sum over the inputs t of
// coef[c][t] * prefix_t, in scalar. When every known source has one prefix (same), their part
// is that prefix times the sum of their coefficients, which the plan keeps; only the u rows'
// prefixes are multiplied one by one.
func (d *Decoder) prefixes(p *decodePlan, same bool) {
	nin := len(d.ins)
	nk := len(p.pos)
	first := 0
	if same && nk > 0 {
		first = nk
	}
	for c, b := range d.dst {
		var hi, lo byte
		if first > 0 {
			hi, lo = mulLog(p.sumK[c], d.pre[0]), mulLog(p.sumK[c], d.pre[1])
		}
		row := p.coef[c*nin : (c+1)*nin]
		for t := first; t < nin; t++ {
			hi ^= mulLog(row[t], d.pre[2*t])
			lo ^= mulLog(row[t], d.pre[2*t+1])
		}
		b[0], b[1] = hi, lo
	}
}

// tailPadded computes octets n64 to L of the outputs and their length prefixes from a
// zero-padded copy of the rest of every input and its prefix.
func (d *Decoder) tailPadded(s *fusedScratch, n64, L int) {
	u, nin := len(d.outs), len(d.ins)
	tl := L - n64
	w := 64
	if tl+2 > 64 {
		w = 128
	}
	tail := grow(d.tail, (nin+u)*w)
	d.tail = tail
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
	s.mul(d.tins, d.touts, w)
	for c, dst := range d.dst {
		b := d.touts[c]
		copy(dst[2+n64:], b[:tl])
		dst[0], dst[1] = b[tl], b[tl+1]
	}
	clear(d.tins)
}

// solve restores the unknowns with the fused kernels of family k. A loss pattern whose plan
// is kept (decodePlan) takes the one-pass solve on it. Otherwise, when the rows share their set
// L, the two-stage solve needs no per-pattern coefficients, and the pattern is only noted: if it
// comes again while noted, its plan is built then. Rows over different sets take the one-pass
// solve on a plan built at once.
func (d *Decoder) solve(k Kernels, plan []int, unknown *psn.Bitmap) {
	d.planKey(plan)
	p := d.findPlan(k, unknown)
	switch {
	case p == nil && d.shareSet(plan) && d.twoStagePays(k, plan):
		d.newPlan(k, unknown)
		d.solveTwoStage(k, plan, unknown)
		return
	case p == nil:
		p = d.newPlan(k, unknown)
	}
	if !p.built {
		p.build()
	}
	d.solveFused(p, plan)
}

// Per-product costs that choose between the solves, in units of one product of the fused
// kernels over one 64-octet column: the one-pass solve's coefficients cost about this many per
// coefficient (the closed form and the kernels' tables), for each family.
const (
	coefCostGFNI   = 30 // AVX-512 GFNI: one instruction per product and column
	coefCostNibble = 12 // AVX2 or NEON: two table lookups per product and column
)

// twoStagePays reports whether the two-stage solve of the u planned rows, which share their
// set, costs less than building the one-pass coefficients: its second product, u x u products
// per 64-octet column, against u x |K| coefficients. At k = 32 it does on GFNI up to T = 4130
// with u = 8, and on the nibble kernels at T = 1058 but not at T = 4130 with u = 8.
func (d *Decoder) twoStagePays(k Kernels, plan []int) bool {
	u := len(plan)
	over := &d.blk.rows[plan[0]].Over
	nk := over.Count() - u
	cost := coefCostNibble
	if k == KernelsGFNI {
		cost = coefCostGFNI
	}
	return u*(d.stride/64) < cost*nk
}

// shareSet reports whether the planned rows were all computed over one set L.
func (d *Decoder) shareSet(plan []int) bool {
	over := &d.blk.rows[plan[0]].Over
	for _, r := range plan[1:] {
		if !d.blk.rows[r].Over.Equal(over) {
			return false
		}
	}
	return true
}

// solveTwoStage is the fused solve when the planned rows share one set L (ordinary repair
// symbols, all over the present positions). The coefficients of the known sources are then the
// rows' own, C(i, j), the same for every loss pattern, and are taken from a row plan
// (rowPlan) instead of computed: the first product is R' = R - C_K S_K, into u symbols of
// scratch (mid), each with its length prefix and zeros beyond T; the second S_U = inv * R', over
// whole 64-octet columns of those symbols, which gives the prefixes and the zeros beyond T too.
// The second reads u symbols where the first reads |K| + u, and saves the u x |K| coefficients
// inv * C_K of the one-pass solve (solveFused).
func (d *Decoder) solveTwoStage(k Kernels, plan []int, unknown *psn.Bitmap) {
	T, L, u := d.symLen, d.symLen-2, len(plan)
	over := d.blk.rows[plan[0]].Over
	d.idx = d.idx[:0]
	for _, r := range plan {
		d.idx = append(d.idx, d.blk.rows[r].Index)
	}
	rp := d.rowPlan(k, d.blk.k, d.idx, &over)
	d.cols = unknown.Positions(d.cols[:0])
	known := over.AndNot(*unknown)
	var same bool
	if k == KernelsGFNI && u <= gfniMaxOut {
		same = d.gatherKnown(rp, &known, plan, L)
		d.pos = d.pos[:0]
		if !same {
			d.pos = known.Positions(d.pos) // rowPrefixes's walk, source by source
		}
	} else {
		d.pos = known.Positions(d.pos[:0])
		d.gcols = append(d.gcols[:0], d.pos...)
		for n := range u {
			d.gcols = append(d.gcols, d.blk.k+n)
		}
		d.s1.gather(&rp.scratch, d.gcols)
		same = d.gatherInputs(d.pos, plan, L)
	}
	d.dst = d.dst[:0]
	for n := range u {
		if n == len(d.mid) {
			d.mid = append(d.mid, nil)
		}
		d.mid[n] = d.mids.at(n)
		d.dst = append(d.dst, d.mid[n])
	}
	if d.columns(&d.s1, L) {
		d.rowPrefixes(rp, same)
	}
	d.endColumns(T)

	d.inv = grow(d.inv, u*u)
	d.lg, d.lh = growInts(d.lg, u), growInts(d.lh, u)
	cauchyInverse(d.inv, d.lg, d.lh, d.idx, d.cols)
	d.s2.prepare(k, d.inv, u, u)
	d.outs = d.outs[:0]
	for _, j := range d.cols {
		d.src[j] = d.srcs.at(j)
		d.span[j] = d.stride
		d.outs = append(d.outs, d.src[j])
	}
	d.s2.mul(d.mid[:u], d.outs, d.stride)
}

// rowPrefixes sets the length prefixes of the first product's outputs d.dst: row r's own plus
// the sum over the known sources of C(idx[r], j) times their prefixes. When they all have one
// prefix (same), that is the prefix times the sum of the row's coefficients over L less those
// of the unknowns; otherwise d.pos lists the known positions in the order of the inputs.
func (d *Decoder) rowPrefixes(rp *rowPlan, same bool) {
	nk := len(d.ins) - len(d.dst) // the known sources, listed first
	nin := rp.blockK + len(rp.idx)
	for r, b := range d.dst {
		hi, lo := d.pre[2*(nk+r)], d.pre[2*(nk+r)+1]
		row := rp.coef[r*nin : r*nin+rp.blockK]
		if same && nk > 0 {
			s := rp.sum[r]
			for _, j := range d.cols {
				s ^= row[j]
			}
			hi ^= mulLog(s, d.pre[0])
			lo ^= mulLog(s, d.pre[1])
		} else {
			for t, j := range d.pos {
				hi ^= mulLog(row[j], d.pre[2*t])
				lo ^= mulLog(row[j], d.pre[2*t+1])
			}
		}
		b[0], b[1] = hi, lo
	}
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
