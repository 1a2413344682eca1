package roce

import (
	"errors"
	"io"
	"net/netip"
	"os"
	"testing"

	"github.com/crem-project/crem/internal/testenv"

	"github.com/crem-project/crem/capture"
)

func realCapture(t testing.TB) string { return testenv.RealCapture(t) }

func findCapture() (string, error) { return testenv.FindCapture() }

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
