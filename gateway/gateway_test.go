package gateway_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/capture"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/gateway"
	"github.com/crem-project/crem/internal/harness/cremtest"
	"github.com/crem-project/crem/internal/harness/lab"
	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/wire"
)

// TestRelayChainLoopback runs the whole chain in relay mode on loopback: an RC requester,
// gateway A, an impaired path with 2 percent loss, gateway B, an RC responder; every byte is
// checked and CREM restores packets in both CREM configurations.
func TestRelayChainLoopback(t *testing.T) {
	loss, _ := netem.ParseLossSpec("0.02")
	res, err := lab.Lab(context.Background(), lab.Options{RTT: 10 * time.Millisecond, Loss: loss, Rate: 200e6,
		Messages: 4, Size: 1 << 20, Seed: 3, Runs: []string{"crem+tcaeth", "crem+gbn"}, Timeout: 40 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Runs {
		t.Logf("%+v", r)
		if !r.Verified {
			t.Errorf("%s: not verified: %s", r.Name, r.Error)
		}
		if r.Restored == 0 {
			t.Errorf("%s: CREM restored nothing", r.Name)
		}
	}
}

type sink struct {
	c  *net.UDPConn
	ch chan []byte
}

func newSink(t *testing.T) *sink {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{c: c, ch: make(chan []byte, 1024)}
	go func() {
		b := make([]byte, 65536)
		for {
			n, err := c.Read(b)
			if err != nil {
				return
			}
			s.ch <- append([]byte(nil), b[:n]...)
		}
	}()
	t.Cleanup(func() { c.Close() })
	return s
}

func (s *sink) addr() netip.AddrPort { return s.c.LocalAddr().(*net.UDPAddr).AddrPort() }

// boundUDP binds a UDP socket on 127.0.0.1: one to hand to a gateway (gateway.Options.Sockets),
// or an address where nothing answers (it is never read; closed at the test's end).
func boundUDP(t testing.TB) *net.UDPConn {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func addrOf(c *net.UDPConn) netip.AddrPort { return c.LocalAddr().(*net.UDPAddr).AddrPort() }

func start(t *testing.T, c gateway.Config, socks gateway.Sockets) (*gateway.Gateway, context.CancelFunc, chan struct{}) {
	g, err := gateway.New(c, gateway.Options{Seed: 7, Sockets: socks})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return g, cancel, done
}

func send(t *testing.T, to netip.AddrPort, from *net.UDPConn, b []byte) {
	if _, err := from.WriteToUDPAddrPort(b, to); err != nil {
		t.Fatal(err)
	}
}

// TestUnreachablePeerAndGarbage: with no peer answering, the flow stays unprotected but its
// packets are relayed, the CSF gives up HELLO after eight attempts (C3) and says so in the
// metrics; garbage on the CREM port is counted and changes nothing.
func TestUnreachablePeerAndGarbage(t *testing.T) {
	peerData, target := newSink(t), newSink(t)
	c := gateway.Config{Peer: addrOf(boundUDP(t)), Shards: 2,
		Relay:  gateway.RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Target: target.addr(), WANListen: netip.MustParseAddrPort("127.0.0.1:0"), PeerData: peerData.addr()},
		Policy: gateway.PolicyConfig{HelloHoldOff: gateway.Dur(200 * time.Millisecond)}}
	g, _, _ := start(t, c, gateway.Sockets{CREM: boundUDP(t)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithCancel(context.Background())
	defer mcancel()
	go g.ServeMetrics(mctx, ln)

	ep, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	defer ep.Close()
	desc := flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddr("127.0.0.1"), DestQP: 0x42, SrcPort: 5000}
	syn := cremtest.Synth{Desc: desc, PSN: 100}
	garbage := [][]byte{{}, {0xff}, {0x12, 0, 0, 8, 0, 0, 0, 1}, make([]byte, 2000), []byte("GET / HTTP/1.1\r\n\r\n"),
		{0x11, 0x80, 0, 0x2c, 0, 0, 0xbe, 0xef}, append([]byte{0x1a}, make([]byte, 60)...)}
	for i := range 40 {
		send(t, g.RelayAddr(), ep, syn.Next(256))
		send(t, g.CREMAddr(), ep, garbage[i%len(garbage)])
		send(t, g.WANAddr(), ep, garbage[i%len(garbage)])
		select {
		case <-peerData.ch:
		case <-time.After(2 * time.Second):
			t.Fatalf("packet %d not relayed", i)
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := g.Stats()
	if st.Sender.Unprotected == 0 || st.Sender.HelloSent <= 8 {
		t.Fatalf("want an unprotected episode after eight HELLOs and HELLO tried again after the hold-off, got %+v", st.Sender)
	}
	if st.Gateway["packets_unprotected"] == 0 || st.Gateway["crem_discarded"]+st.Gateway["crem_malformed"]+st.Receiver.MessagesMalformed == 0 {
		t.Fatalf("counters: %v", st.Gateway)
	}
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"crem_csf_unprotected_total", "crem_csf_hello_sent_total", "crem_crf_flows_restored_total", "crem_gateway_packets_unprotected_total", "crem_csf_flow_state{",
		"crem_pairing_paired_by_correlation_total", "crem_pairing_paired_by_cm_total", "crem_pairing_contradictions_total",
		"crem_pairing_probation_evicted_total", "crem_gateway_reverse_to_none_total"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	resp, err = http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestCloseOnStop: two gateways back to back; the flow is protected, and stopping gateway A
// sends CLOSE reason 0, which gateway B's CRF receives.
func TestCloseOnStop(t *testing.T) {
	target := newSink(t)
	aCREM, bCREM, bWAN := boundUDP(t), boundUDP(t), boundUDP(t)
	rule := []gateway.ProtectRule{{SrcPort: 5000}}
	b, _, _ := start(t, gateway.Config{Peer: addrOf(aCREM), Protect: rule,
		Relay: gateway.RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Target: target.addr(), PeerData: netip.MustParseAddrPort("127.0.0.1:9")}},
		gateway.Sockets{CREM: bCREM, WAN: bWAN})
	a, cancelA, doneA := start(t, gateway.Config{Peer: addrOf(bCREM), Protect: rule,
		Relay: gateway.RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Target: netip.MustParseAddrPort("127.0.0.1:9"), WANListen: netip.MustParseAddrPort("127.0.0.1:0"), PeerData: addrOf(bWAN)}},
		gateway.Sockets{CREM: aCREM})
	ep, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5000})
	if ep == nil {
		t.Skip("port 5000 busy")
	}
	defer ep.Close()
	desc := flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddr("127.0.0.1"), DestQP: 0x42, SrcPort: 5000}
	syn := cremtest.Synth{Desc: desc, PSN: 100}
	deadline := time.Now().Add(5 * time.Second)
	for a.Stats().Sender.ParamAccepted == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("flow never protected: %+v", a.Stats().Sender)
		}
		send(t, a.RelayAddr(), ep, syn.Next(512))
		time.Sleep(5 * time.Millisecond)
	}
	for range 100 {
		send(t, a.RelayAddr(), ep, syn.Next(512))
	}
	time.Sleep(50 * time.Millisecond)
	cancelA()
	<-doneA
	for time.Now().Before(deadline) && b.Stats().Receiver.CloseReceivedByReason[0] == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if st := b.Stats(); st.Receiver.CloseReceivedByReason[0] == 0 || st.Receiver.Flows.Sources == 0 {
		t.Fatalf("B's CRF: %+v", st.Receiver)
	}
}

// TestPcap: the gateway records what it receives and what it sends.
func TestPcap(t *testing.T) {
	peerData := newSink(t)
	var buf bytes.Buffer
	c := gateway.Config{Peer: addrOf(boundUDP(t)),
		Relay: gateway.RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Target: netip.MustParseAddrPort("127.0.0.1:9"), WANListen: netip.MustParseAddrPort("127.0.0.1:0"), PeerData: peerData.addr()}}
	g, err := gateway.New(c, gateway.Options{Pcap: &buf, Seed: 1, Sockets: gateway.Sockets{CREM: boundUDP(t)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	ep, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	defer ep.Close()
	desc := flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddr("127.0.0.1"), DestQP: 7, SrcPort: 1}
	syn := cremtest.Synth{Desc: desc}
	for range 5 {
		send(t, g.RelayAddr(), ep, syn.Next(100))
		<-peerData.ch
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r, err := capture.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	in, out := 0, 0
	for {
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
		switch {
		case d.Dst == g.RelayAddr():
			in++
		case d.Src == g.WANAddr() && d.Dst == peerData.addr():
			out++
		}
	}
	if in != 5 || out != 5 {
		t.Fatalf("captured %d received and %d relayed, want 5 and 5", in, out)
	}
}
