//go:build linux

package udpproxy

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/netem"
)

// TestNetemRoutesShareThePath: a client with a route reaches its own forward address, the
// others --forward, through the same link: one queue, so that the datagrams of the two clients
// leave it in the order they entered it (CREM's REPAIR never overtakes the data it protects, as
// on one WAN), with the same delay; the answers from each address come back to its client.
func TestNetemRoutesShareThePath(t *testing.T) {
	plain, routed := startEcho(t), startEcho(t)
	a, b := dialClient(t), dialClient(t)
	ra := a.LocalAddr().(*net.UDPAddr).AddrPort()
	const delay = 20 * time.Millisecond
	pr := startProxy(t, Config{Forward: plain.addr().String(),
		Routes:      map[netip.AddrPort]netip.AddrPort{ra: routed.addr()},
		ForwardLink: netem.Config{Delay: delay, Rate: 10e6, QueuePackets: 1000},
		ReverseLink: netem.Config{Delay: delay}})
	recvA, recvB := startReceiver(a), startReceiver(b)
	const n = 50
	start := time.Now()
	for i := range n {
		// A larger datagram of b, then a small one of a: behind the bottleneck the small one
		// waits for the large one (one queue), as it would not on a path of its own.
		if _, err := b.WriteToUDPAddrPort(make([]byte, 1400), pr.p.Addr()); err != nil {
			t.Fatal(err)
		}
		if _, err := a.WriteToUDPAddrPort(fmt.Appendf(nil, "a %d", i), pr.p.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	gotA, gotB := recvA.wait(n, patience), recvB.wait(n, patience)
	if len(gotA) != n || len(gotB) != n {
		t.Fatalf("answers: %d to the routed client, %d to the other, want %d each", len(gotA), len(gotB), n)
	}
	for i, g := range gotA {
		if want := fmt.Sprintf("a %d", i); string(g) != want {
			t.Fatalf("routed client's answer %d = %q, want %q", i, g, want)
		}
	}
	if took := time.Since(start); took < 2*delay {
		t.Errorf("answers after %v, less than the round trip %v", took, 2*delay)
	}
	// Each address saw only its client's datagrams.
	for _, x := range plain.arrivals() {
		if len(x.data) != 1400 {
			t.Fatalf("--forward got a datagram of %d octets, not the other client's", len(x.data))
		}
	}
	ar := routed.arrivals()
	if len(ar) != n {
		t.Fatalf("the route's address got %d datagrams, want %d", len(ar), n)
	}
	// One queue: 10 Mbit/s drains a 1400-octet datagram in 1.1 ms, so the routed client's i-th
	// datagram left behind i+1 larger ones, and arrived no sooner than the delay and their
	// draining after the first was sent.
	for i, x := range ar {
		if least := delay + time.Duration(i+1)*1400*8*time.Second/10e6; x.at.Sub(start) < least-time.Millisecond {
			t.Fatalf("routed datagram %d arrived %v after the start, before the %v the shared queue takes", i, x.at.Sub(start), least)
		}
	}
	st := pr.stop()
	checkSums(t, "forward", st.Forward)
	if st.Forward.Forwarded != 2*n || st.ClientsOpened != 2 {
		t.Errorf("forwarded %d, clients %d; want %d and 2", st.Forward.Forwarded, st.ClientsOpened, 2*n)
	}
	if _, err := New(Config{Listen: "127.0.0.1:0", Forward: plain.addr().String(),
		Routes: map[netip.AddrPort]netip.AddrPort{ra: netip.MustParseAddrPort("[::1]:9")}}); err == nil {
		t.Error("a route to another family than --forward's was accepted")
	}
}
