package fec

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/crem-project/crem/psn"
	"pgregory.net/rapid"
)

// drawPresent draws a non-empty set of present positions of a block of k.
func drawPresent(t *rapid.T, k int) psn.Bitmap {
	present := psn.FirstK(k)
	for _, j := range rapid.SliceOfN(rapid.IntRange(0, k-1), 0, k/4+1).Draw(t, "absent") {
		present.Clear(j)
	}
	if present.Empty() {
		present.Set(0)
	}
	return present
}

// drawSubset draws a subset of s with at most n positions.
func drawSubset(t *rapid.T, s psn.Bitmap, n int, label string) psn.Bitmap {
	pos := s.Positions(nil)
	var out psn.Bitmap
	if len(pos) == 0 {
		return out
	}
	for _, x := range rapid.SliceOfN(rapid.IntRange(0, len(pos)-1), 0, n).Draw(t, label) {
		out.Set(pos[x])
	}
	return out
}

// TestPropertyEncodeOverAnySet: Section 4.3.1, for random k <= 255, T, absent positions, sets
// L and Repair Indices with i + k <= 255, Encode equals the scalar definition of R_i[L].
func TestPropertyEncodeOverAnySet(t *testing.T) {
	enc := newEncoder(t)
	rapid.Check(t, func(t *rapid.T) {
		k := rapid.IntRange(1, 255).Draw(t, "k")
		T := rapid.IntRange(2, 120).Draw(t, "T")
		present := drawPresent(t, k)
		over := present
		if rapid.Bool().Draw(t, "subset") {
			over = drawSubset(t, present, 16, "L")
		}
		n := rapid.IntRange(1, min(4, 256-k)).Draw(t, "n")
		first := rapid.IntRange(0, 256-k-n).Draw(t, "first")
		idx := seq(first, n)
		if rapid.Bool().Draw(t, "permuted") {
			idx = rapid.Permutation(idx).Draw(t, "indices")
		}
		b := newTestBlock(t, rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 1)), k, T, present)
		got := symbols(n, T)
		if err := enc.Encode(got, idx, over, b.src); err != nil {
			t.Fatal(err)
		}
		for r, i := range idx {
			if !bytes.Equal(got[r], encodeRef(i, over, b.src, T)) {
				t.Fatalf("R_%d over %v differs from the scalar reference", i, over.Positions(nil))
			}
		}
	})
}

// TestPropertyDecodeMixedRows: Sections 4.3.1, 7.2 and 7.4, for random k <= 255, m, T, absent
// positions and losses, a receiver holding some ordinary rows, coded retransmissions over a
// request set L (the unknowns when asked, some of which then arrive late) and perhaps a stale
// row whose L misses an unknown: the Decoder and a symbolic Block agree on the status; the
// block is solvable exactly when the usable rows number at least the unknowns, and then every
// source comes back byte-exact.
func TestPropertyDecodeMixedRows(t *testing.T) {
	enc, d := newEncoder(t), newDecoder(t)
	rapid.Check(t, func(t *rapid.T) {
		k := rapid.IntRange(1, 255).Draw(t, "k")
		T := rapid.IntRange(2, 120).Draw(t, "T")
		present := drawPresent(t, k)
		lost := drawSubset(t, present, 10, "lost")
		late := drawSubset(t, present.AndNot(lost), 3, "late")
		request := lost.Or(late)
		m := rapid.IntRange(0, min(6, 256-k)).Draw(t, "m")
		fresh := m
		nCoded := 0
		if !request.Empty() {
			nCoded = rapid.IntRange(0, min(request.Count(), 256-k-fresh)).Draw(t, "coded")
		}
		b := newTestBlock(t, rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 2)), k, T, present)

		var blk Block
		if err := d.Reset(SchemeCauchy, k, T, present); err != nil {
			t.Fatal(err)
		}
		if err := blk.Reset(SchemeCauchy, k, present); err != nil {
			t.Fatal(err)
		}
		addRepair := func(i int, over psn.Bitmap) {
			if err := d.AddRepair(i, over, b.repair(t, enc, i, over)); err != nil {
				t.Fatal(err)
			}
			if err := blk.AddRepair(i, over); err != nil {
				t.Fatal(err)
			}
		}
		byRef := rapid.Bool().Draw(t, "sources by reference")
		addSource := func(j int) {
			add := d.AddSource
			if byRef {
				add = d.AddSourceRef
			}
			if err := add(j, b.payloads[j]); err != nil {
				t.Fatal(err)
			}
			if err := blk.AddSource(j); err != nil {
				t.Fatal(err)
			}
		}
		early := present.AndNot(request)
		early.Each(addSource)
		usable := 0
		for i := range m {
			if rapid.Bool().Draw(t, "ordinary held") {
				addRepair(i, present)
				usable++
			}
		}
		for r := range nCoded {
			addRepair(fresh+r, request)
			usable++
		}
		fresh += nCoded
		if lost.Count() > 0 && fresh+k <= 255 && rapid.Bool().Draw(t, "stale row") {
			stale := request
			stale.Clear(lost.Positions(nil)[0])
			if !stale.Empty() {
				addRepair(fresh, stale) // misses an unknown: kept, never used
			}
		}
		late.Each(addSource)

		s, sb := d.Status(), blk.Status()
		if s != sb {
			t.Fatalf("Decoder status %+v, symbolic Block %+v", s, sb)
		}
		u := lost.Count()
		if s.Unknown != lost || s.U != u || s.Usable != usable || s.Missing != max(0, u-usable) {
			t.Fatalf("status %+v, want unknown %v, %d usable", s, lost.Positions(nil), usable)
		}
		restored, err := d.Decode()
		if s.Missing > 0 {
			if !errors.Is(err, ErrNotSolvable) {
				t.Fatalf("unsolvable block: Decode error %v", err)
			}
			return
		}
		if err != nil || restored != lost {
			t.Fatalf("Decode = %v, %v; want %v", restored.Positions(nil), err, lost.Positions(nil))
		}
		if r, err := blk.Restore(); err != nil || r != lost {
			t.Fatalf("symbolic Restore = %v, %v", r.Positions(nil), err)
		}
		b.checkRestored(t, d)
	})
}
