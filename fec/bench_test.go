package fec

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/klauspost/reedsolomon"
)

// benchBlock is a full block of k random payloads of T-2 octets, their source symbols and the
// ordinary repair symbols 0..m-1.
type benchBlock struct {
	k, m, T  int
	payloads [][]byte
	src      [][]byte
	repair   [][]byte
	rows     [][]byte
}

func newBenchBlock(tb testing.TB, k, m, T int) *benchBlock {
	rng := rand.New(rand.NewPCG(uint64(k), uint64(T)))
	b := &benchBlock{k: k, m: m, T: T}
	for range k {
		p := make([]byte, T-2)
		for n := range p {
			p[n] = byte(rng.Uint32())
		}
		s, err := AppendSymbol(nil, p, T)
		if err != nil {
			tb.Fatal(err)
		}
		b.payloads = append(b.payloads, p)
		b.src = append(b.src, s)
	}
	idx := make([]int, m)
	for i := range idx {
		idx[i] = i
		b.repair = append(b.repair, make([]byte, T))
	}
	var err error
	if b.rows, err = CauchyRows(k, idx...); err != nil {
		tb.Fatal(err)
	}
	enc, _ := NewEncoder()
	if err := enc.Encode(b.repair, idx, psn.FirstK(k), b.src); err != nil {
		tb.Fatal(err)
	}
	return b
}

// reportCPU adds the metric cpu-ns/op: process CPU time per iteration since start. Other
// work on the machine stretches ns/op but not this.
func reportCPU(b *testing.B, start time.Duration) {
	if cpu := processCPU() - start; cpu > 0 && b.N > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// benchKernels lists the families of kernels CREM's side of the benchmarks runs here, with the
// names of their sub-benchmarks: crem-gfni, crem-avx2 (crem-nibble where the nibble kernels
// are not AVX2's), crem-portable.
func benchKernels() (ks []Kernels, names []string) {
	for _, k := range []Kernels{KernelsGFNI, KernelsNibble, KernelsPortable} {
		if !k.Available() {
			continue
		}
		ks, names = append(ks, k), append(names, "crem-"+k.Name())
	}
	return ks, names
}

// klauspostAVX2 keeps klauspost's encoder on its AVX2 kernels, off AVX-512 and GFNI, for the
// comparison with CREM's AVX2 path.
var klauspostAVX2 = []reedsolomon.Option{reedsolomon.WithAVX512(false), reedsolomon.WithGFNI(false), reedsolomon.WithAVXGFNI(false)}

// klauspostVariants are klauspost's sides of the benchmarks: its own choice of kernels
// (klauspost) and its AVX2 kernels (klauspost-avx2).
var klauspostVariants = []struct {
	name string
	opts []reedsolomon.Option
}{{"klauspost", nil}, {"klauspost-avx2", klauspostAVX2}}

// lossPatterns returns n seeded sets of u lost positions out of k.
func lossPatterns(k, u, n int) [][]int {
	rng := rand.New(rand.NewPCG(uint64(k*u), 7))
	out := make([][]int, n)
	for p := range out {
		out[p] = rng.Perm(k)[:u]
	}
	return out
}

// BenchmarkEncode: the ordinary repair of a whole block (Section 6.2), CREM's Encoder on each
// path this machine has (WithKernels) against klauspost's Encode with the same CREM Cauchy
// rows, on its own choice of kernels and on its AVX2 ones. Bytes are the block's source octets.
func BenchmarkEncode(b *testing.B) {
	for _, c := range []struct{ k, m, T int }{{32, 4, 1058}, {32, 8, 4130}} {
		blk := newBenchBlock(b, c.k, c.m, c.T)
		name := fmt.Sprintf("k%dm%dT%d", c.k, c.m, c.T)
		idx := make([]int, c.m)
		for i := range idx {
			idx[i] = i
		}
		ks, names := benchKernels()
		for n, kern := range ks {
			b.Run(name+"/"+names[n], func(b *testing.B) {
				enc, err := NewEncoder(WithKernels(kern))
				if err != nil {
					b.Fatal(err)
				}
				dst := make([][]byte, c.m)
				for i := range dst {
					dst[i] = make([]byte, c.T)
				}
				all := psn.FirstK(c.k)
				b.SetBytes(int64(c.k * c.T))
				b.ReportAllocs()
				start := processCPU()
				for b.Loop() {
					if err := enc.Encode(dst, idx, all, blk.src); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, start)
			})
		}
		for _, kv := range klauspostVariants {
			b.Run(name+"/"+kv.name, func(b *testing.B) {
				rs, err := reedsolomon.New(c.k, c.m, append([]reedsolomon.Option{reedsolomon.WithCustomMatrix(blk.rows)}, kv.opts...)...)
				if err != nil {
					b.Fatal(err)
				}
				shards := append([][]byte{}, blk.src...)
				for range c.m {
					shards = append(shards, make([]byte, c.T))
				}
				b.SetBytes(int64(c.k * c.T))
				b.ReportAllocs()
				start := processCPU()
				for b.Loop() {
					if err := rs.Encode(shards); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, start)
			})
		}
	}
}

// BenchmarkDecode: restoring u lost sources of a block of k = 32 from the k - u sources left
// and u ordinary repair symbols (Section 7.4), a different loss pattern every iteration.
// CREM's Decoder takes the payloads as a receiver holds them (by reference, as klauspost takes
// its shards), copies the repair symbols, and solves in closed form (subtracting the known
// sources, or in one fused pass where the processor has AVX-512 and GFNI); klauspost's
// ReconstructData inverts the k x k matrix of the shards at hand (inversion cache off, as every
// pattern is new). Bytes are the block's source octets.
func BenchmarkDecode(b *testing.B) {
	for _, c := range []struct{ k, u, T int }{{32, 4, 1058}, {32, 8, 4130}} {
		blk := newBenchBlock(b, c.k, c.u, c.T)
		pats := lossPatterns(c.k, c.u, 251)
		name := fmt.Sprintf("k%du%dT%d", c.k, c.u, c.T)
		ks, names := benchKernels()
		for n, kern := range ks {
			b.Run(name+"/"+names[n], func(b *testing.B) {
				d, err := NewDecoder(WithKernels(kern))
				if err != nil {
					b.Fatal(err)
				}
				all := psn.FirstK(c.k)
				b.SetBytes(int64(c.k * c.T))
				b.ReportAllocs()
				n := 0
				start := processCPU()
				for b.Loop() {
					var lost psn.Bitmap
					for _, j := range pats[n%len(pats)] {
						lost.Set(j)
					}
					n++
					if err := d.Reset(SchemeCauchy, c.k, c.T, all); err != nil {
						b.Fatal(err)
					}
					for j := range c.k {
						if !lost.Has(j) {
							if err := d.AddSourceRef(j, blk.payloads[j]); err != nil {
								b.Fatal(err)
							}
						}
					}
					for i := range c.u {
						if err := d.AddRepair(i, all, blk.repair[i]); err != nil {
							b.Fatal(err)
						}
					}
					if restored, err := d.Decode(); err != nil || restored != lost {
						b.Fatalf("restored %v, %v", restored.Positions(nil), err)
					}
				}
				reportCPU(b, start)
			})
		}
		for _, kv := range klauspostVariants {
			b.Run(name+"/"+kv.name, func(b *testing.B) {
				rs, err := reedsolomon.New(c.k, c.u, append([]reedsolomon.Option{reedsolomon.WithCustomMatrix(blk.rows),
					reedsolomon.WithInversionCache(false)}, kv.opts...)...)
				if err != nil {
					b.Fatal(err)
				}
				bufs := make([][]byte, c.k)
				for j := range bufs {
					bufs[j] = make([]byte, c.T)
				}
				shards := make([][]byte, c.k+c.u)
				b.SetBytes(int64(c.k * c.T))
				b.ReportAllocs()
				n := 0
				start := processCPU()
				for b.Loop() {
					for j := range c.k {
						shards[j] = blk.src[j]
					}
					copy(shards[c.k:], blk.repair)
					for _, j := range pats[n%len(pats)] {
						shards[j] = bufs[j][:0]
					}
					n++
					if err := rs.ReconstructData(shards); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, start)
			})
		}
	}
}
