package fec

// CodecPath names the byte path Encode and Decode take in this build on this processor, for
// logs and for the failure messages of tests that measure them: "fused (AVX-512, GFNI)" where
// the package's own kernels run (gfni_amd64.s), otherwise "portable" and the single-row
// kernels that serve it, e.g. "portable (klauspost single-row kernels, arm64 NEON)".
func CodecPath() string {
	if useFused {
		return "fused (AVX-512, GFNI)"
	}
	return "portable (" + rowKernels() + ")"
}
