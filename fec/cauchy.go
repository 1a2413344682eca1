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
// A[r][c] = C(rows[r], cols[c]), u = len(rows) = len(cols), and into lg[r] and lh[c] (u entries
// each) the logarithms of its factors g_r and h_c. It uses the closed form of the Cauchy
// inverse, O(u^2), which in characteristic 2 needs no signs:
//
//	inv[c][r] = A[r][c] * g_r * h_c
//	g_r = prod_l (x_r + y_l) / prod_{l != r} (x_r + x_l)
//	h_c = prod_l (x_l + y_c) / prod_{l != c} (y_c + y_l)
//
// Repair Indices must be distinct and valid for the block, positions distinct.
func cauchyInverse(inv []byte, lg, lh []int, rows, cols []int) {
	// In logarithms, so the products and quotients are sums and differences mod 255. The
	// logarithm of x_r + y_c enters g_r, h_c and inv[c][r]: it is looked up once, and kept in
	// inv until the last loop. The terms x_r + x_l and y_c + y_l are symmetric: once per pair.
	u := len(rows)
	lg, lh, inv = lg[:len(rows)], lh[:len(cols)], inv[:u*u]
	clear(lg)
	for c, y := range cols {
		yc := byte(y)
		row := inv[c*u : (c+1)*u]
		h := 0
		for r, i := range rows {
			l := gfLog[byte(255-i)^yc]
			row[r] = l
			lg[r] += int(l)
			h += int(l)
		}
		lh[c] = h
	}
	for a := range u {
		for b := a + 1; b < u; b++ {
			lx := int(gfLog[byte(rows[a])^byte(rows[b])]) // (255 - i) + (255 - i') = i + i'
			ly := int(gfLog[byte(cols[a])^byte(cols[b])])
			lg[a], lg[b] = lg[a]-lx, lg[b]-lx
			lh[a], lh[b] = lh[a]-ly, lh[b]-ly
		}
	}
	// Each sum is above -255 u: 255 u more makes it positive without changing it mod 255.
	for r := range lg {
		lg[r] = (lg[r] + 255*u) % 255
	}
	for c := range lh {
		lh[c] = (lh[c] + 255*u) % 255
	}
	for c := range lh {
		row := inv[c*u : (c+1)*u]
		base := lh[c] + 255
		for r := range row {
			// A[r][c] = 1/(x_r + y_c): its logarithm is the negated one of x_r + y_c, held in
			// row[r]. The sum is below 765, the length of gfExp.
			row[r] = gfExp[base+lg[r]-int(row[r])]
		}
	}
}

// cauchyProject writes into m[c*stride+t] (c < u, t < len(pos)) the coefficients that give
// column pos[t] of the Cauchy rows as a combination of the columns cols: with
// A[r][c] = C(rows[r], cols[c]), z = A^-1 * (C(rows[r], pos[t]))_r. No position of pos may be in
// cols. lh holds the logarithms of the column factors h_c (cauchyInverse); lb is scratch of
// len(pos) entries.
//
// In closed form, O(u) per position: the partial fractions of
// prod_r (X + x_r) / ((X + y_j) prod_c (X + y_c)), which vanishes at every x_r, give in
// characteristic 2
//
//	z_c = h_c * b_j / (y_c + y_j)
//	b_j = prod_c (y_j + y_c) / prod_r (y_j + x_r)
//
// b_j first for every position, then the coefficients output by output, so that neither loop
// waits on the other's lookups.
func cauchyProject(m []byte, stride int, rows, cols, pos, lh, lb []int) {
	lb = lb[:len(pos)]
	for t, j := range pos {
		yj := byte(j)
		s := 0
		for _, y := range cols {
			s += int(gfLog[yj^byte(y)])
		}
		for _, i := range rows {
			s += 255 - int(gfLog[yj^byte(255-i)])
		}
		lb[t] = s % 255
	}
	for c, y := range cols {
		yc := byte(y)
		z := m[c*stride : c*stride+len(pos)]
		base := lh[c] + 255
		for t, j := range pos {
			// base + lb[t] - log(y_c + y_j) < 765, the length of gfExp.
			z[t] = gfExp[base+lb[t]-int(gfLog[yc^byte(j)])]
		}
	}
}
