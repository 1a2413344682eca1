//go:build arm64 && gc && !noasm && !purego

package fec

// On arm64 the nibble kernels are neon_arm64.s's (see gen_neon.go): Advanced SIMD is part of
// every arm64 processor, and TBL looks up the same 16-entry tables that VPSHUFB does on amd64.

// nibbleMaxOut is the number of outputs of the widest NEON kernel.
const nibbleMaxOut = neonMaxOut

// haveNibble says whether the NEON kernels can run.
var haveNibble = haveNEON

// nibbleISA names the instructions of the nibble kernels, for CodecPath.
const nibbleISA = "arm64 NEON"

// nibbleKernels[N-1] is the NEON kernel of N outputs.
var nibbleKernels = neonKernels
