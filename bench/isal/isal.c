#include <string.h>
#include <stdio.h>
#include <isa-l.h>
#include <isa-l/erasure_code.h>
#include "isal.h"

#if ISAL_MAJOR_VERSION > 2 || (ISAL_MAJOR_VERSION == 2 && ISAL_MINOR_VERSION >= 31)
#define ISAL_HAS_GFNI_DISPATCH 1
#endif

void isal_init_tables(int kernel, int k, int rows, unsigned char *a, unsigned char *tbls)
{
#ifdef ISAL_HAS_GFNI_DISPATCH
	if (kernel != ISAL_DISPATCH) {
		ec_init_tables_base(k, rows, a, tbls);
		return;
	}
#endif
	(void)kernel;
	ec_init_tables(k, rows, a, tbls);
}

const char *isal_version(void)
{
	static char v[32];
	snprintf(v, sizeof(v), "%d.%d.%d", ISAL_MAJOR_VERSION, ISAL_MINOR_VERSION, ISAL_PATCH_VERSION);
	return v;
}

int isal_dispatch_gfni(void)
{
#ifdef ISAL_HAS_GFNI_DISPATCH
	return 1;
#else
	return 0;
#endif
}

typedef void (*encode_fn)(int, int, int, unsigned char *, unsigned char **, unsigned char **);

/* ISA-L 2.31 and later mark its per-family functions deprecated in favour of the dispatch; the
 * AVX2 family is measured on purpose, as the counterpart of crem's AVX2 path. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static encode_fn pick(int kernel)
{
	if (kernel == ISAL_AVX2)
		return ec_encode_data_avx2;
	if (kernel == ISAL_BASE)
		return ec_encode_data_base;
	return ec_encode_data;
}
#pragma GCC diagnostic pop

void isal_encode_loop(int n, int kernel, int len, int k, int rows, unsigned char *tbls,
		      unsigned char **data, unsigned char **coding)
{
	encode_fn f = pick(kernel);
	for (int i = 0; i < n; i++)
		f(len, k, rows, tbls, data, coding);
}

/* isal_decode_prepare does what ISA-L's examples do for u lost sources lost[0..u-1] of a code
 * whose (k+m) x k matrix encmat is the identity over the parity rows: the first k rows that
 * survive (sources, then parity 0, 1, ...) form b, gf_invert_matrix inverts it, the rows of the
 * inverse for the lost sources are the decode matrix, and ec_init_tables expands it into tbls
 * (32*k*u octets) for the kernel family. srcs receives the k surviving blocks in b's order. It returns non-zero when
 * b is singular. */
int isal_decode_prepare(int kernel, int k, int m, int u, const unsigned char *encmat, const int *lost,
			unsigned char **blocks, unsigned char **srcs, unsigned char *tbls)
{
	unsigned char b[ISAL_MAX_K * ISAL_MAX_K], inv[ISAL_MAX_K * ISAL_MAX_K];
	unsigned char dec[ISAL_MAX_U * ISAL_MAX_K];
	unsigned char gone[2 * ISAL_MAX_K];
	if (k > ISAL_MAX_K || m > ISAL_MAX_K || u > ISAL_MAX_U || u > k)
		return -1;
	memset(gone, 0, sizeof(gone));
	for (int e = 0; e < u; e++)
		gone[lost[e]] = 1;
	int r = 0;
	for (int i = 0; i < k + m && r < k; i++) {
		if (gone[i])
			continue;
		memcpy(&b[k * r], &encmat[k * i], k);
		srcs[r] = blocks[i];
		r++;
	}
	if (r < k)
		return -2;
	if (gf_invert_matrix(b, inv, k) != 0)
		return -3;
	for (int e = 0; e < u; e++)
		memcpy(&dec[k * e], &inv[k * lost[e]], k);
	isal_init_tables(kernel, k, u, dec, tbls);
	return 0;
}

/* isal_decode_kernel_loop runs n decodes with tables prepared beforehand, pattern (start+i) mod
 * npat for the i-th: tbls and srcs hold npat patterns' tables and surviving blocks. */
void isal_decode_kernel_loop(int n, int start, int kernel, int len, int k, int u, int npat,
			     unsigned char *tbls, unsigned char **srcs, unsigned char **out)
{
	encode_fn f = pick(kernel);
	for (int i = 0; i < n; i++) {
		int p = (start + i) % npat;
		f(len, k, u, tbls + (long)p * 32 * k * u, srcs + (long)p * k, out);
	}
}

/* isal_decode_full_loop runs n whole decodes: each one inverts its pattern's matrix, expands the
 * tables and runs the kernels. */
int isal_decode_full_loop(int n, int start, int kernel, int len, int k, int m, int u, int npat,
			  const unsigned char *encmat, const int *lost, unsigned char **blocks,
			  unsigned char **out)
{
	unsigned char tbls[32 * ISAL_MAX_K * ISAL_MAX_U];
	unsigned char *srcs[ISAL_MAX_K];
	encode_fn f = pick(kernel);
	for (int i = 0; i < n; i++) {
		int p = (start + i) % npat;
		int rc = isal_decode_prepare(kernel, k, m, u, encmat, lost + (long)p * u, blocks, srcs, tbls);
		if (rc != 0)
			return rc;
		f(len, k, u, tbls, srcs, out);
	}
	return 0;
}
