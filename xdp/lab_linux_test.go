//go:build linux

package xdp

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/crem-project/crem/internal/harness/kdroplab"
	"github.com/crem-project/crem/internal/harness/netnslock"
)

// vethLab is two network namespaces joined by a veth pair: A's end (xa) carries the program
// and an AF_XDP socket on queue 0, B's end (xb) the traffic's other side.
//
//	B xb 10.73.0.2 fd73::2 -- xa 10.73.0.1 fd73::1 A [XDP, AF_XDP queue 0]
type vethLab struct {
	A, B       string // namespace names under /run/netns
	MACA, MACB [6]byte
	Prog       *Program
	Sock       *Socket
	// CsumOff reports whether B's device fills in its own checksums (transmit checksum
	// offload turned off), so that frames reach the socket with their UDP checksums whole.
	CsumOff bool
}

var (
	addrA  = netip.MustParseAddr("10.73.0.1")
	addrB  = netip.MustParseAddr("10.73.0.2")
	addrA6 = netip.MustParseAddr("fd73::1")
	addrB6 = netip.MustParseAddr("fd73::2")
)

// needLab skips unless the test can build network namespaces and load the program.
func needLab(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, XDP, AF_XDP)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2)")
	}
}

// newVethLab builds the lab with the program attached in mode and a socket of frames
// frames registered for queue 0; the test's cleanup takes it down.
func newVethLab(t testing.TB, frames int, mode AttachMode) *vethLab {
	t.Helper()
	return newVethLabMTU(t, frames, mode, 0)
}

// newVethLabMTU is newVethLab with both ends' MTU set to mtu (0: the default 1500) and, for an
// mtu above 1500, a multi-buffer socket; it skips where the kernel has no multi-buffer AF_XDP.
func newVethLabMTU(t testing.TB, frames int, mode AttachMode, mtu int) *vethLab {
	t.Helper()
	needLab(t)
	netnslock.Take(t)
	_ = rlimit.RemoveMemlock()
	id := strconv.Itoa(os.Getpid() % 100000)
	l := &vethLab{A: "xda" + id, B: "xdb" + id}
	for _, ns := range []string{l.A, l.B} {
		exec.Command("ip", "netns", "del", ns).Run()
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Skipf("network namespaces not allowed here: %v %s", err, out)
		}
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	kdroplab.Sh(t, "ip", "link", "add", "xa", "netns", l.A, "type", "veth", "peer", "xb", "netns", l.B)
	for _, a := range [][]string{{l.A, "xa", "10.73.0.1/24", "fd73::1/64"}, {l.B, "xb", "10.73.0.2/24", "fd73::2/64"}} {
		kdroplab.Sh(t, "ip", "-n", a[0], "addr", "add", a[2], "dev", a[1])
		kdroplab.Sh(t, "ip", "-n", a[0], "addr", "add", a[3], "dev", a[1], "nodad")
		if mtu > 0 {
			kdroplab.Sh(t, "ip", "-n", a[0], "link", "set", a[1], "mtu", strconv.Itoa(mtu))
		}
		kdroplab.Sh(t, "ip", "-n", a[0], "link", "set", a[1], "up")
		kdroplab.Sh(t, "ip", "-n", a[0], "link", "set", "lo", "up")
	}
	mac := func(ns, dev string) [6]byte {
		out := kdroplab.Sh(t, "ip", "-n", ns, "-o", "link", "show", "dev", dev)
		m := regexp.MustCompile(`link/ether ([0-9a-f:]+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no address in %q", out)
		}
		hw, err := net.ParseMAC(m[1])
		if err != nil {
			t.Fatal(err)
		}
		return [6]byte(hw)
	}
	l.MACA, l.MACB = mac(l.A, "xa"), mac(l.B, "xb")
	// Neighbours are fixed: a resolution under way would hold the first datagrams back.
	for _, n := range []struct {
		ns, dev string
		hw      [6]byte
		addrs   []netip.Addr
	}{{l.A, "xa", l.MACB, []netip.Addr{addrB, addrB6}}, {l.B, "xb", l.MACA, []netip.Addr{addrA, addrA6}}} {
		for _, a := range n.addrs {
			kdroplab.Sh(t, "ip", "-n", n.ns, "neigh", "replace", a.String(), "lladdr", net.HardwareAddr(n.hw[:]).String(), "dev", n.dev, "nud", "permanent")
		}
	}
	kdroplab.InNetns(t, l.B, func() { l.CsumOff = setTxChecksum("xb", false) == nil })
	var multiBufferMissing error
	kdroplab.InNetns(t, l.A, func() {
		ifi, err := net.InterfaceByName("xa")
		if err != nil {
			t.Errorf("xa: %v", err)
			return
		}
		p, err := LoadProgram(4791, cremPort)
		if err != nil {
			t.Errorf("loading: %v", err)
			return
		}
		t.Cleanup(func() { p.Close() })
		if err := p.Attach(ifi.Index, mode); err != nil {
			t.Errorf("attaching: %v", err)
			return
		}
		s, err := NewSocket(SocketConfig{Ifindex: ifi.Index, Queue: 0, Frames: frames, MultiBuffer: mtu > 1500})
		if err != nil && mtu > 1500 && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP)) {
			multiBufferMissing = err
			return
		}
		if err != nil {
			t.Errorf("socket: %v", err)
			return
		}
		t.Cleanup(func() { s.Close() })
		if err := p.Register(0, s); err != nil {
			t.Errorf("registering: %v", err)
			return
		}
		l.Prog, l.Sock = p, s
	})
	if t.Failed() {
		t.FailNow()
	}
	if multiBufferMissing != nil {
		t.Skipf("this kernel binds no multi-buffer AF_XDP socket (XDP_USE_SG, Linux 6.6): %v", multiBufferMissing)
	}
	return l
}

// setTxChecksum turns a device's transmit checksum offload on or off (ETHTOOL_STXCSUM), in
// the calling thread's namespace: with it off, the stack writes whole UDP checksums itself.
func setTxChecksum(dev string, on bool) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	val := struct{ cmd, data uint32 }{unix.ETHTOOL_STXCSUM, 0}
	if on {
		val.data = 1
	}
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data uintptr
		_    [16]byte
	}
	copy(ifr.name[:], dev)
	ifr.data = uintptr(unsafe.Pointer(&val))
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(&val)
	if e != 0 {
		return e
	}
	return nil
}

// listenUDP opens a UDP socket bound to ap in namespace ns.
func (l *vethLab) listenUDP(t testing.TB, ns string, ap netip.AddrPort) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	kdroplab.InNetns(t, ns, func() {
		var err error
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
		if err != nil {
			t.Errorf("listening on %v in %s: %v", ap, ns, err)
		}
	})
	if c == nil {
		t.FailNow()
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// receive takes n frames off the socket (releasing each after check), or fails after timeout.
func (l *vethLab) receive(t testing.TB, n int, timeout time.Duration, check func(i int, frame []byte)) {
	t.Helper()
	frames := make([]Frame, 64)
	deadline := time.Now().Add(timeout)
	got := 0
	for got < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d frames arrived on the AF_XDP socket in %v", got, n, timeout)
		}
		if _, err := l.Sock.Wait(50 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		k := l.Sock.Receive(frames)
		for i := 0; i < k; i++ {
			check(got, frames[i].Data)
			got++
		}
		l.Sock.Release(frames[:k])
	}
}
