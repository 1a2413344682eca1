package fec

// Arithmetic in GF(2^8) defined by x^8 + x^4 + x^3 + x^2 + 1 (0x11D), the field of the draft's
// FEC scheme 1 and of klauspost/reedsolomon. Addition is exclusive-or.

// Poly is the field's primitive polynomial.
const Poly = 0x11D

// The tables are constants of the field, filled once at start-up.
var (
	gfExp [765]byte      // gfExp[n] = 2^n, tripled so that a sum of three logarithms needs no modulo
	gfLog [256]byte      // gfLog[a] = n with 2^n = a, for a != 0
	gfInv [256]byte      // gfInv[a] = a^-1, gfInv[0] = 0
	gfMul [256][256]byte // the whole multiplication table, one lookup per product
)

func init() {
	x := 1
	for n := range 255 {
		gfExp[n] = byte(x)
		gfExp[n+255] = byte(x)
		gfExp[n+510] = byte(x)
		gfLog[x] = byte(n)
		x <<= 1
		if x&0x100 != 0 {
			x ^= Poly
		}
	}
	for a := 1; a < 256; a++ {
		gfInv[a] = gfExp[255-int(gfLog[a])]
		for b := 1; b < 256; b++ {
			gfMul[a][b] = gfExp[int(gfLog[a])+int(gfLog[b])]
		}
	}
}

// Mul returns a * b.
func Mul(a, b byte) byte { return gfMul[a][b] }

// Inv returns the inverse of a. Zero has none; Inv(0) is 0, so callers that may meet 0 check first.
func Inv(a byte) byte { return gfInv[a] }

// Div returns a / b. Division by zero is undefined; Div(a, 0) is 0.
func Div(a, b byte) byte { return gfMul[a][gfInv[b]] }

// mulLog is Mul through the logarithm tables, which stay in the first-level cache where the
// full product table would not.
func mulLog(a, b byte) byte {
	if a == 0 || b == 0 {
		return 0
	}
	return gfExp[int(gfLog[a])+int(gfLog[b])]
}
