//go:build amd64 && gc && !noasm && !purego

package fec

import "github.com/klauspost/cpuid/v2"

//go:generate go run gen_gfni.go

// haveGFNI says whether the fused kernels of gfni_amd64.s can run: they need AVX-512 (with its
// byte masks), the Galois field instructions, BMI2 for the mask of a partial column, and an
// operating system that keeps the 512-bit registers.
var haveGFNI = cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.BMI2, cpuid.GFNI)

// gfniKernels[N-1] is the fused kernel of N outputs (see gen_gfni.go).
var gfniKernels = [gfniMaxOut]func(mat *uint64, in, out [][]byte, n int){
	gfniMul1, gfniMul2, gfniMul3, gfniMul4, gfniMul5, gfniMul6, gfniMul7, gfniMul8, gfniMul9, gfniMul10, gfniMul11, gfniMul12, gfniMul13, gfniMul14, gfniMul15, gfniMul16,
}

//go:noescape
func gfniMul1(mat *uint64, in, out [][]byte, n int)

//go:noescape
func gfniMul2(mat *uint64, in, out [][]byte, n int)

//go:noescape
func gfniMul3(mat *uint64, in, out [][]byte, n int)

//go:noescape
func gfniMul4(mat *uint64, in, out [][]byte, n int)

//go:noescape
func gfniMul5(mat *uint64, in, out [][]byte, n int)

//go:noescape
func gfniMul6(mat *uint64, in, out [][]byte, n int)

//go:noescape
func gfniMul7(mat *uint64, in, out [][]byte, n int)

//go:noescape
func gfniMul8(mat *uint64, in, out [][]byte, n int)

//go:noescape
func gfniMul9(mat *uint64, in, out [][]byte, n int)

//go:noescape
func gfniMul10(mat *uint64, in, out [][]byte, n int)

//go:noescape
func gfniMul11(mat *uint64, in, out [][]byte, n int)

//go:noescape
func gfniMul12(mat *uint64, in, out [][]byte, n int)

//go:noescape
func gfniMul13(mat *uint64, in, out [][]byte, n int)

//go:noescape
func gfniMul14(mat *uint64, in, out [][]byte, n int)

//go:noescape
func gfniMul15(mat *uint64, in, out [][]byte, n int)

//go:noescape
func gfniMul16(mat *uint64, in, out [][]byte, n int)
