package fec

import "fmt"

// MaxK is the largest block: k is 1 to 255.
const MaxK = 255

// CheckK reports whether k is a block size CREM allows.
func CheckK(k int) error {
	if k < 1 || k > MaxK {
		return fmt.Errorf("fec: k = %d: %w", k, ErrK)
	}
	return nil
}

// CheckIndex reports whether Repair Index i may be used in a block of k positions. The draft
// requires i + k <= 255: then every x_i = 255 - i differs from every y_j = j, and every square
// submatrix of the coefficients is non-singular.
func CheckIndex(i, k int) error {
	if err := CheckK(k); err != nil {
		return err
	}
	if i < 0 || i+k > MaxK {
		return fmt.Errorf("fec: Repair Index %d with k = %d (i + k must not exceed 255): %w", i, k, ErrIndex)
	}
	return nil
}

// Coefficient returns C(i, j) = 1/(x_i + y_j) with x_i = 255 - i and y_j = j. It exists when
// i + j < 255.
func Coefficient(i, j int) (byte, error) {
	if i < 0 || j < 0 || i+j >= MaxK {
		return 0, fmt.Errorf("fec: coefficient C(%d, %d) (i + j must be below 255): %w", i, j, ErrIndex)
	}
	return coef(i, j), nil
}

// coef is Coefficient for indices already checked.
func coef(i, j int) byte { return gfInv[byte(255-i)^byte(j)] }

// CauchyRows returns the coefficient rows of Repair Indices idx over k positions,
// rows[r][j] = C(idx[r], j): the parity rows klauspost/reedsolomon's WithCustomMatrix takes.
func CauchyRows(k int, idx ...int) ([][]byte, error) {
	rows := make([][]byte, len(idx))
	for r, i := range idx {
		if err := CheckIndex(i, k); err != nil {
			return nil, err
		}
		rows[r] = make([]byte, k)
		for j := range k {
			rows[r][j] = coef(i, j)
		}
	}
	return rows, nil
}

// cauchyInverse writes into inv (row-major, inv[c*u+r]) the inverse of the u x u Cauchy matrix
// A[r][c] = C(rows[r], cols[c]), u = len(rows) = len(cols). It uses the closed form of the
// Cauchy inverse, O(u^2), which in characteristic 2 needs no signs:
//
//	inv[c][r] = A[r][c] * g_r * h_c
//	g_r = prod_l (x_r + y_l) / prod_{l != r} (x_r + x_l)
//	h_c = prod_l (x_l + y_c) / prod_{l != c} (y_c + y_l)
//
// Repair Indices must be distinct and valid for the block, positions distinct.
func cauchyInverse(inv []byte, rows, cols []int) {
	// In logarithms, so the products and quotients are sums and differences mod 255.
	u := len(rows)
	var g, h [MaxK]int
	for r := range u {
		xr := byte(255 - rows[r])
		lg := 0
		for l := range u {
			lg += int(gfLog[xr^byte(cols[l])])
			if l != r {
				lg += 255 - int(gfLog[xr^byte(255-rows[l])])
			}
		}
		g[r] = lg % 255
	}
	for c := range u {
		h[c] = cauchyLogH(rows, cols, c)
	}
	for c := range u {
		yc := byte(cols[c])
		for r := range u {
			// A[r][c] = 1/(x_r + y_c): its logarithm is the negated one of x_r + y_c.
			la := 255 - int(gfLog[byte(255-rows[r])^yc])
			inv[c*u+r] = gfExp[(la+g[r]+h[c])%255]
		}
	}
}

// cauchyLogH returns the logarithm of h_c = prod_l (x_l + y_c) / prod_{l != c} (y_c + y_l), the
// column factor of the Cauchy inverse (see cauchyInverse).
func cauchyLogH(rows, cols []int, c int) int {
	yc := byte(cols[c])
	lh := 0
	for l := range rows {
		lh += int(gfLog[byte(255-rows[l])^yc])
		if l != c {
			lh += 255 - int(gfLog[yc^byte(cols[l])])
		}
	}
	return lh % 255
}

// cauchyProject writes into z[c*stride] (c < u) the coefficients that give column j of the
// Cauchy rows as a combination of the columns cols: with A[r][c] = C(rows[r], cols[c]),
// z = A^-1 * (C(rows[r], j))_r. j must not be in cols. lh[c] = cauchyLogH(rows, cols, c); lg is
// scratch of u entries.
//
// In closed form, O(u): the partial fractions of prod_r (X + x_r) / ((X + y_j) prod_c (X + y_c)),
// which vanishes at every x_r, give in characteristic 2
//
//	z_c = h_c * b_j / (y_c + y_j)
//	b_j = prod_c (y_j + y_c) / prod_r (y_j + x_r)
//
// One logarithm is looked up per y_j + y_c, kept in lg for both uses.
func cauchyProject(z []byte, stride int, rows, cols, lh, lg []int, j int) {
	yj := byte(j)
	lg = lg[:len(cols)]
	lh = lh[:len(cols)]
	lb := 0
	for c, y := range cols {
		l := int(gfLog[yj^byte(y)])
		lg[c] = l
		lb += l
	}
	for _, i := range rows {
		lb += 255 - int(gfLog[yj^byte(255-i)])
	}
	lb %= 255
	for c, l := range lg {
		// lh[c] + lb + 255 - l < 765, the length of gfExp.
		z[c*stride] = gfExp[lh[c]+lb+255-l]
	}
}
