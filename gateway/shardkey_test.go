package gateway

import (
	"context"
	"hash/maphash"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/internal/harness/cremtest"
	"github.com/crem-project/crem/wire"
)

func relayResolved(t *testing.T, rules []ProtectRule) *resolved {
	t.Helper()
	r, err := Config{CREMAddress: netip.MustParseAddrPort("127.0.0.1:7500"), Peer: netip.MustParseAddrPort("127.0.0.1:7600"), Protect: rules,
		Relay: RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Target: netip.MustParseAddrPort("127.0.0.1:9"), WANListen: netip.MustParseAddrPort("127.0.0.1:0"), PeerData: netip.MustParseAddrPort("127.0.0.1:9")}}.validate()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestQPShards: the QPs of a rule that names qp and reverse_qp go to one shard, the pair's
// lower QP modulo the shards; rules without a pair map nothing; pairs that share a QP stay
// together, and ones that would split a QP across shards turn the spreading off.
func TestQPShards(t *testing.T) {
	r := relayResolved(t, []ProtectRule{{QP: 0x42, ReverseQP: 0x143}, {QP: 0x145, ReverseQP: 0x45}, {QP: 0x50}, {SrcPort: 7}})
	m := newQPShards(r, 2)
	want := qpShards{0x42: 0, 0x143: 0, 0x145: 1, 0x45: 1}
	if len(m) != len(want) {
		t.Fatalf("%v, want %v", m, want)
	}
	for qp, s := range want {
		if m[qp] != s {
			t.Fatalf("%v, want %v", m, want)
		}
	}
	if newQPShards(r, 1) != nil {
		t.Error("one shard: want no map")
	}
	if m := newQPShards(relayResolved(t, []ProtectRule{{QP: 0x50}}), 2); m != nil {
		t.Errorf("no pair: %v, want none", m)
	}
	// 3 with 4 -> shard 1; 4 with 10: 10 joins 4's shard.
	if m := newQPShards(relayResolved(t, []ProtectRule{{QP: 3, ReverseQP: 4}, {QP: 10, ReverseQP: 4}}), 2); m[10] != 1 || m[3] != 1 {
		t.Errorf("shared QP: %v, want 3, 4 and 10 on shard 1", m)
	}
	// 2 with 4 -> shard 0, 3 with 5 -> shard 1; then 4 with 5 would split: none.
	if m := newQPShards(relayResolved(t, []ProtectRule{{QP: 2, ReverseQP: 4}, {QP: 3, ReverseQP: 5}, {QP: 4, ReverseQP: 5}}), 2); m != nil {
		t.Errorf("conflicting pairs: %v, want none", m)
	}
}

// TestShardForQPPairs: in relay mode with two shards the datagrams of a configured pair, both
// directions, and the HELLO of its flows reach the pair's shard; a QP of no pair and a short
// datagram go to the address pair's shard.
func TestShardForQPPairs(t *testing.T) {
	r := relayResolved(t, []ProtectRule{{QP: 0x42, ReverseQP: 0x143}, {QP: 0x145, ReverseQP: 0x45}})
	g := &Gateway{cfg: r, hseed: maphash.MakeSeed()}
	g.route.init()
	for i := range 2 {
		g.shards = append(g.shards, &shard{idx: i})
	}
	g.qps = newQPShards(r, 2)
	bth := func(qp uint32) []byte {
		b := make([]byte, 12)
		b[5], b[6], b[7] = byte(qp>>16), byte(qp>>8), byte(qp)
		return b
	}
	pairShard := g.pairHash(r.localEP, r.remoteEP)
	for _, c := range []struct {
		kind uint8
		b    []byte
		want int
	}{
		{kindLocal, bth(0x42), 0}, {kindWAN, bth(0x143), 0},
		{kindLocal, bth(0x145), 1}, {kindWAN, bth(0x45), 1},
		{kindLocal, bth(0x99), pairShard}, {kindWAN, bth(0x99), pairShard},
		{kindWAN, []byte{1, 2}, pairShard},
	} {
		p := &pkt{buf: c.b, n: len(c.b), kind: c.kind}
		if sh := g.shardFor(p); sh == nil || sh.idx != c.want {
			t.Errorf("%s datagram %x: shard %v, want %d", kindNames[c.kind], c.b, sh, c.want)
		}
	}
	for qp, want := range map[uint32]int{0x45: 1, 0x143: 0, 0x99: g.pairHash(r.remoteEP, r.localEP)} {
		h := wire.Hello{Capabilities: flow.DefaultLimits().Capabilities(4096), SenderNonce: 1, Source: netip.MustParseAddr("127.0.0.1"), Destination: netip.MustParseAddr("127.0.0.1"), FlowLabel: qp}
		b, err := h.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		p := &pkt{buf: b, n: len(b), kind: kindCREM}
		if sh := g.shardFor(p); sh == nil || sh.idx != want {
			t.Errorf("HELLO for QP %#x: shard %v, want %d", qp, sh, want)
		}
	}
}

// TestRelayQPPairsSpreadOverShards: a running relay gateway with two shards and two configured
// QP pairs hands each pair's datagrams, from this side and from the peer, to its own shard:
// each shard's node sees its pair's packets and none of the other's.
func TestRelayQPPairsSpreadOverShards(t *testing.T) {
	sink, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	ep, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	crem, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{Peer: netip.MustParseAddrPort("127.0.0.1:9"), Shards: 2,
		Protect: []ProtectRule{{QP: 0x42, ReverseQP: 0x142}, {QP: 0x43, ReverseQP: 0x143}},
		Relay: RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Target: sink.LocalAddr().(*net.UDPAddr).AddrPort(), WANListen: netip.MustParseAddrPort("127.0.0.1:0"),
			PeerData: sink.LocalAddr().(*net.UDPAddr).AddrPort()}}, Options{Seed: 1, Sockets: Sockets{CREM: crem}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// WRITE packets toward the peer to a QP of each pair (sources: counted unprotected, no
	// session yet) and packets back to the reverse QP of the first, 10 of each.
	write := func(qp uint32) []byte {
		syn := cremtest.Synth{Desc: flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: netip.MustParseAddr("127.0.0.1"),
			Dst: netip.MustParseAddr("127.0.0.1"), DestQP: qp, SrcPort: 4791}, PSN: 1}
		return syn.Next(1024)
	}
	for range 10 {
		for _, qp := range []uint32{0x42, 0x143} {
			ep.WriteToUDPAddrPort(write(qp), g.RelayAddr())
		}
		ep.WriteToUDPAddrPort(write(0x142), g.WANAddr())
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if g.Stats().Gateway["handed_local"] == 20 && g.Stats().Gateway["handed_wan"] == 10 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(3 * publishEvery) // the shards publish what their nodes counted
	// Pair 0x42/0x142 is on shard 0 (0x42 % 2), pair 0x43/0x143 on shard 1.
	want := [2]struct{ out, back uint64 }{{10, 10}, {10, 0}}
	for i, sh := range g.shards {
		n := sh.snapshot().node
		if n.PacketsUnprotected != want[i].out || n.ReverseToNone+n.ReverseToSender != want[i].back {
			t.Errorf("shard %d: %d packets toward the peer, %d back; want %d and %d", i, n.PacketsUnprotected, n.ReverseToNone+n.ReverseToSender, want[i].out, want[i].back)
		}
	}
}
