//go:build unix

package netnslock

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestTakeExcludesAnotherProcess: while this test holds the lock, a second process that takes it
// waits, and it goes on once the first lets go.
func TestTakeExcludesAnotherProcess(t *testing.T) {
	if os.Getenv("CREM_NETNSLOCK_CHILD") == "1" {
		Take(t)
		return
	}
	done := make(chan error, 1)
	t.Run("holder", func(t *testing.T) {
		Take(t)
		cmd := exec.Command(os.Args[0], "-test.run", "^TestTakeExcludesAnotherProcess$")
		cmd.Env = append(os.Environ(), "CREM_NETNSLOCK_CHILD=1")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			t.Fatalf("the second process ended (%v) while the lock was held", err)
		case <-time.After(500 * time.Millisecond):
		}
	})
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the second process: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second process did not get the lock within 10 s of its release")
	}
}
