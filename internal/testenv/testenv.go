// Package testenv finds what tests need from outside the repository: the real RoCEv2 capture in
// the shared test data beside it (read in place, never copied in) and tshark, the independent
// decoder. A test that lacks one skips with a message that says what is missing and why.
package testenv

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// CaptureName is the real RoCEv2 capture of the shared test data.
const CaptureName = "hiroce-send-ack.pcap"

// FindCapture returns the path of ../shared/testdata/roce/hiroce-send-ack.pcap, relative to the
// module root above the working directory.
func FindCapture() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the test directory")
		}
		dir = parent
	}
	p := filepath.Join(dir, "..", "shared", "testdata", "roce", CaptureName)
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}

// RealCapture returns the capture's path or skips the test.
func RealCapture(t testing.TB) string {
	t.Helper()
	p, err := FindCapture()
	if err != nil {
		t.Skipf("real capture not available (the shared test data is kept beside the repository, never copied into it): %v", err)
	}
	return p
}

// Tshark returns tshark's path or skips the test.
func Tshark(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not installed (apt-get install tshark; .ci/run installs it): the independent decoder check is skipped")
	}
	return p
}
