package fec

import "github.com/klauspost/reedsolomon"

// LineSize is the cache line the symbol layout is made for, in octets.
const LineSize = 64

// SymbolStride returns the distance in octets between the starts of consecutive symbols of
// length T in a buffer that holds a block's symbols side by side: T rounded up to whole cache
// lines of LineSize octets, plus one line when that makes an even number of lines (F7).
//
// The codec reads the sources of a block in lockstep, the same offset of each at a time. The
// set of a first-level cache that an address falls in is its line number modulo the number of
// sets, a power of two (64 on the 32 KiB 8-way and 48 KiB 12-way caches of current x86
// processors). With an odd number of lines between starts, symbols i and j share a set only
// when the number of sets divides i - j: no two of up to that many consecutive symbols collide,
// whatever T is and whatever power of two the number of sets is. With T = 4096 and symbols
// 4096 octets apart, every one of them would fall in the same sets.
//
// The padding is at most two lines less one octet per symbol. T below 1 is taken as 1.
func SymbolStride(T int) int {
	lines := (max(T, 1) + LineSize - 1) / LineSize
	if lines%2 == 0 {
		lines++
	}
	return lines * LineSize
}

// NewSymbolBuffer returns a buffer for n symbols of length T laid out SymbolStride(T) apart:
// n x SymbolStride(T) zero octets starting on a cache line. SymbolAt returns symbol i of it.
func NewSymbolBuffer(n, T int) []byte {
	return reedsolomon.AllocAligned(1, max(n, 0)*SymbolStride(T))[0]
}

// SymbolAt returns symbol i of length T in buf, a buffer laid out by SymbolStride(T): T octets
// at i x SymbolStride(T), whose capacity ends with them, so that appending to it never runs
// into the next symbol. buf must hold it (NewSymbolBuffer with n > i).
func SymbolAt(buf []byte, i, T int) []byte {
	o := i * SymbolStride(T)
	return buf[o : o+T : o+T]
}

// symbolSlab keeps the buffers of a block's symbols in one allocation, laid out by
// SymbolStride: buffer i starts i x SymbolStride(T) octets after the first, on a cache line,
// and is size octets long (T rounded up to the kernels' 64-octet columns, at most the stride).
// A buffer handed out stays valid when the slab grows: growing allocates a new slab for the
// buffers handed out afterwards, and the old one lives on while a caller holds one of its
// buffers.
type symbolSlab struct {
	buf    []byte
	n      int // buffers the slab is laid out for
	stride int
	size   int
}

// reset lays the slab out for symbols of length T: at least n of them, and as many as it was
// laid out for before, so that a slab grown in one block holds the next block's symbols in one
// piece whatever its T. It reuses its allocation when that is large enough.
func (s *symbolSlab) reset(n, T int) {
	s.n = max(n, s.n)
	s.stride, s.size = SymbolStride(T), (max(T, 1)+LineSize-1)&^(LineSize-1)
	if len(s.buf) < s.n*s.stride {
		s.buf = NewSymbolBuffer(s.n, T)
	}
}

// at returns buffer i, size octets; the slab doubles (at least to i + 1 buffers) when i is
// beyond it.
func (s *symbolSlab) at(i int) []byte {
	o := i * s.stride
	if i >= s.n || o+s.stride > len(s.buf) {
		s.n = max(i+1, 2*s.n, 4)
		s.buf = NewSymbolBuffer(s.n, s.size)
	}
	return s.buf[o : o+s.size : o+s.size]
}
