package psn

import (
	"encoding/binary"
	"errors"
	"math/bits"
)

// MaxPositions is the largest block a bitmap describes (CREM's k is 1 to 255).
const MaxPositions = 256

// Bitmap is a set of block positions 0..255 in CREM's bit order: bit j counts from the most
// significant bit of word 0. It is a value type, so it never allocates.
type Bitmap [MaxPositions / 32]uint32

// ErrBitmapShort is returned when fewer octets remain than the bitmap's words need.
var ErrBitmapShort = errors.New("bitmap truncated")

// Words returns ceil(k/32), the number of 32-bit words a bitmap of k positions occupies.
func Words(k int) int { return (k + 31) / 32 }

// Set adds position j.
func (b *Bitmap) Set(j int) { b[j>>5] |= 1 << (31 - uint(j&31)) }

// Clear removes position j.
func (b *Bitmap) Clear(j int) { b[j>>5] &^= 1 << (31 - uint(j&31)) }

// Has reports whether position j is in the set.
func (b *Bitmap) Has(j int) bool { return b[j>>5]&(1<<(31-uint(j&31))) != 0 }

// Count returns the number of positions in the set.
func (b *Bitmap) Count() int {
	n := 0
	for _, w := range b {
		n += bits.OnesCount32(w)
	}
	return n
}

// Empty reports whether no position is set.
func (b *Bitmap) Empty() bool { return *b == Bitmap{} }

// FirstK returns a bitmap with positions 0..k-1 set.
func FirstK(k int) Bitmap {
	var b Bitmap
	for w := 0; k > 0; w++ {
		if k >= 32 {
			b[w] = ^uint32(0)
			k -= 32
		} else {
			b[w] = ^uint32(0) << (32 - uint(k))
			k = 0
		}
	}
	return b
}

// Beyond reports whether any position at or above k is set.
func (b *Bitmap) Beyond(k int) bool {
	if k >= MaxPositions {
		return false
	}
	if k < 0 {
		k = 0
	}
	w := k >> 5
	// In the word holding position k, the positions below k are the high k mod 32 bits:
	// shifted out, what is left is at or beyond k. The words after it must be empty.
	if b[w]<<uint(k&31) != 0 {
		return true
	}
	var rest uint32
	for _, v := range b[w+1:] {
		rest |= v
	}
	return rest != 0
}

// And returns the intersection of b and o.
func (b Bitmap) And(o Bitmap) Bitmap {
	for i := range b {
		b[i] &= o[i]
	}
	return b
}

// AndNot returns the positions of b that are not in o.
func (b Bitmap) AndNot(o Bitmap) Bitmap {
	for i := range b {
		b[i] &^= o[i]
	}
	return b
}

// Or returns the union of b and o.
func (b Bitmap) Or(o Bitmap) Bitmap {
	for i := range b {
		b[i] |= o[i]
	}
	return b
}

// Equal reports whether b and o hold the same positions, word by word without a call.
func (b *Bitmap) Equal(o *Bitmap) bool {
	var x uint32
	for i := range b {
		x |= b[i] ^ o[i]
	}
	return x == 0
}

// Contains reports whether every position of o is in b.
func (b *Bitmap) Contains(o *Bitmap) bool {
	var x uint32 // the words' excess, gathered without a branch each
	for i := range b {
		x |= o[i] &^ b[i]
	}
	return x == 0
}

// Each calls f for every set position in ascending order.
func (b *Bitmap) Each(f func(j int)) {
	for w, v := range b {
		for v != 0 {
			lz := bits.LeadingZeros32(v)
			f(w*32 + lz)
			v &^= 1 << (31 - uint(lz))
		}
	}
}

// Positions appends the set positions in ascending order to dst.
func (b *Bitmap) Positions(dst []int) []int {
	for w, v := range b {
		for v != 0 {
			lz := bits.LeadingZeros32(v)
			dst = append(dst, w<<5|lz)
			v &^= 0x80000000 >> uint(lz)
		}
	}
	return dst
}

// Next returns the lowest set position at or above j, or -1 when there is none. A loop
// `for j := b.Next(0); j >= 0; j = b.Next(j + 1)` visits the set word by word without a call
// per position of the block.
func (b *Bitmap) Next(j int) int {
	if j < 0 {
		j = 0
	}
	for w := j >> 5; w < len(b); w++ {
		v := b[w]
		if w == j>>5 {
			v &= ^uint32(0) >> uint(j&31)
		}
		if v != 0 {
			return w<<5 | bits.LeadingZeros32(v)
		}
	}
	return -1
}

// Append writes the ceil(k/32) words of a k-position bitmap in network byte order.
func (b *Bitmap) Append(dst []byte, k int) []byte {
	for w := 0; w < Words(k); w++ {
		dst = binary.BigEndian.AppendUint32(dst, b[w])
	}
	return dst
}

// ParseBitmap reads the ceil(k/32) words of a k-position bitmap and returns it with the number
// of octets read.
func ParseBitmap(src []byte, k int) (Bitmap, int, error) {
	var b Bitmap
	n := Words(k) * 4
	if len(src) < n {
		return b, 0, ErrBitmapShort
	}
	for w := 0; w < Words(k); w++ {
		b[w] = binary.BigEndian.Uint32(src[w*4:])
	}
	return b, n, nil
}
