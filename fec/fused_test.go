package fec

import (
	"math/rand/v2"
	"testing"

	"github.com/crem-project/crem/psn"
)

// TestFusedMul checks every fused family this machine runs (GFNI, nibble tables) against the
// scalar product for every output count up to two passes and more, input counts from 1 to 70,
// lengths from one 64-octet column on, and coefficients of which about one in four is 0 or 1
// (the tables' edge cases). Octets beyond n must stay untouched.
func TestFusedMul(t *testing.T) {
	ks := fusedKernels()
	if len(ks) == 0 {
		t.Skip("no fused kernels on this machine: " + CodecPath())
	}
	for _, k := range ks {
		t.Run(pathName[k], func(t *testing.T) {
			maxOut := map[Kernels]int{KernelsGFNI: gfniMaxOut, KernelsNibble: nibbleMaxOut}[k]
			rng := rand.New(rand.NewPCG(1, 2))
			var s fusedScratch
			for u := 1; u <= 2*maxOut+3; u++ {
				for _, nin := range []int{1, 2, 3, 7, 33, 70} {
					for _, n := range []int{64, 128, 320} {
						checkFusedMul(t, rng, &s, k, u, nin, n)
					}
				}
			}
		})
	}
}

// refProduct is mulRef for every pair, computed once.
var refProduct = func() (t [256][256]byte) {
	for a := range 256 {
		for b := range 256 {
			t[a][b] = mulRef(byte(a), byte(b))
		}
	}
	return t
}()

func checkFusedMul(t *testing.T, rng *rand.Rand, s *fusedScratch, k Kernels, u, nin, n int) {
	t.Helper()
	in := make([][]byte, nin)
	for i := range in {
		in[i] = make([]byte, n+rng.IntN(3))
		for x := range in[i] {
			in[i][x] = byte(rng.Uint32())
		}
	}
	out := make([][]byte, u)
	for o := range out {
		out[o] = make([]byte, n+1)
		for x := range out[o] {
			out[o][x] = 0xA5 // set, not added to
		}
	}
	coef := make([]byte, u*nin)
	for x := range coef {
		switch rng.IntN(8) {
		case 0:
			coef[x] = 0
		case 1:
			coef[x] = 1
		default:
			coef[x] = byte(rng.Uint32())
		}
	}
	fusedMul(s, k, coef, in, out, n)
	for o := range u {
		for x := range n {
			var want byte
			for i := range nin {
				want ^= refProduct[coef[o*nin+i]][in[i][x]]
			}
			if out[o][x] != want {
				t.Fatalf("u %d, %d inputs, n %d: out[%d][%d] = %#x, want %#x", u, nin, n, o, x, out[o][x], want)
			}
		}
		if out[o][n] != 0xA5 {
			t.Fatalf("u %d, %d inputs, n %d: wrote beyond n", u, nin, n)
		}
	}
}

// TestNibbleTables holds the nibble tables to the field: c * x = lo[x & 15] ^ hi[x >> 4] for
// every c and x.
func TestNibbleTables(t *testing.T) {
	for c := range 256 {
		for x := range 256 {
			got := nibbleTab[c][x&15] ^ nibbleTab[c][16+x>>4]
			if want := mulRef(byte(c), byte(x)); got != want {
				t.Fatalf("c %#x, x %#x: tables give %#x, want %#x", c, x, got, want)
			}
		}
	}
}

// TestDecodeFusedAgainstReference solves random blocks through the fused solve of every fused
// family this machine runs and through the portable one (subtract, then apply the inverse with the single-row kernels), with repair
// symbols from the scalar reference: u = 1 to 20 lost sources (two kernel passes beyond 16 for
// GFNI, beyond 4 for AVX2),
// odd and short T, absent positions, coded retransmissions over part of the block, sources by
// copy, by reference (short payloads included) and as whole symbols, some after the repairs.
// All must restore every symbol octet for octet, and keep the octets beyond T zero.
func TestDecodeFusedAgainstReference(t *testing.T) {
	ks := fusedKernels()
	if len(ks) == 0 {
		t.Skip("no fused kernels on this machine: " + CodecPath())
	}
	ks = append(ks, KernelsPortable)
	defer func(k Kernels) { useKernels = k }(useKernels)
	rng := rand.New(rand.NewPCG(3, 4))
	Ts := []int{2, 3, 5, 63, 64, 65, 66, 67, 127, 128, 129, 130, 131, 191, 1057, 1058, 4129, 4130}
	var decs []*Decoder
	for range ks {
		decs = append(decs, newDecoder(t))
	}
	for trial := range 600 {
		u := 1 + trial%10
		if trial%7 == 6 {
			u = 11 + rng.IntN(10)
		}
		k := u + rng.IntN(40)
		if trial%11 == 0 {
			k = u + rng.IntN(180)
		}
		T := Ts[rng.IntN(len(Ts))]
		if trial%3 == 0 {
			T = 2 + rng.IntN(300)
		}
		var present psn.Bitmap
		for j := range k {
			if rng.IntN(8) != 0 {
				present.Set(j)
			}
		}
		pos := present.Positions(nil)
		if len(pos) < u {
			continue
		}
		rng.Shuffle(len(pos), func(a, b int) { pos[a], pos[b] = pos[b], pos[a] })
		lost := bitmapOf(pos[:u]...)
		blk := newTestBlock(t, rng, k, T, present)
		for j := range k { // full payloads most of the time, as a receiver of RDMA packets sees
			if present.Has(j) && rng.IntN(4) != 0 {
				p := make([]byte, T-2)
				for n := range p {
					p[n] = byte(rng.Uint32())
				}
				blk.payloads[j] = p
				blk.src[j], _ = AppendSymbol(nil, p, T)
			}
		}
		// u usable rows of distinct Repair Indices, ordinary or coded over lost and more.
		type row struct {
			i    int
			over psn.Bitmap
			sym  []byte
		}
		var rows []row
		for _, i := range rng.Perm(255 - k + 1)[:u] {
			over := present
			if rng.IntN(3) == 0 {
				over = lost.Or(randomSubset(rng, present.AndNot(lost)))
			}
			rows = append(rows, row{i, over, encodeRef(i, over, blk.src, T)})
		}
		late := randomSubset(rng, present.AndNot(lost))
		how := make([]int, k)
		for j := range how {
			how[j] = rng.IntN(3)
		}
		var want [][]byte
		for n, d := range decs {
			useKernels = ks[n]
			if err := d.Reset(SchemeCauchy, k, T, present); err != nil {
				t.Fatal(err)
			}
			add := func(j int) { addSourceBy(t, d, blk, j, how[j]) }
			early := present.AndNot(lost).AndNot(late)
			early.Each(add)
			for _, r := range rows {
				if err := d.AddRepair(r.i, r.over, r.sym); err != nil {
					t.Fatal(err)
				}
			}
			late.Each(add)
			restored, err := d.Decode()
			if err != nil || restored != lost {
				t.Fatalf("trial %d (k %d, u %d, T %d, %s): restored %v, %v", trial, k, u, T, pathName[useKernels], restored.Positions(nil), err)
			}
			blk.checkRestored(t, d)
			var got [][]byte
			lost.Each(func(j int) {
				s := d.src[j]
				for _, b := range s[T:] {
					if b != 0 {
						t.Fatalf("trial %d (%s): symbol %d not zero beyond T", trial, pathName[useKernels], j)
					}
				}
				got = append(got, s)
			})
			if n == 0 {
				want = got
			} else {
				for x := range got {
					if string(got[x]) != string(want[x]) {
						t.Fatalf("trial %d: the %s solve differs from the %s one", trial, pathName[useKernels], pathName[ks[0]])
					}
				}
			}
		}
	}
}

// TestCauchyProject holds the closed form of inv * C_j against the product with the inverse.
func TestCauchyProject(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 300 {
		k := 2 + rng.IntN(120)
		u := 1 + rng.IntN(min(k-1, 20))
		perm := rng.Perm(k)
		cols, known := perm[:u], perm[u:]
		rows := rng.Perm(255 - k + 1)[:u]
		inv, lh := make([]byte, u*u), make([]int, u)
		cauchyInverse(inv, make([]int, u), lh, rows, cols)
		z := make([]byte, u*len(known))
		cauchyProject(z, len(known), rows, cols, known, lh, make([]int, len(known)))
		for x, j := range known {
			for c := range u {
				var want byte
				for r := range u {
					want ^= mulRef(inv[c*u+r], coefRef(rows[r], j))
				}
				if got := z[c*len(known)+x]; got != want {
					t.Fatalf("rows %v cols %v j %d: z[%d] = %#x, want %#x", rows, cols, j, c, got, want)
				}
			}
		}
	}
}

// TestEncodeFusedAgainstReference: the fused Encode of every fused family this machine runs and
// the portable path give the scalar reference's symbols for 1 to 20 rows of any indices, over any set L, with odd and short T.
func TestEncodeFusedAgainstReference(t *testing.T) {
	ks := fusedKernels()
	if len(ks) == 0 {
		t.Skip("no fused kernels on this machine: " + CodecPath())
	}
	ks = append(ks, KernelsPortable)
	defer func(k Kernels) { useKernels = k }(useKernels)
	rng := rand.New(rand.NewPCG(9, 10))
	enc := newEncoder(t)
	for trial := range 200 {
		k := 1 + rng.IntN(64)
		if trial%9 == 0 {
			k = 1 + rng.IntN(200)
		}
		T := 2 + rng.IntN(300)
		if trial%4 == 0 {
			T = []int{64, 128, 1058, 4129, 4130}[rng.IntN(5)]
		}
		m := 1 + rng.IntN(min(20, 256-k))
		indices := rng.Perm(255 - k + 1)[:m]
		if trial%2 == 0 {
			first := rng.IntN(255 - k + 2 - m)
			for r := range indices {
				indices[r] = first + r
			}
		}
		present := psn.FirstK(k)
		over := present
		if trial%3 != 0 {
			over = randomSubset(rng, present)
		}
		blk := newTestBlock(t, rng, k, T, present)
		var want [][]byte
		for _, i := range indices {
			want = append(want, encodeRef(i, over, blk.src, T))
		}
		for _, kern := range ks {
			useKernels = kern
			dst := make([][]byte, m)
			for r := range dst {
				dst[r] = make([]byte, T)
				dst[r][0] = 0xEE // overwritten, not added to
			}
			if err := enc.Encode(dst, indices, over, blk.src); err != nil {
				t.Fatal(err)
			}
			for r, i := range indices {
				if string(dst[r]) != string(want[r]) {
					t.Fatalf("trial %d (k %d, T %d, %s): R_%d differs from the reference", trial, k, T, pathName[useKernels], i)
				}
			}
		}
	}
}

// TestDecodePlansFollowThePattern: a Decoder that keeps the plans of its last few loss patterns
// and row sets restores every block whatever the order of the patterns it meets: patterns that
// repeat (their plan built on the second meeting, then reused over new sources, a new T, full
// or short payloads), more patterns and row sets than it keeps (plans evicted and rebuilt), rows
// that share their set L (the two-stage solve) and rows over different sets (the one-pass
// solve), on every codec path. The caches never grow past their bounds.
func TestDecodePlansFollowThePattern(t *testing.T) {
	eachPath(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(81, 82))
		d := newDecoder(t)
		type pattern struct {
			k     int
			lost  psn.Bitmap
			idx   []int
			overs []psn.Bitmap // nil: every row over the present positions
		}
		all := psn.FirstK(32)
		patterns := []pattern{
			{32, bitmapOf(3, 17, 20, 31), seq(0, 4), nil},
			{32, bitmapOf(0, 1, 2, 3, 4, 5, 6, 7), seq(0, 8), nil},
			{32, bitmapOf(5), seq(0, 1), nil},
			{32, bitmapOf(3, 17, 20, 31), seq(2, 4), nil}, // the first's loss, other rows
			{32, bitmapOf(3, 17), seq(0, 2), []psn.Bitmap{all, bitmapOf(3, 9, 17)}},
			{32, bitmapOf(3, 17), seq(0, 2), []psn.Bitmap{all, bitmapOf(3, 9, 17, 30)}},
			{40, bitmapOf(3, 17, 20, 31), seq(0, 4), nil}, // the first's loss in a larger block
			{32, bitmapOf(8, 9), seq(0, 2), nil},
		}
		for step := range 400 {
			n := rng.IntN(len(patterns))
			if step%2 == 0 {
				n = 0 // the first pattern again and again, between the others
			}
			pt := patterns[n]
			T := []int{2, 63, 64, 65, 66, 67, 130, 1058}[rng.IntN(8)]
			present := psn.FirstK(pt.k)
			blk := newTestBlock(t, rng, pt.k, T, present)
			if rng.IntN(2) == 0 { // full payloads, one length prefix for all
				for j := range pt.k {
					p := make([]byte, T-2)
					for x := range p {
						p[x] = byte(rng.Uint32())
					}
					blk.payloads[j] = p
					blk.src[j], _ = AppendSymbol(nil, p, T)
				}
			}
			if err := d.Reset(SchemeCauchy, pt.k, T, present); err != nil {
				t.Fatal(err)
			}
			for j := range pt.k {
				if pt.lost.Has(j) {
					continue
				}
				addSourceBy(t, d, blk, j, rng.IntN(3))
			}
			for r, i := range pt.idx {
				over := present
				if pt.overs != nil {
					over = pt.overs[r]
				}
				if err := d.AddRepair(i, over, encodeRef(i, over, blk.src, T)); err != nil {
					t.Fatal(err)
				}
			}
			restored, err := d.Decode()
			if err != nil || restored != pt.lost {
				t.Fatalf("step %d, pattern %d, T %d: restored %v, %v", step, n, T, restored.Positions(nil), err)
			}
			blk.checkRestored(t, d)
			pt.lost.Each(func(j int) {
				for _, b := range d.src[j][T:] {
					if b != 0 {
						t.Fatalf("step %d, pattern %d: symbol %d not zero beyond T", step, n, j)
					}
				}
			})
			if len(d.plans) > decodePlans || len(d.rplans) > rowPlans {
				t.Fatalf("%d loss patterns and %d row sets kept", len(d.plans), len(d.rplans))
			}
			if useKernels != KernelsPortable && step > 0 && n == 0 && (len(d.plans) == 0 || !d.plans[0].built) {
				t.Fatalf("step %d: the repeated pattern has no plan built", step)
			}
		}
		// Warm, the Decoder allocates nothing over new patterns of ordinary rows (the two-stage
		// solve) either.
		k, T := 32, 1058
		blk := newTestBlock(t, rng, k, T, all)
		rep := make([][]byte, 8)
		for i := range rep {
			rep[i] = encodeRef(i, all, blk.src, T)
		}
		var losses []psn.Bitmap
		for x := range 40 {
			losses = append(losses, bitmapOf(rng.Perm(k)[:1+x%8]...))
		}
		n := 0
		decode := func() {
			lost := losses[n%len(losses)]
			n++
			if err := d.Reset(SchemeCauchy, k, T, all); err != nil {
				t.Fatal(err)
			}
			for j := range k {
				if !lost.Has(j) {
					if err := d.AddSourceRef(j, blk.payloads[j]); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i := range lost.Count() {
				if err := d.AddRepair(i, all, rep[i]); err != nil {
					t.Fatal(err)
				}
			}
			if restored, err := d.Decode(); err != nil || restored != lost {
				t.Fatalf("restored %v of %v: %v", restored.Positions(nil), lost.Positions(nil), err)
			}
		}
		for range 64 {
			decode()
		}
		if a := testing.AllocsPerRun(100, decode); a != 0 {
			t.Fatalf("%s: %v allocations per decode of a new pattern", CodecPath(), a)
		}
	})
}

// TestGFNIPartialColumn checks the GFNI kernels at lengths that end inside a 64-octet column,
// which they load and store under a byte mask: every octet below n right, none at n written,
// for every output count of one and two passes.
func TestGFNIPartialColumn(t *testing.T) {
	if !KernelsGFNI.Available() {
		t.Skip("no GFNI kernels on this machine: " + CodecPath())
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var s fusedScratch
	for _, u := range []int{1, 2, 4, 8, 15, 16, 17, 24} {
		for _, nin := range []int{1, 5, 32} {
			for _, n := range []int{1, 2, 34, 63, 65, 127, 1058, 4130} {
				checkFusedMul(t, rng, &s, KernelsGFNI, u, nin, n)
			}
		}
	}
}

// addSourceBy gives d source j of blk one of the three ways a receiver has: way 0 copies the
// payload (AddSource), 1 holds it by reference (AddSourceRef), 2 copies the whole symbol
// (AddSourceSymbol).
func addSourceBy(t *testing.T, d *Decoder, blk *testBlock, j, way int) {
	t.Helper()
	var err error
	switch way {
	case 0:
		err = d.AddSource(j, blk.payloads[j])
	case 1:
		err = d.AddSourceRef(j, blk.payloads[j])
	default:
		err = d.AddSourceSymbol(j, blk.src[j])
	}
	if err != nil {
		t.Fatal(err)
	}
}
