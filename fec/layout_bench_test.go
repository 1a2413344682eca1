package fec

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
)

// pageAligned returns n zero octets starting on a 4096-octet boundary.
func pageAligned(n int) []byte {
	const page = 4096
	b := make([]byte, n+page)
	o := (page - int(addr(b)%page)) % page
	return b[o : o+n : o+n]
}

// layoutSymbols returns n symbols of length T in one buffer, stride octets apart, from a
// 4096-octet boundary: stride T is the naive layout, SymbolStride(T) the package's.
func layoutSymbols(n, T, stride int) [][]byte {
	buf := pageAligned(n * stride)
	out := make([][]byte, n)
	for i := range out {
		out[i] = buf[i*stride : i*stride+T : i*stride+T]
	}
	return out
}

// BenchmarkLayout: the ordinary repair of a whole block, k = 32 and m = 4, with the sources
// and the repair symbols in one buffer T octets apart (naive; at T = 4096 every symbol starts
// in the same first-level cache sets) and SymbolStride(T) apart (stride), on every codec path
// this machine has. Bytes are the block's source octets. The sub-benchmark both runs the two
// layouts in alternate batches of layoutBatch operations and reports each one's wall and
// process CPU time per operation and the ratios naive/stride, so that other work on a shared
// machine weighs on both alike.
func BenchmarkLayout(b *testing.B) {
	const k, m = 32, 4
	idx := []int{0, 1, 2, 3}
	for _, T := range []int{2048, 4096} {
		lays := []struct {
			name     string
			src, dst [][]byte
		}{
			{"naive", layoutSymbols(k, T, T), layoutSymbols(m, T, T)},
			{"stride", layoutSymbols(k, T, SymbolStride(T)), layoutSymbols(m, T, SymbolStride(T))},
		}
		rng := rand.New(rand.NewPCG(k, uint64(T)))
		p := make([]byte, T-2)
		for j := range k {
			for n := range p {
				p[n] = byte(rng.Uint32())
			}
			for _, l := range lays {
				if _, err := AppendSymbol(l.src[j][:0], p, T); err != nil {
					b.Fatal(err)
				}
			}
		}
		ks, names := benchKernels()
		for n, kern := range ks {
			enc, err := NewEncoder(WithKernels(kern))
			if err != nil {
				b.Fatal(err)
			}
			all := psn.FirstK(k)
			for _, l := range lays {
				b.Run(fmt.Sprintf("k%dm%dT%d/%s/%s", k, m, T, names[n], l.name), func(b *testing.B) {
					b.SetBytes(int64(k * T))
					b.ReportAllocs()
					start := processCPU()
					for b.Loop() {
						if err := enc.Encode(l.dst, idx, all, l.src); err != nil {
							b.Fatal(err)
						}
					}
					reportCPU(b, start)
				})
			}
			b.Run(fmt.Sprintf("k%dm%dT%d/%s/both", k, m, T, names[n]), func(b *testing.B) {
				var wall, cpu [2]time.Duration
				var ops [2]int
				i := 0
				for b.Loop() {
					if i%layoutBatch == 0 {
						w, c := time.Now(), processCPU()
						for x := range 2 {
							l := lays[x]
							for range layoutBatch {
								if err := enc.Encode(l.dst, idx, all, l.src); err != nil {
									b.Fatal(err)
								}
							}
							w2, c2 := time.Now(), processCPU()
							wall[x], cpu[x], ops[x] = wall[x]+w2.Sub(w), cpu[x]+c2-c, ops[x]+layoutBatch
							w, c = w2, c2
						}
					}
					i++
				}
				if ops[0] == 0 || ops[1] == 0 || wall[1] == 0 || cpu[1] == 0 {
					return
				}
				for x, name := range []string{"naive", "stride"} {
					b.ReportMetric(float64(wall[x].Nanoseconds())/float64(ops[x]), name+"-ns/op")
					b.ReportMetric(float64(cpu[x].Nanoseconds())/float64(ops[x]), name+"-cpu-ns/op")
				}
				b.ReportMetric(float64(wall[0])/float64(wall[1]), "naive/stride")
				b.ReportMetric(float64(cpu[0])/float64(cpu[1]), "naive/stride-cpu")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// layoutBatch is how many operations BenchmarkLayout's interleaved sub-benchmark runs on one
// layout before it turns to the other.
const layoutBatch = 64
