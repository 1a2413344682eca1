package gateway_test

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/gateway"
	"github.com/crem-project/crem/internal/harness/cremtest"
	"github.com/crem-project/crem/internal/mmsg"
	"github.com/crem-project/crem/wire"
)

// gsoSend sends ps from c to `to` as one message cut into datagrams of len(ps[0]) octets
// (UDP_SEGMENT), skipping the test where the kernel has no UDP GSO.
func gsoSend(t *testing.T, c *net.UDPConn, to netip.AddrPort, ps [][]byte) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	b := mmsg.NewGatherBatch(1, mmsg.MaxSegments, mmsg.SegmentSpace)
	b.SetSend(0, ps[0], to, false)
	for _, p := range ps[1:] {
		b.AddBuf(0, p)
	}
	b.SetSegment(0, uint16(len(ps[0])))
	var ok bool
	var e syscall.Errno
	rc.Control(func(fd uintptr) {
		if ok = mmsg.GSOSupported(fd); ok {
			_, e = b.Send(fd, 0, 1, 0)
		}
	})
	if !ok {
		t.Skip("the kernel refuses UDP_SEGMENT (Linux >= 4.18 needed for UDP GSO)")
	}
	if e != 0 {
		t.Fatalf("GSO send: %v", e)
	}
}

// TestRelayOffloadSplitsAndJoins: RoCEv2 datagrams of one size (the last shorter) sent to a
// gateway's relay socket in one GSO send arrive coalesced (with offload on) and leave toward
// the peer as the same datagrams, in order and intact, each on its own at a socket without
// GRO; the gateway sends them on in GSO runs. With offload off the same datagrams leave, with
// nothing coalesced and nothing sent in runs. In both directions: from this side's endpoints
// toward the peer (relay.listen) and from the peer toward the endpoints (relay.wan_listen).
func TestRelayOffloadSplitsAndJoins(t *testing.T) {
	for _, offload := range []bool{true, false} {
		for _, dir := range []string{"to-peer", "from-peer"} {
			name := dir + "/offload"
			if !offload {
				name = dir + "/no-offload"
			}
			t.Run(name, func(t *testing.T) { testRelayOffload(t, offload, dir == "to-peer") })
		}
	}
}

func testRelayOffload(t *testing.T, offload, toPeer bool) {
	peerData, target, ep := boundUDP(t), boundUDP(t), boundUDP(t)
	crem, wan := boundUDP(t), boundUDP(t)
	var probe error
	if rc, err := boundUDP(t).SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { probe = mmsg.EnableGRO(fd) })
	}
	if probe != nil {
		t.Skipf("the kernel refuses UDP_GRO (Linux >= 5.0 needed): %v", probe)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g, err := gateway.New(gateway.Config{Peer: netip.MustParseAddrPort("127.0.0.1:9"), Protect: []gateway.ProtectRule{{QP: 0xfffffe}}, Shards: 1,
		Relay: gateway.RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Target: addrOf(target), PeerData: addrOf(peerData), Offload: &offload}},
		gateway.Options{Seed: 1, Sockets: gateway.Sockets{CREM: crem, WAN: wan}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// 15 WRITE packets of 4 KiB and a last one of 1 KiB, of one flow: equal datagrams from
	// one source, as a NIC's GRO joins them.
	port := ep.LocalAddr().(*net.UDPAddr).Port
	desc := flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddr("127.0.0.1"), DestQP: 0x42, SrcPort: uint16(port)}
	syn := cremtest.Synth{Desc: desc, PSN: 7}
	var ps [][]byte
	for i := range 16 {
		size := 4096
		if i == 15 {
			size = 1024
		}
		ps = append(ps, append([]byte(nil), syn.Next(size)...))
	}
	to, out := g.RelayAddr(), peerData
	if !toPeer {
		to, out = g.WANAddr(), target
	}
	// The shard sends on what it has when it wakes: a run may leave split when it wakes
	// before the reader handed on the whole receive (the race detector slows the reader), so
	// the burst goes again until one run left whole, at most 20 times.
	in, sent := "local", "wan"
	if !toPeer {
		in, sent = "wan", "local"
	}
	buf := make([]byte, 9216)
	var st map[string]uint64
	bursts := 0
	for bursts < 20 {
		gsoSend(t, ep, to, ps)
		bursts++
		out.SetReadDeadline(time.Now().Add(5 * time.Second))
		for i, want := range ps {
			n, err := out.Read(buf)
			if err != nil {
				t.Fatalf("burst %d, datagram %d of %d: %v", bursts, i, len(ps), err)
			}
			if !bytes.Equal(buf[:n], want) {
				t.Fatalf("burst %d, datagram %d: %d octets, want the %d sent (in order, intact)", bursts, i, n, len(want))
			}
		}
		st = g.Stats().Gateway
		if !offload || st["gso_sends"] > 0 {
			break
		}
	}
	total := uint64(bursts * len(ps))
	// The shard counts what it sent once the send returns: the datagrams may be read first.
	for deadline := time.Now().Add(2 * time.Second); st["tx_packets_"+sent] < total && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		st = g.Stats().Gateway
	}
	if st["rx_packets_"+in] != total || st["tx_packets_"+sent] != total {
		t.Errorf("rx_packets_%s %d, tx_packets_%s %d, want %d each", in, st["rx_packets_"+in], sent, st["tx_packets_"+sent], total)
	}
	if offload {
		if st["gro_receives"] != uint64(bursts) || st["gro_datagrams"] != total {
			t.Errorf("gro_receives %d, gro_datagrams %d: want each burst's %d datagrams in one coalesced receive", st["gro_receives"], st["gro_datagrams"], len(ps))
		}
		if st["gso_sends"] == 0 {
			t.Errorf("gso_sends %d, gso_datagrams %d after %d bursts: want the datagrams sent on in runs", st["gso_sends"], st["gso_datagrams"], bursts)
		}
	} else if st["gro_receives"] != 0 || st["gso_sends"] != 0 {
		t.Errorf("offload off: gro_receives %d, gso_sends %d, want 0", st["gro_receives"], st["gso_sends"])
	}
	if st["gso_fallbacks"] != 0 || st["write_errors"] != 0 {
		t.Errorf("gso_fallbacks %d, write_errors %d, want 0", st["gso_fallbacks"], st["write_errors"])
	}
}

// TestRelayOffloadOddReceives: with offload on, a coalesced receive of 64 small datagrams
// (each copied out into a small buffer) relays every one of them, in order; a lone datagram
// longer than any RoCEv2 datagram, which the 64 KiB receive buffer holds whole, is dropped and
// counted as truncated, as without offload.
func TestRelayOffloadOddReceives(t *testing.T) {
	peerData, target, ep, crem, wan := boundUDP(t), boundUDP(t), boundUDP(t), boundUDP(t), boundUDP(t)
	ctx, cancel := context.WithCancel(context.Background())
	on := true
	g, err := gateway.New(gateway.Config{Peer: netip.MustParseAddrPort("127.0.0.1:9"), Protect: []gateway.ProtectRule{{QP: 0xfffffe}}, Shards: 1,
		Relay: gateway.RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Target: addrOf(target), PeerData: addrOf(peerData), Offload: &on}},
		gateway.Options{Seed: 1, Sockets: gateway.Sockets{CREM: crem, WAN: wan}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var ps [][]byte
	for i := range 64 {
		p := make([]byte, 100)
		p[5], p[6], p[7] = 0, 0, 0x42
		p[11] = byte(i)
		ps = append(ps, p)
	}
	gsoSend(t, ep, g.RelayAddr(), ps)
	buf := make([]byte, 65536)
	peerData.SetReadDeadline(time.Now().Add(5 * time.Second))
	for i, want := range ps {
		n, err := peerData.Read(buf)
		if err != nil {
			t.Fatalf("datagram %d of %d: %v", i, len(ps), err)
		}
		if !bytes.Equal(buf[:n], want) {
			t.Fatalf("datagram %d: %x, want %x", i, buf[:n], want)
		}
	}
	if st := g.Stats().Gateway; st["gro_receives"] != 1 || st["gro_datagrams"] != 64 {
		t.Errorf("gro_receives %d, gro_datagrams %d: want the 64 in one coalesced receive", st["gro_receives"], st["gro_datagrams"])
	}
	if _, err := ep.WriteToUDPAddrPort(make([]byte, 20000), g.RelayAddr()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for g.Stats().Gateway["truncated"] == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	st := g.Stats().Gateway
	if st["truncated"] != 1 || st["dropped_local"] != 1 || st["rx_packets_local"] != 65 {
		t.Errorf("truncated %d, dropped_local %d, rx_packets_local %d: want the long datagram counted and dropped", st["truncated"], st["dropped_local"], st["rx_packets_local"])
	}
	peerData.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := peerData.Read(buf); err == nil {
		t.Errorf("a %d-octet datagram relayed, want none", n)
	}
}
