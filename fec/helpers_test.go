package fec

import (
	"math/rand/v2"
	"testing"

	"github.com/crem-project/crem/psn"
)

// tester is what the helpers need of *testing.T, *testing.B and *rapid.T.
type tester interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// testBlock is a block of random payloads (of random lengths up to T-2) at the present
// positions, with their source symbols; absent positions have nil entries.
type testBlock struct {
	k, T     int
	present  psn.Bitmap
	payloads [][]byte
	src      [][]byte
}

func newTestBlock(tb tester, rng *rand.Rand, k, T int, present psn.Bitmap) *testBlock {
	tb.Helper()
	b := &testBlock{k: k, T: T, present: present, payloads: make([][]byte, k), src: make([][]byte, k)}
	for j := range k {
		if !present.Has(j) {
			continue
		}
		p := make([]byte, rng.IntN(T-1))
		for n := range p {
			p[n] = byte(rng.Uint32())
		}
		s, err := AppendSymbol(nil, p, T)
		if err != nil {
			tb.Fatal(err)
		}
		b.payloads[j], b.src[j] = p, s
	}
	return b
}

// repair computes R_i[L] with the Encoder under test.
func (b *testBlock) repair(tb tester, enc *Encoder, i int, over psn.Bitmap) []byte {
	tb.Helper()
	out := [][]byte{make([]byte, b.T)}
	if err := enc.Encode(out, []int{i}, over, b.src); err != nil {
		tb.Fatalf("R_%d over %v: %v", i, over.Positions(nil), err)
	}
	return out[0]
}

// checkRestored asserts that every present source is known to d and equal to the original.
func (b *testBlock) checkRestored(tb tester, d *Decoder) {
	tb.Helper()
	for j := range b.k {
		if !b.present.Has(j) {
			continue
		}
		p, err := d.Payload(j)
		if err != nil {
			tb.Fatalf("source %d: %v", j, err)
		}
		if string(p) != string(b.payloads[j]) {
			tb.Fatalf("source %d restored as %x, want %x", j, p, b.payloads[j])
		}
		s, _ := d.Symbol(j)
		if string(s) != string(b.src[j]) {
			tb.Fatalf("symbol %d restored as %x, want %x", j, s, b.src[j])
		}
	}
}

func newEncoder(tb testing.TB) *Encoder {
	tb.Helper()
	e, err := NewEncoder()
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

// bitmapOf returns the set of the given positions.
func bitmapOf(pos ...int) psn.Bitmap {
	var b psn.Bitmap
	for _, j := range pos {
		b.Set(j)
	}
	return b
}

// randomSubset returns a random subset of s.
func randomSubset(rng *rand.Rand, s psn.Bitmap) psn.Bitmap {
	var out psn.Bitmap
	s.Each(func(j int) {
		if rng.IntN(2) == 0 {
			out.Set(j)
		}
	})
	return out
}

func newDecoder(tb tester) *Decoder {
	tb.Helper()
	d, err := NewDecoder()
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// pathName names a family of kernels for subtests.
var pathName = map[Kernels]string{KernelsGFNI: "gfni", KernelsNibble: "nibble", KernelsPortable: "portable"}

// fusedKernels lists the fused families this machine runs: GFNI where the processor has
// AVX-512 and GFNI, the nibble kernels where it has AVX2 (both on most AVX-512 machines).
func fusedKernels() []Kernels {
	var ks []Kernels
	for _, k := range []Kernels{KernelsGFNI, KernelsNibble} {
		if k.Available() {
			ks = append(ks, k)
		}
	}
	return ks
}

// eachPath runs f as a subtest on every codec path this machine has, through the switch
// useKernels: the fused GFNI kernels ("gfni"), the fused nibble kernels ("nibble") where the
// processor has them, and the portable path ("portable") always. It restores the switch; tests
// that use it must not run in parallel.
func eachPath(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	defer func(k Kernels) { useKernels = k }(useKernels)
	for _, k := range append(fusedKernels(), KernelsPortable) {
		useKernels = k
		t.Run(pathName[k], f)
	}
}
