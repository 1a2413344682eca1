package fec

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/crem-project/crem/psn"
)

// TestSteadyStateNoAllocsEveryPath: every codec path allocates nothing once warm
// (every CPU a user runs), in the shapes the CSF and CRF run: the ordinary repair of a whole
// block (Section 6.2: k = 32, m = 4, T = 1058; k = 32, m = 8, T = 4130; k = 8, m = 1 as the
// CRF's tests send it), scheme 2's XOR, and the solve of Section 7.4 with sources held by
// reference, a different loss pattern every block, with coded retransmissions and in scheme 2.
// Every path this processor has runs here (GFNI, AVX2 and portable on a processor with AVX-512
// and GFNI), so one ordinary go test covers them all; on the portable path klauspost's
// multi-row encoder allocated twice per block before it was replaced.
func TestSteadyStateNoAllocsEveryPath(t *testing.T) {
	eachPath(t, func(t *testing.T) {
		path := CodecPath()
		check := func(what string, f func()) {
			t.Helper()
			for range 20 { // warm: scratch and symbol buffers grow to the largest shape
				f()
			}
			if a := testing.AllocsPerRun(100, f); a != 0 {
				t.Errorf("%s: %s: %v allocations per call in steady state", path, what, a)
			}
		}
		rng := rand.New(rand.NewPCG(10, 11))
		enc := newEncoder(t)
		for _, c := range []struct{ k, m, T int }{{32, 4, 1058}, {32, 8, 4130}, {8, 1, 1058}, {20, 3, 301}} {
			b := newTestBlock(t, rng, c.k, c.T, psn.FirstK(c.k))
			dst, idx := symbols(c.m, c.T), seq(0, c.m)
			check(fmt.Sprintf("ordinary repair of a whole block, k = %d, m = %d, T = %d", c.k, c.m, c.T), func() {
				if err := enc.Encode(dst, idx, b.present, b.src); err != nil {
					t.Fatal(err)
				}
			})
		}
		b := newTestBlock(t, rng, 32, 1058, psn.FirstK(32))
		xor := make([]byte, 1058)
		check("XOR repair", func() {
			if err := enc.XOR(xor, b.present, b.src); err != nil {
				t.Fatal(err)
			}
		})

		// The receiver: payloads by reference, one of 16 loss patterns of 1 to 4 sources per
		// block, the ordinary rows and a coded retransmission over the lost set.
		const k, T = 32, 1058
		all := psn.FirstK(k)
		full := newTestBlock(t, rng, k, T, all)
		rep := make([][]byte, 4)
		for i := range rep {
			rep[i] = full.repair(t, enc, i, all)
		}
		type pattern struct {
			lost  psn.Bitmap
			coded []byte // R_9 over the lost set
		}
		var pats []pattern
		for p := range 16 {
			var lost psn.Bitmap
			for _, j := range rng.Perm(k)[:1+p%4] {
				lost.Set(j)
			}
			pats = append(pats, pattern{lost, full.repair(t, enc, 9, lost)})
		}
		d := newDecoder(t)
		n := 0
		check("decode by reference, ordinary and coded rows", func() {
			p := pats[n%len(pats)]
			n++
			if err := d.Reset(SchemeCauchy, k, T, all); err != nil {
				t.Fatal(err)
			}
			for j := range k {
				if !p.lost.Has(j) {
					if err := d.AddSourceRef(j, full.payloads[j]); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := d.AddRepair(9, p.lost, p.coded); err != nil {
				t.Fatal(err)
			}
			for i := range p.lost.Count() - 1 {
				if err := d.AddRepair(i, all, rep[i]); err != nil {
					t.Fatal(err)
				}
			}
			if restored, err := d.Decode(); err != nil || restored != p.lost {
				t.Fatalf("%s: restored %v of %v: %v", path, restored.Positions(nil), p.lost.Positions(nil), err)
			}
		})
		full.checkRestored(t, d)

		var parity []byte
		if err := enc.XOR(xor, all, full.src); err != nil {
			t.Fatal(err)
		}
		parity = xor
		check("decode in scheme 2", func() {
			lost := n % k
			n++
			if err := d.Reset(SchemeXOR, k, T, all); err != nil {
				t.Fatal(err)
			}
			for j := range k {
				if j != lost {
					if err := d.AddSource(j, full.payloads[j]); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := d.AddRepair(0, all, parity); err != nil {
				t.Fatal(err)
			}
			if _, err := d.Decode(); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		})
		full.checkRestored(t, d)
	})
}

// TestCodecPathNamesThePath: CodecPath, which the allocation tests print, says which path ran.
func TestCodecPathNamesThePath(t *testing.T) {
	eachPath(t, func(t *testing.T) {
		got := CodecPath()
		want := map[Kernels]string{KernelsGFNI: "fused (AVX-512, GFNI)", KernelsNibble: "fused (" + nibbleISA + ")",
			KernelsPortable: "portable ("}[useKernels]
		if !strings.HasPrefix(got, want) {
			t.Fatalf("CodecPath() = %q on path %s, want it to start with %q", got, pathName[useKernels], want)
		}
	})
}

// TestWithKernelsPinsThePath: a Decoder given WithKernels takes that family whatever the
// package's default, and one without follows it. The fused solve leaves the held repair
// symbols as they arrived; the portable one subtracts the known sources from them, which tells
// the two apart. A family this build or processor lacks, or no family at all, is an error.
func TestWithKernelsPinsThePath(t *testing.T) {
	defer func(k Kernels) { useKernels = k }(useKernels)
	for _, k := range []Kernels{KernelsGFNI, KernelsNibble, KernelsPortable, KernelsAuto} {
		_, errE := NewEncoder(WithKernels(k))
		_, errD := NewDecoder(WithKernels(k))
		if k.Available() != (errE == nil) || k.Available() != (errD == nil) {
			t.Errorf("WithKernels(%v): available %v, NewEncoder %v, NewDecoder %v", k, k.Available(), errE, errD)
		}
	}
	if _, err := NewEncoder(WithKernels(KernelsPortable + 1)); err == nil {
		t.Error("WithKernels of an unknown family: no error")
	}
	rng := rand.New(rand.NewPCG(12, 13))
	const k, T = 12, 300
	all := psn.FirstK(k)
	blk := newTestBlock(t, rng, k, T, all)
	rep := blk.repair(t, newEncoder(t), 0, all)
	solve := func(d *Decoder) (consumed bool) {
		t.Helper()
		if err := d.Reset(SchemeCauchy, k, T, all); err != nil {
			t.Fatal(err)
		}
		for j := 1; j < k; j++ {
			if err := d.AddSource(j, blk.payloads[j]); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.AddRepair(0, all, rep); err != nil {
			t.Fatal(err)
		}
		if restored, err := d.Decode(); err != nil || restored != bitmapOf(0) {
			t.Fatalf("restored %v: %v", restored.Positions(nil), err)
		}
		blk.checkRestored(t, d)
		return string(d.rep[0][:T]) != string(rep)
	}
	for _, def := range append(fusedKernels(), KernelsPortable) {
		useKernels = def
		for _, pin := range append(fusedKernels(), KernelsPortable, KernelsAuto) {
			d, err := NewDecoder(WithKernels(pin))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := solve(d), resolve(pin) == KernelsPortable; got != want {
				t.Errorf("default %s, WithKernels(%v): repair consumed %v, want %v", pathName[def], pin, got, want)
			}
		}
	}
}
