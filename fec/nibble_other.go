//go:build !(amd64 || arm64) || !gc || noasm || purego

package fec

// Where no nibble kernels are built, the fused path is GFNI's or none.

const nibbleMaxOut = 1

const haveNibble = false

const nibbleISA = ""

var nibbleKernels [nibbleMaxOut]func(tbl *byte, in, out [][]byte, n int)
