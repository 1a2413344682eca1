//go:build linux

package gateway

import (
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// TestTunDispatchesPathReportToItsFlowsShard: with several shards, a PATH_REPORT read from the
// TUN device goes to the shard of the flow it names (its Source and Destination), the shard that
// holds that flow's CSF, not to the shard of the reporter's and the source's addresses it
// travels between; other packets go by their own addresses. Root: a real TUN device.
func TestTunDispatchesPathReportToItsFlowsShard(t *testing.T) {
	needTun(t)
	cremAddr := freeLoopbackPort(t)
	g, err := New(Config{CREMAddress: cremAddr, Peer: netip.MustParseAddrPort("127.0.0.1:9"), Mode: ModeTun, Shards: 8,
		Tun: TunConfig{Name: fmt.Sprintf("cremd%d", os.Getpid()%1000000), LocalPrefixes: []Prefix{MustParsePrefix("127.77.0.0/16")}}},
		Options{Seed: 1})
	if err != nil {
		t.Fatalf("New in tun mode: %v", err)
	}
	defer g.closeSockets()
	ip := func(from, to netip.Addr, fromPort, toPort uint16, payload []byte) []byte {
		b, err := roce.LogicalHeader{Src: from, Dst: to, SrcPort: fromPort, DstPort: toPort}.AppendIPUDP(nil, len(payload))
		if err != nil {
			t.Fatal(err)
		}
		return append(b, payload...)
	}
	// landed dispatches b and returns the shard it reached.
	landed := func(b []byte) int {
		t.Helper()
		p := g.getPkt(len(b))
		p.n = copy(p.buf, b)
		g.tunDispatch(p)
		for i, sh := range g.shards {
			select {
			case q := <-sh.in:
				g.putPkt(q)
				return i
			default:
			}
		}
		t.Fatal("the packet reached no shard")
		return -1
	}
	reporter := netip.MustParseAddr("127.99.0.7")
	checked := 0
	for i := range 64 {
		src := netip.AddrFrom4([4]byte{127, 77, 0, byte(1 + i)})
		dst := netip.AddrFrom4([4]byte{127, 88, 0, byte(1 + i)})
		flowShard, pathShard := g.pairHash(src, dst), g.pairHash(reporter, src)
		if flowShard == pathShard {
			continue // the addresses agree: nothing to tell apart
		}
		checked++
		m := wire.PathReport{Method: wire.MethodNodeDrops, Source: src, Destination: dst,
			Hops: []wire.HopEntry{{NodeID: 9, MarkingPeriodNumber: 1, LostCount: 1, Cause: wire.CauseCongestion, DroppedPSNs: []psn.PSN{7}}}}
		rep, err := m.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := landed(ip(reporter, src, 40000, cremAddr.Port(), rep)); got != flowShard {
			t.Fatalf("a PATH_REPORT naming %v -> %v reached shard %d, want the flow's, %d (its own addresses' is %d)", src, dst, got, flowShard, pathShard)
		}
		// Any other datagram between the same addresses goes by them.
		if got := landed(ip(reporter, src, 40000, cremAddr.Port()+1, rep)); got != pathShard {
			t.Fatalf("a datagram to another port reached shard %d, want its addresses', %d", got, pathShard)
		}
	}
	if checked < 16 {
		t.Fatalf("only %d of 64 flows hash apart from their reports' addresses over 8 shards", checked)
	}
}
