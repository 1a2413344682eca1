/* Loops over ISA-L's erasure code calls, so that a measurement times ISA-L as a C caller sees
 * it, without one cgo crossing per operation. */
#ifndef CREM_BENCH_ISAL_H
#define CREM_BENCH_ISAL_H

/* Kernel families of ec_encode_data: the library's own dispatch (AVX-512 where the processor has
 * it) or its AVX2 functions. */
enum { ISAL_DISPATCH = 0, ISAL_AVX2 = 1 };

/* The largest k the helpers take (their matrices are on the stack). */
#define ISAL_MAX_K 64

/* The most lost sources the decode helpers take. */
#define ISAL_MAX_U 16

void isal_encode_loop(int n, int kernel, int len, int k, int rows, unsigned char *tbls,
		      unsigned char **data, unsigned char **coding);

int isal_decode_prepare(int k, int m, int u, const unsigned char *encmat, const int *lost,
			unsigned char **blocks, unsigned char **srcs, unsigned char *tbls);

void isal_decode_kernel_loop(int n, int start, int kernel, int len, int k, int u, int npat,
			     unsigned char *tbls, unsigned char **srcs, unsigned char **out);

int isal_decode_full_loop(int n, int start, int kernel, int len, int k, int m, int u, int npat,
			  const unsigned char *encmat, const int *lost, unsigned char **blocks,
			  unsigned char **out);

#endif
