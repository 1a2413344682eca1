package gateway_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/crem-project/crem/cremtest"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/gateway"
	"github.com/crem-project/crem/wire"
)

// BenchmarkRelay relays 4 KiB RoCEv2 packets on loopback through two gateways back to back
// (endpoint -> A -> B -> endpoint): "crem" protects the flow (k = 32, m = 4, adaptation off),
// "plain" runs the same I/O loop with no flow protected. It reports Gbit/s, CPU seconds per
// Gbit and the per-packet latency through the chain (p50, p99).
func BenchmarkRelay(b *testing.B) {
	for _, mode := range []string{"plain", "crem"} {
		for _, offload := range []bool{false, true} {
			name := mode + "/no-offload"
			if offload {
				name = mode + "/offload"
			}
			b.Run(name, func(b *testing.B) { benchRelay(b, mode == "crem", offload, 1) })
		}
	}
}

// BenchmarkRelayShards is BenchmarkRelay's crem case with offload on each gateway run with
// one and with two shards.
func BenchmarkRelayShards(b *testing.B) {
	for _, n := range []int{1, 2} {
		b.Run(fmt.Sprintf("shards=%d", n), func(b *testing.B) { benchRelay(b, true, true, n) })
	}
}

// startRelayPairWith is startRelayPair with relay.offload and the shards of both gateways
// chosen.
func startRelayPairWith(tb testing.TB, target string, rule []gateway.ProtectRule, pol gateway.PolicyConfig, offload bool, shards int) (a, b *gateway.Gateway, stop func()) {
	tb.Helper()
	aCREM, bCREM, bWAN := boundUDP(tb), boundUDP(tb), boundUDP(tb)
	ctx, cancel := context.WithCancel(context.Background())
	var done []chan struct{}
	stop = func() {
		cancel()
		for _, d := range done {
			<-d
		}
	}
	mk := func(c gateway.Config, socks gateway.Sockets) *gateway.Gateway {
		c.Relay.Offload, c.Shards = &offload, shards
		g, err := gateway.New(c, gateway.Options{Seed: 1, Sockets: socks})
		if err != nil {
			stop()
			tb.Fatal(err)
		}
		d := make(chan struct{})
		done = append(done, d)
		go func() { defer close(d); g.Run(ctx) }()
		return g
	}
	b = mk(gateway.Config{Peer: addrOf(aCREM), Protect: rule, Policy: pol,
		Relay: gateway.RelayConfig{Listen: "127.0.0.1:0", Target: target, PeerData: "127.0.0.1:9"}},
		gateway.Sockets{CREM: bCREM, WAN: bWAN})
	a = mk(gateway.Config{Peer: addrOf(bCREM), Protect: rule, Policy: pol,
		Relay: gateway.RelayConfig{Listen: "127.0.0.1:0", Target: "127.0.0.1:9", WANListen: "127.0.0.1:0", PeerData: addrOf(bWAN)}},
		gateway.Sockets{CREM: aCREM})
	return a, b, stop
}

func benchRelay(b *testing.B, protect, offload bool, shards int) {
	target, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer target.Close()
	target.SetReadBuffer(8 << 20)
	ep, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer ep.Close()
	port := ep.LocalAddr().(*net.UDPAddr).Port
	rule := []gateway.ProtectRule{{SrcPort: port}}
	if !protect {
		rule = []gateway.ProtectRule{{QP: 0xfffffe}}
	}
	off := false
	pol := gateway.PolicyConfig{K: 32, M: 4, Adapt: &off, BurstGap: "1ms"}
	a, gb, stop := startRelayPairWith(b, target.LocalAddr().String(), rule, pol, offload, shards)
	defer stop()

	desc := flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddr("127.0.0.1"), DestQP: 0x42, SrcPort: uint16(port)}
	syn := cremtest.Synth{Desc: desc, PSN: 1}
	// One 4 KiB WRITE packet whose PSN is rewritten for each send, so that every packet is a
	// new source for the CSF (the CRF checks the ICRC of restored packets only, and nothing is
	// lost here); the PSN names the send time's slot.
	pk := syn.Next(4096)
	next := uint32(1000)
	setPSN := func() uint32 {
		next = (next + 1) & 0xffffff
		pk[9], pk[10], pk[11] = byte(next>>16), byte(next>>8), byte(next)
		return next
	}
	sent := make([]time.Time, 1<<24)
	recvd := make(chan time.Duration, 1<<16)
	var lat []time.Duration
	got := make(chan int, 1)
	go func() {
		buf := make([]byte, 9000)
		n := 0
		for {
			target.SetReadDeadline(time.Now().Add(2 * time.Second))
			m, err := target.Read(buf)
			if err != nil {
				got <- n
				return
			}
			if m < 12 {
				continue
			}
			p := binary.BigEndian.Uint32(buf[8:12]) & 0xffffff
			select {
			case recvd <- time.Since(sent[p]):
			default:
			}
			n++
		}
	}()
	to := a.RelayAddr()
	// Warm up: let the flow be protected before measuring.
	if protect {
		deadline := time.Now().Add(3 * time.Second)
		for a.Stats().Sender.ParamAccepted == 0 && time.Now().Before(deadline) {
			p := setPSN()
			sent[p] = time.Now()
			ep.WriteToUDPAddrPort(pk, to)
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
		for len(recvd) > 0 {
			<-recvd
		}
	}
	const window = 256
	inflight := 0
	stall := time.NewTimer(time.Hour)
	wait := func(d time.Duration) <-chan time.Time {
		stall.Reset(d)
		return stall.C
	}
	b.SetBytes(4096)
	b.ResetTimer()
	cpu0, t0 := cpuTime(), time.Now()
	for range b.N {
		for inflight >= window {
			select {
			case d := <-recvd:
				lat = append(lat, d)
				inflight--
			case <-wait(50 * time.Millisecond):
				inflight = 0 // a loss: do not stall
			}
		}
		p := setPSN()
		sent[p] = time.Now()
		ep.WriteToUDPAddrPort(pk, to)
		inflight++
	}
	for inflight > 0 {
		select {
		case d := <-recvd:
			lat = append(lat, d)
			inflight--
		case <-wait(100 * time.Millisecond):
			inflight = 0
		}
	}
	el, cpu := time.Since(t0), cpuTime()-cpu0
	b.StopTimer()
	// Latency added per packet: one packet at a time, through the chain and then straight to
	// the receiving endpoint, on an otherwise idle path.
	oneByOne := func(to netip.AddrPort) []time.Duration {
		var d []time.Duration
		for range 2000 {
			p := setPSN()
			sent[p] = time.Now()
			ep.WriteToUDPAddrPort(pk, to)
			select {
			case x := <-recvd:
				d = append(d, x)
			case <-wait(100 * time.Millisecond):
			}
		}
		slices.Sort(d)
		return d
	}
	chain := oneByOne(to)
	direct := oneByOne(target.LocalAddr().(*net.UDPAddr).AddrPort())
	if len(chain) > 100 && len(direct) > 100 {
		q := func(d []time.Duration, f float64) float64 {
			return float64(d[int(f*float64(len(d)-1))].Nanoseconds()) / 1e3
		}
		b.ReportMetric(q(chain, 0.5)-q(direct, 0.5), "added-p50-us")
		b.ReportMetric(q(chain, 0.99)-q(direct, 0.99), "added-p99-us")
	}
	gbit := float64(len(lat)) * 4096 * 8 / 1e9
	b.ReportMetric(gbit/el.Seconds(), "Gbit/s")
	if gbit > 0 {
		b.ReportMetric(cpu.Seconds()/gbit, "cpu-s/Gbit")
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "loaded-p50-us")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "loaded-p99-us")
	}
	b.ReportMetric(float64(len(lat))/float64(b.N), "delivered/op")
	b.ReportMetric(float64(len(lat))/el.Seconds(), "pkt/s")
	sa, sb := a.Stats().Gateway, gb.Stats().Gateway
	if n := sa["tx_packets_wan"]; n > 0 {
		b.ReportMetric(float64(sa["gso_datagrams"]+sb["gso_datagrams"])/float64(n+sb["tx_packets_local"]), "gso-share")
	}
	lat = lat[:0]
	if protect && b.N >= 10000 && a.Stats().Sender.RepairSent == 0 {
		b.Fatalf("no repair sent: %+v", a.Stats().Sender)
	}
}
