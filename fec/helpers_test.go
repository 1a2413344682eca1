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

// eachPath runs f as a subtest on every codec path this machine has: the fused kernels
// ("fused") where the processor has AVX-512 and GFNI, and the portable path ("portable",
// useFused off) always. It restores the switch; tests that use it must not run in parallel.
func eachPath(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	defer func(v bool) { useFused = v }(useFused)
	for _, p := range []struct {
		name  string
		fused bool
	}{{"fused", true}, {"portable", false}} {
		if p.fused && !haveGFNI {
			continue
		}
		useFused = p.fused
		t.Run(p.name, f)
	}
}
