//go:build linux

package sim

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

const pageSize = 4096

// mapAliased reserves n octets of address space and maps one memfd of period octets over it
// again and again, so the whole range costs period octets of memory.
func mapAliased(n, period int) ([]byte, func() error, error) {
	total := (n + period - 1) / period * period
	fd, err := unix.MemfdCreate("crem-sim", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("memfd: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(period)); err != nil {
		return nil, nil, fmt.Errorf("memfd size: %w", err)
	}
	b, err := unix.Mmap(-1, 0, total, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_NORESERVE)
	if err != nil {
		return nil, nil, fmt.Errorf("reserve %d octets: %w", total, err)
	}
	free := func() error {
		if err := unix.Munmap(b); err != nil {
			return fmt.Errorf("sim: unmap region: %w", err)
		}
		return nil
	}
	for off := 0; off < total; off += period {
		_, _, errno := unix.Syscall6(unix.SYS_MMAP, uintptr(unsafe.Pointer(&b[off])), uintptr(period),
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED|unix.MAP_POPULATE, uintptr(fd), 0)
		if errno != 0 {
			free()
			return nil, nil, fmt.Errorf("map alias at %d: %w", off, errno)
		}
	}
	return b[:n:n], free, nil
}
