package fec

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/crem-project/crem/psn"
	"github.com/klauspost/reedsolomon"
)

func seq(first, n int) []int {
	s := make([]int, n)
	for r := range s {
		s[r] = first + r
	}
	return s
}

func symbols(n, T int) [][]byte {
	out := make([][]byte, n)
	for r := range out {
		out[r] = make([]byte, T)
	}
	return out
}

// TestEncodeMatchesKlauspostCustomMatrix: Section 4.3.1, ordinary repair symbols of whole
// blocks (absent positions as zero shards) equal reedsolomon.New(k, m,
// WithCustomMatrix(CREM rows)).Encode, up to k + m = 256, on every codec path.
func TestEncodeMatchesKlauspostCustomMatrix(t *testing.T) {
	eachPath(t, testEncodeMatchesKlauspost)
}

func testEncodeMatchesKlauspost(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	enc := newEncoder(t)
	cases := []struct{ k, m, T int }{{1, 1, 2}, {4, 2, 16}, {32, 4, 1058}, {32, 8, 4130}, {255, 1, 40}, {200, 56, 33}, {17, 12, 100}}
	for range 20 {
		k := 1 + rng.IntN(255)
		cases = append(cases, struct{ k, m, T int }{k, 1 + rng.IntN(min(16, 256-k)), 2 + rng.IntN(300)})
	}
	for _, c := range cases {
		present := psn.FirstK(c.k)
		if c.k > 3 {
			present.Clear(rng.IntN(c.k))
		}
		b := newTestBlock(t, rng, c.k, c.T, present)
		got := symbols(c.m, c.T)
		if err := enc.Encode(got, seq(0, c.m), present, b.src); err != nil {
			t.Fatalf("k=%d m=%d T=%d: %v", c.k, c.m, c.T, err)
		}
		rows, err := CauchyRows(c.k, seq(0, c.m)...)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := reedsolomon.New(c.k, c.m, reedsolomon.WithCustomMatrix(rows))
		if err != nil {
			t.Fatal(err)
		}
		shards := make([][]byte, 0, c.k+c.m)
		for j := range c.k {
			if b.src[j] == nil {
				shards = append(shards, make([]byte, c.T))
			} else {
				shards = append(shards, b.src[j])
			}
		}
		shards = append(shards, symbols(c.m, c.T)...)
		if err := rs.Encode(shards); err != nil {
			t.Fatal(err)
		}
		for r := range c.m {
			if !bytes.Equal(got[r], shards[c.k+r]) {
				t.Fatalf("%s, k=%d m=%d T=%d: R%d differs from klauspost", CodecPath(), c.k, c.m, c.T, r)
			}
		}
	}
}

// TestEncodeMatchesScalarReference: Section 4.3.1, R_i[L] over random sets L and random
// Repair Indices (consecutive or not), on every codec path, against the octet-by-octet scalar
// reference.
func TestEncodeMatchesScalarReference(t *testing.T) {
	eachPath(t, testEncodeMatchesScalarReference)
}

func testEncodeMatchesScalarReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	enc := newEncoder(t)
	for trial := range 200 {
		k := 1 + rng.IntN(64)
		if trial%20 == 0 {
			k = 200 + rng.IntN(56)
		}
		T := 2 + rng.IntN(200)
		present := randomSubset(rng, psn.FirstK(k))
		b := newTestBlock(t, rng, k, T, present)
		over := present
		if trial%2 == 1 {
			over = randomSubset(rng, present)
		}
		n := 1 + rng.IntN(min(8, 256-k))
		idx := seq(rng.IntN(256-k-n+1), n)
		if trial%3 == 0 {
			idx = rng.Perm(256 - k)[:n]
		}
		got := symbols(n, T)
		if err := enc.Encode(got, idx, over, b.src); err != nil {
			t.Fatalf("k=%d T=%d indices %v: %v", k, T, idx, err)
		}
		for r, i := range idx {
			if want := encodeRef(i, over, b.src, T); !bytes.Equal(got[r], want) {
				t.Fatalf("%s, k=%d T=%d R_%d over %v:\n got %x\nwant %x", CodecPath(), k, T, i, over.Positions(nil), got[r], want)
			}
		}
	}
}

// TestEncodeRowsInAnyOrder: Section 4.3.1, each output is its own Repair Index's symbol
// whatever order the indices are listed in, on every codec path.
func TestEncodeRowsInAnyOrder(t *testing.T) {
	eachPath(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 8))
		enc := newEncoder(t)
		b := newTestBlock(t, rng, 32, 1058, psn.FirstK(32))
		up := symbols(4, 1058)
		down := symbols(4, 1058)
		if err := enc.Encode(up, []int{0, 1, 2, 3}, b.present, b.src); err != nil {
			t.Fatal(err)
		}
		if err := enc.Encode(down, []int{3, 2, 1, 0}, b.present, b.src); err != nil {
			t.Fatal(err)
		}
		for r := range 4 {
			if !bytes.Equal(up[r], down[3-r]) {
				t.Fatalf("%s: R%d depends on the order of the indices", CodecPath(), r)
			}
		}
	})
}

// TestEncodeErrors: Sections 4.1 and 4.3.1, every bad argument is a clear error, never a panic:
// k out of 1..255, i + k > 255, mismatched lengths, L beyond k or naming a missing source.
func TestEncodeErrors(t *testing.T) {
	enc := newEncoder(t)
	src4 := symbols(4, 16)
	all4 := psn.FirstK(4)
	for _, c := range []struct {
		name    string
		dst     [][]byte
		indices []int
		over    psn.Bitmap
		src     [][]byte
		want    error
	}{
		{"k = 0", symbols(1, 16), []int{0}, psn.Bitmap{}, nil, ErrK},
		{"k = 256", symbols(1, 16), []int{0}, psn.Bitmap{}, symbols(256, 16), ErrK},
		{"i + k > 255", symbols(1, 16), []int{252}, all4, src4, ErrIndex},
		{"negative index", symbols(1, 16), []int{-1}, all4, src4, ErrIndex},
		{"dst and indices", symbols(2, 16), []int{0}, all4, src4, ErrArgs},
		{"T = 1", symbols(1, 1), []int{0}, all4, src4, ErrSymbolLength},
		{"dst lengths differ", [][]byte{make([]byte, 16), make([]byte, 15)}, []int{0, 1}, all4, src4, ErrSymbolLength},
		{"source shorter than T", symbols(1, 17), []int{0}, all4, src4, ErrSymbolLength},
		{"L beyond k", symbols(1, 16), []int{0}, psn.FirstK(5), src4, ErrSet},
		{"L names a nil source", symbols(1, 16), []int{0}, all4, [][]byte{src4[0], nil, src4[2], src4[3]}, ErrSymbolLength},
	} {
		if err := enc.Encode(c.dst, c.indices, c.over, c.src); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if err := enc.Encode(nil, nil, all4, src4); err != nil {
		t.Errorf("no output: %v", err)
	}
	if err := enc.XOR(make([]byte, 16), psn.FirstK(5), src4); !errors.Is(err, ErrSet) {
		t.Errorf("XOR over a set beyond k: %v", err)
	}
	if err := enc.XOR(make([]byte, 1), all4, src4); !errors.Is(err, ErrSymbolLength) {
		t.Errorf("XOR with T = 1: %v", err)
	}
}

// TestEncodeEmptySetIsZero: a repair symbol over the empty set is the zero symbol on both paths.
func TestEncodeEmptySetIsZero(t *testing.T) {
	enc := newEncoder(t)
	dst := [][]byte{bytes.Repeat([]byte{1}, 8), bytes.Repeat([]byte{1}, 8)}
	if err := enc.Encode(dst, []int{1, 0}, psn.Bitmap{}, make([][]byte, 3)); err != nil {
		t.Fatal(err)
	}
	if err := enc.Encode(dst[:1], []int{0}, psn.Bitmap{}, make([][]byte, 1)); err != nil {
		t.Fatal(err)
	}
	for r := range dst {
		if !bytes.Equal(dst[r], make([]byte, 8)) {
			t.Errorf("R over the empty set = %x", dst[r])
		}
	}
}

// TestXORScheme: Section 4.3.2, the scheme 2 repair symbol is the exclusive-or of the present
// source symbols (absent positions are zero).
func TestXORScheme(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	enc := newEncoder(t)
	present := psn.FirstK(7)
	present.Clear(2)
	b := newTestBlock(t, rng, 7, 50, present)
	got := make([]byte, 50)
	if err := enc.XOR(got, present, b.src); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 50)
	present.Each(func(j int) {
		for n := range want {
			want[n] ^= b.src[j][n]
		}
	})
	if !bytes.Equal(got, want) {
		t.Fatalf("XOR = %x, want %x", got, want)
	}
}

// TestEncodePlansFollowTheShape: an Encoder that keeps the plans of the last few shapes gives
// the scalar reference's symbols whatever the order of the shapes it meets: shapes that repeat
// (the plan reused over new sources and a new T), more shapes than it keeps (plans evicted and
// rebuilt), one set L under other indices and one list of indices over other sets, on every
// codec path.
func TestEncodePlansFollowTheShape(t *testing.T) {
	eachPath(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(71, 72))
		enc := newEncoder(t)
		type shape struct {
			k       int
			indices []int
			over    psn.Bitmap
		}
		shapes := []shape{
			{32, seq(0, 4), psn.FirstK(32)},
			{32, seq(0, 8), psn.FirstK(32)},
			{32, seq(4, 4), psn.FirstK(32)},
			{32, []int{6, 7}, bitmapOf(4, 9, 30)},
			{32, []int{6, 7}, bitmapOf(4, 9, 31)},
			{40, seq(0, 4), psn.FirstK(32)}, // the shape of the first, in a larger block
			{8, seq(0, 1), psn.FirstK(8)},
			{32, seq(0, 4), psn.Bitmap{}},
		}
		for step := range 300 {
			n := rng.IntN(len(shapes))
			if step%3 == 0 {
				n = 0 // the ordinary repair, between the others
			}
			s := shapes[n]
			T := []int{2, 63, 64, 65, 130, 1058}[rng.IntN(6)]
			blk := newTestBlock(t, rng, s.k, T, psn.FirstK(s.k))
			dst := symbols(len(s.indices), T)
			for r := range dst {
				dst[r][0] = 0xEE // overwritten, not added to
			}
			if err := enc.Encode(dst, s.indices, s.over, blk.src); err != nil {
				t.Fatal(err)
			}
			for r, i := range s.indices {
				if want := encodeRef(i, s.over, blk.src, T); string(dst[r]) != string(want) {
					t.Fatalf("step %d, shape %d, T %d: R_%d differs from the reference", step, n, T, i)
				}
			}
		}
	})
}
