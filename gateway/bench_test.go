package gateway_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/gateway"
	"github.com/crem-project/crem/internal/harness/cremtest"
	"github.com/crem-project/crem/wire"
)

// BenchmarkRelay relays 4 KiB RoCEv2 packets on loopback through two gateways back to back
// (endpoint -> A -> B -> endpoint), one shard each: "crem" protects the flow (k = 32, m = 4,
// adaptation off), "plain" runs the same I/O loop with no flow protected; "offload" moves the
// gateways' datagrams with UDP GSO and GRO (relay.offload), "no-offload" one datagram per
// message. The endpoints, the same in every case, cost as little as the kernel allows (as
// NICs would): they send batches of 32 with sendmmsg in GSO runs and receive with recvmmsg
// and GRO (one datagram per message where the kernel has neither), 256 packets in flight.
// It reports Gbit/s, packets/s,
// CPU seconds (the whole process: endpoints included) per Gbit, the share of datagrams the
// gateways sent in GSO runs, and the per-packet latency through the chain.
func BenchmarkRelay(b *testing.B) {
	for _, mode := range []string{"plain", "crem"} {
		for _, offload := range []bool{false, true} {
			name := mode + "/no-offload"
			if offload {
				name = mode + "/offload"
			}
			b.Run(name, func(b *testing.B) { benchRelay(b, mode == "crem", offload, 1, 1) })
		}
	}
}

// BenchmarkRelayShards is BenchmarkRelay's crem case with offload and two flows (QPs 0x42 and
// 0x43, each a configured pair with its reverse QP, so that each has a shard of its own when
// there are two: the pair's lower QP modulo the shards), each gateway run with one and with
// two shards; the endpoint sends the flows' batches in turn.
func BenchmarkRelayShards(b *testing.B) {
	for _, n := range []int{1, 2} {
		b.Run(fmt.Sprintf("shards=%d", n), func(b *testing.B) { benchRelay(b, true, true, n, 2) })
	}
}

// startRelayPairWith is startRelayPair with relay.offload and the shards of both gateways
// chosen.
func startRelayPairWith(tb testing.TB, target netip.AddrPort, rule []gateway.ProtectRule, pol gateway.PolicyConfig, offload bool, shards int) (a, b *gateway.Gateway, stop func()) {
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
		Relay: gateway.RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Target: target, PeerData: netip.MustParseAddrPort("127.0.0.1:9")}},
		gateway.Sockets{CREM: bCREM, WAN: bWAN})
	a = mk(gateway.Config{Peer: addrOf(bCREM), Protect: rule, Policy: pol,
		Relay: gateway.RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Target: netip.MustParseAddrPort("127.0.0.1:9"), WANListen: netip.MustParseAddrPort("127.0.0.1:0"), PeerData: addrOf(bWAN)}},
		gateway.Sockets{CREM: aCREM})
	return a, b, stop
}

// benchBatch is how many packets the endpoints send and receive per system call.
const benchBatch = 32

// sentSlots holds the send times of the latest PSNs (a PSN's slot is its low bits).
const sentSlots = 1 << 20

// benchSink is the receiving endpoint: it reads batches and keeps each packet's time through
// the chain, found by its PSN.
type benchSink struct {
	base   time.Time
	sent   []atomic.Int64 // send time since base, per PSN slot
	got    atomic.Int64
	notify chan struct{}
	mu     sync.Mutex
	lat    []time.Duration
}

func (k *benchSink) arrived(pkts [][]byte) {
	now := int64(time.Since(k.base))
	k.mu.Lock()
	for _, p := range pkts {
		if len(p) < 12 {
			continue
		}
		psn := binary.BigEndian.Uint32(p[8:12]) & 0xffffff
		k.lat = append(k.lat, time.Duration(now-k.sent[psn%sentSlots].Load()))
	}
	k.mu.Unlock()
	k.got.Add(int64(len(pkts)))
	select {
	case k.notify <- struct{}{}:
	default:
	}
}

func (k *benchSink) take() []time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.lat
	k.lat = make([]time.Duration, 0, cap(l))
	return l
}

func benchRelay(b *testing.B, protect, offload bool, shards, flows int) {
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
	ep.SetWriteBuffer(8 << 20)
	port := uint16(ep.LocalAddr().(*net.UDPAddr).Port)
	rule := []gateway.ProtectRule{{SrcPort: port}}
	if flows > 1 {
		rule = nil
		for f := range flows {
			rule = append(rule, gateway.ProtectRule{SrcPort: port, QP: 0x42 + uint32(f), ReverseQP: 0x142 + uint32(f)})
		}
	}
	if !protect {
		rule = []gateway.ProtectRule{{QP: 0xfffffe}}
	}
	off := false
	pol := gateway.PolicyConfig{K: new(32), M: new(4), Adapt: &off, BurstGap: gateway.Dur(time.Millisecond)}
	a, gb, stop := startRelayPairWith(b, target.LocalAddr().(*net.UDPAddr).AddrPort(), rule, pol, offload, shards)
	defer stop()

	// Per flow, copies of one 4 KiB WRITE packet whose PSN is rewritten for each send, so that
	// every packet is a new source for the CSF (the CRF checks the ICRC of restored packets
	// only, and nothing is lost here); the PSN names the send time's slot, the flows' PSNs
	// apart.
	pkts := make([][][]byte, flows)
	next := make([]uint32, flows)
	for f := range flows {
		desc := flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddr("127.0.0.1"), DestQP: uint32(0x42 + f), SrcPort: uint16(port)}
		syn := cremtest.Synth{Desc: desc, PSN: 1}
		pk := syn.Next(4096)
		for range benchBatch {
			pkts[f] = append(pkts[f], slices.Clone(pk))
		}
		next[f] = uint32(1000 + f<<19)
	}
	sink := &benchSink{base: time.Now(), sent: make([]atomic.Int64, sentSlots), notify: make(chan struct{}, 1),
		lat: make([]time.Duration, 0, b.N+4096)}
	stamp := func(f int, p []byte) {
		next[f] = (next[f] + 1) & 0xffffff
		n := next[f]
		p[9], p[10], p[11] = byte(n>>16), byte(n>>8), byte(n)
		sink.sent[n%sentSlots].Store(int64(time.Since(sink.base)))
	}
	recvDone := make(chan struct{})
	go func() { defer close(recvDone); benchReceive(target, sink) }()
	defer func() { target.Close(); <-recvDone }()
	send := benchSender(b, ep)
	to := a.RelayAddr()
	direct := target.LocalAddr().(*net.UDPAddr).AddrPort()
	stall := time.NewTimer(time.Hour)
	wait := func(d time.Duration) bool {
		stall.Reset(d)
		select {
		case <-sink.notify:
			if !stall.Stop() {
				<-stall.C
			}
			return true
		case <-stall.C:
			return false
		}
	}
	// Warm up: let the flow be protected before measuring.
	if protect {
		deadline := time.Now().Add(3 * time.Second)
		for a.Stats().Sender.ParamAccepted < uint64(flows) && time.Now().Before(deadline) {
			for f := range flows {
				stamp(f, pkts[f][0])
				send(pkts[f][:1], to)
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
	}
	const window = 256
	// run sends n packets in batches, at most window in flight, and returns how many
	// arrived; a packet missing for 50 ms counts as lost, so a loss does not stall.
	run := func(n int) int64 {
		got0 := sink.got.Load()
		var sent, lost int64
		for f := 0; sent < int64(n); f = (f + 1) % flows {
			for sent-(sink.got.Load()-got0)-lost > window-benchBatch {
				if !wait(50 * time.Millisecond) {
					lost = sent - (sink.got.Load() - got0)
				}
			}
			m := min(benchBatch, n-int(sent))
			for _, p := range pkts[f][:m] {
				stamp(f, p)
			}
			send(pkts[f][:m], to)
			sent += int64(m)
		}
		for sent-(sink.got.Load()-got0)-lost > 0 && wait(100*time.Millisecond) {
		}
		return sink.got.Load() - got0
	}
	run(4096) // warm: buffers, the CSF's blocks, the CRF's window
	sink.take()
	b.SetBytes(4096)
	b.ResetTimer()
	cpu0, t0 := cpuTime(), time.Now()
	got := run(b.N)
	el, cpu := time.Since(t0), cpuTime()-cpu0
	b.StopTimer()
	lat := sink.take()
	// Latency added per packet: one packet at a time, through the chain and then straight to
	// the receiving endpoint, on an otherwise idle path.
	oneByOne := func(to netip.AddrPort) []time.Duration {
		for range 2000 {
			stamp(0, pkts[0][0])
			send(pkts[0][:1], to)
			wait(100 * time.Millisecond)
		}
		d := sink.take()
		slices.Sort(d)
		return d
	}
	chain := oneByOne(to)
	straight := oneByOne(direct)
	if len(chain) > 100 && len(straight) > 100 {
		q := func(d []time.Duration, f float64) float64 {
			return float64(d[int(f*float64(len(d)-1))].Nanoseconds()) / 1e3
		}
		b.ReportMetric(q(chain, 0.5)-q(straight, 0.5), "added-p50-us")
		b.ReportMetric(q(chain, 0.99)-q(straight, 0.99), "added-p99-us")
	}
	gbit := float64(got) * 4096 * 8 / 1e9
	b.ReportMetric(gbit/el.Seconds(), "Gbit/s")
	b.ReportMetric(float64(got)/el.Seconds(), "pkt/s")
	if gbit > 0 {
		b.ReportMetric(cpu.Seconds()/gbit, "cpu-s/Gbit")
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "loaded-p50-us")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "loaded-p99-us")
	}
	b.ReportMetric(float64(got)/float64(b.N), "delivered/op")
	sa, sb := a.Stats().Gateway, gb.Stats().Gateway
	if n := sa["tx_packets_wan"] + sa["tx_packets_crem"] + sb["tx_packets_local"]; n > 0 {
		b.ReportMetric(float64(sa["gso_datagrams"]+sb["gso_datagrams"])/float64(n), "gso-share")
	}
	if protect && b.N >= 10000 && a.Stats().Sender.RepairSent == 0 {
		b.Fatalf("no repair sent: %+v", a.Stats().Sender)
	}
}
