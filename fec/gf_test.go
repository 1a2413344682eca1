package fec

import "testing"

// TestGFTablesMatchReference: Section 4.3.1 (scheme 1), GF(2^8) with 0x11D; every product,
// inverse and quotient of the tables against the shift-and-add reference.
func TestGFTablesMatchReference(t *testing.T) {
	for a := range 256 {
		for b := range 256 {
			if got, want := Mul(byte(a), byte(b)), mulRef(byte(a), byte(b)); got != want || mulLog(byte(a), byte(b)) != want {
				t.Fatalf("Mul(%#x, %#x) = %#x, by logarithms %#x, reference %#x", a, b, got, mulLog(byte(a), byte(b)), want)
			}
			if b != 0 {
				if got := Mul(Div(byte(a), byte(b)), byte(b)); got != byte(a) {
					t.Fatalf("Div(%#x, %#x) * %#x = %#x", a, b, b, got)
				}
			}
		}
		if a != 0 {
			if got, want := Inv(byte(a)), invRef(byte(a)); got != want {
				t.Fatalf("Inv(%#x) = %#x, reference %#x", a, got, want)
			}
		}
	}
	if Inv(0) != 0 || Div(7, 0) != 0 {
		t.Fatalf("Inv(0) = %#x, Div(7, 0) = %#x, want 0 (documented, no panic)", Inv(0), Div(7, 0))
	}
	// x^8 = x^4 + x^3 + x^2 + 1: 0x80 * 2 reduces to 0x1d.
	if got := Mul(0x80, 2); got != 0x1d {
		t.Fatalf("0x80 * 2 = %#x, want 0x1d (polynomial 0x11D)", got)
	}
}
