package fec

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/crem-project/crem/psn"
)

// guarded returns n octets that end where an inaccessible page begins, so a read or write at
// or beyond n faults; the test unmaps them when it ends.
func guarded(t *testing.T, n int) []byte {
	t.Helper()
	page := unix.Getpagesize()
	size := (n+page-1)/page*page + page
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatalf("mmap %d: %v", size, err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	if err := unix.Mprotect(mem[size-page:], unix.PROT_NONE); err != nil {
		t.Fatalf("mprotect: %v", err)
	}
	return mem[size-page-n : size-page : size-page]
}

// TestGFNIPartialColumnStaysInBounds runs the GFNI kernels and a whole Encode on symbols that
// end right before an inaccessible page: the masked last column must neither read nor write
// past the symbol's end (it would fault), and the result must equal the portable path's.
func TestGFNIPartialColumnStaysInBounds(t *testing.T) {
	if !KernelsGFNI.Available() {
		t.Skip("no GFNI kernels on this machine: " + CodecPath())
	}
	for _, T := range []int{2, 34, 100, 1058, 4130} {
		const k, m = 32, 4
		src := make([][]byte, k)
		for j := range src {
			src[j] = guarded(t, T)
			for x := range src[j] {
				src[j][x] = byte(j*7 + x*13 + 1)
			}
		}
		dst := make([][]byte, m)
		want := make([][]byte, m)
		for r := range dst {
			dst[r] = guarded(t, T)
			want[r] = make([]byte, T)
		}
		idx := []int{0, 1, 2, 3}
		gf, err := NewEncoder(WithKernels(KernelsGFNI))
		if err != nil {
			t.Fatal(err)
		}
		port, err := NewEncoder(WithKernels(KernelsPortable))
		if err != nil {
			t.Fatal(err)
		}
		all := psn.FirstK(k)
		if err := gf.Encode(dst, idx, all, src); err != nil {
			t.Fatalf("T %d: gfni: %v", T, err)
		}
		if err := port.Encode(want, idx, all, src); err != nil {
			t.Fatalf("T %d: portable: %v", T, err)
		}
		for r := range dst {
			if string(dst[r]) != string(want[r]) {
				t.Fatalf("T %d: repair %d differs from the portable path's", T, r)
			}
		}
	}
}
