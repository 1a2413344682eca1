// Package fec is CREM's erasure code: the repair symbols a CREM sender computes over a block of
// RDMA packets and the solve a CREM receiver runs to restore the packets it lost.
//
// It provides GF(2^8) arithmetic with the polynomial 0x11D, the Cauchy coefficients
// C(i, j) = 1/(x_i + y_j) with x_i = 255 - i and y_j = j, source symbols
// uint16(len(P)) || P || zero padding to T, and the three FEC schemes of the draft (RULINGS C1):
// 0 Source Copy, 1 Cauchy Reed-Solomon over any set L of positions, 2 XOR parity.
//
// The receiver side is split in two. [Block] is the bookkeeping alone: which positions are
// present and known, which repair rows are held over which sets L, whether the unknowns can be
// solved and, if not, what is missing. It holds no symbol bytes, so a simulator can run the
// protocol symbolically on it. [Decoder] adds the bytes: it keeps the symbols, subtracts what is
// known and inverts the Cauchy submatrix in closed form.
//
// On amd64 processors with AVX-512 and GFNI the byte work runs on the package's own fused
// kernels (gfni_amd64.s), which keep up to 16 outputs in registers while any number of inputs
// stream through them with arbitrary coefficients: every Encode, and the whole solve of a
// Decode in one pass. With AVX2 but not AVX-512 and GFNI the same fused work runs on
// nibble-table kernels (avx2_amd64.s: two VPSHUFB lookups per product, up to 4 outputs of 64
// octets in registers, more in several passes). Elsewhere, and under the build tags purego or
// noasm, it runs the portable path on single-row kernels: github.com/klauspost/reedsolomon's
// LowLevel (AVX2 or SSSE3 on amd64, NEON on arm64), or plain Go under noasm and where klauspost
// has no assembly. [CodecPath] names the path in use, and [WithKernels] pins an Encoder or
// Decoder to one. No path allocates once its scratch has grown.
//
// Nothing here knows packets, sockets or time.
package fec
