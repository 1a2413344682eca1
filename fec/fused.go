package fec

import (
	"fmt"
	"strings"
)

// The fused products: many outputs at once, each the sum of many inputs times arbitrary
// coefficients, in one pass over the inputs. Two families of kernels compute them: GFNI's
// (gfni_amd64.s, AVX-512 and VGF2P8AFFINEQB) and the nibble-table kernels (avx2_amd64.s on
// amd64: two VPSHUFB lookups of 16-entry tables per product; neon_arm64.s on arm64: two TBL). Without either, Encoder and
// Decoder take the portable path of single-row kernels.

// Kernels names a family of byte kernels for Encode and Decode; see WithKernels.
type Kernels uint8

const (
	// KernelsAuto takes the fastest family the processor runs: GFNI, else nibble tables, else
	// portable.
	KernelsAuto Kernels = iota
	// KernelsGFNI is the fused kernels of AVX-512 with GFNI (amd64).
	KernelsGFNI
	// KernelsNibble is the fused nibble-table kernels (AVX2 on amd64, NEON on arm64).
	KernelsNibble
	// KernelsPortable is the single-row kernels (klauspost's, or plain Go).
	KernelsPortable
)

// Available says whether this build on this processor runs the family.
func (k Kernels) Available() bool {
	switch k {
	case KernelsAuto, KernelsPortable:
		return true
	case KernelsGFNI:
		return haveGFNI
	case KernelsNibble:
		return haveNibble
	}
	return false
}

// String names the path the family takes, as CodecPath does.
func (k Kernels) String() string {
	switch k {
	case KernelsAuto:
		return useKernels.String()
	case KernelsGFNI:
		return "fused (AVX-512, GFNI)"
	case KernelsNibble:
		return "fused (" + nibbleISA + ")"
	case KernelsPortable:
		return "portable (" + rowKernels() + ")"
	}
	return fmt.Sprintf("Kernels(%d)", uint8(k))
}

// Name is a short name of the family for benchmarks and logs: "auto", "gfni", the nibble
// kernels' instruction set in lower case ("avx2"), "portable".
func (k Kernels) Name() string {
	switch k {
	case KernelsAuto:
		return "auto"
	case KernelsGFNI:
		return "gfni"
	case KernelsNibble:
		if nibbleISA == "" {
			return "nibble"
		}
		return strings.ToLower(nibbleISA)
	case KernelsPortable:
		return "portable"
	}
	return fmt.Sprintf("kernels%d", uint8(k))
}

// WithKernels pins an Encoder or a Decoder to one family of kernels, e.g. to compare them, or
// to keep a program off the 512-bit registers. It fails if the family does not run here.
func WithKernels(k Kernels) Option {
	return func(o *options) error {
		if k > KernelsPortable || !k.Available() {
			return fmt.Errorf("fec: %v does not run on this processor in this build: %w", k, ErrArgs)
		}
		o.kernels = k
		return nil
	}
}

// bestKernels is the fastest family available.
func bestKernels() Kernels {
	switch {
	case haveGFNI:
		return KernelsGFNI
	case haveNibble:
		return KernelsNibble
	}
	return KernelsPortable
}

// useKernels is the family of the Encoders and Decoders built without WithKernels (or with
// KernelsAuto). Tests switch it to run every path on one processor.
var useKernels = bestKernels()

// resolve returns the family to run for the configured k.
func resolve(k Kernels) Kernels {
	if k == KernelsAuto {
		return useKernels
	}
	return k
}

// gfniMaxOut is the number of outputs of the widest GFNI kernel; more outputs take several
// passes over the inputs, and likewise beyond nibbleMaxOut.
const gfniMaxOut = 16

// gfniMat[c] is the multiplication by c as the 8 x 8 bit matrix VGF2P8AFFINEQB takes: octet
// 7 - i of the matrix is row i, whose bit b is bit i of c * 2^b.
var gfniMat [256]uint64

// nibbleTab[c] is the multiplication by c as the nibble kernels take it: c * v at octet v and
// c * (v << 4) at octet 16 + v, for v = 0 to 15.
var nibbleTab [256][32]byte

func init() {
	for c := range 256 {
		// cx[b] = c * 2^b, by doubling: the field tables may not be filled yet.
		var cx [8]byte
		v := c
		for b := range 8 {
			cx[b] = byte(v)
			v <<= 1
			if v&0x100 != 0 {
				v ^= Poly
			}
		}
		var m uint64
		for i := range 8 {
			var row byte
			for b := range 8 {
				row |= (cx[b] >> i & 1) << b
			}
			m |= uint64(row) << (8 * (7 - i))
		}
		gfniMat[c] = m
		// c * x is the sum of c * 2^b over the bits b of x.
		for x := range 16 {
			var lo, hi byte
			for b := range 4 {
				if x>>b&1 != 0 {
					lo ^= cx[b]
					hi ^= cx[b+4]
				}
			}
			nibbleTab[c][x], nibbleTab[c][16+x] = lo, hi
		}
	}
}

// fusedScratch holds the coefficients of one fused product in the form its kernels take:
// GFNI's matrices or the nibble tables, every pass's in turn (the pass of outputs first to
// first + w - 1 from index first * nin on). Preparing them once serves the whole columns and the
// tail of a symbol.
type fusedScratch struct {
	k         Kernels
	nin, nout int
	mat       []uint64
	tbl       []byte
	prepared  bool
}

// fusedMul sets out[o][x] = sum over i of coef[o*len(in)+i] * in[i][x] for x < n with the
// fused kernels of family k (KernelsGFNI or KernelsNibble); see prepare and mul.
func fusedMul(s *fusedScratch, k Kernels, coef []byte, in, out [][]byte, n int) {
	s.prepare(k, coef, len(in), len(out))
	s.mul(in, out, n)
}

// maxOut is the number of outputs of one pass of family k.
func maxOut(k Kernels) int {
	if k == KernelsGFNI {
		return gfniMaxOut
	}
	return nibbleMaxOut
}

// prepare readies s for products of family k with nout outputs of nin inputs each, output o
// the sum over i of coef[o*nin+i] * in[i]. It allocates only while the scratch grows.
func (s *fusedScratch) prepare(k Kernels, coef []byte, nin, nout int) {
	if nin <= 0 || nout <= 0 || len(coef) < nin*nout {
		panic("fec: fusedScratch.prepare: bad shape")
	}
	step := maxOut(k)
	switch {
	case k == KernelsGFNI && haveGFNI:
		if cap(s.mat) < nin*nout {
			s.mat = make([]uint64, nin*nout)
		}
		for first := 0; first < nout; first += step {
			w := min(nout-first, step)
			m := s.mat[first*nin : (first+w)*nin]
			for o := range w {
				row := coef[(first+o)*nin : (first+o+1)*nin]
				for i, c := range row {
					m[i*w+o] = gfniMat[c]
				}
			}
		}
	case k == KernelsNibble && haveNibble:
		if cap(s.tbl) < nin*nout*32 {
			s.tbl = make([]byte, nin*nout*32)
		}
		for first := 0; first < nout; first += step {
			w := min(nout-first, step)
			t := s.tbl[first*nin*32 : (first+w)*nin*32]
			for o := range w {
				row := coef[(first+o)*nin : (first+o+1)*nin]
				for i, c := range row {
					*(*[32]byte)(t[(i*w+o)*32:]) = nibbleTab[c]
				}
			}
		}
	default:
		panic("fec: fusedScratch.prepare: " + k.String() + " has no fused kernels here")
	}
	s.k, s.nin, s.nout, s.prepared = k, nin, nout, true
}

// mul sets out[o][x] to the prepared sum for x < n, where n is a positive multiple of 64 (any
// positive n for the GFNI family, whose kernels mask a partial last column), every in[i] and
// out[o] holds at least n octets, and no output overlaps an input.
func (s *fusedScratch) mul(in, out [][]byte, n int) {
	// The kernel trusts its operands; its callers build them, and this keeps a slip of theirs
	// from reaching memory it must not touch.
	if !s.prepared || n <= 0 || (n%64 != 0 && s.k != KernelsGFNI) || len(in) != s.nin || len(out) != s.nout {
		panic("fec: fusedScratch.mul: bad shape")
	}
	// The shortest operand, found without a branch per operand.
	short := n
	for _, b := range in {
		short = min(short, len(b))
	}
	for _, b := range out {
		short = min(short, len(b))
	}
	if short < n {
		panic("fec: fusedScratch.mul: short operand")
	}
	s.run(in, out, n)
}

// mulChecked is mul for a caller that has itself checked every in[i] and out[o] to hold at
// least n octets (Encode, at its API edge): the guard keeps only the checks of the shape,
// which cost the same whatever the number of operands.
func (s *fusedScratch) mulChecked(in, out [][]byte, n int) {
	if !s.prepared || n <= 0 || (n%64 != 0 && s.k != KernelsGFNI) || len(in) != s.nin || len(out) != s.nout {
		panic("fec: fusedScratch.mul: bad shape")
	}
	s.run(in, out, n)
}

// run calls the kernels, one pass per maxOut outputs; the operands are checked.
func (s *fusedScratch) run(in, out [][]byte, n int) {
	nin, step := s.nin, maxOut(s.k)
	for first := 0; first < len(out); first += step {
		outs := out[first:min(len(out), first+step)]
		if s.k == KernelsGFNI {
			gfniKernels[len(outs)-1](&s.mat[first*nin], in, outs, n)
		} else {
			nibbleKernels[len(outs)-1](&s.tbl[first*nin*32], in, outs, n)
		}
	}
}

// gather readies s for the product of from's prepared coefficients restricted to the inputs
// cols (indices into from's inputs, in the order s takes them): the prepared matrices or
// tables are copied, not computed again.
func (s *fusedScratch) gather(from *fusedScratch, cols []int) {
	if !from.prepared || len(cols) == 0 {
		panic("fec: fusedScratch.gather: bad shape")
	}
	nin, nout, step := len(cols), from.nout, maxOut(from.k)
	if from.k == KernelsGFNI {
		if cap(s.mat) < nin*nout {
			s.mat = make([]uint64, nin*nout)
		}
	} else if cap(s.tbl) < nin*nout*32 {
		s.tbl = make([]byte, nin*nout*32)
	}
	for first := 0; first < nout; first += step {
		w := min(nout-first, step)
		if from.k == KernelsGFNI {
			src := from.mat[first*from.nin : (first+w)*from.nin]
			dst := s.mat[first*nin : (first+w)*nin]
			gatherMat(dst, src, cols, w)
			continue
		}
		src := from.tbl[first*from.nin*32 : (first+w)*from.nin*32]
		dst := s.tbl[first*nin*32 : (first+w)*nin*32]
		for t, i := range cols {
			copy(dst[t*w*32:(t+1)*w*32], src[i*w*32:(i+1)*w*32])
		}
	}
	s.k, s.nin, s.nout, s.prepared = from.k, nin, nout, true
}

// gatherMat copies the w matrices of input cols[t] of src to input t of dst (moveMats).
func gatherMat(dst, src []uint64, cols []int, w int) {
	for t, i := range cols {
		moveMats(dst[t*w:(t+1)*w], src[i*w:(i+1)*w])
	}
}

// moveMats copies the matrices of one input, a few words, word by word rather than by a call
// to memmove (which copy, and an array assignment of 32 octets or more, become).
func moveMats(dst, src []uint64) {
	src = src[:len(dst)]
	for o := range dst {
		dst[o] = src[o]
	}
}
