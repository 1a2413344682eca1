package psn

import (
	"math/rand/v2"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

func TestSerialArithmeticAcrossWrap(t *testing.T) {
	cases := []struct {
		p, q   PSN
		before bool
		diff   int32
	}{
		{0, 1, true, 1},
		{1, 0, false, -1},
		{Mask, 0, true, 1},
		{0, Mask, false, -1},
		{Mask - 5, 4, true, 10},
		{5, 5, false, 0},
		{0, half - 1, true, half - 1},
		{0, half, false, half}, // exactly half: not before, distance +2^23 by convention
	}
	for _, c := range cases {
		if got := c.p.Before(c.q); got != c.before {
			t.Errorf("%v.Before(%v) = %v, want %v", c.p, c.q, got, c.before)
		}
		if got := Diff(c.p, c.q); got != c.diff {
			t.Errorf("Diff(%v, %v) = %d, want %d", c.p, c.q, got, c.diff)
		}
	}
	if got := PSN(Mask).Add(1); got != 0 {
		t.Errorf("Mask+1 = %v", got)
	}
	if got := PSN(0).Add(-1); got != Mask {
		t.Errorf("0-1 = %v", got)
	}
	if Max(Mask, 2) != 2 || Min(Mask, 2) != Mask {
		t.Error("Max/Min across wrap")
	}
}

func TestSerialProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := PSN(rapid.Uint32Range(0, Mask).Draw(t, "p"))
		n := rapid.IntRange(-half+1, half-1).Draw(t, "n")
		q := p.Add(n)
		if Diff(p, q) != int32(n) {
			t.Fatalf("Diff(%v, %v) = %d, want %d", p, q, Diff(p, q), n)
		}
		if (n > 0) != p.Before(q) || (n < 0) != p.After(q) {
			t.Fatalf("order of %v and %v with n=%d", p, q, n)
		}
		if uint32(q) > Mask {
			t.Fatalf("result %d exceeds 24 bits", q)
		}
	})
}

func TestRangeAcrossWrap(t *testing.T) {
	r := Range{Start: Mask - 1, Count: 4}
	for _, q := range []PSN{Mask - 1, Mask, 0, 1} {
		if !r.Contains(q) {
			t.Errorf("%v should contain %v", r, q)
		}
	}
	for _, q := range []PSN{Mask - 2, 2} {
		if r.Contains(q) {
			t.Errorf("%v should not contain %v", r, q)
		}
	}
	if r.End() != 2 || r.Last() != 1 {
		t.Errorf("End %v Last %v", r.End(), r.Last())
	}
}

func TestBitmapOrderMatchesDraft(t *testing.T) {
	// The Appendix: all four positions present is 0xF0000000; L = {0,1,2} is 0xE0000000.
	var present, lost Bitmap
	for j := 0; j < 4; j++ {
		present.Set(j)
	}
	for j := 0; j < 3; j++ {
		lost.Set(j)
	}
	if present[0] != 0xF0000000 || lost[0] != 0xE0000000 {
		t.Fatalf("present %#x lost %#x", present[0], lost[0])
	}
	if got := present.Append(nil, 4); string(got) != "\xf0\x00\x00\x00" {
		t.Fatalf("Append = % x", got)
	}
	var b Bitmap
	b.Set(32)
	b.Set(254)
	if b[1] != 0x80000000 || b[7] != 0x2 {
		t.Fatalf("words %#x", b)
	}
	if got := b.Positions(nil); len(got) != 2 || got[0] != 32 || got[1] != 254 {
		t.Fatalf("positions %v", got)
	}
	if !b.Beyond(200) || b.Beyond(255) {
		t.Fatal("Beyond")
	}
	if FirstK(33) != (Bitmap{0xFFFFFFFF, 0x80000000}) {
		t.Fatalf("FirstK(33) = %#x", FirstK(33))
	}
}

func TestBitmapRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		k := rapid.IntRange(1, 255).Draw(t, "k")
		var b Bitmap
		set := rapid.SliceOfDistinct(rapid.IntRange(0, k-1), rapid.ID[int]).Draw(t, "set")
		for _, j := range set {
			b.Set(j)
		}
		if b.Count() != len(set) {
			t.Fatalf("Count %d want %d", b.Count(), len(set))
		}
		enc := b.Append(nil, k)
		if len(enc) != Words(k)*4 {
			t.Fatalf("len %d", len(enc))
		}
		got, n, err := ParseBitmap(enc, k)
		if err != nil || n != len(enc) || got != b {
			t.Fatalf("round trip: %v %d %#x vs %#x", err, n, got, b)
		}
		if _, _, err := ParseBitmap(enc[:len(enc)-1], k); err == nil {
			t.Fatal("short bitmap accepted")
		}
	})
}

func TestBitmapWordOperationsMatchPositionByPosition(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for range 2000 {
		var b Bitmap
		for range rng.IntN(12) {
			b.Set(rng.IntN(MaxPositions))
		}
		var want []int
		for j := range MaxPositions {
			if b.Has(j) {
				want = append(want, j)
			}
		}
		if got := b.Positions(nil); !slices.Equal(got, want) {
			t.Fatalf("Positions %v, want %v", got, want)
		}
		var next []int
		for j := b.Next(0); j >= 0; j = b.Next(j + 1) {
			next = append(next, j)
		}
		if !slices.Equal(next, want) {
			t.Fatalf("Next walk %v, want %v", next, want)
		}
		for k := -1; k <= MaxPositions+1; k++ {
			beyond := false
			for _, j := range want {
				beyond = beyond || j >= k
			}
			if got := b.Beyond(k); got != beyond {
				t.Fatalf("Beyond(%d) of %v = %v", k, want, got)
			}
		}
	}
}
