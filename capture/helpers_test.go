package capture

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// realCapture returns the path of the real RoCEv2 capture, read in place from the shared test
// data beside the repository (../shared from the module root), or skips the test.
func realCapture(t testing.TB) string {
	t.Helper()
	p, err := findCapture()
	if err != nil {
		t.Skipf("real capture not available (shared test data is kept beside the repository, never copied into it): %v", err)
	}
	return p
}

func findCapture() (string, error) {
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
	p := filepath.Join(dir, "..", "shared", "testdata", "roce", "hiroce-send-ack.pcap")
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}

var (
	macA = [6]byte{0x02, 0, 0, 0, 0, 0x0a}
	macB = [6]byte{0x02, 0, 0, 0, 0, 0x0b}
	v4A  = netip.MustParseAddrPort("10.0.0.1:49152")
	v4B  = netip.MustParseAddrPort("10.0.0.2:4791")
	v6A  = netip.MustParseAddrPort("[2001:db8::1]:49152")
	v6B  = netip.MustParseAddrPort("[2001:db8::2]:4791")
)

// frame builds an Ethernet frame or fails the test.
func frame(t testing.TB, h FrameHeader, payload []byte) []byte {
	t.Helper()
	b, err := AppendUDPFrame(nil, h, payload)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var testTime = time.Unix(1700000000, 0)

func netipPort(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }
