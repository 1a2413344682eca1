package fec

import (
	"fmt"

	"github.com/crem-project/crem/psn"
)

// Encoder computes repair symbols. It keeps scratch buffers, so it is not safe for concurrent
// use: give each goroutine its own. Once its scratch has grown to the largest block it has
// coded, it allocates nothing, on every path.
type Encoder struct {
	pos     []int
	kernels Kernels // as configured; KernelsAuto follows useKernels

	// The coefficients, and for the fused kernels (encodeFused) inputs and scratch.
	coef        []byte
	ins         [][]byte
	tins, touts [][]byte
	scratch     fusedScratch
	tail        []byte
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
// kernels, source by source (encodeRows). No path allocates once the Encoder is warm.
func (e *Encoder) Encode(dst [][]byte, indices []int, over psn.Bitmap, src [][]byte) error {
	_, T, err := checkEncode(dst, indices, over, src)
	if err != nil || len(dst) == 0 {
		return err
	}
	if k := resolve(e.kernels); k != KernelsPortable {
		e.encodeFused(k, dst, indices, T, over, src)
		return nil
	}
	e.encodeRows(dst, indices, over, src)
	return nil
}

// encodeRows computes the symbols with the single-row kernels mulSlice and mulAddSlice
// (klauspost's LowLevel AVX2 or SSSE3 on amd64, NEON on arm64; plain Go under noasm and where
// klauspost has no assembly), which allocate nothing. Source by source, so each is read once
// for all m rows while it is in the first-level cache. klauspost's multi-row kernels would
// read each source once into registers for all rows, but it reaches them only through an
// Encoder, whose every call allocates (a sync.Pool put of its matrix scratch, and a GFNI matrix
// array that escapes to the heap).
func (e *Encoder) encodeRows(dst [][]byte, indices []int, over psn.Bitmap, src [][]byte) {
	e.pos = over.Positions(e.pos[:0])
	m, nin := len(dst), len(e.pos)
	if nin == 0 {
		for r := range dst {
			clear(dst[r])
		}
		return
	}
	if cap(e.coef) < m*nin {
		e.coef = make([]byte, m*nin)
	}
	cf := e.coef[:m*nin]
	for t, j := range e.pos {
		for r, i := range indices {
			cf[t*m+r] = coef(i, j)
		}
	}
	for t, j := range e.pos {
		in, c := src[j], cf[t*m:(t+1)*m]
		for r, out := range dst {
			if t == 0 {
				mulSlice(c[r], in, out)
			} else {
				mulAddSlice(c[r], in, out)
			}
		}
	}
}

// encodeFused computes the symbols with the fused kernels of family k over the whole 64-octet
// columns, and the last partial column from a zero-padded copy. It allocates only while its
// scratch grows.
func (e *Encoder) encodeFused(k Kernels, dst [][]byte, indices []int, T int, over psn.Bitmap, src [][]byte) {
	e.pos = over.Positions(e.pos[:0])
	m, nin := len(dst), len(e.pos)
	if nin == 0 {
		for r := range dst {
			clear(dst[r])
		}
		return
	}
	if cap(e.coef) < m*nin {
		e.coef = make([]byte, m*nin)
	}
	cf := e.coef[:m*nin]
	e.ins = e.ins[:0]
	for t, j := range e.pos {
		for r, i := range indices {
			cf[r*nin+t] = coef(i, j)
		}
		e.ins = append(e.ins, src[j])
	}
	e.scratch.prepare(k, cf, nin, m)
	n64 := T &^ 63
	if n64 > 0 {
		e.scratch.mul(e.ins, dst, n64)
	}
	if tl := T - n64; tl > 0 {
		if need := (nin + m) * 64; cap(e.tail) < need {
			e.tail = make([]byte, need)
		}
		tail := e.tail[:(nin+m)*64]
		e.tins, e.touts = e.tins[:0], e.touts[:0]
		for t, in := range e.ins {
			b := tail[t*64 : (t+1)*64]
			clear(b[copy(b, in[n64:T]):])
			e.tins = append(e.tins, b)
		}
		for r := range m {
			e.touts = append(e.touts, tail[(nin+r)*64:(nin+r+1)*64])
		}
		e.scratch.mul(e.tins, e.touts, 64)
		for r := range m {
			copy(dst[r][n64:T], e.touts[r][:tl])
		}
	}
	clear(e.ins) // hold no caller buffer beyond the call
	e.ins = e.ins[:0]
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

// checkEncode validates Encode's arguments before anything is written.
func checkEncode(dst [][]byte, indices []int, over psn.Bitmap, src [][]byte) (k, T int, err error) {
	k = len(src)
	if err := CheckK(k); err != nil {
		return 0, 0, err
	}
	if len(dst) != len(indices) {
		return 0, 0, fmt.Errorf("fec: %d output symbols for %d Repair Indices: %w", len(dst), len(indices), ErrArgs)
	}
	if len(dst) == 0 {
		return k, 0, nil
	}
	T = len(dst[0])
	if err := CheckT(T); err != nil {
		return 0, 0, err
	}
	for r := range dst {
		if len(dst[r]) != T {
			return 0, 0, fmt.Errorf("fec: output symbol %d has %d octets, output 0 has %d: %w", r, len(dst[r]), T, ErrSymbolLength)
		}
	}
	for _, i := range indices {
		if err := CheckIndex(i, k); err != nil {
			return 0, 0, err
		}
	}
	if err := checkSources(T, over, src); err != nil {
		return 0, 0, err
	}
	return k, T, nil
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
