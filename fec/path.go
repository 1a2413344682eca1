package fec

// CodecPath names the byte path Encode and Decode take in this build on this processor, for
// logs and for the failure messages of tests that measure them: "fused (AVX-512, GFNI)" or
// "fused (AVX2)" where the package's own kernels run (gfni_amd64.s, avx2_amd64.s), otherwise
// "portable" and the single-row kernels that serve it, e.g. "portable (klauspost single-row
// kernels, arm64 NEON)". An Encoder or Decoder given WithKernels takes the path of that
// family instead.
func CodecPath() string { return useKernels.String() }
