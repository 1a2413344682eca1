package fec

import (
	"testing"
	"unsafe"

	"github.com/crem-project/crem/psn"
)

// l1 is a first-level data cache with LineSize-octet lines, indexed by the line number modulo
// its number of sets (sets = size / (ways x LineSize)). The set bits of a 64-set cache lie
// inside a 4 KiB page, so virtual addresses decide them.
type l1 struct {
	name       string
	size, ways int
}

func (c l1) sets() int { return c.size / (c.ways * LineSize) }

var l1Caches = []l1{
	{"32KiB-8way", 32 << 10, 8},
	{"48KiB-12way", 48 << 10, 12},
}

// strideTs is every symbol length to check: all of MinT..MaxT.
func strideTs() []int {
	ts := make([]int, 0, MaxT-MinT+1)
	for T := MinT; T <= MaxT; T++ {
		ts = append(ts, T)
	}
	return ts
}

// TestSymbolStrideDistinctSets: for every T in MinT..MaxT the starts of 32 consecutive symbols
// laid out by SymbolStride (k = 32, the largest block the codec streams in one pass at the
// configured limits) fall in 32 distinct sets of a 32 KiB 8-way and a 48 KiB 12-way cache
// with 64-octet lines, and so does every later line of the symbols (each line is the start's
// set plus its offset). The stride holds a symbol, starts on a line, and wastes under two lines.
func TestSymbolStrideDistinctSets(t *testing.T) {
	const k = 32
	for _, T := range strideTs() {
		s := SymbolStride(T)
		if s < T || s%LineSize != 0 || s-T >= 2*LineSize {
			t.Fatalf("T = %d: stride %d (want a multiple of %d, at least T, under T + %d)", T, s, LineSize, 2*LineSize)
		}
		for _, c := range l1Caches {
			var seen [256]bool
			for i := range k {
				set := (i * s / LineSize) % c.sets()
				if seen[set] {
					t.Fatalf("T = %d, stride %d, %s: symbol %d starts in set %d, as an earlier one does", T, s, c.name, i, set)
				}
				seen[set] = true
			}
		}
	}
}

// TestNaiveStrideAliases shows what SymbolStride avoids: with symbols T octets apart, T = 4096
// or any multiple of 4096 puts all 32 starts in one set of either cache.
func TestNaiveStrideAliases(t *testing.T) {
	for _, T := range []int{4096, 8192, 12288, 16384, 65536 - 4096} {
		for _, c := range l1Caches {
			sets := map[int]bool{}
			for i := range 32 {
				sets[(i*T/LineSize)%c.sets()] = true
			}
			if len(sets) != 1 {
				t.Errorf("T = %d, %s: %d sets, want 1", T, c.name, len(sets))
			}
		}
	}
}

// TestSymbolStrideFigures pins the stride for the symbol lengths of RoCEv2 MTUs and the powers
// of two around them.
func TestSymbolStrideFigures(t *testing.T) {
	for _, c := range []struct{ T, want int }{
		{2, 64}, {64, 64}, {65, 192}, {128, 192}, {1024, 1088}, {1058, 1088}, {2048, 2112},
		{4096, 4160}, {4130, 4160}, {4160, 4160}, {8192, 8256}, {65535, 65600},
	} {
		if got := SymbolStride(c.T); got != c.want {
			t.Errorf("SymbolStride(%d) = %d, want %d", c.T, got, c.want)
		}
	}
}

// addr is the address of the first octet of b.
func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// TestSymbolBufferLayout: NewSymbolBuffer starts on a cache line, SymbolAt(i) is T octets at
// i x SymbolStride(T) with no capacity beyond, and appending to a symbol leaves the next alone.
func TestSymbolBufferLayout(t *testing.T) {
	for _, T := range []int{2, 63, 1058, 4096, 4130, 65535} {
		const n = 32
		buf := NewSymbolBuffer(n, T)
		if len(buf) != n*SymbolStride(T) || addr(buf)%LineSize != 0 {
			t.Fatalf("T = %d: buffer of %d octets at %#x", T, len(buf), addr(buf))
		}
		for i := range n {
			s := SymbolAt(buf, i, T)
			if len(s) != T || cap(s) != T || addr(s)-addr(buf) != uintptr(i*SymbolStride(T)) {
				t.Fatalf("T = %d: symbol %d: len %d cap %d at +%d", T, i, len(s), cap(s), addr(s)-addr(buf))
			}
		}
		s := append(SymbolAt(buf, 0, T), 0xff)
		if addr(s) == addr(buf) || buf[SymbolStride(T)] != 0 {
			t.Fatalf("T = %d: an append ran into the next symbol", T)
		}
	}
}

// TestSymbolSlab: buffers by position obey the stride, keep their place while the slab is
// large enough, and stay valid when it grows.
func TestSymbolSlab(t *testing.T) {
	var s symbolSlab
	for _, T := range []int{4096, 1058, 4096} {
		s.reset(32, T)
		first := s.at(0)
		if addr(first)%LineSize != 0 || len(first) != (T+63)&^63 {
			t.Fatalf("T = %d: buffer 0 of %d octets at %#x", T, len(first), addr(first))
		}
		for i := range 32 {
			if d := addr(s.at(i)) - addr(first); d != uintptr(i*SymbolStride(T)) {
				t.Fatalf("T = %d: buffer %d at +%d, want +%d", T, i, d, i*SymbolStride(T))
			}
		}
		first[0] = 7
		grown := s.at(40)
		if first[0] != 7 || len(grown) != len(first) || len(s.buf) < 41*SymbolStride(T) {
			t.Fatalf("T = %d: growing lost a buffer or did not grow", T)
		}
	}
}

// TestDecoderLayout: a Decoder holds a block's sources, received and restored, and its repair
// symbols SymbolStride(T) apart, so that its solve's lockstep reads collide in no first-level
// cache set; the layout follows T from block to block.
func TestDecoderLayout(t *testing.T) {
	const k, m = 32, 4
	d, _ := NewDecoder()
	enc, _ := NewEncoder()
	for _, T := range []int{4096, 1058, 8192, 4096} {
		var src [][]byte
		for j := range k {
			s, _ := AppendSymbol(nil, make([]byte, j), T)
			src = append(src, s)
		}
		rep := make([][]byte, m)
		for i := range rep {
			rep[i] = make([]byte, T)
		}
		if err := enc.Encode(rep, []int{0, 1, 2, 3}, psn.FirstK(k), src); err != nil {
			t.Fatal(err)
		}
		if err := d.Reset(SchemeCauchy, k, T, psn.FirstK(k)); err != nil {
			t.Fatal(err)
		}
		for j := m; j < k; j++ {
			if err := d.AddSource(j, make([]byte, j)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range m {
			if err := d.AddRepair(i, psn.FirstK(k), rep[i]); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := d.Decode(); err != nil {
			t.Fatal(err)
		}
		s0, _ := d.Symbol(0)
		for j := range k {
			s, err := d.Symbol(j)
			if err != nil || addr(s)-addr(s0) != uintptr(j*SymbolStride(T)) {
				t.Fatalf("T = %d: source %d at +%d (%v), want +%d", T, j, addr(s)-addr(s0), err, j*SymbolStride(T))
			}
		}
		for i := range m {
			if addr(d.rep[i])-addr(d.rep[0]) != uintptr(i*SymbolStride(T)) {
				t.Fatalf("T = %d: repair %d at +%d, want +%d", T, i, addr(d.rep[i])-addr(d.rep[0]), i*SymbolStride(T))
			}
		}
	}
}
