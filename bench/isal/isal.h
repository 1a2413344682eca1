/* Loops over ISA-L's erasure code calls, so that a measurement times ISA-L as a C caller sees
 * it, without one cgo crossing per operation. */
#ifndef CREM_BENCH_ISAL_H
#define CREM_BENCH_ISAL_H

/* Kernel families of ec_encode_data: the library's own dispatch (AVX-512 where the processor has
 * it, and from ISA-L 2.31 on its GFNI kernels where the processor has GFNI), its AVX2 functions,
 * or its scalar reference (ec_encode_data_base). */
enum { ISAL_DISPATCH = 0, ISAL_AVX2 = 1, ISAL_BASE = 2, ISAL_FAMILIES = 3 };

/* isal_init_tables expands rows x k coefficients a into the tables the kernel family takes: from
 * ISA-L 2.31 on, ec_init_tables dispatches too and makes GFNI tables on a processor with GFNI,
 * which the AVX2 and scalar kernels cannot read; they get ec_init_tables_base's. */
void isal_init_tables(int kernel, int k, int rows, unsigned char *a, unsigned char *tbls);

/* isal_version is the version of the ISA-L headers this was built with, "2.30.0" say. */
const char *isal_version(void);

/* isal_dispatch_gfni says whether this ISA-L's dispatch can pick GFNI kernels (2.31 and later). */
int isal_dispatch_gfni(void);

/* The largest k the helpers take (their matrices are on the stack). */
#define ISAL_MAX_K 64

/* The most lost sources the decode helpers take. */
#define ISAL_MAX_U 16

void isal_encode_loop(int n, int kernel, int len, int k, int rows, unsigned char *tbls,
		      unsigned char **data, unsigned char **coding);

int isal_decode_prepare(int kernel, int k, int m, int u, const unsigned char *encmat, const int *lost,
			unsigned char **blocks, unsigned char **srcs, unsigned char *tbls);

void isal_decode_kernel_loop(int n, int start, int kernel, int len, int k, int u, int npat,
			     unsigned char *tbls, unsigned char **srcs, unsigned char **out);

int isal_decode_full_loop(int n, int start, int kernel, int len, int k, int m, int u, int npat,
			  const unsigned char *encmat, const int *lost, unsigned char **blocks,
			  unsigned char **out);

#endif
