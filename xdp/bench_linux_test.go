//go:build linux

package xdp

import (
	"github.com/crem-project/crem/internal/harness/kdroplab"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crem-project/crem/internal/mmsg"
)

const (
	echoBatch   = 32
	echoWindow  = 256  // datagrams in flight
	echoPayload = 1052 // a RoCEv2 SEND of 1024 octets: BTH, payload, ICRC
)

// rawUDP opens a blocking UDP socket bound to ap in namespace ns, with a receive timeout.
func (l *vethLab) rawUDP(t testing.TB, ns string, ap netip.AddrPort) int {
	t.Helper()
	fd := -1
	kdroplab.InNetns(t, ns, func() {
		s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Errorf("socket: %v", err)
			return
		}
		unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
		unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
		unix.SetsockoptTimeval(s, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 20000})
		if err := unix.Bind(s, &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}); err != nil {
			unix.Close(s)
			t.Errorf("binding %v: %v", ap, err)
			return
		}
		fd = s
	})
	if fd < 0 {
		t.FailNow()
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// echoClient sends n datagrams from fd to dst, echoWindow of them in flight, in batches of
// echoBatch (sendmmsg, recvmmsg), and returns how many came back and in what time. A window
// that stays silent for 200 ms counts as lost.
func echoClient(t testing.TB, fd int, dst netip.AddrPort, n int) (got, lost int, d time.Duration) {
	send, recv := mmsg.NewBatch(echoBatch, 0), mmsg.NewBatch(echoBatch, 0)
	out := make([]byte, echoPayload)
	in := make([][]byte, echoBatch)
	for i := range in {
		in[i] = make([]byte, 2048)
		send.SetSend(i, out, dst, false)
	}
	sent, inflight, silent := 0, 0, 0
	start := time.Now()
	for got+lost < n {
		for inflight+echoBatch <= echoWindow && sent < n {
			k := min(echoBatch, n-sent)
			m, e := send.Send(uintptr(fd), 0, k, 0)
			if e != 0 {
				t.Fatalf("sendmmsg: %v", e)
			}
			sent += m
			inflight += m
		}
		for i := range in {
			recv.SetRecv(i, in[i])
		}
		m, e := recv.Recv(uintptr(fd), echoBatch, 0)
		if e == unix.EAGAIN || e == unix.EINTR {
			if silent++; silent == 10 {
				lost += inflight
				inflight, silent = 0, 0
			}
			continue
		}
		if e != 0 {
			t.Fatalf("recvmmsg: %v", e)
		}
		silent = 0
		got += m
		inflight -= m
	}
	return got, lost, time.Since(start)
}

// xdpEcho answers every frame on the socket with itself, addresses and ports swapped in place
// (the checksums hold: their sums do not depend on the order), until stop.
func xdpEcho(s *Socket, stop *atomic.Bool) {
	frames := make([]Frame, echoBatch)
	pkts := make([][]byte, echoBatch)
	for !stop.Load() {
		s.Wait(10 * time.Millisecond)
		n := s.Receive(frames)
		for i := 0; i < n; i++ {
			b := frames[i].Data
			var mac [6]byte
			copy(mac[:], b[0:6])
			copy(b[0:6], b[6:12])
			copy(b[6:12], mac[:])
			ip := b[ethLen:]
			ihl := int(ip[0]&0x0f) * 4
			var a [4]byte
			copy(a[:], ip[12:16])
			copy(ip[12:16], ip[16:20])
			copy(ip[16:20], a[:])
			u := ip[ihl:]
			u[0], u[1], u[2], u[3] = u[2], u[3], u[0], u[1]
			pkts[i] = b
		}
		for sent := 0; sent < n && !stop.Load(); {
			m, _ := s.Transmit(pkts[sent:n])
			sent += m
		}
		s.Release(frames[:n])
	}
}

// socketEcho answers every datagram on fd with itself (recvmmsg, sendmmsg), until stop.
func socketEcho(fd int, stop *atomic.Bool) {
	recv, send := mmsg.NewBatch(echoBatch, 0), mmsg.NewBatch(echoBatch, 0)
	bufs := make([][]byte, echoBatch)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	for !stop.Load() {
		for i := range bufs {
			recv.SetRecv(i, bufs[i])
		}
		n, e := recv.Recv(uintptr(fd), echoBatch, 0)
		if e != 0 || n == 0 {
			continue
		}
		for i := 0; i < n; i++ {
			r := recv.Received(i)
			send.SetSend(i, bufs[i][:r.N], r.From, false)
		}
		for off := 0; off < n && !stop.Load(); {
			m, e := send.Send(uintptr(fd), off, n, 0)
			if e != 0 {
				break
			}
			off += m
		}
	}
}

// BenchmarkVethEcho measures, in one run on one veth pair, datagrams of 1052 octets echoed by A
// to a client in B (sendmmsg and recvmmsg, 256 in flight): through the AF_XDP socket in copy
// mode (receive in place, swap, transmit by copy), then, with the program detached, through an
// ordinary UDP socket with recvmmsg and sendmmsg. It reports each rate (echoes/s: one receive
// and one transmit at A each) and their ratio, and the CPU time of A's serving thread per echo
// (user and system: its receive calls, copies and transmissions; the kernel's receive work on
// the veth runs in the sender's context and is not in it) and the ratio of those, socket over
// AF_XDP.
func BenchmarkVethEcho(b *testing.B) {
	l := newVethLab(b, 4096, AttachGeneric)
	var ifindex int
	kdroplab.InNetns(b, l.A, func() {
		ifi, err := net.InterfaceByName("xa")
		if err != nil {
			b.Error(err)
			return
		}
		ifindex = ifi.Index
	})
	client := l.rawUDP(b, l.B, netip.AddrPortFrom(addrB, 7000))
	server := l.rawUDP(b, l.A, netip.AddrPortFrom(addrA, 4791))
	const n = 100000
	var xdpRate, sockRate, xdpCPU, sockCPU float64
	var lostX, lostS int
	for i := 0; i < b.N; i++ {
		// run returns the echo rate and the CPU time A's serving thread spent per echo.
		run := func(serve func(*atomic.Bool), lostTo *int) (float64, float64) {
			var stop atomic.Bool
			var wg sync.WaitGroup
			var cpu time.Duration
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				var r0, r1 unix.Rusage
				unix.Getrusage(unix.RUSAGE_THREAD, &r0)
				serve(&stop)
				unix.Getrusage(unix.RUSAGE_THREAD, &r1)
				cpu = time.Duration(r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano())
			}()
			echoClient(b, client, netip.AddrPortFrom(addrA, 4791), 2000) // warm up
			got, lost, d := echoClient(b, client, netip.AddrPortFrom(addrA, 4791), n)
			stop.Store(true)
			wg.Wait()
			if got < n*99/100 {
				b.Fatalf("%d of %d echoed, %d lost", got, n, lost)
			}
			*lostTo += lost
			return float64(got) / d.Seconds(), float64(cpu.Nanoseconds()) / float64(got+2000)
		}
		if l.Prog.AttachMode() == "" {
			kdroplab.InNetns(b, l.A, func() {
				if err := l.Prog.Attach(ifindex, AttachGeneric); err != nil {
					b.Error(err)
				}
			})
		}
		r, c := run(func(stop *atomic.Bool) { xdpEcho(l.Sock, stop) }, &lostX)
		xdpRate, xdpCPU = xdpRate+r, xdpCPU+c
		if err := l.Prog.Detach(); err != nil {
			b.Fatal(err)
		}
		r, c = run(func(stop *atomic.Bool) { socketEcho(server, stop) }, &lostS)
		sockRate, sockCPU = sockRate+r, sockCPU+c
	}
	if st, err := l.Sock.Stats(); err == nil {
		b.Logf("AF_XDP socket: %+v", st)
	}
	b.ReportMetric(xdpRate/float64(b.N), "afxdp-echo/s")
	b.ReportMetric(sockRate/float64(b.N), "recvmmsg-echo/s")
	b.ReportMetric(xdpRate/sockRate, "ratio")
	b.ReportMetric(xdpCPU/float64(b.N), "afxdp-cpu-ns/echo")
	b.ReportMetric(sockCPU/float64(b.N), "recvmmsg-cpu-ns/echo")
	b.ReportMetric(sockCPU/xdpCPU, "cpu-ratio")
	b.ReportMetric(float64(lostX), "afxdp-lost")
	b.ReportMetric(float64(lostS), "recvmmsg-lost")
	b.ReportMetric(0, "ns/op")
}
