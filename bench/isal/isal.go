package main

/*
#cgo LDFLAGS: -lisal
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <isa-l/erasure_code.h>
#include "isal.h"

static long long thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
*/
import "C"

import (
	"fmt"
	"time"
	"unsafe"
)

// Kernel families of ISA-L's ec_encode_data.
const (
	isalDispatch = C.ISAL_DISPATCH // ec_encode_data: the library picks (AVX-512 where it runs)
	isalAVX2     = C.ISAL_AVX2     // ec_encode_data_avx2
	isalBase     = C.ISAL_BASE     // ec_encode_data_base, the scalar reference

	isalFamilyCount = C.ISAL_FAMILIES
)

// maxK and maxU bound the helpers in isal.c.
const (
	maxK = C.ISAL_MAX_K
	maxU = C.ISAL_MAX_U
)

// arena holds C memory: ISA-L's buffers and the arrays of pointers it takes must not be Go
// memory holding Go pointers. The Go side reads and writes the same buffers through slices.
type arena struct{ ptrs []unsafe.Pointer }

// bytes returns n zeroed octets aligned to 64.
func (a *arena) bytes(n int) []byte {
	size := (n + 63) &^ 63
	if size == 0 {
		size = 64
	}
	p := C.aligned_alloc(64, C.size_t(size))
	if p == nil {
		panic(fmt.Sprintf("isal bench: aligned_alloc(%d) failed", size))
	}
	C.memset(p, 0, C.size_t(size))
	a.ptrs = append(a.ptrs, p)
	return unsafe.Slice((*byte)(p), size)[:n:n]
}

// buffers returns n zeroed buffers of T octets.
func (a *arena) buffers(n, T int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = a.bytes(T)
	}
	return out
}

// pointers returns a C array of n pointers, the first len(bufs) set to the buffers (which must
// be the arena's).
func (a *arena) pointers(n int, bufs [][]byte) **C.uchar {
	raw := a.bytes(n * int(unsafe.Sizeof(uintptr(0))))
	arr := unsafe.Slice((**C.uchar)(unsafe.Pointer(&raw[0])), n)
	for i, b := range bufs {
		arr[i] = (*C.uchar)(unsafe.Pointer(&b[0]))
	}
	return &arr[0]
}

// ints returns a C array holding v.
func (a *arena) ints(v []int) *C.int {
	raw := a.bytes(len(v) * int(unsafe.Sizeof(C.int(0))))
	arr := unsafe.Slice((*C.int)(unsafe.Pointer(&raw[0])), len(v))
	for i, x := range v {
		arr[i] = C.int(x)
	}
	return &arr[0]
}

// free releases everything the arena handed out.
func (a *arena) free() {
	for _, p := range a.ptrs {
		C.free(p)
	}
	a.ptrs = nil
}

func uc(b []byte) *C.uchar { return (*C.uchar)(unsafe.Pointer(&b[0])) }

// cauchyMatrix is ISA-L's gf_gen_cauchy1_matrix: (k+m) x k, the identity over the rows
// 1/(i ^ j) for i = k..k+m-1.
func cauchyMatrix(a *arena, k, m int) []byte {
	mat := a.bytes((k + m) * k)
	C.gf_gen_cauchy1_matrix(uc(mat), C.int(k+m), C.int(k))
	return mat
}

// initTables expands rows x k coefficients (rows*k octets) into the tables of the kernel
// family (see isal_init_tables), in the arena.
func initTables(a *arena, kernel C.int, k, rows int, coef []byte) []byte {
	tbls := a.bytes(32 * k * rows)
	C.isal_init_tables(kernel, C.int(k), C.int(rows), uc(coef), uc(tbls))
	return tbls
}

// isalVersion is the version of the ISA-L headers this was built with.
func isalVersion() string { return C.GoString(C.isal_version()) }

// isalDispatchGFNI says whether this ISA-L's dispatch picks GFNI kernels where the processor
// has GFNI (2.31 and later).
func isalDispatchGFNI() bool { return C.isal_dispatch_gfni() != 0 }

// encodeLoop runs ec_encode_data (or its AVX2 form) n times.
func encodeLoop(n int, kernel C.int, T, k, rows int, tbls []byte, data, coding **C.uchar) {
	C.isal_encode_loop(C.int(n), kernel, C.int(T), C.int(k), C.int(rows), uc(tbls), data, coding)
}

// encodeBase is ec_encode_data_base, ISA-L's scalar reference (one gf_mul per product; it
// takes the tables of initTables(isalBase, ...) and reads each coefficient from them).
func encodeBase(T, k, rows int, tbls []byte, data, coding **C.uchar) {
	C.ec_encode_data_base(C.int(T), C.int(k), C.int(rows), uc(tbls), data, coding)
}

// decodePrepare inverts the matrix of one loss pattern and expands its decode tables (see
// isal_decode_prepare); srcs receives the k surviving blocks.
func decodePrepare(kernel C.int, k, m, u int, encmat []byte, lost *C.int, blocks, srcs **C.uchar, tbls []byte) error {
	if rc := C.isal_decode_prepare(kernel, C.int(k), C.int(m), C.int(u), uc(encmat), lost, blocks, srcs, uc(tbls)); rc != 0 {
		return fmt.Errorf("isal_decode_prepare: %d", int(rc))
	}
	return nil
}

// decodeKernelLoop runs n decodes on tables prepared beforehand.
func decodeKernelLoop(n, start int, kernel C.int, T, k, u, npat int, tbls []byte, srcs, out **C.uchar) {
	C.isal_decode_kernel_loop(C.int(n), C.int(start), kernel, C.int(T), C.int(k), C.int(u), C.int(npat), uc(tbls), srcs, out)
}

// decodeFullLoop runs n whole decodes: inversion, tables and kernels.
func decodeFullLoop(n, start int, kernel C.int, T, k, m, u, npat int, encmat []byte, lost *C.int, blocks, out **C.uchar) error {
	if rc := C.isal_decode_full_loop(C.int(n), C.int(start), kernel, C.int(T), C.int(k), C.int(m), C.int(u), C.int(npat),
		uc(encmat), lost, blocks, out); rc != 0 {
		return fmt.Errorf("isal_decode_full_loop: %d", int(rc))
	}
	return nil
}

// threadCPU is the CPU time of the calling thread (the program locks its goroutine to one).
func threadCPU() time.Duration { return time.Duration(C.thread_cpu_ns()) }

// cPointers views a C array of n pointers.
func cPointers(p **C.uchar, n int) []*C.uchar { return unsafe.Slice(p, n) }

// cInts views a C array of n ints.
func cInts(p *C.int, n int) []C.int { return unsafe.Slice(p, n) }
