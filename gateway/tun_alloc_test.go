//go:build linux

package gateway

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/internal/harness/cremtest"
	"github.com/crem-project/crem/internal/testenv"
	"github.com/crem-project/crem/internal/vnethdr"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// TestTunNoAllocs: once warm, the TUN data path of two tun-mode gateways (real TUN devices and
// raw sockets; CSF and CRF at work, k = 32, m = 4) allocates nothing per packet: packets handed
// on as the device reader hands them (tunDispatch), through the shards' engines, the send
// queues and sendmmsg (tun.write = raw) or the coalesced writes into the device (device), the
// CREM messages between the gateways on loopback, the RDMA ACKs that release the CSF's blocks.
// Gateway A sends the sources on toward 127.88.0.1 (raw: loopback, where the host takes and
// drops them), and gateway B is given the same packets as if they had come across. The
// device's reader and GSO splitting are covered, with a kernel behind them, by
// cmd/crem.TestTunGSONetns. Needs root (TUN device, raw socket).
func TestTunNoAllocs(t *testing.T) {
	for _, write := range []TunWrite{WriteRaw, WriteDevice} {
		t.Run(write.String(), func(t *testing.T) { tunNoAllocs(t, write) })
	}
}

// tunNoAllocs runs TestTunNoAllocs with tun.write = write. With device writes the packets go
// into the host's stack on the TUN devices, addressed to loopback addresses, which the host
// drops as martians on a device other than lo: nothing leaves.
func tunNoAllocs(t *testing.T, write TunWrite) {
	needTun(t)
	if testing.Short() {
		t.Skip("moves 40000 packets")
	}
	if testenv.Race {
		t.Skip("the race detector allocates")
	}
	src, dst := netip.MustParseAddr("127.77.0.1"), netip.MustParseAddr("127.88.0.1")
	const qp, reverseQP, sport = 0x42, 0x43, 49152
	off := false
	rule := []ProtectRule{{Src: HostPrefix(src), Dst: HostPrefix(dst), QP: qp, ReverseQP: reverseQP, SrcPort: sport, Ordered: &off}}
	pol := PolicyConfig{K: new(32), M: new(4), Adapt: &off, BurstGap: Dur(time.Millisecond)}
	aCREM, bCREM := freeLoopbackPort(t), freeLoopbackPort(t)
	ctx, cancel := context.WithCancel(context.Background())
	var done []chan struct{}
	defer func() {
		cancel()
		for _, d := range done {
			<-d
		}
	}()
	mk := func(self, peer netip.AddrPort, name, local string) *Gateway {
		g, err := New(Config{CREMAddress: self, Peer: peer, Mode: ModeTun, Shards: 1, Protect: rule, Policy: pol,
			Tun: TunConfig{Name: fmt.Sprintf("%s%d", name, os.Getpid()%100000), LocalPrefixes: []Prefix{MustParsePrefix(local)}, Verify: VerifyLogical, Write: write}},
			Options{Seed: 1})
		if err != nil {
			t.Fatalf("New in tun mode: %v", err)
		}
		d := make(chan struct{})
		done = append(done, d)
		go func() { defer close(d); g.Run(ctx) }()
		return g
	}
	b := mk(bCREM, aCREM, "cremyb", "127.88.0.0/16")
	a := mk(aCREM, bCREM, "cremya", "127.77.0.0/16")
	desc := flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: src, Dst: dst, DestQP: qp, SrcPort: sport}
	back := flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: dst, Dst: src, DestQP: reverseQP, SrcPort: 4791}
	id := uint16(0)
	// ipOf makes the packet a kernel sender would: consecutive IPv4 Identifications, the
	// header and UDP checksums set (so that device writes may coalesce them).
	ipOf := func(d flow.Descriptor, payload []byte) []byte {
		b, err := d.LogicalHeader().AppendIPUDP(nil, len(payload))
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, payload...)
		id++
		b[4], b[5] = byte(id>>8), byte(id)
		b[10], b[11] = 0, 0
		c := vnethdr.Checksum(b[:20])
		b[10], b[11] = byte(c>>8), byte(c)
		u, _ := vnethdr.IPv4UDPChecksum(b)
		b[26], b[27] = byte(u>>8), byte(u)
		return b
	}
	syn := cremtest.Synth{Desc: desc, PSN: 1}
	// One ring of packets, built once: a packet is handed on by copying it into a pool
	// buffer, as the device reader reads into one.
	ring := make([][]byte, 4096)
	acks := make([][]byte, len(ring)/256)
	for i := range ring {
		ring[i] = ipOf(desc, syn.Next(4096))
		if i%256 == 255 {
			acks[i/256] = ipOf(back, cremtest.Ack(reverseQP, psn.PSN(1+i)))
		}
	}
	hand := func(g *Gateway, b []byte) {
		p := g.getPkt(len(b))
		p.n = copy(p.buf, b)
		g.tunDispatch(p)
	}
	next := 0
	// rebuild makes the ring again with new PSNs, so that the CSF sees new sources.
	rebuild := func() {
		base := psn.PSN(1 + next)
		for j := range ring {
			pk, _ := syn.Write(base.Add(j), 4096)
			ring[j] = ipOf(desc, pk)
			if j%256 == 255 {
				acks[j/256] = ipOf(back, cremtest.Ack(reverseQP, base.Add(j)))
			}
		}
	}
	burst := func(n int) {
		for i := range n {
			k := next % len(ring)
			if k == 0 && next > 0 {
				rebuild()
			}
			hand(a, ring[k])
			hand(b, ring[k])
			if k%256 == 255 {
				hand(a, acks[k/256])
			}
			next++
			if i%32 == 31 {
				time.Sleep(300 * time.Microsecond)
			}
		}
	}
	burst(3*len(ring) + 1) // warm
	time.Sleep(100 * time.Millisecond)
	// The rebuild of the ring allocates: the measured packets stay within one pass of it.
	const n = 4094
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	burst(n)
	time.Sleep(100 * time.Millisecond)
	runtime.ReadMemStats(&m1)
	per := float64(m1.Mallocs-m0.Mallocs) / n
	sa, sb := a.Stats(), b.Stats()
	t.Logf("%.4f allocations per packet; A: %d repair sent, %d sent on in %d sends (%d coalesced); B: %d CRF sources, %d repair, %d sent on",
		per, sa.Sender.RepairSent, sa.Gateway["tx_packets_tun"], sa.Gateway["tun_send_batches"], sa.Gateway["tun_coalesced"],
		sb.Receiver.Flows.Sources, sb.Receiver.Flows.Repairs, sb.Gateway["tx_packets_tun"])
	if sa.Sender.RepairSent == 0 || sb.Receiver.Flows.Sources == 0 {
		t.Fatal("the flow was not protected")
	}
	if sa.Gateway["tx_packets_tun"] == 0 || sa.Gateway["tun_send_batches"] >= sa.Gateway["tx_packets_tun"] {
		t.Errorf("A sent %d packets on in %d calls, want batches", sa.Gateway["tx_packets_tun"], sa.Gateway["tun_send_batches"])
	}
	if write == WriteDevice && sa.Gateway["tun_coalesced"] == 0 {
		t.Errorf("A wrote no packet coalesced into the device")
	}
	if per > 0.05 {
		t.Fatalf("%.3f allocations per packet through the TUN path, want none in steady state", per)
	}
}

// TestTunOffloadFallback: when the kernel refuses every offload set asked for (here an unknown
// flag stands in for an old kernel), the device is opened again without the virtio header and
// the gateway says why; tun.offload = false never asks.
func TestTunOffloadFallback(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("opens a TUN device and a raw socket: run as root")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("no TUN device: %v", err)
	}
	saved := tunOffloads
	defer func() { tunOffloads = saved }()
	for i := range tunOffloads {
		tunOffloads[i] = 1 << 30 // no such TUN_F_ flag: EINVAL
	}
	off := false
	port := func() netip.AddrPort {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).AddrPort()
	}
	for _, c := range []struct {
		name    string
		offload *bool
		want    string
	}{{"refused", nil, "off (TUNSETOFFLOAD: invalid argument)"}, {"not asked", &off, "off"}} {
		g, err := New(Config{CREMAddress: port(), Peer: netip.MustParseAddrPort("127.0.0.1:9"), Mode: ModeTun, Shards: 1,
			Tun: TunConfig{Name: fmt.Sprintf("cremz%d", os.Getpid()%100000), LocalPrefixes: []Prefix{MustParsePrefix("127.77.0.0/16")}, Offload: c.offload}},
			Options{Seed: 1})
		if err != nil {
			t.Fatalf("%s: New: %v", c.name, err)
		}
		if g.tun.vnet || g.tun.offloadState() != c.want {
			t.Errorf("%s: virtio header %v, offloads %q; want none, %q", c.name, g.tun.vnet, g.tun.offloadState(), c.want)
		}
		g.closeSockets()
	}
}
