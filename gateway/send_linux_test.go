package gateway

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// refusingWriter is a writer whose GSO sends (messages of several datagrams) fail with errno
// before reaching the kernel; the others go through.
func refusingWriter(errno unix.Errno, refused *int) *writer {
	w := newWriter()
	w.sendFn = func(fd uintptr) bool {
		if w.count[w.off] > 1 {
			*refused++
			w.n, w.errno = 0, errno
			return true
		}
		return w.sendmmsg(fd)
	}
	return w
}

func offloadSock(t *testing.T) (*sock, *net.UDPConn) {
	t.Helper()
	s, err := listen("test", netip.MustParseAddrPort("127.0.0.1:0"), kindWAN, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.conn.Close() })
	if !s.gso.Load() {
		t.Skip("the kernel refuses UDP_SEGMENT (Linux >= 4.18 needed for UDP GSO)")
	}
	rx, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rx.Close() })
	return s, rx
}

// equalPkts returns n datagrams of size octets, each filled with its index.
func equalPkts(n, size int) []*pkt {
	ps := make([]*pkt, n)
	for i := range ps {
		ps[i] = &pkt{buf: bytes.Repeat([]byte{byte(i)}, size), n: size}
	}
	return ps
}

func expectDatagrams(t *testing.T, rx *net.UDPConn, ps []*pkt) {
	t.Helper()
	buf := make([]byte, 65536)
	rx.SetReadDeadline(time.Now().Add(5 * time.Second))
	for i, p := range ps {
		n, err := rx.Read(buf)
		if err != nil {
			t.Fatalf("datagram %d of %d: %v", i, len(ps), err)
		}
		if !bytes.Equal(buf[:n], p.data()) {
			t.Fatalf("datagram %d: %d octets, want %d filled with %d", i, n, p.n, i)
		}
	}
}

// TestWriterEIODisablesGSO: a GSO send failing with EIO (a device that cannot checksum it)
// is sent again one datagram per message, every datagram arriving in order, and GSO stays
// off for the socket: the next write tries no run.
func TestWriterEIODisablesGSO(t *testing.T) {
	s, rx := offloadSock(t)
	refused := 0
	w := refusingWriter(unix.EIO, &refused)
	to := rx.LocalAddr().(*net.UDPAddr).AddrPort()
	ps := equalPkts(10, 1000)
	tos := make([]netip.AddrPort, len(ps))
	for i := range tos {
		tos[i] = to
	}
	out := w.write(s, ps, tos)
	if out.datagrams != 10 || out.octets != 10000 || out.errors != 0 {
		t.Fatalf("%+v, want 10 datagrams of 10000 octets, no error", out)
	}
	expectDatagrams(t, rx, ps)
	if refused != 1 || s.gso.Load() || s.off.gsoDisabled.Load() != 1 || s.off.gsoFallbacks.Load() != 1 {
		t.Fatalf("refused %d, gso %v, disabled %d, fallbacks %d: want one refusal, GSO off for good",
			refused, s.gso.Load(), s.off.gsoDisabled.Load(), s.off.gsoFallbacks.Load())
	}
	if !out.gsoOff {
		t.Fatal("the first write did not say GSO went off")
	}
	if out := w.write(s, ps, tos); out.datagrams != 10 || refused != 1 || s.off.gsoSends.Load() != 0 {
		t.Fatalf("second write %+v, refused %d, gso sends %d: want no run tried", out, refused, s.off.gsoSends.Load())
	}
	expectDatagrams(t, rx, ps)
}

// TestWriterEINVALLimitsGSO: a GSO run refused with EINVAL (its datagrams beyond what the
// kernel may cut here, such as the path MTU) goes again one by one; runs of that size are
// not tried again, shorter ones are.
func TestWriterEINVALLimitsGSO(t *testing.T) {
	s, rx := offloadSock(t)
	refused := 0
	w := refusingWriter(unix.EINVAL, &refused)
	to := rx.LocalAddr().(*net.UDPAddr).AddrPort()
	ps := equalPkts(6, 2000)
	tos := []netip.AddrPort{to, to, to, to, to, to}
	if out := w.write(s, ps, tos); out.datagrams != 6 || out.errors != 0 || refused != 1 {
		t.Fatalf("%+v, refused %d: want 6 datagrams after one refusal", out, refused)
	}
	expectDatagrams(t, rx, ps)
	if !s.gso.Load() || s.gsoBelow.Load() != 2000 {
		t.Fatalf("gso %v, below %d: want GSO on below 2000 octets", s.gso.Load(), s.gsoBelow.Load())
	}
	w.write(s, ps, tos)
	expectDatagrams(t, rx, ps)
	if refused != 1 {
		t.Fatalf("a run of 2000-octet datagrams tried again (%d refusals)", refused)
	}
	w = newWriter() // the real kernel: shorter runs still go in one message
	small := equalPkts(6, 500)
	if out := w.write(s, small, tos); out.datagrams != 6 || s.off.gsoSends.Load() != 1 {
		t.Fatalf("%+v, gso sends %d: want the 500-octet run in one send", out, s.off.gsoSends.Load())
	}
	expectDatagrams(t, rx, small)
}

// TestWriterRuns: runs break at a change of destination or a longer datagram, end after a
// shorter one, and hold at most 64 datagrams; every datagram arrives, in order.
func TestWriterRuns(t *testing.T) {
	s, rx := offloadSock(t)
	rx2, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rx2.Close()
	a, b := rx.LocalAddr().(*net.UDPAddr).AddrPort(), rx2.LocalAddr().(*net.UDPAddr).AddrPort()
	var ps []*pkt
	var tos []netip.AddrPort
	add := func(n, size int, to netip.AddrPort) {
		for range n {
			ps = append(ps, &pkt{buf: bytes.Repeat([]byte{byte(len(ps))}, size), n: size})
			tos = append(tos, to)
		}
	}
	add(70, 100, a) // a run of 64, then 6
	add(3, 100, b)  // another destination
	add(2, 300, b)  // longer: a new run
	add(1, 50, b)   // shorter: ends it
	add(2, 300, b)  // a new run
	w := newWriter()
	m := w.build(s, ps, tos, 0, true, 1<<30)
	wantCounts := []int{64, 6, 3, 3, 2}
	if m != len(wantCounts) {
		t.Fatalf("%d messages %v, want %v", m, w.count[:m], wantCounts)
	}
	for i, c := range wantCounts {
		if w.count[i] != c {
			t.Fatalf("messages %v, want %v", w.count[:m], wantCounts)
		}
	}
	out := w.write(s, ps, tos)
	if out.datagrams != len(ps) || out.errors != 0 {
		t.Fatalf("%+v, want %d datagrams", out, len(ps))
	}
	var toA, toB []*pkt
	for i, p := range ps {
		if tos[i] == a {
			toA = append(toA, p)
		} else {
			toB = append(toB, p)
		}
	}
	expectDatagrams(t, rx, toA)
	expectDatagrams(t, rx2, toB)
}
