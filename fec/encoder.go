package fec

import (
	"fmt"
	"slices"

	"github.com/crem-project/crem/psn"
)

// Encoder computes repair symbols. It keeps scratch buffers and the plans of the last few
// shapes it coded, so it is not safe for concurrent use: give each goroutine its own. Once its
// scratch has grown to the largest block it has coded, it allocates nothing on any path while
// the shapes repeat; a new shape (Repair Indices and set L) allocates its plan once.
type Encoder struct {
	kernels Kernels // as configured; KernelsAuto follows useKernels

	// The plans of the last shapes coded, most recently used first (see plan).
	plans mru[encodePlan]

	// Inputs and tail scratch of the fused kernels (encodeFused).
	ins         [][]byte
	tins, touts [][]byte
	tail        []byte
}

// encodePlans is the number of shapes an Encoder keeps planned: the ordinary repair of the
// block's configuration, and room for the coded retransmissions between its blocks.
const encodePlans = 4

// encodePlan is what Encode needs for one shape, apart from the bytes: the positions of L in
// ascending order and the coefficients C(indices[r], pos[t]) as the family's kernels take them
// (prepared matrices or tables for the fused kernels, t-major rows for the portable ones).
type encodePlan struct {
	k       Kernels // resolved family
	indices []int
	over    psn.Bitmap
	pos     []int
	whole   bool   // pos is 0, 1, ..., len(pos)-1
	coef    []byte // portable: coef[t*m+r]
	scratch fusedScratch
}

// plan returns the plan of family k for (indices, over), from the cache or built, and makes it
// the most recently used. The indices must be valid for the block.
func (e *Encoder) plan(k Kernels, indices []int, over *psn.Bitmap) *encodePlan {
	if p := e.plans.find(func(p *encodePlan) bool {
		return p.k == k && p.over.Equal(over) && slices.Equal(p.indices, indices)
	}); p != nil {
		return p
	}
	p := e.plans.push(encodePlans)
	p.build(k, indices, over)
	return p
}

// build fills p for family k and the shape (indices, over).
func (p *encodePlan) build(k Kernels, indices []int, over *psn.Bitmap) {
	p.k, p.over = k, *over
	p.indices = append(p.indices[:0], indices...)
	p.pos = over.Positions(p.pos[:0])
	p.whole = len(p.pos) == 0 || p.pos[len(p.pos)-1] == len(p.pos)-1
	m, nin := len(indices), len(p.pos)
	if nin == 0 {
		return
	}
	if cap(p.coef) < m*nin {
		p.coef = make([]byte, m*nin)
	}
	cf := p.coef[:m*nin]
	if k == KernelsPortable {
		for t, j := range p.pos {
			for r, i := range indices {
				cf[t*m+r] = coef(i, j)
			}
		}
		return
	}
	for t, j := range p.pos {
		for r, i := range indices {
			cf[r*nin+t] = coef(i, j)
		}
	}
	p.scratch.prepare(k, cf, nin, m)
}

// Option configures an Encoder or a Decoder.
type Option func(*options) error

type options struct {
	kernels Kernels
}

func buildOptions(opts []Option) (options, error) {
	var o options
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// NewEncoder returns an Encoder.
func NewEncoder(opts ...Option) (*Encoder, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	return &Encoder{kernels: o.kernels}, nil
}

// Encode computes the scheme 1 repair symbols R_i[L] = sum over j in L of C(i, j) * S_j, one
// for each Repair Index indices[r], into dst[r]. src holds one entry per position of the block
// (k = len(src)); entries outside L are not read and may be nil, so absent positions and
// positions outside a coded retransmission's L are zero symbols. All of dst and the entries in L
// are T octets long.
//
// An ordinary repair symbol has L = all present positions; a coded retransmission has L = the
// lost sources named in the request. On a processor with AVX-512 and GFNI, or with AVX2, the
// symbols are computed together by the package's fused kernels, whatever the indices and L,
// reading each source once. Elsewhere (the portable path) they are computed with single-row
// kernels, source by source (encodeRows). The coefficients of a shape (indices, L) are
// prepared once and kept for the next calls of the same shape (the last few shapes), so a
// sender that codes block after block with one configuration pays for them once. No path
// allocates once the Encoder is warm.
func (e *Encoder) Encode(dst [][]byte, indices []int, over psn.Bitmap, src [][]byte) error {
	T, err := checkEncode(dst, indices, &over, src)
	if err != nil || len(dst) == 0 {
		return err
	}
	k := resolve(e.kernels)
	p := e.plan(k, indices, &over)
	if err := checkLengths(T, p.pos, p.whole, src); err != nil {
		return err
	}
	if len(p.pos) == 0 {
		for r := range dst {
			clear(dst[r])
		}
		return nil
	}
	if k != KernelsPortable {
		e.encodeFused(p, dst, T, src)
		return nil
	}
	encodeRows(p, dst, src)
	return nil
}

// encodeRows computes the symbols with the single-row kernels mulSlice and mulAddSlice
// (klauspost's LowLevel AVX2 or SSSE3 on amd64, NEON on arm64; plain Go under noasm and where
// klauspost has no assembly), which allocate nothing. Source by source, so each is read once
// for all m rows while it is in the first-level cache. klauspost's multi-row kernels would
// read each source once into registers for all rows, but it reaches them only through an
// Encoder, whose every call allocates (a sync.Pool put of its matrix scratch, and a GFNI matrix
// array that escapes to the heap).
func encodeRows(p *encodePlan, dst [][]byte, src [][]byte) {
	m := len(dst)
	for t, j := range p.pos {
		in, c := src[j], p.coef[t*m:(t+1)*m]
		for r, out := range dst {
			if t == 0 {
				mulSlice(c[r], in, out)
			} else {
				mulAddSlice(c[r], in, out)
			}
		}
	}
}

// encodeFused computes the symbols with the fused kernels of the plan's family over the whole
// 64-octet columns, and the last partial column from the last 64 octets of each source (or a
// zero-padded copy when T < 64), whose last octets it keeps. It allocates only while its
// scratch grows.
func (e *Encoder) encodeFused(p *encodePlan, dst [][]byte, T int, src [][]byte) {
	if p.k == KernelsGFNI {
		// One pass, the partial last column masked; a block whose every position is in L
		// (every ordinary repair of a full block) is the kernel's input as it stands.
		ins := src
		if !p.whole || len(src) != len(p.pos) {
			ins = e.gather(p, src)
		}
		// Encode has checked every source of L and every output to hold T octets
		// (checkEncode, checkLengths): the kernel's guard need only check the shape.
		p.scratch.mulChecked(ins, dst, T)
		clear(e.ins) // hold no caller buffer beyond the call
		e.ins = e.ins[:0]
		return
	}
	m, nin := len(dst), len(p.pos)
	e.gather(p, src)
	n64 := T &^ 63
	if n64 > 0 {
		p.scratch.mul(e.ins, dst, n64)
	}
	if tl := T - n64; tl > 0 {
		e.tins, e.touts = e.tins[:0], e.touts[:0]
		if T >= 64 {
			// The last 64 octets overlap the columns already done; the products are bytewise,
			// so their last tl octets are the tail's.
			if need := m * 64; cap(e.tail) < need {
				e.tail = make([]byte, need)
			}
			for _, in := range e.ins {
				e.tins = append(e.tins, in[T-64:T])
			}
			for r := range m {
				e.touts = append(e.touts, e.tail[r*64:(r+1)*64])
			}
			p.scratch.mul(e.tins, e.touts, 64)
			for r := range m {
				copy(dst[r][n64:T], e.touts[r][64-tl:])
			}
		} else {
			if need := (nin + m) * 64; cap(e.tail) < need {
				e.tail = make([]byte, need)
			}
			tail := e.tail[:(nin+m)*64]
			for t, in := range e.ins {
				b := tail[t*64 : (t+1)*64]
				clear(b[copy(b, in[:T]):])
				e.tins = append(e.tins, b)
			}
			for r := range m {
				e.touts = append(e.touts, tail[(nin+r)*64:(nin+r+1)*64])
			}
			p.scratch.mul(e.tins, e.touts, 64)
			for r := range m {
				copy(dst[r][:T], e.touts[r][:tl])
			}
		}
		clear(e.tins) // hold no caller buffer beyond the call
	}
	clear(e.ins)
	e.ins = e.ins[:0]
}

// gather sets e.ins to the sources at the plan's positions, in order.
func (e *Encoder) gather(p *encodePlan, src [][]byte) [][]byte {
	e.ins = e.ins[:0]
	for _, j := range p.pos {
		e.ins = append(e.ins, src[j])
	}
	return e.ins
}

// XOR computes the scheme 2 repair symbol (Repair Index 0): the exclusive-or of the source
// symbols at the positions in present. Coded retransmission is not defined for this scheme,
// so the set is always the block's present positions.
func (e *Encoder) XOR(dst []byte, present psn.Bitmap, src [][]byte) error {
	if err := CheckK(len(src)); err != nil {
		return err
	}
	if err := CheckT(len(dst)); err != nil {
		return err
	}
	if err := checkSources(len(dst), present, src); err != nil {
		return err
	}
	clear(dst)
	present.Each(func(j int) { mulAddSlice(1, src[j], dst) })
	return nil
}

// checkEncode validates Encode's arguments but the lengths of the sources (checkLengths,
// once the positions of L are known) before anything is written. It returns T.
func checkEncode(dst [][]byte, indices []int, over *psn.Bitmap, src [][]byte) (T int, err error) {
	k := len(src)
	if err := CheckK(k); err != nil {
		return 0, err
	}
	if len(dst) != len(indices) {
		return 0, fmt.Errorf("fec: %d output symbols for %d Repair Indices: %w", len(dst), len(indices), ErrArgs)
	}
	if len(dst) == 0 {
		return 0, nil
	}
	T = len(dst[0])
	if err := CheckT(T); err != nil {
		return 0, err
	}
	for r := range dst {
		if len(dst[r]) != T {
			return 0, fmt.Errorf("fec: output symbol %d has %d octets, output 0 has %d: %w", r, len(dst[r]), T, ErrSymbolLength)
		}
	}
	for _, i := range indices {
		if i < 0 || i+k > MaxK {
			return 0, CheckIndex(i, k)
		}
	}
	if over.Beyond(k) {
		return 0, fmt.Errorf("fec: set names a position at or beyond k = %d: %w", k, ErrSet)
	}
	return T, nil
}

// checkLengths reports whether the source at every position of pos holds T octets. The
// lengths are compared without a branch each, and the culprit looked for only when one
// differs; whole says pos is 0, 1, ..., len(pos)-1, read in place.
func checkLengths(T int, pos []int, whole bool, src [][]byte) error {
	diff := 0
	if whole && len(pos) <= len(src) {
		for _, s := range src[:len(pos)] {
			diff |= len(s) ^ T
		}
	} else {
		for _, j := range pos {
			diff |= len(src[j]) ^ T
		}
	}
	if diff == 0 {
		return nil
	}
	for _, j := range pos {
		if len(src[j]) != T {
			return fmt.Errorf("fec: source symbol %d has %d octets, want T = %d: %w", j, len(src[j]), T, ErrSymbolLength)
		}
	}
	return nil
}

// checkSources reports whether every position of the set is in the block and holds T octets.
func checkSources(T int, over psn.Bitmap, src [][]byte) error {
	if over.Beyond(len(src)) {
		return fmt.Errorf("fec: set names a position at or beyond k = %d: %w", len(src), ErrSet)
	}
	bad := -1
	over.Each(func(j int) {
		if bad < 0 && len(src[j]) != T {
			bad = j
		}
	})
	if bad >= 0 {
		return fmt.Errorf("fec: source symbol %d has %d octets, want T = %d: %w", bad, len(src[bad]), T, ErrSymbolLength)
	}
	return nil
}
