package main

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestParsePss(t *testing.T) {
	in := []byte("5614301eb000-7ffc94526000 ---p 00000000 00:00 0 [rollup]\nRss:  1616 kB\nPss:   526 kB\nPss_Anon: 112 kB\n")
	v, err := parsePss(in)
	if err != nil || v != 526<<10 {
		t.Fatalf("parsePss = %d, %v; want %d", v, err, 526<<10)
	}
	for _, bad := range []string{"", "Rss: 1 kB\n", "Pss: x kB\n"} {
		if _, err := parsePss([]byte(bad)); err == nil {
			t.Errorf("parsePss(%q) accepted", bad)
		}
	}
}

// The meter sees memory the process really touches.
func TestMemoryMeterSeesAllocation(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Pss is read from /proc/self/smaps_rollup, which only Linux has")
	}
	// Earlier tests of the package leave freed heap resident, which the allocation below could
	// reuse without touching a new page: hand it back to the system first, before the meter's
	// first sample, so that its peak can only come from the allocation.
	debug.FreeOSMemory()
	m := startMemoryMeter(time.Hour) // samples at start and Stop only
	if m == nil {
		t.Skip("/proc/self/smaps_rollup is not readable here")
	}
	before, _ := readPss()
	b := make([]byte, 64<<20)
	for i := range b {
		b[i] = byte(i)
	}
	peak := m.Stop()
	runtime.KeepAlive(b)
	if peak < before+48<<20 {
		t.Fatalf("peak %d MiB after touching 64 MiB from %d MiB", peak>>20, before>>20)
	}
}
