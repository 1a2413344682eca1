package roce

import (
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/crem-project/crem/capture"
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

// findCapture locates ../shared/testdata/roce/hiroce-send-ack.pcap from the module root.
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

// rocePacket is one RoCEv2 packet of a capture, copied out of the reader's buffer.
type rocePacket struct {
	frame    int
	ip, udp  []byte
	pkt      []byte // UDP payload: BTH through ICRC
	src, dst netip.AddrPort
}

// readRoCE returns every UDP datagram to port 4791 in the capture at path.
func readRoCE(t testing.TB, path string) []rocePacket {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := capture.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []rocePacket
	for {
		fr, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		d, err := capture.DecodeUDP(fr.LinkType, fr.Data)
		if errors.Is(err, capture.ErrNotUDP) {
			continue
		}
		if err != nil {
			t.Fatalf("frame %d: %v", fr.Number, err)
		}
		if d.Dst.Port() != UDPPort {
			continue
		}
		out = append(out, rocePacket{
			frame: fr.Number,
			ip:    clone(d.IPHeader), udp: clone(d.UDPHeader), pkt: clone(d.Payload),
			src: d.Src, dst: d.Dst,
		})
	}
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }
