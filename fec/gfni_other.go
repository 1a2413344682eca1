//go:build !amd64 || !gc || noasm || purego

package fec

// haveGFNI is false where the fused kernels are not built.
const haveGFNI = false

var gfniKernels [gfniMaxOut]func(mat *uint64, in, out [][]byte, n int)
