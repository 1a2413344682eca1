package fec

import (
	"math/rand/v2"
	"testing"

	"github.com/crem-project/crem/psn"
)

// TestFusedMul checks the fused kernels against the scalar product for every output count
// up to two passes, a few input counts and lengths.
func TestFusedMul(t *testing.T) {
	if !haveGFNI {
		t.Skip("no fused kernels on this machine")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var mat []uint64
	for u := 1; u <= 2*gfniMaxOut+3; u++ {
		for _, nin := range []int{1, 2, 7, 33} {
			for _, n := range []int{64, 128, 320} {
				in := make([][]byte, nin)
				for i := range in {
					in[i] = make([]byte, n+int(rng.IntN(3)))
					for x := range in[i] {
						in[i][x] = byte(rng.Uint32())
					}
				}
				out := make([][]byte, u)
				for o := range out {
					out[o] = make([]byte, n+1)
					out[o][n] = 0xA5
				}
				coef := make([]byte, u*nin)
				for x := range coef {
					coef[x] = byte(rng.Uint32())
				}
				mat = fusedMul(mat, coef, in, out, n)
				for o := range u {
					for x := range n {
						var want byte
						for i := range nin {
							want ^= Mul(coef[o*nin+i], in[i][x])
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
		}
	}
}

// TestDecodeFusedAgainstReference solves random blocks through the fused solve and through
// the portable one (subtract, then apply the inverse with the single-row kernels), with repair
// symbols from the scalar reference: u = 1 to 20 lost sources (two kernel passes beyond 16),
// odd and short T, absent positions, coded retransmissions over part of the block, sources by
// copy, by reference (short payloads included) and as whole symbols, some after the repairs.
// Both must restore every symbol octet for octet, and keep the octets beyond T zero.
func TestDecodeFusedAgainstReference(t *testing.T) {
	if !haveGFNI {
		t.Skip("no fused kernels on this machine")
	}
	defer func(v bool) { useFused = v }(useFused)
	rng := rand.New(rand.NewPCG(3, 4))
	Ts := []int{2, 3, 5, 63, 64, 65, 66, 67, 127, 128, 129, 130, 131, 191, 1057, 1058, 4129, 4130}
	fused, portable := newDecoder(t), newDecoder(t)
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
		for n, d := range []*Decoder{fused, portable} {
			useFused = n == 0
			if err := d.Reset(SchemeCauchy, k, T, present); err != nil {
				t.Fatal(err)
			}
			add := func(j int) {
				var err error
				switch how[j] {
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
				t.Fatalf("trial %d (k %d, u %d, T %d, fused %v): restored %v, %v", trial, k, u, T, useFused, restored.Positions(nil), err)
			}
			blk.checkRestored(t, d)
			var got [][]byte
			lost.Each(func(j int) {
				s := d.src[j]
				for _, b := range s[T:] {
					if b != 0 {
						t.Fatalf("trial %d (fused %v): symbol %d not zero beyond T", trial, useFused, j)
					}
				}
				got = append(got, s)
			})
			if n == 0 {
				want = got
			} else {
				for x := range got {
					if string(got[x]) != string(want[x]) {
						t.Fatalf("trial %d: the two solves differ", trial)
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
		inv := make([]byte, u*u)
		cauchyInverse(inv, rows, cols)
		lh := make([]int, u)
		for c := range u {
			lh[c] = cauchyLogH(rows, cols, c)
		}
		z := make([]byte, u)
		for _, j := range known {
			cauchyProject(z, 1, rows, cols, lh, j)
			for c := range u {
				var want byte
				for r := range u {
					want ^= mulRef(inv[c*u+r], coefRef(rows[r], j))
				}
				if z[c] != want {
					t.Fatalf("rows %v cols %v j %d: z[%d] = %#x, want %#x", rows, cols, j, c, z[c], want)
				}
			}
		}
	}
}

// TestEncodeFusedAgainstReference: the fused Encode and the klauspost paths give the scalar
// reference's symbols for 1 to 20 rows of any indices, over any set L, with odd and short T.
func TestEncodeFusedAgainstReference(t *testing.T) {
	if !haveGFNI {
		t.Skip("no fused kernels on this machine")
	}
	defer func(v bool) { useFused = v }(useFused)
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
		for _, fused := range []bool{true, false} {
			useFused = fused
			dst := make([][]byte, m)
			for r := range dst {
				dst[r] = make([]byte, T)
				dst[r][0] = 0xEE // overwritten, not added to
			}
			if err := enc.Encode(dst, indices, over, blk.src); err != nil {
				t.Fatal(err)
			}
			for r, i := range indices {
				if string(dst[r]) != string(encodeRef(i, over, blk.src, T)) {
					t.Fatalf("trial %d (k %d, T %d, fused %v): R_%d differs from the reference", trial, k, T, fused, i)
				}
			}
		}
	}
}
