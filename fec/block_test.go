package fec

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/crem-project/crem/psn"
)

// TestBlockStatusSaysWhatIsMissing: Sections 7.1 and 7.4, the receiver knows exactly which
// sources are unknown, how many repair symbols it holds, and how many more it needs.
func TestBlockStatusSaysWhatIsMissing(t *testing.T) {
	var b Block
	present := psn.FirstK(8)
	present.Clear(5) // an absent position is neither coded nor expected
	if err := b.Reset(SchemeCauchy, 8, present); err != nil {
		t.Fatal(err)
	}
	for _, j := range []int{0, 3, 4, 6} {
		if err := b.AddSource(j); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.AddRepair(0, present); err != nil {
		t.Fatal(err)
	}
	s := b.Status()
	if s.Unknown != bitmapOf(1, 2, 7) || s.U != 3 || s.Held != 1 || s.Usable != 1 || s.Missing != 2 || s.Solvable() || s.Complete() {
		t.Fatalf("status %+v, want unknown {1,2,7}, 1 held and usable, 2 missing", s)
	}
	if _, _, err := b.Plan(nil); !errors.Is(err, ErrNotSolvable) {
		t.Fatalf("Plan of an unsolvable block: %v", err)
	}
	if _, err := b.Restore(); !errors.Is(err, ErrNotSolvable) || b.Known() != bitmapOf(0, 3, 4, 6) {
		t.Fatalf("Restore of an unsolvable block: %v, known %v", err, b.Known())
	}
	// A coded retransmission over the lost set and a late source make it solvable.
	if err := b.AddRepair(9, bitmapOf(1, 2, 7)); err != nil {
		t.Fatal(err)
	}
	if err := b.AddSource(7); err != nil {
		t.Fatal(err)
	}
	plan, s, err := b.Plan(nil)
	if err != nil || s.U != 2 || s.Missing != 0 || len(plan) != 2 {
		t.Fatalf("plan %v status %+v: %v", plan, s, err)
	}
	restored, err := b.Restore()
	if err != nil || restored != bitmapOf(1, 2) || !b.Status().Complete() {
		t.Fatalf("Restore = %v, %v", restored.Positions(nil), err)
	}
}

// TestBlockRowNotContainingUnknowns: Section 4.3.1, only rows whose set L contains every
// unknown are used; such a row becomes usable when a late source shrinks the unknowns into L.
func TestBlockRowNotContainingUnknowns(t *testing.T) {
	var b Block
	if err := b.Reset(SchemeCauchy, 4, psn.FirstK(4)); err != nil {
		t.Fatal(err)
	}
	if err := b.AddRepair(2, bitmapOf(0, 1)); err != nil {
		t.Fatal(err)
	}
	if err := b.AddSource(3); err != nil {
		t.Fatal(err)
	}
	if err := b.AddRepair(0, psn.FirstK(4)); err != nil {
		t.Fatal(err)
	}
	if s := b.Status(); s.U != 3 || s.Usable != 1 || s.Held != 2 || s.Missing != 2 {
		t.Fatalf("status %+v: the row over {0,1} must not count while 2 is unknown", s)
	}
	if err := b.AddSource(2); err != nil {
		t.Fatal(err)
	}
	if s := b.Status(); s.U != 2 || s.Usable != 2 || s.Missing != 0 {
		t.Fatalf("status %+v: after source 2 both rows are usable", s)
	}
}

// TestBlockDuplicates: RULINGS C7(d), a Repair Index already held and a source already known
// are ignored and reported (ErrDuplicate), changing nothing.
func TestBlockDuplicates(t *testing.T) {
	var b Block
	all := psn.FirstK(4)
	if err := b.Reset(SchemeCauchy, 4, all); err != nil {
		t.Fatal(err)
	}
	if err := b.AddRepair(1, all); err != nil {
		t.Fatal(err)
	}
	if err := b.AddRepair(1, bitmapOf(0)); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("second Repair Index 1: %v", err)
	}
	if err := b.AddSource(2); err != nil {
		t.Fatal(err)
	}
	if err := b.AddSource(2); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("second source 2: %v", err)
	}
	if s := b.Status(); s.Held != 1 || s.U != 3 {
		t.Fatalf("status after duplicates %+v", s)
	}
}

// TestBlockRefusesBadInput: Sections 4.1, 4.3 and RULINGS C1, the bookkeeping refuses with a
// clear error: k out of range, a Present Bitmap beyond k, sources at absent or out-of-range
// positions, repair rows with i + k > 255, an empty set or one naming absent positions, XOR rows
// other than index 0 over the present set, repair rows in a Source Copy block, use before Reset.
func TestBlockRefusesBadInput(t *testing.T) {
	var b Block
	if err := b.AddSource(0); !errors.Is(err, ErrArgs) {
		t.Errorf("source before Reset: %v", err)
	}
	if err := b.AddRepair(0, psn.FirstK(1)); !errors.Is(err, ErrArgs) {
		t.Errorf("repair before Reset: %v", err)
	}
	for _, k := range []int{0, 256, -3} {
		if err := b.Reset(SchemeCauchy, k, psn.Bitmap{}); !errors.Is(err, ErrK) {
			t.Errorf("Reset k = %d: %v", k, err)
		}
	}
	if err := b.Reset(SchemeCauchy, 4, psn.FirstK(5)); !errors.Is(err, ErrSet) {
		t.Errorf("Present Bitmap beyond k: %v", err)
	}
	if err := b.Reset(Scheme(3), 4, psn.FirstK(4)); !errors.Is(err, ErrScheme) {
		t.Errorf("scheme 3: %v", err)
	}
	present := bitmapOf(0, 1, 3)
	if err := b.Reset(SchemeCauchy, 4, present); err != nil {
		t.Fatal(err)
	}
	for j, want := range map[int]error{2: ErrSet, 4: ErrIndex, -1: ErrIndex} {
		if err := b.AddSource(j); !errors.Is(err, want) {
			t.Errorf("source %d: %v, want %v", j, err, want)
		}
	}
	for _, c := range []struct {
		i    int
		over psn.Bitmap
		want error
	}{
		{252, present, ErrIndex}, {-1, present, ErrIndex}, {0, psn.Bitmap{}, ErrSet},
		{0, psn.FirstK(4), ErrSet}, {0, bitmapOf(200), ErrSet},
	} {
		if err := b.AddRepair(c.i, c.over); !errors.Is(err, c.want) {
			t.Errorf("repair %d over %v: %v, want %v", c.i, c.over.Positions(nil), err, c.want)
		}
	}
	if err := b.Reset(SchemeXOR, 4, present); err != nil {
		t.Fatal(err)
	}
	if err := b.AddRepair(1, present); !errors.Is(err, ErrIndex) {
		t.Errorf("XOR repair index 1: %v", err)
	}
	if err := b.AddRepair(0, bitmapOf(0, 1)); !errors.Is(err, ErrSet) {
		t.Errorf("XOR repair over a lost set: %v", err)
	}
	if err := b.Reset(SchemeSourceCopy, 4, present); err != nil {
		t.Fatal(err)
	}
	if err := b.AddRepair(0, present); !errors.Is(err, ErrScheme) {
		t.Errorf("repair row in a Source Copy block: %v", err)
	}
	if err := b.AddSource(1); err != nil {
		t.Errorf("Source Copy block takes sources: %v", err)
	}
}

// TestBlockPlanTakesLowestUsableIndices: whatever order the repair rows arrive in, and whatever
// sets they cover, Plan returns the status Status gives and the first u usable rows in
// ascending Repair Index order.
func TestBlockPlanTakesLowestUsableIndices(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for range 3000 {
		k := 1 + rng.IntN(40)
		var b Block
		if err := b.Reset(SchemeCauchy, k, psn.FirstK(k)); err != nil {
			t.Fatal(err)
		}
		for j := range k {
			if rng.IntN(3) > 0 {
				if err := b.AddSource(j); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, i := range rng.Perm(12)[:rng.IntN(12)] {
			over := psn.FirstK(k)
			if rng.IntN(3) == 0 {
				over.Clear(rng.IntN(k))
			}
			if over.Empty() {
				continue
			}
			if err := b.AddRepair(i, over); err != nil {
				t.Fatal(err)
			}
		}
		st := b.Status()
		plan, s, err := b.Plan(nil)
		if s != st {
			t.Fatalf("Plan's status %+v, Status %+v", s, st)
		}
		var want []int
		for i := range MaxK {
			for r, row := range b.Rows() {
				if row.Index == i && row.Over.Contains(&st.Unknown) && len(want) < st.U {
					want = append(want, r)
				}
			}
		}
		switch {
		case st.U == 0:
			want = nil
		case !st.Solvable():
			want = nil
			if !errors.Is(err, ErrNotSolvable) {
				t.Fatalf("Plan of an unsolvable block: %v", err)
			}
		}
		if len(plan) != len(want) || (len(want) > 0 && !slices.Equal(plan, want)) {
			t.Fatalf("plan %v, want %v (rows %v, status %+v)", plan, want, b.Rows(), st)
		}
	}
}
