package fec

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// TestRepairIndexLimit: Section 4.3.1, "The CSF MUST use only Repair Indices with
// i + k <= 255"; C(i, j) exists whenever i + j < 255.
func TestRepairIndexLimit(t *testing.T) {
	for _, c := range []struct {
		i, k int
		ok   bool
	}{
		{0, 255, true}, {1, 255, false}, {254, 1, true}, {255, 1, false}, {200, 55, true},
		{200, 56, false}, {-1, 4, false}, {0, 0, false}, {0, 256, false}, {3, 4, true},
	} {
		err := CheckIndex(c.i, c.k)
		if (err == nil) != c.ok {
			t.Errorf("CheckIndex(%d, %d) = %v, want ok %v", c.i, c.k, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrIndex) && !errors.Is(err, ErrK) {
			t.Errorf("CheckIndex(%d, %d) = %v, want ErrIndex or ErrK", c.i, c.k, err)
		}
	}
	if _, err := Coefficient(0, 254); err != nil {
		t.Errorf("C(0, 254): %v", err)
	}
	for _, ij := range [][2]int{{1, 254}, {255, 0}, {-1, 0}, {0, -1}, {128, 127}} {
		if _, err := Coefficient(ij[0], ij[1]); !errors.Is(err, ErrIndex) {
			t.Errorf("C(%d, %d) error %v, want ErrIndex", ij[0], ij[1], err)
		}
	}
	if _, err := CauchyRows(4, 0, 252); !errors.Is(err, ErrIndex) {
		t.Errorf("CauchyRows(4, 0, 252) error %v, want ErrIndex", err)
	}
}

// TestCoefficientsMatchDefinition: Section 4.3.1, every C(i, j) with i + j < 255 against
// 1/(x_i + y_j) computed by the bitwise reference.
func TestCoefficientsMatchDefinition(t *testing.T) {
	for i := range 255 {
		for j := 0; i+j < 255; j++ {
			c, err := Coefficient(i, j)
			if err != nil || c != coefRef(i, j) || c == 0 {
				t.Fatalf("C(%d, %d) = %#x (%v), reference %#x", i, j, c, err, coefRef(i, j))
			}
		}
	}
}

// TestCauchyInverseClosedForm: Section 4.3.1, "every square submatrix of a Cauchy matrix is
// non-singular": the closed-form inverse of random u x u submatrices (any Repair Indices with
// i + k <= 255, any columns) equals Gauss-Jordan on the reference field, and A * inv = I.
func TestCauchyInverseClosedForm(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 400 {
		u := 1 + rng.IntN(12)
		if trial%50 == 0 {
			u = 1 + rng.IntN(64)
		}
		k := u + rng.IntN(255-u+1)
		maxI := 255 - k
		if maxI+1 < u {
			k = 255 - u + 1
			maxI = u - 1
		}
		rows := rng.Perm(maxI + 1)[:u]
		cols := rng.Perm(k)[:u]
		a := make([][]byte, u)
		for r := range u {
			a[r] = make([]byte, u)
			for c := range u {
				a[r][c] = coefRef(rows[r], cols[c])
			}
		}
		inv := make([]byte, u*u)
		cauchyInverse(inv, make([]int, u), make([]int, u), rows, cols)
		want := invertRef(a)
		if want == nil {
			t.Fatalf("reference says singular: rows %v cols %v", rows, cols)
		}
		for c := range u {
			for r := range u {
				if inv[c*u+r] != want[c][r] {
					t.Fatalf("rows %v cols %v: inv[%d][%d] = %#x, Gauss-Jordan %#x", rows, cols, c, r, inv[c*u+r], want[c][r])
				}
			}
		}
		for c := range u {
			for c2 := range u {
				var s byte
				for r := range u {
					s ^= mulRef(inv[c*u+r], a[r][c2])
				}
				if (c == c2) != (s == 1) || (c != c2 && s != 0) {
					t.Fatalf("(inv * A)[%d][%d] = %#x", c, c2, s)
				}
			}
		}
	}
}
