package gateway_test

import (
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/gateway"
	"github.com/crem-project/crem/internal/harness/cremtest"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// The addresses of the relay pair of TestRelayPathReportWANAddressesC10: the endpoints'
// logical addresses differ from the gateways' WAN sockets, which the path carries.
var (
	wrEpA, wrEpB     = netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	wrCREMA, wrCREMB = netip.MustParseAddrPort("192.0.2.1:7001"), netip.MustParseAddrPort("198.51.100.2:7001")
	wrWANA, wrWANB   = netip.MustParseAddrPort("192.0.2.1:6000"), netip.MustParseAddrPort("198.51.100.2:6000")
	wrReporter       = netip.MustParseAddrPort("203.0.113.7:40000") // configured
	wrStranger       = netip.MustParseAddrPort("203.0.113.8:40000") // not configured
)

// wanReportRun is what one run of the relay pair in virtual time did.
type wanReportRun struct {
	a, b       gateway.Stats
	dropped    int
	delivered  int // distinct PSNs B's endpoint got
	sent       int
	restored   uint64
	extraAtA   uint64
	requestsAt uint64
}

// runWANReports drives two relay-mode Nodes in virtual time: 1,600 packets on one QP from A's
// endpoint to B's (one at 1 ms, the rest one every 50 us from 50 ms on, k = 16, m = 1, a 5 ms
// path each way, CRF reorder allowance 20 ms), the path dropping two packets of each of the
// first 75 blocks (more than its one ordinary symbol restores; the last 25 blocks, lossless,
// refill the repair budget for the last answers). With report, a node on the path tells A of each
// drop 200 us later, in a method 3 PATH_REPORT it sends from address from, naming the flow by
// src and dst (the addresses it sees) and the PSN; forged, if set, is sent to A as well each
// time (from whoever it says).
func runWANReports(t *testing.T, report bool, from netip.AddrPort, src, dst netip.Addr, forged func(p psn.PSN) (netip.AddrPort, []byte)) wanReportRun {
	t.Helper()
	const srcPort, qp = 5000, 0x2a
	off, ordered := false, false
	mk := func(self, peer, wan, peerData netip.AddrPort, local, remote netip.Addr) *gateway.Node {
		n, err := gateway.NewNode(gateway.Config{CREMAddress: self, Peer: peer, DomainProtection: gateway.ProtectionBoundary,
			Protect:   []gateway.ProtectRule{{SrcPort: srcPort, Ordered: &ordered}},
			Reporters: []netip.Addr{wrReporter.Addr()},
			Policy: gateway.PolicyConfig{K: new(16), M: new(1), Adapt: &off, MTU: new(1024), InitialRTT: gateway.Dur(10 * time.Millisecond), BurstGap: gateway.Dur(time.Millisecond),
				Reorder: gateway.Dur(20 * time.Millisecond)},
			Relay: gateway.RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), WANListen: wan, Target: netip.MustParseAddrPort("127.0.0.1:4791"),
				PeerData: peerData, LocalEndpoint: local, RemoteEndpoint: remote}},
			gateway.NodeOptions{Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	a := mk(wrCREMA, wrCREMB, wrWANA, wrWANB, wrEpA, wrEpB)
	b := mk(wrCREMB, wrCREMA, wrWANB, wrWANA, wrEpB, wrEpA)
	ab, ba := &vpath{delay: 5 * time.Millisecond}, &vpath{delay: 5 * time.Millisecond}
	syn := cremtest.Synth{Desc: flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: wrEpA, Dst: wrEpB, DestQP: qp, SrcPort: srcPort}, PSN: 0x10}
	type rep struct {
		at   time.Duration
		from netip.AddrPort
		b    []byte
	}
	var reports []rep
	var run wanReportRun
	got := map[psn.PSN]bool{}
	var now time.Duration
	for now = 0; now < 400*time.Millisecond; now += 50 * time.Microsecond {
		// One packet first, which fixes the first configuration's Effective PSN (E27); the
		// rest from 50 ms on, the flow protected (HELLO, PARAM_UPDATE and PARAM_ACK done).
		if now == time.Millisecond || now >= 50*time.Millisecond && run.sent < 1600 {
			p := syn.PSN
			pkt := syn.Next(1024)
			a.Local(now, srcPort, pkt)
			run.sent++
			if j := (run.sent - 2) % 16; run.sent > 1 && run.sent <= 1202 && (j == 3 || j == 9) {
				run.dropped++
				if report {
					pr := wire.PathReport{Method: wire.MethodNodeDrops, Source: src, Destination: dst, FlowLabel: qp,
						Hops: []wire.HopEntry{{NodeID: 3, LostCount: 1, Cause: wire.CauseCorruption, DroppedPSNs: []psn.PSN{p}}}}
					rb, err := pr.Append(nil)
					if err != nil {
						t.Fatal(err)
					}
					reports = append(reports, rep{now + 200*time.Microsecond, from, rb})
				}
				if forged != nil {
					f, fb := forged(p)
					reports = append(reports, rep{now + 200*time.Microsecond, f, fb})
				}
			} else {
				ab.put(now, gateway.ToEndpoint, pkt)
			}
		}
		for len(reports) > 0 && reports[0].at <= now {
			a.CREM(now, reports[0].from, reports[0].b, false)
			reports = reports[1:]
		}
		for _, it := range ab.due(now) {
			if it.kind == gateway.ToCREM {
				b.CREM(now, wrCREMA, it.data, false)
			} else if b.WAN(now, it.data, false) {
				got[psn.PSN(uint32(it.data[9])<<16|uint32(it.data[10])<<8|uint32(it.data[11]))] = true
			}
		}
		for _, it := range ba.due(now) {
			if it.kind == gateway.ToCREM {
				a.CREM(now, wrCREMB, it.data, false)
			}
		}
		for _, n := range []*gateway.Node{a, b} {
			if d, ok := n.NextDeadline(); ok && d <= now {
				n.Tick(now)
			}
		}
		a.Drain(func(d gateway.Datagram) {
			if d.Kind == gateway.ToCREM {
				ab.put(now, gateway.ToCREM, d.Payload)
			}
		})
		b.Drain(func(d gateway.Datagram) {
			switch d.Kind {
			case gateway.ToCREM:
				ba.put(now, gateway.ToCREM, d.Payload)
			case gateway.ToEndpoint:
				got[psn.PSN(d.PSN)] = true
			}
		})
	}
	run.a, run.b = a.Stats(), b.Stats()
	run.delivered = len(got)

	run.restored = run.b.Receiver.Flows.Restored
	run.extraAtA = run.a.Sender.ExtraSent
	run.requestsAt = run.a.Sender.RequestsReceived
	return run
}

// TestRelayPathReportWANAddressesC10: between two relay-mode gateways a node on the path sees
// the flow's datagrams from A's WAN socket to A's peer_data address, not between the endpoints'
// logical addresses, and names the flow by those in its PATH_REPORT, which it sends to A (the
// source it sees) at the CREM port (A's WAN source with any destination: a proxy in front of
// B shows B under its own address). A maps it to the flow with that destination QP (its only
// flow to that peer with that QP) and its CSF sends extra ordinary repair for the dropped
// PSNs at once: B's CRF restores every drop before its reorder allowance asks for any (no
// REPAIR_REQUEST reaches A). A report by the logical addresses works as before. Without
// reports the same drops take the request round. Every PSN arrives.
func TestRelayPathReportWANAddressesC10(t *testing.T) {
	for _, tc := range []struct {
		name     string
		report   bool
		src, dst netip.Addr
	}{
		{"WAN addresses", true, wrWANA.Addr(), wrWANB.Addr()},
		// A proxy or NAT in front of B: the node sees B under another address than peer_data.
		{"WAN source, destination translated", true, wrWANA.Addr(), netip.MustParseAddr("198.51.100.77")},
		{"logical addresses", true, wrEpA, wrEpB},
		{"no reporter", false, netip.Addr{}, netip.Addr{}},
	} {
		r := runWANReports(t, tc.report, wrReporter, tc.src, tc.dst, nil)
		t.Logf("%s: %d sent, %d dropped, %d delivered (%d restored); A: %d PATH_REPORTs taken, %d extra symbols, %d requests",
			tc.name, r.sent, r.dropped, r.delivered, r.restored, r.a.Sender.PathReports, r.extraAtA, r.requestsAt)
		if r.delivered != r.sent || r.dropped != 150 {
			t.Errorf("%s: %d of %d PSNs delivered (%d dropped)", tc.name, r.delivered, r.sent, r.dropped)
		}
		if r.restored != uint64(r.dropped) {
			t.Errorf("%s: %d restored of %d dropped", tc.name, r.restored, r.dropped)
		}
		if tc.report {
			if r.a.Sender.PathReports != uint64(r.dropped) || r.extraAtA != uint64(r.dropped) || r.requestsAt != 0 {
				t.Errorf("%s: %d reports taken, %d extra symbols, %d requests: want %d, %d, 0", tc.name,
					r.a.Sender.PathReports, r.extraAtA, r.requestsAt, r.dropped, r.dropped)
			}
		} else if r.requestsAt == 0 || r.extraAtA != 0 {
			t.Errorf("%s: %d requests and %d extra symbols: want the request round", tc.name, r.requestsAt, r.extraAtA)
		}
	}
}

// TestRelayPathReportForgedC14: the run of TestRelayPathReportWANAddressesC10 without a genuine
// reporter, while for every drop a forged PATH_REPORT reaches A: from an unlisted address (by
// the WAN and by the logical addresses), for a flow A does not have (another QP, addresses
// that are neither A's WAN address nor its peer_data address), with absurd counts, naming PSNs that do not exist, and one that does not parse.
// None moves anything: no extra repair, the request round as without reports; each is counted
// where it is refused, the gateway's own (malformed, unknown flow) among the gateway's metrics.
func TestRelayPathReportForgedC14(t *testing.T) {
	const qp = 0x2a
	kinds := []string{"unlisted WAN", "unlisted logical", "other QP", "other addresses", "absurd count", "no such PSN", "malformed"}
	i := 0
	forged := func(p psn.PSN) (netip.AddrPort, []byte) {
		k := kinds[i%len(kinds)]
		i++
		pr := wire.PathReport{Method: wire.MethodNodeDrops, Source: wrWANA.Addr(), Destination: wrWANB.Addr(), FlowLabel: qp,
			Hops: []wire.HopEntry{{NodeID: 3, LostCount: 1, Cause: wire.CauseCongestion, DroppedPSNs: []psn.PSN{p}}}}
		from := wrReporter
		switch k {
		case "unlisted WAN":
			from = wrStranger
		case "unlisted logical":
			from, pr.Source, pr.Destination = wrStranger, wrEpA, wrEpB
		case "other QP":
			pr.FlowLabel = qp + 1
		case "other addresses": // neither A's WAN address nor its peer_data, nor the logical ones
			pr.Source, pr.Destination = netip.MustParseAddr("192.0.2.99"), netip.MustParseAddr("198.51.100.3")
		case "absurd count":
			pr.Hops[0].LostCount = 0xffffffff
		case "no such PSN":
			pr.Hops[0].DroppedPSNs = []psn.PSN{p.Add(1 << 20), p.Add(-1 << 20), p.Add(100000)}
			pr.Hops[0].LostCount = 3
		}
		b, err := pr.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		if k == "malformed" {
			b = b[:len(b)-2]
		}
		return from, b
	}
	r := runWANReports(t, false, netip.AddrPort{}, netip.Addr{}, netip.Addr{}, forged)
	s, g := r.a.Sender, r.a.Gateway
	t.Logf("%d forged reports: CSF rejected %d (unlisted %d, wrong flow %d, implausible %d, malformed %d), took %d (drops unknown %d); gateway: malformed %d, unknown flow %d; extra %d, requests %d",
		i, s.PathReportsRejected, s.PathReportsUnlisted, s.PathReportsWrongFlow, s.PathReportsImplausible, s.PathReportsMalformed, s.PathReports,
		s.PathReportDropsUnknown, g["path_reports_malformed"], g["path_reports_unknown_flow"], s.ExtraSent, s.RequestsReceived)
	per := uint64(i / len(kinds)) // each kind at least this often
	if r.delivered != r.sent || r.restored != uint64(r.dropped) {
		t.Errorf("%d of %d delivered, %d restored of %d dropped", r.delivered, r.sent, r.restored, r.dropped)
	}
	if s.ExtraSent != 0 || s.RequestsReceived == 0 {
		t.Errorf("forged reports: %d extra symbols, %d requests: want none, and the request round", s.ExtraSent, s.RequestsReceived)
	}
	if s.PathReportsUnlisted < 2*per || s.PathReportsImplausible < per || s.PathReports < per || s.PathReportDropsUnknown < 3*per ||
		g["path_reports_unknown_flow"] < 2*per || s.PathReportsMalformed < per || g["path_reports_malformed"] != 0 || s.PathReportsWrongFlow != 0 {
		t.Errorf("forged reports not counted by kind: %+v %v", s, g)
	}
	// A malformed report still names its flow at fixed offsets: its CSF counts it (G63).
	if got := s.PathReportsRejected + s.PathReports + g["path_reports_unknown_flow"] + g["path_reports_malformed"]; got != uint64(i) {
		t.Errorf("%d forged reports, %d accounted for", i, got)
	}
}

// TestRelayReportAddressWarnedC10: a relay-mode gateway with path reporters whose CREM socket
// listens on another address than its WAN socket says so at start: a reporter between the
// gateways sends its reports to the WAN address at the CREM port, where nothing listens. With
// both on one address, or without reporters, nothing is said.
func TestRelayReportAddressWarnedC10(t *testing.T) {
	for _, tc := range []struct {
		name      string
		wan       netip.Addr
		reporters []netip.Addr
		warned    bool
	}{
		{"CREM elsewhere", netip.MustParseAddr("127.0.0.2"), []netip.Addr{netip.MustParseAddr("127.0.0.9")}, true},
		{"CREM on the WAN address", netip.MustParseAddr("127.0.0.1"), []netip.Addr{netip.MustParseAddr("127.0.0.9")}, false},
		{"no reporters", netip.MustParseAddr("127.0.0.2"), nil, false},
	} {
		h := &logRecords{}
		g, err := gateway.New(gateway.Config{Peer: netip.MustParseAddrPort("127.0.0.1:9"), Reporters: tc.reporters,
			Relay: gateway.RelayConfig{Target: netip.MustParseAddrPort("127.0.0.1:9"), PeerData: netip.MustParseAddrPort("127.0.0.1:9")}},
			gateway.Options{Logger: slog.New(h), Seed: 1, Sockets: gateway.Sockets{CREM: bindLoopback(t, netip.MustParseAddr("127.0.0.1")),
				Relay: bindLoopback(t, netip.MustParseAddr("127.0.0.1")), WAN: bindLoopback(t, tc.wan)}})
		if err != nil {
			t.Fatal(err)
		}
		g.Close()
		warned := false
		for _, r := range h.recs {
			warned = warned || strings.Contains(r, "path reporters on the WAN path")
		}
		if warned != tc.warned {
			t.Errorf("%s: warned %v, want %v (%q)", tc.name, warned, tc.warned, h.recs)
		}
	}
}
