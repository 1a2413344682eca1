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

// BenchmarkLayout: a whole block's work at k = 32 with the block's symbols in one buffer T
// octets apart (naive; at T = 4096 every symbol starts in the same first-level cache sets) and
// SymbolStride(T) apart (stride), on every codec path this machine has: the ordinary repair of
// m = 4 (encode, sources and repair symbols so laid out) and the restoring of u = 4 lost sources
// (decode: Reset, the survivors by reference from the laid-out symbols, the 4 repair symbols
// copied, the solve; 16 seeded loss patterns in turn). Bytes are the block's source octets.
// The both sub-benchmark runs the two layouts in alternate batches of layoutBatch operations and
// reports each one's wall and process CPU time per operation and the ratios naive/stride, so
// that other work on a shared machine weighs on both alike.
func BenchmarkLayout(b *testing.B) {
	const k, m = 32, 4
	idx := []int{0, 1, 2, 3}
	all := psn.FirstK(k)
	pats := lossPatterns(k, m, 16)
	for _, T := range []int{2048, 4096} {
		lays := [2]struct {
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
			dec, err := NewDecoder(WithKernels(kern))
			if err != nil {
				b.Fatal(err)
			}
			var encode, decode [2]func()
			for x, l := range lays {
				if err := enc.Encode(l.dst, idx, all, l.src); err != nil {
					b.Fatal(err)
				}
				encode[x] = func() {
					if err := enc.Encode(l.dst, idx, all, l.src); err != nil {
						b.Fatal(err)
					}
				}
				i := 0
				decode[x] = func() {
					if err := decodeLaidOut(dec, l.src, l.dst, pats[i%len(pats)]); err != nil {
						b.Fatal(err)
					}
					i++
				}
			}
			for _, c := range []struct {
				op, mu string // m repair symbols made, or u sources restored
				run    [2]func()
			}{{"encode", "m", encode}, {"decode", "u", decode}} {
				name := fmt.Sprintf("%s-k%d%s%dT%d/%s", c.op, k, c.mu, m, T, names[n])
				for x, l := range lays {
					b.Run(name+"/"+l.name, func(b *testing.B) {
						b.SetBytes(int64(k * T))
						b.ReportAllocs()
						start := processCPU()
						for b.Loop() {
							c.run[x]()
						}
						reportCPU(b, start)
					})
				}
				b.Run(name+"/both", func(b *testing.B) { layoutBoth(b, c.run) })
			}
		}
	}
}

// decodeLaidOut restores the sources at lost from the others, by reference, and the repair
// symbols rep (Repair Indices 0.. over every position) with d, checking nothing.
func decodeLaidOut(d *Decoder, src, rep [][]byte, lost []int) error {
	k, T := len(src), len(src[0])
	var gone psn.Bitmap
	for _, j := range lost {
		gone.Set(j)
	}
	if err := d.Reset(SchemeCauchy, k, T, psn.FirstK(k)); err != nil {
		return err
	}
	for j := range k {
		if !gone.Has(j) {
			if err := d.AddSourceRef(j, src[j][2:]); err != nil {
				return err
			}
		}
	}
	for i := range lost {
		if err := d.AddRepair(i, psn.FirstK(k), rep[i]); err != nil {
			return err
		}
	}
	_, err := d.Decode()
	return err
}

// layoutBoth runs run[0] (naive) and run[1] (stride) in alternate batches of layoutBatch and
// reports each one's wall and process CPU time per operation and their ratios.
func layoutBoth(b *testing.B, run [2]func()) {
	var wall, cpu [2]time.Duration
	var ops [2]int
	i := 0
	for b.Loop() {
		if i%layoutBatch == 0 {
			w, c := time.Now(), processCPU()
			for x := range 2 {
				for range layoutBatch {
					run[x]()
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
}

// layoutBatch is how many operations BenchmarkLayout's both sub-benchmarks run on one layout
// before they turn to the other.
const layoutBatch = 64
