package fec

import "github.com/crem-project/crem/psn"

// The scalar reference: the field and the code computed bit by bit and byte by byte from the
// draft's definitions, with no table and no SIMD, for the tests to hold the fast paths against.

// mulRef multiplies in GF(2^8) mod 0x11D by shift and add.
func mulRef(a, b byte) byte {
	var p byte
	for b != 0 {
		if b&1 != 0 {
			p ^= a
		}
		hi := a & 0x80
		a <<= 1
		if hi != 0 {
			a ^= byte(Poly & 0xff)
		}
		b >>= 1
	}
	return p
}

// invRef finds the inverse by search.
func invRef(a byte) byte {
	for b := 1; b < 256; b++ {
		if mulRef(a, byte(b)) == 1 {
			return byte(b)
		}
	}
	return 0
}

// refInv is invRef for every element, computed once.
var refInv = func() (t [256]byte) {
	for a := 1; a < 256; a++ {
		t[a] = invRef(byte(a))
	}
	return t
}()

// coefRef is C(i, j) = 1/(x_i + y_j) from the draft's definition.
func coefRef(i, j int) byte { return refInv[byte(255-i)^byte(j)] }

// encodeRef computes R_i[L] octet by octet.
func encodeRef(i int, over psn.Bitmap, src [][]byte, T int) []byte {
	out := make([]byte, T)
	over.Each(func(j int) {
		c := coefRef(i, j)
		for n := range T {
			out[n] ^= mulRef(c, src[j][n])
		}
	})
	return out
}

// invertRef inverts a square matrix by Gauss-Jordan elimination with the reference field; nil
// when singular.
func invertRef(a [][]byte) [][]byte {
	u := len(a)
	m := make([][]byte, u)
	for r := range u {
		m[r] = make([]byte, 2*u)
		copy(m[r], a[r])
		m[r][u+r] = 1
	}
	for c := range u {
		p := -1
		for r := c; r < u; r++ {
			if m[r][c] != 0 {
				p = r
				break
			}
		}
		if p < 0 {
			return nil
		}
		m[c], m[p] = m[p], m[c]
		iv := refInv[m[c][c]]
		for n := range 2 * u {
			m[c][n] = mulRef(m[c][n], iv)
		}
		for r := range u {
			if r != c && m[r][c] != 0 {
				f := m[r][c]
				for n := range 2 * u {
					m[r][n] ^= mulRef(f, m[c][n])
				}
			}
		}
	}
	out := make([][]byte, u)
	for r := range u {
		out[r] = m[r][u:]
	}
	return out
}
