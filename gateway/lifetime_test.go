//go:build linux

package gateway

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// relayConfig is a gateway in relay mode on loopback whose peer answers nothing.
func relayConfig() Config {
	return Config{Peer: netip.MustParseAddrPort("127.0.0.1:9"),
		Relay: RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Target: netip.MustParseAddrPort("127.0.0.1:9"), WANListen: netip.MustParseAddrPort("127.0.0.1:0"), PeerData: netip.MustParseAddrPort("127.0.0.1:9")}}
}

// cremSocket binds a CREM socket on loopback for Options.Sockets.
func cremSocket(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newTestGateway(t *testing.T, o Options, adjust func(*Gateway)) *Gateway {
	t.Helper()
	o.Sockets.CREM = cremSocket(t)
	g, err := New(relayConfig(), o)
	if err != nil {
		t.Fatal(err)
	}
	if adjust != nil {
		adjust(g)
	}
	t.Cleanup(func() {
		closed := make(chan struct{})
		go func() { g.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Error("Close did not return within 5 s")
		}
	})
	return g
}

// runAsync runs g and returns the channel Run's result arrives on.
func runAsync(ctx context.Context, g *Gateway) chan error {
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	return done
}

func waitRun(t *testing.T, done chan error, within time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		t.Fatalf("%s: Run did not return within %v", what, within)
		return nil
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestStopUnderTraffic: a gateway whose sockets never empty stops at once when its
// context ends. pairLoop looked for the stop only when both sockets were empty at once, so
// sustained traffic held Run up for as long as it lasted. "endless" has every read of the CREM
// and WAN sockets return a full batch (sockets that never empty, whatever the machine's speed);
// "flood" has four senders flood them on loopback.
func TestStopUnderTraffic(t *testing.T) {
	t.Run("endless", func(t *testing.T) {
		g := newTestGateway(t, Options{Seed: 1}, func(g *Gateway) {
			g.testReceiver = func(r *receiver) {
				if r.s.kind != kindLocal {
					r.readFn = func(uintptr) bool { r.n, r.errno = r.b.Len(), 0; return true }
				}
			}
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := runAsync(ctx, g)
		waitFor(t, 10*time.Second, "traffic on both sockets", func() bool {
			return g.c.rx[kindCREM].Load() > 100 && g.c.rx[kindWAN].Load() > 1000
		})
		cancel()
		start := time.Now()
		if err := waitRun(t, done, 5*time.Second, "sockets that never empty"); err != nil {
			t.Fatalf("Run: %v", err)
		}
		t.Logf("stopped %v after the context ended", time.Since(start))
	})
	t.Run("flood", func(t *testing.T) {
		g := newTestGateway(t, Options{Seed: 1}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := runAsync(ctx, g)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for _, to := range []netip.AddrPort{g.CREMAddr(), g.WANAddr(), g.WANAddr(), g.CREMAddr()} {
			c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetWriteBuffer(8 << 20)
			pc := ipv4.NewPacketConn(c)
			ua := net.UDPAddrFromAddrPort(to)
			ms := make([]ipv4.Message, 64)
			for j := range ms {
				ms[j] = ipv4.Message{Buffers: [][]byte{make([]byte, 1000)}, Addr: ua}
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					pc.WriteBatch(ms, 0)
				}
			}()
		}
		defer func() { close(stop); wg.Wait() }()
		waitFor(t, 10*time.Second, "the flood reaching both sockets", func() bool {
			return g.c.rx[kindCREM].Load() > 1000 && g.c.rx[kindWAN].Load() > 1000
		})
		cancel()
		start := time.Now()
		if err := waitRun(t, done, 5*time.Second, "under a flood"); err != nil {
			t.Fatalf("Run: %v", err)
		}
		t.Logf("stopped %v after the context ended, under a flood", time.Since(start))
	})
}

// TestRunEndsWhenALoopEnds: a reader that ends before the stop (its socket closed
// under it) stops the gateway, and Run says why; before, Run went on waiting for its context
// (the relay socket), or waited forever even after it (pairLoop ending before it started its
// waiters).
func TestRunEndsWhenALoopEnds(t *testing.T) {
	for _, c := range []struct {
		name string
		sock func(*Gateway) *sock
	}{{"relay listen", func(g *Gateway) *sock { return g.local }}, {"crem", func(g *Gateway) *sock { return g.crem }},
		{"wan", func(g *Gateway) *sock { return g.wan }}} {
		t.Run(c.name, func(t *testing.T) {
			g := newTestGateway(t, Options{Seed: 1}, nil)
			c.sock(g).conn.Close()
			err := waitRun(t, runAsync(context.Background(), g), 5*time.Second, "a reader ended")
			if err == nil || !strings.Contains(err.Error(), c.sock(g).addr.String()) {
				t.Fatalf("Run: %v, want an error naming the socket %v", err, c.sock(g).addr)
			}
		})
	}
}

// TestReadErrorsPause: a socket whose reads keep failing is read again after a pause
// that doubles from 1 ms to 100 ms (the reader used to try again at once, spinning a core),
// counted; the gateway still stops at once.
func TestReadErrorsPause(t *testing.T) {
	for _, kind := range []int{kindLocal, kindCREM} {
		t.Run(kindNames[kind], func(t *testing.T) {
			g := newTestGateway(t, Options{Seed: 1}, func(g *Gateway) {
				g.testReceiver = func(r *receiver) {
					if r.s.kind == kind {
						r.readFn = func(uintptr) bool { r.n, r.errno = 0, unix.EIO; return true }
					}
				}
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			start := time.Now()
			done := runAsync(ctx, g)
			// Seven pauses come before the eighth error: 1+2+4+8+16+32+64 ms at least.
			waitFor(t, 10*time.Second, "eight read errors", func() bool { return g.c.readErrors.Load() >= 8 })
			if el := time.Since(start); el < 127*time.Millisecond {
				t.Fatalf("eight failed reads in %v: no pause between them", el)
			}
			cancel()
			if err := waitRun(t, done, 2*time.Second, "reads failing"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestClose: Close releases the sockets of a gateway that never ran (they can be bound
// again), may be called again, and refuses a later Run; Close of a running gateway stops it
// (Run returns) and waits for it.
func TestClose(t *testing.T) {
	g, err := New(relayConfig(), Options{Seed: 1, Sockets: Sockets{CREM: cremSocket(t)}})
	if err != nil {
		t.Fatal(err)
	}
	addrs := []netip.AddrPort{g.CREMAddr(), g.RelayAddr(), g.WANAddr()}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(a))
		if err != nil {
			t.Fatalf("%v still bound after Close: %v", a, err)
		}
		c.Close()
	}
	if err := g.Run(context.Background()); err == nil {
		t.Fatal("Run after Close: want an error")
	}

	g = newTestGateway(t, Options{Seed: 1}, nil)
	done := runAsync(context.Background(), g)
	waitFor(t, 5*time.Second, "running", func() bool {
		g.life.Lock()
		defer g.life.Unlock()
		return g.state == stateRunning
	})
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	// Close waited for Run's end: the state is final and Run's deferred close of finished has
	// happened. (Run's return value reaches done a moment later, from runAsync's goroutine.)
	g.life.Lock()
	state := g.state
	g.life.Unlock()
	select {
	case <-g.finished:
	default:
		t.Fatal("Close returned before Run did")
	}
	if state != stateDone {
		t.Fatalf("state %v after Close, want done", state)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after Close")
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
}
