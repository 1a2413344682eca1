//go:build arm64 && gc && !noasm && !purego

package fec

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// neonTables lays out the tables of the NEON kernel of w outputs for coef[i*w+o], the
// coefficient of input i in output o: for each, its products with the low nibbles 0 to 15,
// then with the high nibbles 0x00 to 0xF0, from the field's product table.
func neonTables(coef []byte, w int) []byte {
	tbl := make([]byte, 32*len(coef))
	for e, c := range coef {
		t := tbl[32*e : 32*e+32]
		for x := range 16 {
			t[x] = gfMul[c][x]
			t[16+x] = gfMul[c][x<<4]
		}
	}
	return tbl
}

// neonCoef draws nin*w coefficients, a quarter of them 0 or 1, the others anything.
func neonCoef(rng *rand.Rand, nin, w int) []byte {
	coef := make([]byte, nin*w)
	for e := range coef {
		switch rng.IntN(8) {
		case 0:
			coef[e] = 0
		case 1:
			coef[e] = 1
		default:
			coef[e] = byte(rng.Uint32())
		}
	}
	return coef
}

// neonCheck runs the kernel of w outputs over nin random inputs of n octets (at random
// offsets, so unaligned, with random octets beyond n) into outputs full of garbage, and
// compares every octet with the plain product; the octets of the outputs beyond n and the
// inputs must be left as they were.
func neonCheck(t *testing.T, rng *rand.Rand, w, nin, n int, coef []byte) {
	t.Helper()
	const slack = 64
	in := make([][]byte, nin)
	saved := make([][]byte, nin)
	for i := range in {
		off := rng.IntN(16)
		buf := make([]byte, off+n+rng.IntN(slack))
		for x := range buf {
			buf[x] = byte(rng.Uint32())
		}
		in[i] = buf[off:]
		saved[i] = bytes.Clone(in[i])
	}
	out := make([][]byte, w)
	for o := range out {
		off := rng.IntN(16)
		buf := make([]byte, off+n+slack)
		for x := range buf {
			buf[x] = byte(rng.Uint32())
		}
		out[o] = buf[off:]
	}
	tail := make([][]byte, w)
	for o := range out {
		tail[o] = bytes.Clone(out[o][n:])
	}
	tbl := neonTables(coef, w)
	neonKernels[w-1](&tbl[0], in, out, n)
	for o := range w {
		for x := range n {
			var want byte
			for i := range nin {
				want ^= Mul(coef[i*w+o], in[i][x])
			}
			if out[o][x] != want {
				t.Fatalf("%d outputs, %d inputs, n %d: out[%d][%d] = %#x, want %#x", w, nin, n, o, x, out[o][x], want)
			}
		}
		if !bytes.Equal(out[o][n:], tail[o]) {
			t.Fatalf("%d outputs, %d inputs, n %d: output %d changed beyond n", w, nin, n, o)
		}
	}
	for i := range in {
		if !bytes.Equal(in[i], saved[i]) {
			t.Fatalf("%d outputs, %d inputs, n %d: input %d changed", w, nin, n, i)
		}
	}
}

// TestNeonKernels checks every kernel against the plain product for 1 to 40 inputs, lengths
// from 64 to 8192 octets and random coefficients with many 0 and 1.
func TestNeonKernels(t *testing.T) {
	if !haveNEON {
		t.Skip("no NEON kernels on this machine")
	}
	rng := rand.New(rand.NewPCG(13, 6))
	lengths := []int{64, 128, 192, 256, 320, 448, 640, 1024, 1472, 2048, 4096, 8192}
	for w := 1; w <= neonMaxOut; w++ {
		for nin := 1; nin <= 40; nin++ {
			n := lengths[(w*7+nin)%len(lengths)]
			neonCheck(t, rng, w, nin, n, neonCoef(rng, nin, w))
		}
		// Every length up to 1024 and the longest, for a few input counts.
		for _, nin := range []int{1, 2, 5} {
			for n := 64; n <= 1024; n += 64 {
				neonCheck(t, rng, w, nin, n, neonCoef(rng, nin, w))
			}
			neonCheck(t, rng, w, nin, 8192, neonCoef(rng, nin, w))
		}
	}
}

// TestNeonKernelsSpecialCoefficients checks all-zero, all-one and single-nonzero tables:
// zero sums must come out zero whatever the outputs held, ones must be plain XOR, and each
// output must take only its own coefficients.
func TestNeonKernelsSpecialCoefficients(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for w := 1; w <= neonMaxOut; w++ {
		for _, nin := range []int{1, 3, 9} {
			zeros := make([]byte, nin*w)
			neonCheck(t, rng, w, nin, 192, zeros)
			ones := bytes.Repeat([]byte{1}, nin*w)
			neonCheck(t, rng, w, nin, 192, ones)
			for e := range nin * w {
				single := make([]byte, nin*w)
				single[e] = byte(2 + rng.IntN(254))
				neonCheck(t, rng, w, nin, 128, single)
			}
		}
	}
}

// TestNeonKernelsSharedInputs passes the same input several times, and inputs that are
// neighbouring parts of one buffer, as the decoder's symbol store can.
func TestNeonKernelsSharedInputs(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const n = 256
	buf := make([]byte, 4*n)
	for x := range buf {
		buf[x] = byte(rng.Uint32())
	}
	in := [][]byte{buf[:n], buf[n : 2*n], buf[:n], buf[2*n : 3*n], buf[3*n:]}
	for w := 1; w <= neonMaxOut; w++ {
		coef := neonCoef(rng, len(in), w)
		out := make([][]byte, w)
		for o := range out {
			out[o] = make([]byte, n)
		}
		tbl := neonTables(coef, w)
		neonKernels[w-1](&tbl[0], in, out, n)
		for o := range w {
			for x := range n {
				var want byte
				for i := range in {
					want ^= Mul(coef[i*w+o], in[i][x])
				}
				if out[o][x] != want {
					t.Fatalf("%d outputs: out[%d][%d] = %#x, want %#x", w, o, x, out[o][x], want)
				}
			}
		}
	}
}

// BenchmarkNeonMul measures each kernel on 10 inputs of 8 KiB (SetBytes counts the input
// octets read). Not meaningful under an emulator.
func BenchmarkNeonMul(b *testing.B) {
	const nin, n = 10, 8192
	rng := rand.New(rand.NewPCG(11, 12))
	in := make([][]byte, nin)
	for i := range in {
		in[i] = make([]byte, n)
		for x := range in[i] {
			in[i][x] = byte(rng.Uint32())
		}
	}
	for w := 1; w <= neonMaxOut; w++ {
		b.Run(fmt.Sprintf("in=%d/out=%d/n=%d", nin, w, n), func(b *testing.B) {
			out := make([][]byte, w)
			for o := range out {
				out[o] = make([]byte, n)
			}
			tbl := neonTables(neonCoef(rng, nin, w), w)
			kernel := neonKernels[w-1]
			kernel(&tbl[0], in, out, n) // warm the caches
			b.SetBytes(nin * n)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				kernel(&tbl[0], in, out, n)
			}
			b.ReportMetric(float64(w*nin*n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gproducts/s")
		})
	}
}
