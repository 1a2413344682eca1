package capture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// readAll returns copies of every frame of a capture.
func readAll(t testing.TB, r io.Reader) ([]Frame, *Reader) {
	t.Helper()
	cr, err := NewReader(r)
	if err != nil {
		t.Fatal(err)
	}
	var out []Frame
	for {
		f, err := cr.Next()
		if err == io.EOF {
			return out, cr
		}
		if err != nil {
			t.Fatal(err)
		}
		f.Data = append([]byte(nil), f.Data...)
		out = append(out, f)
	}
}

// Section 6 (pcap verify reads pcap): the real capture, a big-endian microsecond pcap, reads
// as 123 Ethernet frames with tshark's timestamps and lengths, and 105 of them are UDP to 4791.
func TestReadRealPcapSection6(t *testing.T) {
	f, err := os.Open(realCapture(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	frames, r := readAll(t, f)
	if r.Format() != FormatPcap || r.LinkType() != LinkEthernet {
		t.Errorf("format %v link %d", r.Format(), r.LinkType())
	}
	if len(frames) != 123 {
		t.Fatalf("%d frames, want 123", len(frames))
	}
	// From tshark -T fields -e frame.number -e frame.time_epoch -e frame.len.
	for _, w := range []struct {
		n      int
		sec    int64
		usec   int64
		length int
	}{{1, 1650970174, 376937, 90}, {15, 1650970190, 668808, 206}, {123, 1650970195, 676615, 62}} {
		fr := frames[w.n-1]
		if fr.Number != w.n || !fr.Time.Equal(time.Unix(w.sec, w.usec*1000)) || len(fr.Data) != w.length || fr.OrigLen != w.length || fr.Truncated() {
			t.Errorf("frame %d: number %d time %v length %d/%d", w.n, fr.Number, fr.Time, len(fr.Data), fr.OrigLen)
		}
	}
	roce, other := 0, 0
	for _, fr := range frames {
		d, err := DecodeUDP(fr.LinkType, fr.Data)
		switch {
		case errors.Is(err, ErrNotUDP):
			other++
		case err != nil:
			t.Errorf("frame %d: %v", fr.Number, err)
		case d.Dst.Port() == 4791:
			roce++
			if d.IPVersion() != 4 || len(d.IPHeader) != 20 || d.VLANs != 0 {
				t.Errorf("frame %d: IPv%d header %d octets, %d VLANs", fr.Number, d.IPVersion(), len(d.IPHeader), d.VLANs)
			}
			// Ethernet padding of short frames is cut off by the IP and UDP lengths.
			if 14+20+8+len(d.Payload) > len(fr.Data) || int(binary.BigEndian.Uint16(d.UDPHeader[4:])) != 8+len(d.Payload) {
				t.Errorf("frame %d: payload %d octets of a %d-octet frame", fr.Number, len(d.Payload), len(fr.Data))
			}
		}
	}
	if roce != 105 || other != 18 {
		t.Errorf("%d RoCEv2 and %d other frames, want 105 and 18", roce, other)
	}
}

// ngWriter builds pcapng files by hand, in either byte order, to test the reader on blocks and
// options that no tool at hand writes.
type ngWriter struct {
	o binary.AppendByteOrder
	b []byte
}

func (g *ngWriter) block(typ uint32, body []byte) {
	for len(body)%4 != 0 {
		body = append(body, 0)
	}
	total := uint32(12 + len(body))
	g.b = g.o.AppendUint32(g.b, typ)
	g.b = g.o.AppendUint32(g.b, total)
	g.b = append(g.b, body...)
	g.b = g.o.AppendUint32(g.b, total)
}

func (g *ngWriter) shb() {
	body := g.o.AppendUint32(nil, 0x1a2b3c4d)
	body = g.o.AppendUint16(body, 1)
	body = g.o.AppendUint16(body, 0)
	body = g.o.AppendUint64(body, ^uint64(0))
	g.block(blockSHB, body)
}

// idb describes an interface; opts are (code, value) pairs.
func (g *ngWriter) idb(link LinkType, snaplen uint32, opts ...any) {
	body := g.o.AppendUint16(nil, uint16(link))
	body = g.o.AppendUint16(body, 0)
	body = g.o.AppendUint32(body, snaplen)
	for i := 0; i < len(opts); i += 2 {
		v := opts[i+1].([]byte)
		body = g.o.AppendUint16(body, uint16(opts[i].(int)))
		body = g.o.AppendUint16(body, uint16(len(v)))
		body = append(body, v...)
		for len(body)%4 != 0 {
			body = append(body, 0)
		}
	}
	body = append(body, 0, 0, 0, 0) // opt_endofopt
	g.block(blockIDB, body)
}

func (g *ngWriter) epb(iface uint32, ts uint64, data []byte, origLen int) {
	body := g.o.AppendUint32(nil, iface)
	body = g.o.AppendUint32(body, uint32(ts>>32))
	body = g.o.AppendUint32(body, uint32(ts))
	body = g.o.AppendUint32(body, uint32(len(data)))
	body = g.o.AppendUint32(body, uint32(origLen))
	g.block(blockEPB, append(body, data...))
}

func (g *ngWriter) spb(data []byte) {
	g.block(blockSPB, append(g.o.AppendUint32(nil, uint32(len(data))), data...))
}

// Section 6 (pcap verify reads pcapng): sections of both byte orders, several interfaces with
// their own link types and timestamp resolutions (decimal and binary) and offsets, enhanced and
// simple packet blocks, a snap length that cuts a frame, and blocks the reader must skip.
func TestReadPcapNGSection6(t *testing.T) {
	eth := frame(t, FrameHeader{SrcMAC: macA, DstMAC: macB, Src: v4A, Dst: v4B}, []byte("one"))
	raw := eth[14:]
	sll2 := append(append([]byte{0x08, 0x00}, make([]byte, 18)...), raw...)
	le := &ngWriter{o: binary.LittleEndian}
	le.shb()
	le.idb(LinkEthernet, 0, 9, []byte{9})                                             // nanoseconds
	le.idb(LinkRaw, 0, 14, binary.LittleEndian.AppendUint64(nil, 10), 2, []byte("x")) // µs, +10 s, a comment
	le.epb(0, 1_500_000_000, eth, len(eth))
	le.block(5, []byte{1, 2, 3, 4}) // an interface statistics block: skipped
	le.epb(1, 2_000_001, raw, len(raw))
	le.spb(eth)
	be := &ngWriter{o: binary.BigEndian}
	be.shb()
	be.idb(LinkLinuxSLL2, 30, 9, []byte{0x80 | 10}) // 2^-10 s, snap length 30
	be.epb(0, 3*1024+512, sll2[:30], len(sll2))     // cut by the writer
	be.spb(sll2)
	frames, r := readAll(t, bytes.NewReader(append(le.b, be.b...)))
	if r.Format() != FormatPcapNG {
		t.Errorf("format %v", r.Format())
	}
	want := []struct {
		link LinkType
		time time.Time
		data []byte
		orig int
	}{
		{LinkEthernet, time.Unix(1, 500_000_000), eth, len(eth)},
		{LinkRaw, time.Unix(12, 1000), raw, len(raw)},
		{LinkEthernet, time.Time{}, eth, len(eth)},
		{LinkLinuxSLL2, time.Unix(3, 500_000_000), sll2[:30], len(sll2)},
		{LinkLinuxSLL2, time.Time{}, sll2[:30], len(sll2)},
	}
	if len(frames) != len(want) {
		t.Fatalf("%d frames, want %d", len(frames), len(want))
	}
	for i, w := range want {
		f := frames[i]
		if f.Number != i+1 || f.LinkType != w.link || !f.Time.Equal(w.time) || !bytes.Equal(f.Data, w.data) || f.OrigLen != w.orig {
			t.Errorf("frame %d: %+v, want link %d time %v %d/%d octets", i+1, f, w.link, w.time, len(w.data), w.orig)
		}
		if i < 3 { // whole frames decode whatever the link type
			d, err := DecodeUDP(f.LinkType, f.Data)
			if err != nil || string(d.Payload) != "one" || d.Dst != v4B {
				t.Errorf("frame %d: decodes to %+v, %v", i+1, d, err)
			}
		} else if !f.Truncated() {
			t.Errorf("frame %d cut by the snap length is not reported truncated", i+1)
		}
	}
}

// Section 6: the pcapng reader agrees with the pcap reader on the real capture converted by
// editcap (skipped without editcap, which comes with tshark).
func TestReadPcapNGFromEditcapSection6(t *testing.T) {
	src := realCapture(t)
	editcap, err := exec.LookPath("editcap")
	if err != nil {
		t.Skip("editcap is not installed (it comes with tshark); the pcapng conversion check is skipped")
	}
	ng := filepath.Join(t.TempDir(), "real.pcapng")
	if out, err := exec.Command(editcap, "-F", "pcapng", src, ng).CombinedOutput(); err != nil {
		t.Fatalf("editcap: %v: %s", err, out)
	}
	a, _ := os.ReadFile(src)
	b, _ := os.ReadFile(ng)
	pf, _ := readAll(t, bytes.NewReader(a))
	nf, r := readAll(t, bytes.NewReader(b))
	if r.Format() != FormatPcapNG || len(nf) != len(pf) || len(pf) != 123 {
		t.Fatalf("pcapng %v: %d frames, pcap %d", r.Format(), len(nf), len(pf))
	}
	for i := range pf {
		if nf[i].Number != pf[i].Number || !nf[i].Time.Equal(pf[i].Time) || !bytes.Equal(nf[i].Data, pf[i].Data) || nf[i].LinkType != pf[i].LinkType {
			t.Errorf("frame %d differs: pcapng %v, pcap %v", i+1, nf[i].Time, pf[i].Time)
		}
	}
}

// Section 6: files that end inside a record, are not captures, or hold impossible lengths give
// errors, never a panic or a silent short read.
func TestReadBadFilesSection6(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf)
	_ = w.WriteFrame(time.Unix(1, 0), frame(t, FrameHeader{Src: v4A, Dst: v4B}, []byte("x")))
	good := buf.Bytes()
	cases := []struct {
		name string
		b    []byte
		want error // from NewReader, or else from the first Next
	}{
		{"empty", nil, io.ErrUnexpectedEOF},
		{"not a capture", []byte("GET / HTTP/1.1\r\n\r\n....."), ErrFormat},
		{"pcap header cut", good[:10], io.ErrUnexpectedEOF},
		{"record header cut", good[:30], io.ErrUnexpectedEOF},
		{"record data cut", good[:len(good)-1], io.ErrUnexpectedEOF},
		{"huge record", func() []byte {
			b := append([]byte{}, good...)
			binary.LittleEndian.PutUint32(b[24+8:], 1<<30)
			return b
		}(), ErrFormat},
		{"pcap version 3", func() []byte {
			b := append([]byte{}, good...)
			b[4] = 3
			return b
		}(), ErrFormat},
		{"pcapng bad byte order", []byte{0x0a, 0x0d, 0x0d, 0x0a, 28, 0, 0, 0, 1, 2, 3, 4}, ErrFormat},
		{"pcapng packet before interface", func() []byte {
			g := &ngWriter{o: binary.LittleEndian}
			g.shb()
			g.epb(0, 0, []byte{1}, 1)
			return g.b
		}(), ErrFormat},
		{"pcapng trailing length differs", func() []byte {
			g := &ngWriter{o: binary.LittleEndian}
			g.shb()
			g.idb(LinkEthernet, 0)
			g.b[len(g.b)-4]++
			return g.b
		}(), ErrFormat},
	}
	for _, c := range cases {
		r, err := NewReader(bytes.NewReader(c.b))
		if err == nil {
			for err == nil {
				_, err = r.Next()
			}
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// A pcap of the other byte order with microsecond stamps reads the same frames.
func TestReadPcapByteOrdersSection6(t *testing.T) {
	data := frame(t, FrameHeader{Src: v4A, Dst: v4B}, []byte("payload"))
	for _, c := range []struct {
		o     binary.AppendByteOrder
		magic uint32
		frac  uint32
		want  time.Time
	}{
		{binary.BigEndian, 0xa1b2c3d4, 250000, time.Unix(7, 250_000_000)},
		{binary.LittleEndian, 0xa1b2c3d4, 250000, time.Unix(7, 250_000_000)},
		{binary.BigEndian, 0xa1b23c4d, 250, time.Unix(7, 250)},
	} {
		b := c.o.AppendUint32(nil, c.magic)
		b = c.o.AppendUint16(b, 2)
		b = c.o.AppendUint16(b, 4)
		b = append(b, make([]byte, 8)...)
		b = c.o.AppendUint32(b, 65535)
		b = c.o.AppendUint32(b, 1|0x10000000) // Ethernet with an FCS-length hint in the top bits
		b = c.o.AppendUint32(b, 7)
		b = c.o.AppendUint32(b, c.frac)
		b = c.o.AppendUint32(b, uint32(len(data)))
		b = c.o.AppendUint32(b, uint32(len(data)+4))
		b = append(b, data...)
		frames, r := readAll(t, bytes.NewReader(b))
		if len(frames) != 1 || r.LinkType() != LinkEthernet || !frames[0].Time.Equal(c.want) || !bytes.Equal(frames[0].Data, data) || frames[0].OrigLen != len(data)+4 {
			t.Errorf("%v %#x: %+v", c.o, c.magic, frames)
		}
	}
}
