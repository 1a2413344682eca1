//go:build arm64 && gc && !noasm && !purego

package fec

//go:generate go run gen_neon.go

// neonMaxOut is the number of outputs of the widest fused kernel of neon_arm64.s: its sums
// take 24 of the 32 vector registers, the nibbles, tables and products the other 8.
const neonMaxOut = 6

// haveNEON says whether the kernels of neon_arm64.s can run: Advanced SIMD (NEON) is part of
// every arm64 processor Go supports, so always.
var haveNEON = true

// neonKernels[N-1] is the fused kernel of N outputs (see gen_neon.go). The kernel of N
// outputs takes, for input i and output o, the 32 octets at tbl[(i*N+o)*32]: c(i, o) times
// the low nibbles 0 to 15, then times the high nibbles 0x00 to 0xF0.
var neonKernels = [neonMaxOut]func(tbl *byte, in, out [][]byte, n int){
	neonMul1, neonMul2, neonMul3, neonMul4, neonMul5, neonMul6,
}

//go:noescape
func neonMul1(tbl *byte, in, out [][]byte, n int)

//go:noescape
func neonMul2(tbl *byte, in, out [][]byte, n int)

//go:noescape
func neonMul3(tbl *byte, in, out [][]byte, n int)

//go:noescape
func neonMul4(tbl *byte, in, out [][]byte, n int)

//go:noescape
func neonMul5(tbl *byte, in, out [][]byte, n int)

//go:noescape
func neonMul6(tbl *byte, in, out [][]byte, n int)
