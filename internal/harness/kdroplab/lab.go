//go:build linux

// Package kdroplab builds, for tests, a sender, a router and a receiver, each a network
// namespace joined by veth pairs, with a tc bottleneck on the router's device toward the
// receiver: the smallest path on which a kernel queue drops RoCEv2 datagrams.
//
//	sender s0 10.71.1.1 fd71:1::1 -- r0 [router] r1 (tc) -- v0 10.71.2.1 fd71:2::1 receiver
package kdroplab

import (
	"encoding/binary"
	"github.com/crem-project/crem/internal/harness/netnslock"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/reporter/kdrop"
)

// Need skips unless the test can build network namespaces and load the program.
func Need(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, eBPF)")
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		t.Skip("needs the kernel's BTF (/sys/kernel/btf/vmlinux)")
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (iproute2)", tool)
		}
	}
}

// Sh runs a command; a failure fails the test.
func Sh(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return string(out)
}

// InNetns runs fn on a thread in the network namespace ns; sockets it opens stay there.
func InNetns(t testing.TB, ns string, fn func()) {
	t.Helper()
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		f, err := os.Open("/run/netns/" + ns)
		if err == nil {
			err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
			f.Close()
		}
		if err == nil {
			fn()
		}
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatalf("entering %s: %v", ns, err)
	}
}

// Lab is sender -- router -- receiver, each a network namespace, with a tbf bottleneck on the
// router's device toward the receiver.
type Lab struct {
	// Sender, Router and Receiver are the namespaces' names (under /run/netns).
	Sender, Router, Receiver string
	// Dev is the router's device toward the receiver (r1), as the kernel program names it.
	Dev kdrop.Device
}

// New builds the lab with the queue discipline qdisc (as tc takes it, such as
// "tbf rate 200mbit burst 16kb limit 24kb") on r1; the test's cleanup takes it down.
func New(t testing.TB, qdisc string) *Lab {
	t.Helper()
	netnslock.Take(t) // a bottleneck must see its excess: no other lab beside it
	id := strconv.Itoa(os.Getpid() % 100000)
	l := &Lab{Sender: "kds" + id, Router: "kdr" + id, Receiver: "kdv" + id}
	for _, ns := range []string{l.Sender, l.Router, l.Receiver} {
		exec.Command("ip", "netns", "del", ns).Run()
		Sh(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	Sh(t, "ip", "link", "add", "s0", "netns", l.Sender, "type", "veth", "peer", "r0", "netns", l.Router)
	Sh(t, "ip", "link", "add", "r1", "netns", l.Router, "type", "veth", "peer", "v0", "netns", l.Receiver)
	for _, a := range [][]string{{l.Sender, "s0", "10.71.1.1/24", "fd71:1::1/64"}, {l.Router, "r0", "10.71.1.2/24", "fd71:1::2/64"},
		{l.Router, "r1", "10.71.2.2/24", "fd71:2::2/64"}, {l.Receiver, "v0", "10.71.2.1/24", "fd71:2::1/64"}} {
		Sh(t, "ip", "-n", a[0], "addr", "add", a[2], "dev", a[1])
		Sh(t, "ip", "-n", a[0], "addr", "add", a[3], "dev", a[1], "nodad")
		Sh(t, "ip", "-n", a[0], "link", "set", a[1], "up")
		Sh(t, "ip", "-n", a[0], "link", "set", "lo", "up")
	}
	Sh(t, "ip", "-n", l.Sender, "route", "add", "default", "via", "10.71.1.2")
	Sh(t, "ip", "-n", l.Sender, "-6", "route", "add", "default", "via", "fd71:1::2")
	Sh(t, "ip", "-n", l.Receiver, "route", "add", "default", "via", "10.71.2.2")
	Sh(t, "ip", "-n", l.Receiver, "-6", "route", "add", "default", "via", "fd71:2::2")
	// Neighbours are fixed: a resolution under way would drop datagrams itself (and IPv6's
	// first one can take a second).
	mac := func(ns, dev string) string {
		out := Sh(t, "ip", "-n", ns, "-o", "link", "show", "dev", dev)
		m := regexp.MustCompile(`link/ether ([0-9a-f:]+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no address in %q", out)
		}
		return m[1]
	}
	for _, n := range [][]string{{l.Sender, "s0", "10.71.1.2", "fd71:1::2", l.Router, "r0"}, {l.Router, "r1", "10.71.2.1", "fd71:2::1", l.Receiver, "v0"},
		{l.Router, "r0", "10.71.1.1", "fd71:1::1", l.Sender, "s0"}, {l.Receiver, "v0", "10.71.2.2", "fd71:2::2", l.Router, "r1"}} {
		m := mac(n[4], n[5])
		for _, a := range n[2:4] {
			Sh(t, "ip", "-n", n[0], "neigh", "replace", a, "lladdr", m, "dev", n[1], "nud", "permanent")
		}
	}
	Sh(t, "ip", "netns", "exec", l.Router, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	Sh(t, append([]string{"tc", "-n", l.Router, "qdisc", "add", "dev", "r1", "root"}, regexp.MustCompile(`\s+`).Split(qdisc, -1)...)...)
	InNetns(t, l.Router, func() {
		ifi, err := net.InterfaceByName("r1")
		if err != nil {
			t.Errorf("r1: %v", err)
			return
		}
		cookie, err := kdrop.NetnsCookie()
		if err != nil {
			t.Errorf("netns cookie: %v", err)
			return
		}
		l.Dev = kdrop.Device{Ifindex: ifi.Index, Netns: cookie}
	})
	if t.Failed() {
		t.FailNow()
	}
	return l
}

// Dropped reads the drop counter of r1's queue discipline.
func (l *Lab) Dropped(t testing.TB) int {
	out := Sh(t, "tc", "-n", l.Router, "-s", "qdisc", "show", "dev", "r1")
	m := regexp.MustCompile(`dropped (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no drop counter in %q", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// Datagram builds a RoCEv2 datagram (BTH of an RC SEND, payload, ICRC room) of size octets.
func Datagram(size int, qp uint32, p psn.PSN) []byte {
	b := make([]byte, size)
	b[0] = 0x04 // RC SEND only
	b[1] = 0x40
	binary.BigEndian.PutUint16(b[2:], 0xffff)
	binary.BigEndian.PutUint32(b[4:], qp&0xffffff)
	binary.BigEndian.PutUint32(b[8:], uint32(p)&0xffffff)
	return b
}
