package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// TestTunInterceptsPathReportC10: in tun mode a PATH_REPORT addressed to a source this gateway
// serves is taken off the data path and handed to that flow's CSF (C10), which accepts it only
// from a configured reporter (C14); a PATH_REPORT for a flow the gateway does not serve is sent
// on unchanged. The gateway is built by New with a tun-mode configuration (a real TUN device,
// so root); the shard's handler is fed the packets directly, and what it sends on is read from
// the gateway's pcap, which records every packet sendTun sends. All addresses are on loopback
// (127.77.0.0/16 this side, 127.88.0.0/16 the far side), so what is sent on stays on the host.
func TestTunInterceptsPathReportC10(t *testing.T) {
	needTun(t)
	cremAddr := freeLoopbackPort(t)
	var (
		src      = netip.MustParseAddr("127.77.0.1") // this side's endpoint: the flow's source
		dst      = netip.MustParseAddr("127.88.0.1") // the far side's endpoint
		reporter = netip.MustParseAddr("127.99.0.7") // a configured path reporter
		stranger = netip.MustParseAddr("127.99.0.8") // not a configured reporter
	)
	const qp, otherQP, sport = 0x42, 0x43, 49152
	var pcap bytes.Buffer
	g, err := New(Config{CREMAddress: cremAddr, Peer: netip.MustParseAddrPort("127.0.0.1:9"), Mode: ModeTun, Shards: 1,
		Tun:       TunConfig{Name: fmt.Sprintf("cremt%d", os.Getpid()%1000000), LocalPrefixes: []Prefix{MustParsePrefix("127.77.0.0/16")}},
		Protect:   []ProtectRule{{Src: HostPrefix(src), Dst: HostPrefix(dst), QP: qp}},
		Reporters: []netip.Addr{reporter}}, Options{Seed: 1, Pcap: &pcap})
	if err != nil {
		t.Fatalf("New in tun mode: %v", err)
	}
	defer g.closeSockets()
	sh := g.shards[0]
	cremPort := g.cfg.crem.Port()

	// sent returns the packets sendTun has sent on so far, from the pcap (Ethernet frames).
	sent := func() [][]byte {
		t.Helper()
		if err := g.pcap.flush(); err != nil {
			t.Fatal(err)
		}
		r, err := capture.NewReader(bytes.NewReader(pcap.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		var out [][]byte
		for {
			f, err := r.Next()
			if errors.Is(err, io.EOF) {
				return out
			}
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, append([]byte(nil), f.Data[14:]...))
		}
	}
	feed := func(b []byte) {
		p := &pkt{buf: make([]byte, bufSize), kind: kindTun}
		p.n = copy(p.buf, b)
		sh.mu.Lock()
		sh.handle(g.now(), p)
		sh.flush() // what the shard's loop does after each batch: the raw-socket queue goes out
		sh.mu.Unlock()
	}
	// ipv4 wraps a UDP payload in an IPv4 and UDP header (IPv4 checksum set, UDP's 0).
	ipv4 := func(from, to netip.Addr, fromPort, toPort uint16, payload []byte) []byte {
		b, err := roce.LogicalHeader{Src: from, Dst: to, SrcPort: fromPort, DstPort: toPort}.AppendIPUDP(nil, len(payload))
		if err != nil {
			t.Fatal(err)
		}
		return append(b, payload...)
	}

	// A RoCEv2 RDMA WRITE ONLY leaving this side creates the flow's CSF.
	bth := roce.BTH{OpCode: roce.OpWriteOnly, PKey: 0xffff, DestQP: qp, AckReq: true, PSN: 7}
	rp, err := bth.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	rp, _ = roce.RETH{VA: 0x1000, RKey: 0x55, DMALength: 256}.Append(rp)
	rp = append(rp, bytes.Repeat([]byte{0xa5}, 256)...)
	rp = append(rp, 0, 0, 0, 0) // ICRC
	data := ipv4(src, dst, sport, roce.UDPPort, rp)
	if err := roce.SealICRC(data[:20], data[20:28], data[28:]); err != nil {
		t.Fatal(err)
	}
	if err := roce.VerifyICRC(data[:20], data[20:28], data[28:]); err != nil {
		t.Fatal(err)
	}
	feed(data)
	k := flow.Key{Src: src, Dst: dst, DestQP: qp}
	s := sh.n.senders[k]
	if s == nil {
		t.Fatalf("no CSF for %v after its first source packet (flows started %d)", k, sh.n.stats.FlowsStarted)
	}
	if out := sent(); len(out) != 1 || !bytes.Equal(out[0], data) {
		t.Fatalf("the source packet: %d packets sent on, want it alone and unchanged", len(out))
	}

	report := func(d netip.Addr, label uint32) []byte {
		m := wire.PathReport{Method: wire.MethodNodeDrops, Source: src, Destination: d, FlowLabel: label,
			Hops: []wire.HopEntry{{NodeID: 9, MarkingPeriodNumber: 1, LostCount: 1, Cause: wire.CauseCongestion,
				DroppedPSNs: []psn.PSN{7}}}}
		b, err := m.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	type counts struct{ intercepted, accepted, rejected uint64 }
	now := func() counts {
		st := s.s.Stats()
		return counts{sh.n.stats.PathReportsTaken, st.PathReports, st.PathReportsRejected}
	}
	for _, tc := range []struct {
		name string
		pkt  []byte
		want counts // the change
		// passed: the packet is sent on unchanged rather than taken off the path.
		passed bool
	}{
		// C10 and C14: the CSF takes the report from a configured reporter.
		{"configured reporter", ipv4(reporter, src, 40000, cremPort, report(dst, qp)), counts{1, 1, 0}, false},
		// C14: from anyone else it is still the CSF's (addressed to its source), which refuses it.
		{"unconfigured reporter", ipv4(stranger, src, 40000, cremPort, report(dst, qp)), counts{1, 0, 1}, false},
		// Not a flow this gateway serves (another QP, another destination): sent on as it is.
		{"other QP", ipv4(reporter, src, 40000, cremPort, report(dst, otherQP)), counts{}, true},
		{"other destination", ipv4(reporter, src, 40000, cremPort, report(netip.MustParseAddr("127.88.0.2"), qp)), counts{}, true},
	} {
		before, n := now(), len(sent())
		feed(tc.pkt)
		after, out := now(), sent()
		got := counts{after.intercepted - before.intercepted, after.accepted - before.accepted, after.rejected - before.rejected}
		if got != tc.want {
			t.Errorf("%s: intercepted %d, CSF accepted %d, rejected %d; want %d, %d, %d", tc.name,
				got.intercepted, got.accepted, got.rejected, tc.want.intercepted, tc.want.accepted, tc.want.rejected)
		}
		switch {
		case !tc.passed && len(out) != n:
			t.Errorf("%s: an intercepted PATH_REPORT was sent on (%d packets)", tc.name, len(out)-n)
		case tc.passed && (len(out) != n+1 || !bytes.Equal(out[n], tc.pkt)):
			t.Errorf("%s: %d packets sent on, want the PATH_REPORT alone and unchanged", tc.name, len(out)-n)
		}
	}
}

// needTun skips a test of tun mode where it cannot run: another system, no root, no TUN device.
func needTun(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("tun mode exists on Linux only")
	}
	if os.Geteuid() != 0 {
		t.Skip("tun mode opens a TUN device and a raw socket: run as root")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("no TUN device: %v", err)
	}
}

// freeLoopbackPort is an address on 127.0.0.1 with a UDP port free a moment ago.
func freeLoopbackPort(t *testing.T) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}
