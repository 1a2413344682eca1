//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package kdrop

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/reporter"
	"github.com/crem-project/crem/wire"
)

// queueReasons are the drop reasons of a qdisc that overflowed, by name.
var queueReasons = []string{"QDISC_DROP", "QDISC_OVERLIMIT", "QDISC_CONGESTED"}

// needLab skips unless the test can build network namespaces and load the program.
func needLab(t *testing.T) {
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

func sh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return string(out)
}

// inNetns runs fn on a thread in the network namespace ns; sockets it opens stay there.
func inNetns(t *testing.T, ns string, fn func()) {
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

// lab is sender -- router -- receiver, each a network namespace, with a tbf bottleneck on the
// router's device toward the receiver.
type lab struct {
	snd, rtr, rcv string
	routerDev     Device
}

func newLab(t *testing.T, tbf string) *lab {
	t.Helper()
	id := strconv.Itoa(os.Getpid() % 100000)
	l := &lab{snd: "kds" + id, rtr: "kdr" + id, rcv: "kdv" + id}
	for _, ns := range []string{l.snd, l.rtr, l.rcv} {
		exec.Command("ip", "netns", "del", ns).Run()
		sh(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	sh(t, "ip", "link", "add", "s0", "netns", l.snd, "type", "veth", "peer", "r0", "netns", l.rtr)
	sh(t, "ip", "link", "add", "r1", "netns", l.rtr, "type", "veth", "peer", "v0", "netns", l.rcv)
	for _, a := range [][]string{{l.snd, "s0", "10.71.1.1/24", "fd71:1::1/64"}, {l.rtr, "r0", "10.71.1.2/24", "fd71:1::2/64"},
		{l.rtr, "r1", "10.71.2.2/24", "fd71:2::2/64"}, {l.rcv, "v0", "10.71.2.1/24", "fd71:2::1/64"}} {
		sh(t, "ip", "-n", a[0], "addr", "add", a[2], "dev", a[1])
		sh(t, "ip", "-n", a[0], "addr", "add", a[3], "dev", a[1], "nodad")
		sh(t, "ip", "-n", a[0], "link", "set", a[1], "up")
		sh(t, "ip", "-n", a[0], "link", "set", "lo", "up")
	}
	sh(t, "ip", "-n", l.snd, "route", "add", "default", "via", "10.71.1.2")
	sh(t, "ip", "-n", l.snd, "-6", "route", "add", "default", "via", "fd71:1::2")
	sh(t, "ip", "-n", l.rcv, "route", "add", "default", "via", "10.71.2.2")
	sh(t, "ip", "-n", l.rcv, "-6", "route", "add", "default", "via", "fd71:2::2")
	// Neighbours are fixed: a resolution under way would drop datagrams itself (and IPv6's
	// first one can take a second).
	mac := func(ns, dev string) string {
		out := sh(t, "ip", "-n", ns, "-o", "link", "show", "dev", dev)
		m := regexp.MustCompile(`link/ether ([0-9a-f:]+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no address in %q", out)
		}
		return m[1]
	}
	for _, n := range [][]string{{l.snd, "s0", "10.71.1.2", "fd71:1::2", l.rtr, "r0"}, {l.rtr, "r1", "10.71.2.1", "fd71:2::1", l.rcv, "v0"},
		{l.rtr, "r0", "10.71.1.1", "fd71:1::1", l.snd, "s0"}, {l.rcv, "v0", "10.71.2.2", "fd71:2::2", l.rtr, "r1"}} {
		m := mac(n[4], n[5])
		for _, a := range n[2:4] {
			sh(t, "ip", "-n", n[0], "neigh", "replace", a, "lladdr", m, "dev", n[1], "nud", "permanent")
		}
	}
	sh(t, "ip", "netns", "exec", l.rtr, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	sh(t, append([]string{"tc", "-n", l.rtr, "qdisc", "add", "dev", "r1", "root"}, regexp.MustCompile(`\s+`).Split(tbf, -1)...)...)
	inNetns(t, l.rtr, func() {
		ifi, err := net.InterfaceByName("r1")
		if err != nil {
			t.Errorf("r1: %v", err)
			return
		}
		cookie, err := NetnsCookie()
		if err != nil {
			t.Errorf("netns cookie: %v", err)
			return
		}
		l.routerDev = Device{Ifindex: ifi.Index, Netns: cookie}
	})
	if t.Failed() {
		t.FailNow()
	}
	return l
}

// qdiscDropped reads the tbf's drop counter.
func (l *lab) qdiscDropped(t *testing.T) int {
	out := sh(t, "tc", "-n", l.rtr, "-s", "qdisc", "show", "dev", "r1")
	m := regexp.MustCompile(`dropped (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no drop counter in %q", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// bth builds a RoCEv2 datagram (BTH, payload, ICRC room) of size octets.
func bth(size int, qp uint32, p psn.PSN) []byte {
	b := make([]byte, size)
	b[0] = 0x04 // RC SEND only
	b[1] = 0x40
	binary.BigEndian.PutUint16(b[2:], 0xffff)
	binary.BigEndian.PutUint32(b[4:], qp&0xffffff)
	binary.BigEndian.PutUint32(b[8:], uint32(p)&0xffffff)
	return b
}

type flowID struct {
	family int
	qp     uint32
}

// TestQueueDropsReportedExactlyThroughTbf: RoCEv2-shaped datagrams of an IPv4 and an IPv6
// flow cross a router whose egress tbf cannot carry them; every PSN the queue dropped is
// reported once, and only those: the receiver's gaps, the qdisc's drop counter and the PSNs
// of the PATH_REPORTs agree.
func TestQueueDropsReportedExactlyThroughTbf(t *testing.T) {
	needLab(t)
	l := newLab(t, "tbf rate 200mbit burst 16kb limit 24kb")
	byName, err := Reasons()
	if err != nil {
		t.Fatal(err)
	}
	var reasons []uint32
	for _, n := range queueReasons {
		reasons = append(reasons, byName[n])
	}
	dev := l.routerDev
	src, err := Open(Config{Devices: []Device{dev}, Ports: []uint16{4791}, Reasons: reasons, RingSize: 1 << 20})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer src.Close()
	t.Logf("attached at %s", src.Attach())

	// A short per-flow interval keeps every list under 255 PSNs (beyond, the engine cuts it and
	// says Truncated, PR3), so that the PSNs can be compared one by one.
	eng, err := reporter.New(reporter.Config{NodeID: 7, Port: 50000, FlowInterval: 100 * time.Microsecond, PortRate: 1e6, PortBurst: 64})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	reported := map[flowID][]psn.PSN{}
	lostCount, truncated := 0, 0
	d := &Driver{Src: src, Eng: eng, Send: func(dg reporter.Datagram) error {
		rep, err := wire.ParsePathReport(dg.Payload)
		if err != nil {
			t.Errorf("malformed report: %v", err)
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		fam := 6
		if rep.Source.Is4() {
			fam = 4
		}
		if rep.Truncated {
			truncated++
		}
		for _, h := range rep.Hops {
			if h.Cause != wire.CauseCongestion || h.NodeID != 7 {
				t.Errorf("hop entry %+v: want node 7, cause congestion", h)
			}
			lostCount += int(h.LostCount)
			id := flowID{fam, rep.FlowLabel}
			reported[id] = append(reported[id], h.DroppedPSNs...)
		}
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()

	const perFlow = 1500
	const start = psn.PSN(0xffff00) // the PSNs wrap in the middle
	flows := map[flowID]netip.AddrPort{
		{4, 0x11}: netip.MustParseAddrPort("10.71.2.1:4791"),
		{6, 0x22}: netip.MustParseAddrPort("[fd71:2::1]:4791"),
	}
	received := map[flowID]map[psn.PSN]bool{}
	var conn *net.UDPConn
	inNetns(t, l.rcv, func() {
		c, err := net.ListenUDP("udp", &net.UDPAddr{Port: 4791})
		if err != nil {
			t.Error(err)
			return
		}
		c.SetReadBuffer(8 << 20)
		conn = c
	})
	if conn == nil {
		t.FailNow()
	}
	defer conn.Close()
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		buf := make([]byte, 2048)
		for {
			conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			n, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			fam := 6
			if from.Addr().Unmap().Is4() {
				fam = 4
			}
			if n < 12 {
				continue
			}
			id := flowID{fam, binary.BigEndian.Uint32(buf[4:]) & 0xffffff}
			if received[id] == nil {
				received[id] = map[psn.PSN]bool{}
			}
			received[id][psn.PSN(binary.BigEndian.Uint32(buf[8:])&0xffffff)] = true
		}
	}()
	inNetns(t, l.snd, func() {
		socks := map[flowID]*net.UDPConn{}
		for id, to := range flows {
			c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			socks[id] = c
		}
		for i := 0; i < perFlow; i++ {
			for id, c := range socks {
				if _, err := c.Write(bth(1100, id.qp, start.Add(i))); err != nil {
					t.Errorf("sending flow %v: %v", id, err)
					return
				}
			}
			if i%8 == 7 {
				time.Sleep(50 * time.Microsecond)
			}
		}
	})
	<-recvDone
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("driver: %v", err)
	}

	qdisc := l.qdiscDropped(t)
	gaps, reportedN := 0, 0
	for id := range flows {
		var missing []psn.PSN
		for i := 0; i < perFlow; i++ {
			if p := start.Add(i); !received[id][p] {
				missing = append(missing, p)
			}
		}
		got := slices.Clone(reported[id])
		slices.Sort(got)
		if dup := len(got) - len(slices.Compact(slices.Clone(got))); dup != 0 {
			t.Errorf("flow %v: %d PSNs reported twice", id, dup)
		}
		slices.Sort(missing)
		gaps += len(missing)
		reportedN += len(got)
		if !slices.Equal(got, missing) {
			t.Errorf("flow %v: reported %d PSNs, the receiver missed %d; first reported %v, first missed %v",
				id, len(got), len(missing), head(got), head(missing))
		}
	}
	st := d.Stats()
	t.Logf("sent %d, dropped by the queue %d, receiver's gaps %d, PSNs reported %d (Lost Count %d, truncated reports %d), reports %d; kernel %+v",
		2*perFlow, qdisc, gaps, reportedN, lostCount, truncated, st.Engine.Reports, st.Kernel)
	if qdisc == 0 || gaps == 2*perFlow {
		t.Fatalf("the bottleneck dropped %d of %d: the test needs some drops and some deliveries", qdisc, 2*perFlow)
	}
	if reportedN != qdisc || gaps != qdisc || lostCount != qdisc || truncated != 0 {
		t.Fatalf("queue dropped %d, receiver missed %d, reported %d PSNs, Lost Count %d, %d truncated reports",
			qdisc, gaps, reportedN, lostCount, truncated)
	}
	if st.Kernel.EventsLost != 0 || st.Kernel.NotLinear != 0 {
		t.Fatalf("kernel counters %+v: nothing should be lost or unreadable here", st.Kernel)
	}
}

func head(p []psn.PSN) string {
	if len(p) > 5 {
		return fmt.Sprint(p[:5], "...")
	}
	return fmt.Sprint(p)
}
