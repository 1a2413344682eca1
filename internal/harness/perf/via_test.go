package perf

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/rc"
	"github.com/crem-project/crem/rc/udp"
	"github.com/crem-project/crem/roce"
)

// relay is a stand-in for a relay-mode gateway's listen socket: it sends on every datagram
// that reaches it to one address, and counts them.
type relay struct {
	sock *net.UDPConn
	to   netip.AddrPort
	n    atomic.Int64
	done chan struct{}
}

func newRelay(t *testing.T) *relay {
	t.Helper()
	s, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{sock: s, done: make(chan struct{})}
	t.Cleanup(func() { s.Close(); <-r.done })
	return r
}

func (r *relay) addr() netip.AddrPort { return r.sock.LocalAddr().(*net.UDPAddr).AddrPort() }

func (r *relay) run(to netip.AddrPort) {
	r.to = to
	go func() {
		defer close(r.done)
		buf := make([]byte, 65536)
		for {
			n, _, err := r.sock.ReadFromUDPAddrPort(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			r.n.Add(1)
			r.sock.WriteToUDPAddrPort(buf[:n], r.to)
		}
	}()
}

// With Via on both ends, every RoCEv2 datagram goes through the relays, none straight to the
// peer (the relays are the only way between the data sockets here: each end's peer address is
// its relay), the run verifies, the result names the relay, and the QPs start with the RTT
// unknown unless it is stated.
func TestViaSendsThroughRelays(t *testing.T) {
	srvHost, err := udp.Listen("127.0.0.1:0", udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srvHost.Close()
	cliHost, err := udp.Listen("127.0.0.1:0", udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cliHost.Close()
	setup, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer setup.Close()
	toServer, toClient := newRelay(t), newRelay(t)
	toServer.run(srvHost.LocalAddr())
	toClient.run(cliHost.LocalAddr())
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		ServeWith(ctx, setup, srvHost, ServeOptions{Via: toClient.addr()})
	}()
	defer func() { stop(); <-served }()
	o := Options{Op: "write", Size: 64 << 10, Iters: 8, MTU: 1024, Mode: rc.ModeTCAETH, Rate: 200e6, Seed: 3,
		Server: setup.LocalAddr().String(), Via: toServer.addr(), Bind: netip.MustParseAddr("127.0.0.1"),
		Timeout: time.Minute, RetryCount: stallRetries}
	res, err := Run(context.Background(), o, cliHost)
	if err != nil {
		t.Fatalf("%v (%+v)", err, res)
	}
	if !res.Verified || res.Via != toServer.addr().String() {
		t.Fatalf("verified %v, via %q, want %v", res.Verified, res.Via, toServer.addr())
	}
	// The client's datagrams (data and retransmissions) all crossed the relay to the server (the
	// kernel may drop a few on a busy machine, which the QPs recover), the server's ACKs the
	// other.
	sent := int64(res.DataPackets + res.RetransmittedPackets)
	if got := toServer.n.Load(); got < 8*64 || got > sent {
		t.Errorf("the relay to the server carried %d datagrams; the client sent %d", got, sent)
	}
	// The server's counts are taken when it reports: after that it may still repeat its last
	// ACK at the idle tail (rc.AckRepeats times), and answer each retransmission that reaches it
	// late (a timeout that fired while the last ACK was on its way).
	replies := int64(res.AckPackets + res.NakPackets)
	if got := toClient.n.Load(); got == 0 || got > replies+rc.AckRepeats+int64(res.RetransmittedPackets) {
		t.Errorf("the relay to the client carried %d datagrams; the server sent %d ACKs and NAKs, the client %d retransmissions",
			got, replies, res.RetransmittedPackets)
	}
	if d := (&Options{Via: toServer.addr()}).rtt(); d != 0 {
		t.Errorf("initial RTT with Via and no RTT stated: %v, want 0 (unknown)", d)
	}
	if d := (&Options{Via: toServer.addr(), RTT: 30 * time.Millisecond}).rtt(); d != 30*time.Millisecond {
		t.Errorf("initial RTT with Via and RTT 30ms stated: %v", d)
	}
	if d := (&Options{Delay: 5 * time.Millisecond}).rtt(); d != 11*time.Millisecond {
		t.Errorf("initial RTT without Via: %v, want 2 x delay + 1 ms", d)
	}
}

// first_retransmission_ms is the time from the client's first data packet to its first
// retransmission, as the client's pcap stamps them, to the microsecond; absent without one.
func TestFirstRetransmissionMatchesPcap(t *testing.T) {
	loss, _ := netem.ParseLossSpec("0.03")
	var pcap bytes.Buffer
	o := Options{Op: "write", Size: 256 << 10, Iters: 4, MTU: 1024, Mode: rc.ModeTCAETH, Rate: 400e6, Loss: loss,
		Delay: 2 * time.Millisecond, Seed: 7, Pcap: &pcap, Timeout: time.Minute, RetryCount: stallRetries}
	res, err := Loopback(context.Background(), o)
	if err != nil {
		t.Fatalf("%v (%+v)", err, res)
	}
	if res.RetransmittedPackets == 0 || res.FirstRetransmissionMs == nil {
		t.Fatalf("3 percent loss: %d retransmissions, first_retransmission_ms %v", res.RetransmittedPackets, res.FirstRetransmissionMs)
	}
	r, err := capture.NewReader(&pcap)
	if err != nil {
		t.Fatal(err)
	}
	var first, retx time.Time
	seen := map[uint32]bool{}
	for retx.IsZero() {
		f, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		d, err := capture.DecodeUDP(f.LinkType, f.Data)
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := roce.ParseBTH(d.Payload)
		if err != nil || !b.OpCode.Info().Source {
			continue // the server's ACKs share the loopback capture
		}
		if first.IsZero() {
			first = f.Time
		}
		if seen[uint32(b.PSN)] {
			retx = f.Time
		}
		seen[uint32(b.PSN)] = true
	}
	if retx.IsZero() {
		t.Fatal("no retransmission in the capture")
	}
	want := float64(retx.Sub(first)) / float64(time.Millisecond)
	if got := *res.FirstRetransmissionMs; got < want-0.002 || got > want+0.002 {
		t.Errorf("first_retransmission_ms %.4f, the capture says %.4f", got, want)
	}
	o.Loss, o.Pcap = netem.LossSpec{}, nil
	if clean, err := Loopback(context.Background(), o); err != nil || clean.RetransmittedPackets == 0 && clean.FirstRetransmissionMs != nil {
		t.Errorf("no loss: %v, %d retransmissions, first_retransmission_ms %v", err, clean.RetransmittedPackets, clean.FirstRetransmissionMs)
	}
}
