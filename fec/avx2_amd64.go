//go:build amd64 && gc && !noasm && !purego

package fec

import "github.com/klauspost/cpuid/v2"

//go:generate go run gen_avx2.go

// The fused nibble-table kernels of avx2_amd64.s (see gen_avx2.go), for processors with AVX2
// but not AVX-512 and GFNI.

// nibbleMaxOut is the number of outputs of the widest nibble kernel: 8 sums (two 32-octet
// halves per output) fill the 16 ymm registers with the mask, the nibbles, the tables and a
// lookup; more outputs take several passes.
const nibbleMaxOut = 4

// haveNibble says whether the kernels of avx2_amd64.s can run: they need AVX2 and an operating
// system that keeps the 256-bit registers.
var haveNibble = cpuid.CPU.Supports(cpuid.AVX, cpuid.AVX2)

// nibbleISA names the instructions of the nibble kernels, for CodecPath.
const nibbleISA = "AVX2"

// nibbleKernels[N-1] is the nibble kernel of N outputs.
var nibbleKernels = [nibbleMaxOut]func(tbl *byte, in, out [][]byte, n int){
	avx2Mul1, avx2Mul2, avx2Mul3, avx2Mul4,
}

//go:noescape
func avx2Mul1(tbl *byte, in, out [][]byte, n int)

//go:noescape
func avx2Mul2(tbl *byte, in, out [][]byte, n int)

//go:noescape
func avx2Mul3(tbl *byte, in, out [][]byte, n int)

//go:noescape
func avx2Mul4(tbl *byte, in, out [][]byte, n int)
