//go:build linux

package xdp

import (
	"errors"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
)

// loadForTest loads the program with 4791 and the CREM port, or skips where BPF is not allowed
// (without root, CAP_BPF and CAP_NET_ADMIN).
func loadForTest(t testing.TB) *Program {
	t.Helper()
	_ = rlimit.RemoveMemlock()
	p, err := LoadProgram(4791, cremPort)
	if err != nil {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, ebpf.ErrNotSupported) {
			t.Skipf("needs root or CAP_BPF with CAP_NET_ADMIN (loading an XDP program): %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func run(t testing.TB, p *Program, frame []byte) uint32 {
	t.Helper()
	ret, err := p.prog.Run(&ebpf.RunOptions{Data: frame})
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN on %d octets: %v", len(frame), err)
	}
	return ret
}

// loSocket binds a socket to the loopback device's queue 0, for the XSKMAP entry a redirect
// needs; nothing is attached to the loopback device, so it receives nothing.
func loSocket(t testing.TB) *Socket {
	t.Helper()
	s, err := NewSocket(SocketConfig{Ifindex: 1, Frames: 64, Bind: BindCopy})
	// The kernel releases a closed socket's hold on the queue a moment later.
	for i := 0; i < 50 && errors.Is(err, unix.EBUSY); i++ {
		time.Sleep(20 * time.Millisecond)
		s, err = NewSocket(SocketConfig{Ifindex: 1, Frames: 64, Bind: BindCopy})
	}
	if err != nil {
		t.Skipf("no AF_XDP socket on the loopback device: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestProgramVerdicts runs the program alone (BPF_PROG_TEST_RUN) on crafted frames: IPv4 (any
// header length) and IPv6 UDP to 4791 or the CREM port go to the socket of queue 0; other
// ports, other protocols, fragments, VLAN tags, IPv6 extension headers and frames cut short
// go to the kernel's stack (XDP_PASS); with no socket registered a matching frame passes too,
// and is counted.
func TestProgramVerdicts(t *testing.T) {
	p := loadForTest(t)
	frames := testFrames()
	for _, f := range frames {
		if got := run(t, p, f.frame); got != xdpPass {
			t.Errorf("%s with no socket registered: action %d, want XDP_PASS", f.name, got)
		}
	}
	c, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, f := range frames {
		if f.redirect {
			want++
		}
	}
	if c.NoSocket != uint64(want) || c.Redirected != 0 {
		t.Errorf("counters %+v, want %d without a socket and none redirected", c, want)
	}

	s := loSocket(t)
	if err := p.Register(0, s); err != nil {
		t.Fatal(err)
	}
	for _, f := range frames {
		want := uint32(xdpPass)
		if f.redirect {
			want = xdpRedirect
		}
		if got := run(t, p, f.frame); got != want {
			t.Errorf("%s: action %d, want %d", f.name, got, want)
		}
	}
	c2, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c2.Redirected != uint64(want) || c2.NoSocket != c.NoSocket {
		t.Errorf("counters %+v after the socket, want %d redirected", c2, want)
	}
	if err := p.Unregister(0); err != nil {
		t.Fatal(err)
	}
	if got := run(t, p, frames[0].frame); got != xdpPass {
		t.Errorf("after Unregister: action %d, want XDP_PASS", got)
	}
}

// TestProgramAgreesWithParser runs random mutations of the crafted frames through the program
// and through ParseUDP: the program sends a frame to the socket exactly when ParseUDP finds a
// UDP datagram to 4791 or the CREM port (its UDP length aside, which the program does not read).
func TestProgramAgreesWithParser(t *testing.T) {
	p := loadForTest(t)
	if err := p.Register(0, loSocket(t)); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	base := testFrames()
	n := 3000
	if testing.Short() {
		n = 300
	}
	matched := 0
	interesting := []int{12, 13, 14, 20, 21, 23, 36, 37, 40, 56, 57}
	for i := 0; i < n; i++ {
		f := append([]byte(nil), base[rng.IntN(len(base))].frame...)
		for k := rng.IntN(4); k >= 0; k-- {
			at := interesting[rng.IntN(len(interesting))]
			if rng.IntN(3) == 0 {
				at = rng.IntN(len(f))
			}
			if at < len(f) {
				f[at] = byte(rng.Uint32())
			}
		}
		if rng.IntN(4) == 0 {
			f = f[:14+rng.IntN(len(f)-13)]
		}
		d, err := ParseUDP(f)
		match := (err == nil || errors.Is(err, ErrLength)) && (d.DstPort == 4791 || d.DstPort == cremPort)
		want := uint32(xdpPass)
		if match {
			want = xdpRedirect
		}
		if got := run(t, p, f); got != want {
			t.Fatalf("frame %x: program %d, parser %v (err %v)", f, got, want, err)
		}
		if match {
			matched++
		}
	}
	if matched < n/20 || matched > n*19/20 {
		t.Errorf("%d of %d mutated frames matched: the mutations do not test both outcomes", matched, n)
	}
}

// BenchmarkProgram measures the program alone per frame (BPF_PROG_TEST_RUN, the kernel's own
// timing over 100,000 repetitions): a RoCEv2 datagram redirected, one to another port passed
// after the map lookup, and an ARP frame passed at the EtherType.
func BenchmarkProgram(b *testing.B) {
	p := loadForTest(b)
	if err := p.Register(0, loSocket(b)); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		frame []byte
	}{
		{"redirect-ipv4", udpFrame("10.0.0.1", "10.0.0.2", 4791, rocePayload(1, 1052))},
		{"redirect-ipv6", udpFrame("fd00::1", "fd00::2", 4791, rocePayload(1, 1052))},
		{"pass-other-port", udpFrame("10.0.0.1", "10.0.0.2", 5000, rocePayload(1, 1052))},
		{"pass-arp", frameNamed("arp")},
	} {
		b.Run(c.name, func(b *testing.B) {
			var per float64
			for i := 0; i < b.N; i++ {
				_, d, err := p.prog.Benchmark(c.frame, 100000, nil)
				if err != nil {
					b.Fatal(err)
				}
				per += float64(d.Nanoseconds())
			}
			b.ReportMetric(per/float64(b.N), "ns/frame")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func frameNamed(name string) []byte {
	for _, f := range testFrames() {
		if f.name == name {
			return f.frame
		}
	}
	panic("no test frame " + name)
}
