package fec

// The fused product of gfni_amd64.s: many outputs at once, each the sum of many inputs times
// arbitrary coefficients, in one pass over the inputs.

// gfniMaxOut is the number of outputs of the widest fused kernel; more outputs take several
// passes over the inputs.
const gfniMaxOut = 16

// useFused says whether Decoder solves through the fused kernels. Tests turn it off to check
// the portable path.
var useFused = haveGFNI

// gfniMat[c] is the multiplication by c as the 8 x 8 bit matrix VGF2P8AFFINEQB takes: octet
// 7 - i of the matrix is row i, whose bit b is bit i of c * 2^b.
var gfniMat [256]uint64

func init() {
	for c := range 256 {
		// cx[b] = c * 2^b, by doubling: the field tables may not be filled yet.
		var cx [8]byte
		v := c
		for b := range 8 {
			cx[b] = byte(v)
			v <<= 1
			if v&0x100 != 0 {
				v ^= Poly
			}
		}
		var m uint64
		for i := range 8 {
			var row byte
			for b := range 8 {
				row |= (cx[b] >> i & 1) << b
			}
			m |= uint64(row) << (8 * (7 - i))
		}
		gfniMat[c] = m
	}
}

// fusedMul sets out[o][x] = sum over i of coef[o*len(in)+i] * in[i][x] for x < n, where n is a
// positive multiple of 64, every in[i] and out[o] holds at least n octets, and no output
// overlaps an input. mat is scratch; the grown one is returned.
func fusedMul(mat []uint64, coef []byte, in, out [][]byte, n int) []uint64 {
	nin := len(in)
	// The kernel trusts its operands; its callers build them, and this keeps a slip of theirs
	// from reaching memory it must not touch.
	if n <= 0 || n%64 != 0 || nin == 0 || len(coef) < nin*len(out) {
		panic("fec: fusedMul: bad shape")
	}
	for _, b := range in {
		if len(b) < n {
			panic("fec: fusedMul: short input")
		}
	}
	for _, b := range out {
		if len(b) < n {
			panic("fec: fusedMul: short output")
		}
	}
	for first := 0; first < len(out); first += gfniMaxOut {
		outs := out[first:min(len(out), first+gfniMaxOut)]
		w := len(outs)
		if cap(mat) < nin*w {
			mat = make([]uint64, nin*w)
		}
		m := mat[:nin*w]
		for o := range w {
			row := coef[(first+o)*nin : (first+o+1)*nin]
			for i, c := range row {
				m[i*w+o] = gfniMat[c]
			}
		}
		gfniKernels[w-1](&m[0], in, outs, n)
	}
	return mat
}
