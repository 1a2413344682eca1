package fec

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/crem-project/crem/psn"
)

// FuzzDecoder drives a Decoder with an arbitrary sequence of operations (sources, repair rows
// over arbitrary sets and indices, Source Copy symbols, corrupted ones, decodes, resets) on a
// block of genuine symbols: it never panics, its status obeys Missing = max(0, U - Usable), and
// every decode that succeeds from genuine symbols restores the sources byte-exact. The third
// octet also picks the codec path (any this machine runs: GFNI, AVX2, portable) of the
// Encoder and the Decoder.
func FuzzDecoder(f *testing.F) {
	f.Add([]byte{3, 14, 1, 0xff, 0, 3, 0, 1, 8, 0, 1, 9, 0, 1, 10, 0x11, 3, 0, 0})
	f.Add([]byte{7, 30, 2, 0xfe, 0, 1, 0, 0, 2, 0, 1, 8, 0, 3, 0, 0, 5, 0, 0})
	f.Add([]byte{0, 0, 0, 1, 2, 0, 0, 3, 1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		k := 1 + int(data[0])%40
		T := 2 + int(data[1])%64
		scheme := Scheme(data[2] % 4) // 3 is refused
		rng := rand.New(rand.NewPCG(uint64(data[3]), 3))
		present := randomSubset(rng, psn.FirstK(k))
		present.Set(0)
		b := newTestBlock(t, rng, k, T, present)
		paths := append(fusedKernels(), KernelsPortable)
		kern := paths[int(data[2]/4)%len(paths)]
		enc, err := NewEncoder(WithKernels(kern))
		if err != nil {
			t.Fatal(err)
		}
		d, err := NewDecoder(WithKernels(kern))
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Reset(scheme, k, T, present); err != nil {
			if scheme <= SchemeXOR {
				t.Fatalf("Reset: %v", err)
			}
			return
		}
		genuine := true // every symbol handed in so far was computed from the block
		for ops := data[4:]; len(ops) >= 3; ops = ops[3:] {
			op, a, c := ops[0]%6, int(ops[1]), int(ops[2])
			switch op {
			case 0:
				j := a%(k+2) - 1
				if j >= 0 && j < k && present.Has(j) {
					if c&1 == 1 {
						_ = d.AddSourceRef(j, b.payloads[j])
					} else {
						_ = d.AddSource(j, b.payloads[j])
					}
				} else {
					_ = d.AddSource(j, []byte("x"))
				}
			case 1:
				i := a - 8
				over := present
				if c&1 == 1 {
					over = randomSubset(rand.New(rand.NewPCG(uint64(c), 4)), present)
				}
				sym := make([]byte, T)
				switch {
				case scheme == SchemeXOR && i == 0 && over == present:
					_ = enc.XOR(sym, present, b.src)
				case i >= 0 && i+k <= 255:
					_ = enc.Encode([][]byte{sym}, []int{i}, over, b.src)
				}
				if c&2 == 2 {
					sym[0] ^= 1
					if err := d.AddRepair(i, over, sym); err == nil {
						genuine = false
					}
				} else {
					_ = d.AddRepair(i, over, sym)
				}
			case 2:
				j := a % k
				if present.Has(j) {
					sym := append([]byte{}, b.src[j]...)
					if c&1 == 1 {
						sym[0] = 0xff // a length prefix beyond T - 2
					}
					if err := d.AddSourceSymbol(j, sym); err == nil && c&1 == 1 {
						t.Fatalf("a corrupted Source Copy (%x) was accepted", sym)
					}
				}
			case 3:
				before := d.Status()
				restored, err := d.Decode()
				if before.Solvable() != (err == nil) {
					t.Fatalf("status %+v but Decode error %v", before, err)
				}
				if err != nil && !errors.Is(err, ErrNotSolvable) {
					t.Fatalf("Decode: %v", err)
				}
				if err == nil && restored != before.Unknown {
					t.Fatalf("restored %v, unknown were %v", restored.Positions(nil), before.Unknown.Positions(nil))
				}
				if err == nil && genuine {
					b.checkRestored(t, d)
				}
			case 4:
				s := d.Status()
				if s.Missing != max(0, s.U-s.Usable) || s.Usable > s.Held || s.U != s.Unknown.Count() {
					t.Fatalf("inconsistent status %+v", s)
				}
			case 5:
				if err := d.Reset(scheme, k, T, present); err != nil {
					t.Fatal(err)
				}
				genuine = true
			}
		}
	})
}
