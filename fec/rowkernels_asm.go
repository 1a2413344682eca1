//go:build (amd64 || arm64 || ppc64le) && !noasm && !appengine && !gccgo && !nopshufb

package fec

import (
	"runtime"

	"github.com/klauspost/cpuid/v2"
	"github.com/klauspost/reedsolomon"
)

// The single-row kernels of the portable path: klauspost's LowLevel, in assembly here.

// mulSlice sets out[x] = c * in[x] for x < len(in).
func mulSlice(c byte, in, out []byte) { reedsolomon.LowLevel{}.GalMulSlice(c, in, out) }

// mulAddSlice adds c * in[x] to out[x] for x < len(in).
func mulAddSlice(c byte, in, out []byte) { reedsolomon.LowLevel{}.GalMulSliceXor(c, in, out) }

// rowKernels names what klauspost's kernels run here (its defaultOptions decide the same way).
func rowKernels() string {
	switch runtime.GOARCH {
	case "amd64":
		switch {
		case cpuid.CPU.Supports(cpuid.AVX2):
			return "klauspost single-row kernels, amd64 AVX2"
		case cpuid.CPU.Supports(cpuid.SSSE3):
			return "klauspost single-row kernels, amd64 SSSE3"
		}
		return "klauspost single-row kernels, amd64 without SSSE3: plain Go"
	case "arm64":
		return "klauspost single-row kernels, arm64 NEON"
	}
	return "klauspost single-row kernels, " + runtime.GOARCH + " assembly"
}
