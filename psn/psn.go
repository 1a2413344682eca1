// Package psn owns 24-bit packet sequence number arithmetic: serial comparison across the
// wrap at 2^24, PSN ranges, and the position bitmaps that CREM messages carry.
package psn

import "fmt"

// Modulus is the size of the PSN space; PSNs are 24-bit values.
const Modulus = 1 << 24

// Mask keeps the low 24 bits of a value.
const Mask = Modulus - 1

// half is the serial-arithmetic horizon: a PSN less than half the space ahead is "after".
const half = Modulus / 2

// PSN is a 24-bit packet sequence number. Values above Mask are never produced by this package.
type PSN uint32

// Of returns v reduced to 24 bits.
func Of(v uint32) PSN { return PSN(v & Mask) }

// Add returns p + n modulo 2^24; n may be negative.
func (p PSN) Add(n int) PSN { return PSN((int64(p) + int64(n)) & Mask) }

// Forward returns how many steps q lies ahead of p, (q - p) mod 2^24, in [0, 2^24).
func (p PSN) Forward(q PSN) uint32 { return (uint32(q) - uint32(p)) & Mask }

// Diff returns the signed serial distance q - p in (-2^23, 2^23].
func Diff(p, q PSN) int32 {
	d := int32(p.Forward(q))
	if d > half {
		d -= Modulus
	}
	return d
}

// Before reports whether p precedes q in serial arithmetic (q is less than half the space ahead).
func (p PSN) Before(q PSN) bool { d := p.Forward(q); return d != 0 && d < half }

// After reports whether p follows q in serial arithmetic.
func (p PSN) After(q PSN) bool { return q.Before(p) }

// AtOrBefore reports whether p equals q or precedes it.
func (p PSN) AtOrBefore(q PSN) bool { return p == q || p.Before(q) }

// Max returns the later of p and q in serial arithmetic.
func Max(p, q PSN) PSN {
	if p.Before(q) {
		return q
	}
	return p
}

// Min returns the earlier of p and q in serial arithmetic.
func Min(p, q PSN) PSN {
	if p.Before(q) {
		return p
	}
	return q
}

func (p PSN) String() string { return fmt.Sprintf("%#06x", uint32(p)) }

// Range is Count consecutive PSNs starting at Start (modulo 2^24).
type Range struct {
	Start PSN
	Count uint32
}

// End returns the PSN just past the range.
func (r Range) End() PSN { return r.Start.Add(int(r.Count)) }

// Last returns the last PSN of a non-empty range.
func (r Range) Last() PSN { return r.Start.Add(int(r.Count) - 1) }

// Contains reports whether q is one of the range's PSNs.
func (r Range) Contains(q PSN) bool { return r.Start.Forward(q) < r.Count }

func (r Range) String() string { return fmt.Sprintf("[%v+%d]", r.Start, r.Count) }
