package mmsg

import (
	"bytes"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// gsoPayloads are the datagrams of one GSO send: n of size octets, the last one short octets
// (0: as long as the others), each filled with its own index.
func gsoPayloads(n, size, short int) [][]byte {
	ps := make([][]byte, n)
	for i := range ps {
		l := size
		if i == n-1 && short > 0 {
			l = short
		}
		ps[i] = bytes.Repeat([]byte{byte(i + 1)}, l)
	}
	return ps
}

// gsoSend sends ps as one message gathered from their buffers and cut into datagrams of
// len(ps[0]) octets (UDP_SEGMENT), with TOS tos.
func gsoSend(t *testing.T, p *pair, ps [][]byte, tos uint8) {
	t.Helper()
	var ok bool
	p.txrc.Control(func(fd uintptr) { ok = GSOSupported(fd) })
	if !ok {
		t.Skip("the kernel refuses UDP_SEGMENT (Linux >= 4.18 needed)")
	}
	tx := NewGatherBatch(1, MaxSegments, SegmentSpace+TOSSpace)
	tx.SetSend(0, ps[0], p.rxAddr(), p.sock6)
	for _, b := range ps[1:] {
		if !tx.AddBuf(0, b) {
			t.Fatal("AddBuf refused a buffer below the batch's bound")
		}
	}
	tx.SetSegment(0, uint16(len(ps[0])))
	tx.SetTOS(0, tos, !p.sock6)
	p.send(t, tx, 1)
}

func enableGRO(t *testing.T, p *pair) {
	t.Helper()
	var err error
	p.rxrc.Control(func(fd uintptr) { err = EnableGRO(fd) })
	if err != nil {
		t.Skipf("the kernel refuses UDP_GRO (Linux >= 5.0 needed): %v", err)
	}
}

// TestGSOToGRO: one GSO send of equal datagrams (the last shorter) arrives at a socket with
// UDP_GRO as one coalesced receive whose control message gives the segment size, the octets
// in order, the TOS of the send.
func TestGSOToGRO(t *testing.T) {
	for _, c := range []struct{ network, addr string }{{"udp4", "127.0.0.1"}, {"udp6", "::1"}} {
		t.Run(c.network, func(t *testing.T) {
			p := newPair(t, c.network, c.addr)
			enableGRO(t, p)
			ps := gsoPayloads(15, 4128, 1000)
			gsoSend(t, p, ps, 0x03)
			rx := NewBatch(1, 2*unix.CmsgSpace(4)+GROSpace)
			buf := make([]byte, GROBufSize)
			rx.SetRecv(0, buf)
			p.recv(t, rx, 1)
			r := rx.Received(0)
			want := bytes.Join(ps, nil)
			if r.Trunc || !bytes.Equal(buf[:r.N], want) {
				t.Fatalf("received %d octets (trunc %v), want the %d sent in order", r.N, r.Trunc, len(want))
			}
			if !r.HasSegment || r.Segment != 4128 {
				t.Errorf("segment %d (found %v), want 4128", r.Segment, r.HasSegment)
			}
			if !r.HasTOS || r.TOS != 0x03 {
				t.Errorf("TOS %#x (found %v), want 0x03", r.TOS, r.HasTOS)
			}
		})
	}
}

// TestGSOWithoutGRO: without UDP_GRO the receiver gets the GSO send's datagrams one by one,
// each of its size, none with a segment size.
func TestGSOWithoutGRO(t *testing.T) {
	p := newPair(t, "udp4", "127.0.0.1")
	ps := gsoPayloads(10, 1400, 0)
	gsoSend(t, p, ps, 0)
	rx := NewBatch(len(ps), 2*unix.CmsgSpace(4)+GROSpace)
	bufs := make([][]byte, len(ps))
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
		rx.SetRecv(i, bufs[i])
	}
	p.recv(t, rx, len(ps))
	for i := range ps {
		r := rx.Received(i)
		if !bytes.Equal(bufs[i][:r.N], ps[i]) || r.HasSegment {
			t.Errorf("datagram %d: %d octets, segment %v, want %d octets alone", i, r.N, r.HasSegment, len(ps[i]))
		}
	}
}

// TestGROAlone: with UDP_GRO on, datagrams sent one by one arrive one by one, without a
// segment size (loopback coalesces only what was sent with GSO).
func TestGROAlone(t *testing.T) {
	p := newPair(t, "udp4", "127.0.0.1")
	enableGRO(t, p)
	const n = 4
	tx := NewBatch(n, 0)
	ps := gsoPayloads(n, 700, 0)
	for i := range ps {
		tx.SetSend(i, ps[i], p.rxAddr(), false)
	}
	p.send(t, tx, n)
	rx := NewBatch(n, GROSpace+2*unix.CmsgSpace(4))
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, GROBufSize)
		rx.SetRecv(i, bufs[i])
	}
	p.recv(t, rx, n)
	for i := range ps {
		r := rx.Received(i)
		if !bytes.Equal(bufs[i][:r.N], ps[i]) || (r.HasSegment && r.Segment < r.N) {
			t.Errorf("datagram %d: %d octets, segment %d, want %d octets alone", i, r.N, r.Segment, len(ps[i]))
		}
	}
}

// TestAddBufBound: a message takes at most the batch's buffers; the extra one is refused.
func TestAddBufBound(t *testing.T) {
	b := NewGatherBatch(2, 3, SegmentSpace)
	x := make([]byte, 10)
	b.SetSend(1, x, netip.MustParseAddrPort("127.0.0.1:9"), false)
	if !b.AddBuf(1, x) || !b.AddBuf(1, x) || b.AddBuf(1, x) {
		t.Fatal("AddBuf: want two more buffers taken, the fourth refused")
	}
	if got := b.hs[1].Hdr.Iovlen; got != 3 {
		t.Fatalf("iovlen %d, want 3", got)
	}
	b.SetSegment(1, 10)
	c := ParseControl(b.oob[b.space : b.space+int(b.hs[1].Hdr.Controllen)])
	if c.HasTOS || c.HasSegment { // UDP_SEGMENT is a send option: ParseControl reads UDP_GRO
		t.Fatalf("%+v: a UDP_SEGMENT message read as a received control", c)
	}
	if int(b.hs[1].Hdr.Controllen) != SegmentSpace {
		t.Fatalf("controllen %d, want %d", b.hs[1].Hdr.Controllen, SegmentSpace)
	}
}
