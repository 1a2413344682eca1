//go:build unix

package netnslock

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Take blocks until no other test on the machine holds the lock, then holds it until t ends.
// It logs how long it waited when it waited at all.
func Take(t testing.TB) {
	t.Helper()
	path := filepath.Join(os.TempDir(), "crem-netns-lab.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("netns lab lock: %v", err)
	}
	start := time.Now()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("netns lab lock %s: %v", path, err)
	}
	if w := time.Since(start); w > 100*time.Millisecond {
		t.Logf("waited %.1f s for another namespace lab to end", w.Seconds())
	}
	t.Cleanup(func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}
