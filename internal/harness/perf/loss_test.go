package perf

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crem-project/crem/rc"
	"github.com/crem-project/crem/roce"
)

// dropProxy stands between a client and a server as a proxy or a rate limiter would: the
// client's setup exchange goes through it (it points the ACCEPT's data port at itself) and its
// data socket forwards the client's packets to the server's, dropping every every-th data
// packet. The server's packets go to the client directly.
type dropProxy struct {
	setup, up, data *net.UDPConn
	server          netip.AddrPort // the server's setup address
	every           int
	mu              sync.Mutex
	client          netip.AddrPort // of the setup exchange
	serverData      netip.AddrPort
	seen, dropped   int // data packets
	wg              sync.WaitGroup
}

func newDropProxy(t *testing.T, server string, every int) *dropProxy {
	t.Helper()
	lo := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}
	p := &dropProxy{server: netip.MustParseAddrPort(server), every: every}
	var err error
	for _, c := range []**net.UDPConn{&p.setup, &p.up, &p.data} {
		if *c, err = net.ListenUDP("udp", lo); err != nil {
			t.Fatal(err)
		}
	}
	p.data.SetReadBuffer(4 << 20)
	p.wg.Add(3)
	go p.setupDown()
	go p.setupUp()
	go p.forward()
	t.Cleanup(func() {
		p.setup.Close()
		p.up.Close()
		p.data.Close()
		p.wg.Wait()
	})
	return p
}

// setupDown takes the client's setup messages to the server.
func (p *dropProxy) setupDown() {
	defer p.wg.Done()
	buf := make([]byte, 2048)
	for {
		n, from, err := p.setup.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		p.mu.Lock()
		p.client = from
		p.mu.Unlock()
		p.up.WriteToUDPAddrPort(buf[:n], p.server)
	}
}

// setupUp takes the server's answers to the client, the ACCEPT's data port made the proxy's.
func (p *dropProxy) setupUp() {
	defer p.wg.Done()
	buf := make([]byte, 2048)
	for {
		n, _, err := p.up.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		out := buf[:n]
		if m, _, err := rc.ParseSetup(out); err == nil && m.Type == rc.SetupAccept {
			p.mu.Lock()
			p.serverData = netip.AddrPortFrom(p.server.Addr(), m.DataPort)
			p.mu.Unlock()
			m.DataPort = p.data.LocalAddr().(*net.UDPAddr).AddrPort().Port()
			if out, err = m.Append(nil); err != nil {
				panic(err)
			}
		}
		p.mu.Lock()
		to := p.client
		p.mu.Unlock()
		p.setup.WriteToUDPAddrPort(out, to)
	}
}

// forward carries the client's RoCE packets to the server's data socket, dropping every
// every-th data packet.
func (p *dropProxy) forward() {
	defer p.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, _, err := p.data.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil || n < roce.BTHLen {
			continue
		}
		p.mu.Lock()
		to := p.serverData
		drop := false
		if roce.Opcode(buf[0]).Info().Source {
			p.seen++
			if p.seen%p.every == 0 {
				p.dropped++
				drop = true
			}
		}
		p.mu.Unlock()
		if !drop {
			p.data.WriteToUDPAddrPort(buf[:n], to)
		}
	}
}

// Packets a proxy on the path drops are counted as lost on the path, not in the sockets: the
// warning names the path and the rate above its bottleneck, never the sockets, and the JSON's
// path_lost_data_packets is the proxy's count (the kernels dropped none, and said so).
func TestPathDropsNotBlamedOnSockets(t *testing.T) {
	p := newDropProxy(t, startServer(t), 25) // 4 percent of the client's data packets
	o := testOpts("write")
	o.Size, o.Iters, o.Rate, o.Server = 64<<10, 40, 100e6, p.setup.LocalAddr().String()
	res, err := Run(context.Background(), o, listen(t))
	if err != nil {
		t.Fatalf("%v (%s)", err, res.Error)
	}
	p.mu.Lock()
	dropped := int64(p.dropped)
	p.mu.Unlock()
	// A proxy slower than the client (the race detector) also overflows its own socket: those
	// are the path's drops too.
	if d, ok := kernelDrops(p.data.LocalAddr().(*net.UDPAddr).AddrPort().Port()); ok {
		dropped += d
	}
	if dropped < 50 {
		t.Fatalf("the proxy dropped %d data packets: too few to judge", dropped)
	}
	if res.SocketDroppedPackets == nil || res.PathLostDataPackets == nil || res.PathLostPackets == nil ||
		res.ServerSocketDroppedPackets == nil {
		t.Fatalf("no split of the loss: socket %v, path %v", res.SocketDroppedPackets, res.PathLostDataPackets)
	}
	k, path := *res.SocketDroppedPackets, *res.PathLostDataPackets
	// The figures agree with the proxy's count, give or take the kernels' own drops and a
	// few packets in flight at the end.
	if path < dropped-k-2 || path > dropped+2 {
		t.Errorf("the proxy dropped %d data packets; path_lost_data_packets %d, the kernels %d", dropped, path, k)
	}
	if k*10 > dropped {
		t.Logf("the kernels dropped %d packets at 100 Mbit/s: a loaded host", k)
	}
	if strings.Contains(res.Warning, "dropped by") || !strings.Contains(res.Warning, "lost on the path") ||
		!strings.Contains(res.Warning, "a proxy, a rate limiter or the network") || !strings.Contains(res.Warning, "bottleneck") {
		t.Errorf("warning %q", res.Warning)
	}
	t.Logf("proxy dropped %d; path %d (all packets %d), sockets %d: %s", dropped, path, *res.PathLostPackets, k, res.Warning)
}

// Packets the kernel drops on a full socket (a receive buffer of a few packets, bursts at
// 5 Gbit/s) are counted as the sockets' drops from the kernel's own count: the warning names
// the sockets with the fix (a lower --rate, larger buffers) and the buffer granted, not the path.
func TestSocketDropsCountedByKernel(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the kernel's drop count is Linux's")
	}
	o := testOpts("write")
	o.Size, o.Iters, o.Rate, o.SocketBuffer, o.Timeout = 256<<10, 4, 5e9, 4096, 30*time.Second
	res, _ := Loopback(context.Background(), o)
	if res.SocketDroppedPackets == nil || res.PathLostDataPackets == nil {
		t.Fatalf("no split of the loss: %+v", res)
	}
	k, path := *res.SocketDroppedPackets, *res.PathLostDataPackets
	if k <= 0 || k < res.SocketLostDataPackets/2 {
		t.Errorf("%d data packets lost between the QPs, the kernel counted %d", res.SocketLostDataPackets, k)
	}
	if path > 2 && float64(path) > 0.01*float64(res.SocketDataPackets) {
		t.Errorf("%d data packets called lost on the path of a loopback (the kernel counted %d)", path, k)
	}
	if !strings.Contains(res.Warning, "were dropped by this host's sockets") || strings.Contains(res.Warning, "on the path") ||
		!strings.Contains(res.Warning, "lower --rate") || res.SocketReceiveBuffer <= 0 ||
		!(strings.Contains(res.Warning, "sysctl -w net.core.rmem_max=") || strings.Contains(res.Warning, "--socket-buffer")) {
		t.Errorf("warning %q (buffer %d)", res.Warning, res.SocketReceiveBuffer)
	}
	t.Logf("kernel %d, path %d, of %d: %s", k, path, res.SocketDataPackets, res.Warning)
}
