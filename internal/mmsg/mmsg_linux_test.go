package mmsg

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"github.com/crem-project/crem/internal/testenv"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestHdrLayout: the hand-declared struct mmsghdr has the kernel's size.
func TestHdrLayout(t *testing.T) {
	want := uintptr(64)
	if unsafe.Sizeof(uintptr(0)) == 4 {
		want = 32
	}
	if got := unsafe.Sizeof(Hdr{}); got != want {
		t.Errorf("sizeof(mmsghdr) = %d, want %d", got, want)
	}
}

// pair is a sending and a receiving UDP socket on one loopback address.
type pair struct {
	tx, rx     *net.UDPConn
	txrc, rxrc syscall.RawConn
	sock6      bool
}

func newPair(t *testing.T, network, addr string) *pair {
	t.Helper()
	la := net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(addr), 0))
	rx, err := net.ListenUDP(network, la)
	if err != nil {
		t.Skipf("no %s loopback: %v", network, err)
	}
	t.Cleanup(func() { rx.Close() })
	tx, err := net.ListenUDP(network, la)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Close() })
	p := &pair{tx: tx, rx: rx, sock6: network == "udp6"}
	if p.txrc, err = tx.SyscallConn(); err != nil {
		t.Fatal(err)
	}
	if p.rxrc, err = rx.SyscallConn(); err != nil {
		t.Fatal(err)
	}
	rx.SetReadDeadline(time.Now().Add(5 * time.Second))
	var serr error
	p.rxrc.Control(func(fd uintptr) {
		if p.sock6 {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		}
		if serr == nil {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1)
		}
	})
	if serr != nil {
		t.Fatal(serr)
	}
	return p
}

func (p *pair) rxAddr() netip.AddrPort { return p.rx.LocalAddr().(*net.UDPAddr).AddrPort() }
func (p *pair) txAddr() netip.AddrPort { return p.tx.LocalAddr().(*net.UDPAddr).AddrPort() }

// send sends datagrams [0, n) of b, retrying after partial sends, and fails the test on error.
func (p *pair) send(t *testing.T, b *Batch, n int) {
	t.Helper()
	off := 0
	var errno syscall.Errno
	err := p.txrc.Write(func(fd uintptr) bool {
		for off < n {
			k, e := b.Send(fd, off, n, 0)
			if e == unix.EAGAIN {
				return false
			}
			if e != 0 {
				errno = e
				return true
			}
			off += k
		}
		return true
	})
	if err != nil || errno != 0 {
		t.Fatalf("sendmmsg: %v %v (sent %d of %d)", err, errno, off, n)
	}
}

// recv receives until want datagrams have arrived in b (each prepared with SetRecv).
func (p *pair) recv(t *testing.T, b *Batch, want int) {
	t.Helper()
	got := 0
	var errno syscall.Errno
	err := p.rxrc.Read(func(fd uintptr) bool {
		for got < want {
			k, e := Recvmmsg(fd, b.hs[got:want], 0)
			if e == unix.EAGAIN {
				return false
			}
			if e != 0 {
				errno = e
				return true
			}
			got += k
		}
		return true
	})
	if err != nil || errno != 0 {
		t.Fatalf("recvmmsg: %v %v (received %d of %d)", err, errno, got, want)
	}
}

func testRoundTrip(t *testing.T, network, addr string) {
	p := newPair(t, network, addr)
	const n = 8
	tx := NewBatch(n, TOSSpace)
	rx := NewBatch(n, 2*unix.CmsgSpace(4))
	tos := []uint8{0, 1, 2, 3, 0xb8, 0xbb, 0x22, 0xff} // Not-ECT, ECT(1), ECT(0), CE, with DSCPs
	payloads := make([][]byte, n)
	for i := range n {
		payloads[i] = bytes.Repeat([]byte{byte(i + 1)}, 100+i)
		if i == n-1 {
			payloads[i] = make([]byte, 0, 1) // an empty datagram
		}
		tx.SetSend(i, payloads[i], p.rxAddr(), p.sock6)
		tx.SetTOS(i, tos[i], !p.sock6)
	}
	p.send(t, tx, n)
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
		rx.SetRecv(i, bufs[i])
	}
	p.recv(t, rx, n)
	for i := range n {
		r := rx.Received(i)
		if r.Trunc || !bytes.Equal(bufs[i][:r.N], payloads[i]) {
			t.Errorf("datagram %d: %d octets %x (trunc %v), want %x", i, r.N, bufs[i][:r.N], r.Trunc, payloads[i])
		}
		if r.From != p.txAddr() {
			t.Errorf("datagram %d from %v, want %v", i, r.From, p.txAddr())
		}
		if !r.HasTOS || r.TOS != tos[i] {
			t.Errorf("datagram %d: TOS %#x (found %v), want %#x", i, r.TOS, r.HasTOS, tos[i])
		}
		if r.HasDrops {
			t.Errorf("datagram %d: drop count %d reported with no drops", i, r.Drops)
		}
	}
}

// TestRoundTrip: a batch sent with sendmmsg arrives through recvmmsg with its payloads, source
// address and TOS or traffic class (ECN bits included).
func TestRoundTrip(t *testing.T) {
	t.Run("ipv4", func(t *testing.T) { testRoundTrip(t, "udp4", "127.0.0.1") })
	t.Run("ipv6", func(t *testing.T) { testRoundTrip(t, "udp6", "::1") })
}

// TestConnectedAndTruncated: a datagram with no address goes to the connected peer, and one
// larger than its buffer is reported truncated.
func TestConnectedAndTruncated(t *testing.T) {
	p := newPair(t, "udp4", "127.0.0.1")
	conn, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(p.rxAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	p.tx = conn
	if p.txrc, err = conn.SyscallConn(); err != nil {
		t.Fatal(err)
	}
	tx := NewBatch(2, TOSSpace)
	tx.SetSend(0, []byte("0123456789"), netip.AddrPort{}, false)
	tx.SetSend(1, []byte("ab"), netip.AddrPort{}, false)
	p.send(t, tx, 2)
	rx := NewBatch(2, TOSSpace)
	small, big := make([]byte, 4), make([]byte, 64)
	rx.SetRecv(0, small)
	rx.SetRecv(1, big)
	p.recv(t, rx, 2)
	r0, r1 := rx.Received(0), rx.Received(1)
	if !r0.Trunc || r0.N != 4 || string(small) != "0123" {
		t.Errorf("truncated datagram: n %d trunc %v %q", r0.N, r0.Trunc, small)
	}
	if r1.Trunc || string(big[:r1.N]) != "ab" {
		t.Errorf("second datagram: n %d trunc %v %q", r1.N, r1.Trunc, big[:r1.N])
	}
	from := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	if r0.From != from || r1.From != from {
		t.Errorf("sources %v %v, want %v", r0.From, r1.From, from)
	}
	if !r0.HasTOS || r0.TOS != 0 {
		t.Errorf("no TOS set: got %#x (found %v), want 0", r0.TOS, r0.HasTOS)
	}
}

// TestDropCount: once the receive buffer has overflowed, the next datagram carries the socket's
// drop count (SO_RXQ_OVFL).
func TestDropCount(t *testing.T) {
	p := newPair(t, "udp4", "127.0.0.1")
	p.rx.SetReadBuffer(1) // the kernel's minimum: a few datagrams
	const n = 64
	tx := NewBatch(n, TOSSpace)
	payload := make([]byte, 1000)
	for i := range n {
		tx.SetSend(i, payload, p.rxAddr(), false)
	}
	p.send(t, tx, n)
	rx := NewBatch(n, 2*unix.CmsgSpace(4))
	buf := make([]byte, 2048)
	// Drain what the buffer held; those were queued before the first drop.
	for {
		for i := range n {
			rx.SetRecv(i, buf)
		}
		var k int
		var e syscall.Errno
		p.rxrc.Control(func(fd uintptr) { k, e = rx.Recv(fd, n, unix.MSG_DONTWAIT) })
		if e == unix.EAGAIN {
			break
		}
		if e != 0 {
			t.Fatal(e)
		}
		if k == n {
			t.Fatal("the receive buffer held every datagram: nothing was dropped")
		}
	}
	p.send(t, tx, 1)
	rx.SetRecv(0, buf)
	p.recv(t, rx, 1)
	r := rx.Received(0)
	if !r.HasDrops || r.Drops == 0 || r.Drops >= n {
		t.Errorf("drop count %d (found %v), want between 1 and %d", r.Drops, r.HasDrops, n-1)
	}
}

// TestBatchNoAllocs: preparing, sending, receiving and reading a batch allocates nothing.
func TestBatchNoAllocs(t *testing.T) {
	if testenv.Race {
		t.Skip("the race detector allocates")
	}
	p := newPair(t, "udp4", "127.0.0.1")
	const n = 16
	tx, rx := NewBatch(n, TOSSpace), NewBatch(n, 2*unix.CmsgSpace(4))
	payload, buf := make([]byte, 200), make([]byte, 2048)
	to := p.rxAddr()
	var sent, got int
	var errno syscall.Errno
	sendFn := func(fd uintptr) bool { sent, errno = tx.Send(fd, 0, n, 0); return errno != unix.EAGAIN }
	recvFn := func(fd uintptr) bool {
		k, e := Recvmmsg(fd, rx.hs[got:n], 0)
		if e == unix.EAGAIN {
			return false
		}
		errno, got = e, got+k
		return e != 0 || got == n
	}
	var sum int
	allocs := testing.AllocsPerRun(50, func() {
		for i := range n {
			tx.SetSend(i, payload, to, false)
			tx.SetTOS(i, 2, true)
			rx.SetRecv(i, buf)
		}
		got = 0
		if err := p.txrc.Write(sendFn); err != nil || errno != 0 || sent != n {
			panic(fmt.Sprint("send: ", err, errno, sent))
		}
		if err := p.rxrc.Read(recvFn); err != nil || errno != 0 {
			panic(fmt.Sprint("recv: ", err, errno))
		}
		for i := range n {
			r := rx.Received(i)
			sum += r.N + int(r.TOS)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per batch, want 0", allocs)
	}
	if sum != 51*n*(200+2) {
		t.Errorf("received %d octets and TOS in all, want %d", sum, 51*n*(200+2))
	}
}

// TestSockaddr: addresses survive PutSockaddr and AddrPort in both families, with the port in
// network order and IPv4 reaching an IPv6 socket as a mapped address.
func TestSockaddr(t *testing.T) {
	for _, c := range []struct {
		ap     string
		sock6  bool
		family uint16
		length uint32
	}{
		{"192.0.2.7:4791", false, unix.AF_INET, unix.SizeofSockaddrInet4},
		{"[::ffff:192.0.2.7]:4791", false, unix.AF_INET, unix.SizeofSockaddrInet4},
		{"192.0.2.7:1", true, unix.AF_INET6, unix.SizeofSockaddrInet6},
		{"[2001:db8::1]:65535", true, unix.AF_INET6, unix.SizeofSockaddrInet6},
		{"[fe80::1]:258", true, unix.AF_INET6, unix.SizeofSockaddrInet6},
	} {
		ap := netip.MustParseAddrPort(c.ap)
		var sa unix.RawSockaddrInet6
		for i := range sa.Addr {
			sa.Addr[i] = 0xee // PutSockaddr must overwrite what was there
		}
		if l := PutSockaddr(&sa, ap, c.sock6); l != c.length || sa.Family != c.family {
			t.Errorf("%v sock6 %v: length %d family %d, want %d %d", ap, c.sock6, l, sa.Family, c.length, c.family)
		}
		raw := (*[unix.SizeofSockaddrInet6]byte)(unsafe.Pointer(&sa))
		if port := binary.BigEndian.Uint16(raw[2:4]); port != ap.Port() {
			t.Errorf("%v: port in the sockaddr %d", ap, port)
		}
		want := netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		if got := AddrPort(&sa); got != want {
			t.Errorf("%v sock6 %v: read back %v, want %v", ap, c.sock6, got, want)
		}
	}
	sa := unix.RawSockaddrInet6{Family: unix.AF_UNIX}
	if got := AddrPort(&sa); got.IsValid() {
		t.Errorf("AF_UNIX read as %v", got)
	}
}

// cmsg builds one control message with its padding.
func cmsg(level, typ int32, data []byte) []byte {
	b := make([]byte, unix.CmsgSpace(len(data)))
	var h unix.Cmsghdr
	h.Level, h.Type = level, typ
	h.SetLen(unix.CmsgLen(len(data)))
	copy(b, (*[unix.SizeofCmsghdr]byte)(unsafe.Pointer(&h))[:])
	copy(b[unix.CmsgLen(0):], data)
	return b
}

func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

// TestParseControl: the TOS, traffic class and drop count are found among other messages;
// truncated, garbage and misaligned input never panics and finds only complete messages.
func TestParseControl(t *testing.T) {
	tos4 := make([]byte, TOSSpace)
	PutTOS(tos4, 0xb9, true)
	tclass := make([]byte, TOSSpace)
	PutTOS(tclass, 0x03, false)
	drops := cmsg(unix.SOL_SOCKET, unix.SO_RXQ_OVFL, u32(77))
	other := cmsg(unix.IPPROTO_IP, unix.IP_TTL, u32(64))
	recvTOS := cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{0xb9}) // as the kernel passes it: one octet
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, c := range []struct {
		name string
		oob  []byte
		want Control
	}{
		{"empty", nil, Control{}},
		{"tos", tos4, Control{TOS: 0xb9, HasTOS: true}},
		{"tclass", tclass, Control{TOS: 3, HasTOS: true}},
		{"tos+drops", join(tos4, drops), Control{TOS: 0xb9, HasTOS: true, Drops: 77, HasDrops: true}},
		{"other+drops+tclass", join(other, drops, tclass), Control{TOS: 3, HasTOS: true, Drops: 77, HasDrops: true}},
		{"short tos", cmsg(unix.IPPROTO_IP, unix.IP_TOS, nil), Control{}},
		{"short tclass", cmsg(unix.IPPROTO_IPV6, unix.IPV6_TCLASS, []byte{3, 0}), Control{}},
		{"tos then cut", join(tos4, drops[:unix.SizeofCmsghdr+2]), Control{TOS: 0xb9, HasTOS: true}},
		{"tos then garbage", join(tos4, bytes.Repeat([]byte{0xff}, 40)), Control{TOS: 0xb9, HasTOS: true}},
		{"zero length", make([]byte, 64), Control{}},
		{"received tos", recvTOS, Control{TOS: 0xb9, HasTOS: true}},
		{"unpadded last", join(drops, recvTOS[:unix.CmsgLen(1)]), Control{TOS: 0xb9, HasTOS: true, Drops: 77, HasDrops: true}},
		{"gro+tos", join(cmsg(unix.IPPROTO_UDP, unix.UDP_GRO, u32(4128)), recvTOS), Control{TOS: 0xb9, HasTOS: true, Segment: 4128, HasSegment: true}},
		{"gro zero", cmsg(unix.IPPROTO_UDP, unix.UDP_GRO, u32(0)), Control{}},
		{"gro short", cmsg(unix.IPPROTO_UDP, unix.UDP_GRO, []byte{1, 2}), Control{}},
	} {
		if got := ParseControl(c.oob); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
		// Misaligned by one octet: the same answer.
		shifted := append([]byte{0}, c.oob...)[1:]
		if got := ParseControl(shifted); got != c.want {
			t.Errorf("%s misaligned: %+v, want %+v", c.name, got, c.want)
		}
	}
	// Every cut of a complete sequence finds exactly the messages it holds whole.
	full := join(recvTOS, drops)
	for n := range len(full) {
		got := ParseControl(full[:n])
		wantTOS := n >= unix.CmsgLen(1)
		wantDrops := n >= len(recvTOS)+unix.CmsgLen(4)
		if got.HasTOS != wantTOS || got.HasDrops != wantDrops {
			t.Errorf("cut at %d: %+v, want TOS %v drops %v", n, got, wantTOS, wantDrops)
		}
	}
}

// parseReference walks control messages octet by octet, as the kernel lays them out, to check
// ParseControl against.
func parseReference(oob []byte) (c Control) {
	lenSize := unix.SizeofCmsghdr - 8 // Len is as wide as a pointer
	align := lenSize
	for off := 0; len(oob)-off >= unix.SizeofCmsghdr; {
		m := oob[off:]
		var l uint64
		if lenSize == 8 {
			l = binary.NativeEndian.Uint64(m)
		} else {
			l = uint64(binary.NativeEndian.Uint32(m))
		}
		if l < uint64(unix.SizeofCmsghdr) || l > uint64(len(m)) {
			return c
		}
		level := int32(binary.NativeEndian.Uint32(m[lenSize:]))
		typ := int32(binary.NativeEndian.Uint32(m[lenSize+4:]))
		data := m[unix.SizeofCmsghdr:l]
		switch {
		case level == unix.IPPROTO_IP && typ == unix.IP_TOS && len(data) >= 1:
			c.TOS, c.HasTOS = data[0], true
		case level == unix.IPPROTO_IPV6 && typ == unix.IPV6_TCLASS && len(data) >= 4:
			c.TOS, c.HasTOS = data[0], true // little-endian: the low octet is first
			if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
				c.TOS = data[3]
			}
		case level == unix.SOL_SOCKET && typ == unix.SO_RXQ_OVFL && len(data) >= 4:
			c.Drops, c.HasDrops = binary.NativeEndian.Uint32(data), true
		case level == unix.IPPROTO_UDP && typ == unix.UDP_GRO && len(data) >= 4:
			if seg := int32(binary.NativeEndian.Uint32(data)); seg > 0 {
				c.Segment, c.HasSegment = int(seg), true
			}
		}
		next := (int(l) + align - 1) &^ (align - 1)
		if next > len(m) {
			return c
		}
		off += next
	}
	return c
}

// FuzzParseControl: ParseControl never panics, agrees with the octet-by-octet reference, and
// does not depend on alignment.
func FuzzParseControl(f *testing.F) {
	tos4 := make([]byte, TOSSpace)
	PutTOS(tos4, 0x02, true)
	tclass := make([]byte, TOSSpace)
	PutTOS(tclass, 0x03, false)
	f.Add([]byte{})
	f.Add(tos4)
	f.Add(append(append([]byte{}, tclass...), cmsg(unix.SOL_SOCKET, unix.SO_RXQ_OVFL, u32(5))...))
	f.Add(append(cmsg(unix.IPPROTO_IP, unix.IP_TTL, u32(64)), cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{1})[:unix.CmsgLen(1)]...))
	f.Add(bytes.Repeat([]byte{0xff}, 40))
	f.Add(append(cmsg(unix.IPPROTO_UDP, unix.UDP_GRO, u32(4128)), tos4...))
	f.Fuzz(func(t *testing.T, oob []byte) {
		got := ParseControl(oob)
		if want := parseReference(oob); got != want {
			t.Fatalf("ParseControl(%x) = %+v, reference %+v", oob, got, want)
		}
		shifted := append([]byte{0}, oob...)[1:]
		if again := ParseControl(shifted); again != got {
			t.Fatalf("misaligned %x: %+v, aligned %+v", oob, again, got)
		}
	})
}
