//go:build !(amd64 || arm64 || ppc64le) || noasm || appengine || gccgo || nopshufb

package fec

import (
	"crypto/subtle"
	"runtime"
)

// The single-row kernels of the portable path where klauspost has no assembly (and under
// noasm): plain Go over one 256-octet row of the product table per coefficient. klauspost's
// own Go fallback looks up two octets at a time in a 128 KiB table per coefficient (32 MiB in
// all, built on first use), which the decoder's coefficients, new with every loss pattern,
// keep out of the caches.

// mulSlice sets out[x] = c * in[x] for x < len(in).
func mulSlice(c byte, in, out []byte) {
	out = out[:len(in)]
	if c == 1 {
		copy(out, in)
		return
	}
	mt := &gfMul[c]
	for len(in) >= 8 {
		o, i := out[:8], in[:8]
		o[0], o[1], o[2], o[3] = mt[i[0]], mt[i[1]], mt[i[2]], mt[i[3]]
		o[4], o[5], o[6], o[7] = mt[i[4]], mt[i[5]], mt[i[6]], mt[i[7]]
		in, out = in[8:], out[8:]
	}
	for x, v := range in {
		out[x] = mt[v]
	}
}

// mulAddSlice adds c * in[x] to out[x] for x < len(in).
func mulAddSlice(c byte, in, out []byte) {
	out = out[:len(in)]
	if c == 1 {
		subtle.XORBytes(out, out, in)
		return
	}
	mt := &gfMul[c]
	for len(in) >= 8 {
		o, i := out[:8], in[:8]
		o[0] ^= mt[i[0]]
		o[1] ^= mt[i[1]]
		o[2] ^= mt[i[2]]
		o[3] ^= mt[i[3]]
		o[4] ^= mt[i[4]]
		o[5] ^= mt[i[5]]
		o[6] ^= mt[i[6]]
		o[7] ^= mt[i[7]]
		in, out = in[8:], out[8:]
	}
	for x, v := range in {
		out[x] ^= mt[v]
	}
}

// rowKernels names the kernels: plain Go.
func rowKernels() string { return "plain Go, " + runtime.GOARCH }
