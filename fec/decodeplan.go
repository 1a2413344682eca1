package fec

import (
	"slices"

	"github.com/crem-project/crem/psn"
)

// decodePlans is the number of loss patterns a Decoder keeps planned for its fused solve.
const decodePlans = 4

// decodePlan is what the fused solve needs for one loss pattern, apart from the bytes: the
// unknown positions, the known positions the planned rows cover (the first inputs, in ascending
// order; the planned rows follow them), and the u x (|known| + u) coefficients of the outputs,
// in bytes (for the length prefixes) and as the family's kernels take them.
//
// It is keyed on the resolved kernel family, the planned rows' Repair Indices and sets L, and
// the unknown positions: together they fix the inputs (the known positions of the rows' sets
// are those sets less the unknowns) and every coefficient. Not on k (the coefficients do not
// depend on it) nor on T.
type decodePlan struct {
	k       Kernels
	idx     []int        // Repair Indices of the planned rows, ascending
	overs   []psn.Bitmap // their sets L
	unknown psn.Bitmap
	built   bool // the fields below are filled (build)

	cols    []int  // unknown positions, ascending: the outputs
	pos     []int  // known positions the rows cover, ascending
	coef    []byte // output c = sum over inputs t of coef[c*nin+t] * input t
	sumK    []byte // sumK[c] = sum over the known inputs t of coef[c*nin+t]
	inv     []byte // the inverse of the u x u Cauchy submatrix, inv[c*u+n]
	lg, lh  []int  // the logarithms of the inverse's factors g_r and h_c (cauchyInverse)
	lb      []int  // scratch of cauchyProject
	scratch fusedScratch
}

// planKey sets d.idx and d.overs to the Repair Indices and sets of the planned rows, the key of
// their plans with the family and the unknowns.
func (d *Decoder) planKey(plan []int) {
	d.idx, d.overs = d.idx[:0], d.overs[:0]
	for _, r := range plan {
		row := &d.blk.rows[r]
		d.idx = append(d.idx, row.Index)
		d.overs = append(d.overs, row.Over)
	}
}

// findPlan returns the kept plan of family k for the key in d.idx, d.overs and the unknowns,
// made the most recently used, or nil.
func (d *Decoder) findPlan(k Kernels, unknown *psn.Bitmap) *decodePlan {
	return d.plans.find(func(p *decodePlan) bool {
		return p.k == k && p.unknown.Equal(unknown) && slices.Equal(p.idx, d.idx) && sameSets(p.overs, d.overs)
	})
}

// sameSets reports whether a and b hold equal sets in the same order.
func sameSets(a, b []psn.Bitmap) bool {
	if len(a) != len(b) {
		return false
	}
	for n := range a {
		if !a[n].Equal(&b[n]) {
			return false
		}
	}
	return true
}

// newPlan keeps a plan for family k, the key in d.idx, d.overs and the unknowns, not built yet,
// as the most recently used; past decodePlans the least recently used one's storage is reused.
func (d *Decoder) newPlan(k Kernels, unknown *psn.Bitmap) *decodePlan {
	p := d.plans.push(decodePlans)
	p.k, p.unknown, p.built = k, *unknown, false
	p.idx = append(p.idx[:0], d.idx...)
	p.overs = append(p.overs[:0], d.overs...)
	return p
}

// build fills p for its family, the rows' indices and sets, and the unknowns. With R the planned
// rows, K the known sources in their sets and C_K their coefficients (zero where a row's set
// leaves a source out),
//
//	S_U = inv * (R - C_K * S_K) = inv * R + (inv * C_K) * S_K
//
// so the coefficients are [inv * C_K | inv]: O(u |K|) in closed form where every row covers the
// source (cauchyProject), O(u^2) per source otherwise.
func (p *decodePlan) build() {
	k, idx, overs, unknown := p.k, p.idx, p.overs, &p.unknown
	p.built = true
	var union psn.Bitmap
	all := overs[0]
	for n := range overs {
		union = union.Or(overs[n])
		all = all.And(overs[n])
	}
	p.cols = unknown.Positions(p.cols[:0])
	union = union.AndNot(*unknown)
	all = all.AndNot(*unknown)
	p.pos = union.Positions(p.pos[:0])
	u, nk := len(p.cols), len(p.pos)
	nin := nk + u
	p.inv = grow(p.inv, u*u)
	p.coef = grow(p.coef, u*nin)
	p.lh, p.lg, p.lb = growInts(p.lh, u), growInts(p.lg, u), growInts(p.lb, nk)
	inv, m := p.inv, p.coef
	cauchyInverse(inv, p.lg, p.lh, idx, p.cols)
	cauchyProject(m, nin, idx, p.cols, p.pos, p.lh, p.lb)
	if all != union {
		// The positions some rows leave out: their coefficients summed row by row.
		p.partialRows(all)
	}
	p.sumK = grow(p.sumK, u)
	for c := range u {
		var z byte
		for _, v := range m[c*nin : c*nin+nk] {
			z ^= v
		}
		p.sumK[c] = z
		copy(m[c*nin+nk:(c+1)*nin], inv[c*u:(c+1)*u])
	}
	p.scratch.prepare(k, m, nin, u)
}

// partialRows sets the coefficients of the known positions outside all, which some of the
// planned rows leave out: sum over the rows n covering j of inv[c][n] * C(idx[n], j).
func (p *decodePlan) partialRows(all psn.Bitmap) {
	u := len(p.cols)
	nin := len(p.pos) + u
	for t, j := range p.pos {
		if all.Has(j) {
			continue
		}
		for c := range u {
			var z byte
			for n, i := range p.idx {
				if p.overs[n].Has(j) {
					z ^= mulLog(p.inv[c*u+n], coef(i, j))
				}
			}
			p.coef[c*nin+t] = z
		}
	}
}

// grow returns b with length n, reallocated only when its capacity is short.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// growInts is grow for ints.
func growInts(b []int, n int) []int {
	if cap(b) < n {
		return make([]int, n)
	}
	return b[:n]
}

// rowPlans is the number of row sets a Decoder keeps prepared for its two-stage solve.
const rowPlans = 4

// rowPlan is the two-stage solve's first product for one set of planned rows that share their
// set L: the coefficients C(idx[r], j) of every position j < k (zero outside L), then the
// identity on the rows themselves, as the family's kernels take them, and the sum of each row's
// coefficients over L. A loss pattern takes its known positions' columns from it (gather)
// instead of computing coefficients. Keyed on the resolved family, k, the indices and L.
type rowPlan struct {
	k       Kernels
	blockK  int
	idx     []int
	over    psn.Bitmap
	coef    []byte // u x (k + u), row r = output r
	sum     []byte // sum[r] = sum over j in L of C(idx[r], j)
	scratch fusedScratch
}

// rowPlan returns the row plan of family k for a block of blockK positions and the rows idx
// over the set over, from the cache or built, and makes it the most recently used.
func (d *Decoder) rowPlan(k Kernels, blockK int, idx []int, over *psn.Bitmap) *rowPlan {
	if p := d.rplans.find(func(p *rowPlan) bool {
		return p.k == k && p.blockK == blockK && p.over.Equal(over) && slices.Equal(p.idx, idx)
	}); p != nil {
		return p
	}
	p := d.rplans.push(rowPlans)
	p.build(k, blockK, idx, over)
	return p
}

// build fills p for family k, blockK positions, the rows idx and their set over.
func (p *rowPlan) build(k Kernels, blockK int, idx []int, over *psn.Bitmap) {
	p.k, p.blockK, p.over = k, blockK, *over
	p.idx = append(p.idx[:0], idx...)
	u := len(idx)
	nin := blockK + u
	p.coef = grow(p.coef, u*nin)
	p.sum = grow(p.sum, u)
	clear(p.coef)
	for r, i := range idx {
		row := p.coef[r*nin : (r+1)*nin]
		var s byte
		for j := range blockK {
			if over.Has(j) {
				row[j] = coef(i, j)
				s ^= row[j]
			}
		}
		row[blockK+r] = 1
		p.sum[r] = s
	}
	p.scratch.prepare(k, p.coef, nin, u)
}
