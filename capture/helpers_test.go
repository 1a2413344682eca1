package capture

import (
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/internal/testenv"
)

func realCapture(t testing.TB) string { return testenv.RealCapture(t) }

func findCapture() (string, error) { return testenv.FindCapture() }

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
