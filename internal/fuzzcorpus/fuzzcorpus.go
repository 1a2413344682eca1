// Package fuzzcorpus gives the fuzz targets real traffic: the datagrams of a capture (the real
// RoCEv2 capture of the shared test data, read in place and never copied into the repository,
// or a capture the lab wrote), and Go fuzz corpus files ("go test fuzz v1") written from them.
package fuzzcorpus

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/internal/testenv"
)

// RoCEv2Port is the UDP destination port of RoCEv2.
const RoCEv2Port = 4791

// Datagram is one UDP datagram of a capture, copied out of the reader.
type Datagram struct {
	Frame    int
	LinkType capture.LinkType
	Data     []byte // the whole frame
	IP, UDP  []byte // the IP header (options and extension headers included) and the UDP header
	Payload  []byte
	Src, Dst netip.AddrPort
}

// Read returns every UDP datagram of the capture r; frames that carry none are skipped.
func Read(r io.Reader) ([]Datagram, error) {
	cr, err := capture.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("fuzzcorpus: %w", err)
	}
	var out []Datagram
	for {
		fr, err := cr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("fuzzcorpus: frame %d: %w", len(out)+1, err)
		}
		data := bytes.Clone(fr.Data)
		d, err := capture.DecodeUDP(fr.LinkType, data)
		if err != nil {
			continue
		}
		out = append(out, Datagram{Frame: fr.Number, LinkType: fr.LinkType, Data: data, IP: d.IPHeader,
			UDP: d.UDPHeader, Payload: d.Payload, Src: d.Src, Dst: d.Dst})
	}
}

// RealCapture returns the datagrams of the real RoCEv2 capture beside the repository
// (../shared/testdata/roce), or an error saying why there are none.
func RealCapture() ([]Datagram, error) {
	path, err := testenv.FindCapture()
	if err != nil {
		return nil, fmt.Errorf("fuzzcorpus: real capture: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("fuzzcorpus: %w", err)
	}
	defer f.Close()
	return Read(f)
}

// RoCEv2 returns the payloads of the datagrams to the RoCEv2 port: whole RoCEv2 packets, BTH
// through ICRC.
func RoCEv2(ds []Datagram) [][]byte {
	var out [][]byte
	for _, d := range ds {
		if d.Dst.Port() == RoCEv2Port {
			out = append(out, d.Payload)
		}
	}
	return out
}

// RealRoCEv2 returns the RoCEv2 packets of the real capture, or an error saying why there are
// none.
func RealRoCEv2() ([][]byte, error) {
	ds, err := RealCapture()
	if err != nil {
		return nil, err
	}
	pkts := RoCEv2(ds)
	if len(pkts) == 0 {
		return nil, errors.New("fuzzcorpus: no RoCEv2 packet in the real capture")
	}
	return pkts, nil
}

// Encode returns a corpus file for the values of one fuzz input, in the format go test reads
// from testdata/fuzz/<Target>/: []byte, string, bool and the sized integer types.
func Encode(values ...any) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("go test fuzz v1\n")
	for _, v := range values {
		switch v := v.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%s)\n", strconv.Quote(string(v)))
		case string:
			fmt.Fprintf(&b, "string(%s)\n", strconv.Quote(v))
		case bool:
			fmt.Fprintf(&b, "bool(%v)\n", v)
		case uint8:
			fmt.Fprintf(&b, "byte(%d)\n", v)
		case uint16, uint32, uint64, int8, int16, int32, int64, int, uint:
			fmt.Fprintf(&b, "%T(%d)\n", v, v)
		default:
			return nil, fmt.Errorf("fuzzcorpus: cannot encode a %T", v)
		}
	}
	return b.Bytes(), nil
}

// Write writes one corpus file for values into dir (testdata/fuzz/<Target>), named as go test
// names the inputs it finds (a prefix of the content's SHA-256), and returns its path.
func Write(dir string, values ...any) (string, error) {
	b, err := Encode(values...)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("fuzzcorpus: %w", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%x", sha256.Sum256(b))[:16])
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", fmt.Errorf("fuzzcorpus: %w", err)
	}
	return path, nil
}
