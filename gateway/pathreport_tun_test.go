package gateway_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/gateway"
	"github.com/crem-project/crem/internal/harness/cremtest"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// ipPacket wraps a UDP payload in an IPv4 and UDP header.
func ipPacket(t *testing.T, from, to netip.Addr, fromPort, toPort uint16, payload []byte) []byte {
	t.Helper()
	b, err := roce.LogicalHeader{Src: from, Dst: to, SrcPort: fromPort, DstPort: toPort}.AppendIPUDP(nil, len(payload))
	if err != nil {
		t.Fatal(err)
	}
	return append(b, payload...)
}

// TestTunPathReportC10C14: the packet handling of a tun-mode gateway (Node.Tun, no device, no
// root) takes a PATH_REPORT addressed to a source it serves off the data path and gives it to
// that flow's CSF (C10), which applies the configured reporters (C14) and the rest of its
// checks and counts each refusal by kind; reports for flows it does not serve go on to their
// host unchanged, a malformed one counted. Two tun-mode Nodes in virtual time establish the
// flow (10.1.0.1 -> 10.2.0.1, QP 0x33; 2 ms each way); the drop a configured reporter names
// gets extra repair at once, the same report from anyone else gets nothing.
func TestTunPathReportC10C14(t *testing.T) {
	const qp, sport, cremPort = 0x33, 49152, 7001
	src, dst := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.2.0.1")
	reporter, stranger := netip.MustParseAddr("10.9.0.7"), netip.MustParseAddr("10.9.0.8")
	cremA, cremB := netip.MustParseAddrPort("127.0.0.1:7001"), netip.MustParseAddrPort("127.0.0.2:7001")
	off := false
	mk := func(self, peer netip.AddrPort, local string) *gateway.Node {
		n, err := gateway.NewNode(gateway.Config{CREMAddress: self, Peer: peer, Mode: gateway.ModeTun,
			Tun:       gateway.TunConfig{LocalPrefixes: []gateway.Prefix{gateway.MustParsePrefix(local)}},
			Protect:   []gateway.ProtectRule{{Src: gateway.HostPrefix(src), Dst: gateway.HostPrefix(dst), QP: qp}},
			Reporters: []netip.Addr{reporter},
			Policy:    gateway.PolicyConfig{K: new(8), M: new(1), Adapt: &off, MTU: new(1024), InitialRTT: gateway.Dur(4 * time.Millisecond), BurstGap: gateway.Dur(time.Millisecond)}},
			gateway.NodeOptions{Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	a, b := mk(cremA, cremB, "10.1.0.0/16"), mk(cremB, cremA, "10.2.0.0/16")
	ab, ba := &vpath{delay: 2 * time.Millisecond}, &vpath{delay: 2 * time.Millisecond}
	syn := cremtest.Synth{Desc: flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: src, Dst: dst, DestQP: qp, SrcPort: sport}, PSN: 0x500}
	var now time.Duration
	step := func(until time.Duration) {
		for ; now < until; now += 100 * time.Microsecond {
			for _, it := range ab.due(now) {
				if it.kind == gateway.ToCREM {
					b.CREM(now, cremA, it.data, false)
				} else {
					b.Tun(now, it.data, false)
				}
			}
			for _, it := range ba.due(now) {
				if it.kind == gateway.ToCREM {
					a.CREM(now, cremB, it.data, false)
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
				if d.Kind == gateway.ToCREM {
					ba.put(now, gateway.ToCREM, d.Payload)
				}
			})
		}
	}
	source := func() psn.PSN {
		p := syn.PSN
		pkt := ipPacket(t, src, dst, sport, roce.UDPPort, syn.Next(1024))
		if !a.Tun(now, pkt, false) {
			t.Fatal("a source packet was not sent on")
		}
		ab.put(now, gateway.ToTun, pkt)
		return p
	}
	source() // fixes the first configuration's Effective PSN
	step(30 * time.Millisecond)
	var psns []psn.PSN
	for range 8 { // one block, closed full
		psns = append(psns, source())
		step(now + 100*time.Microsecond)
	}
	cs := a.Sender(syn.Desc.Key())
	if cs == nil {
		t.Fatal("no CSF for the flow")
	}
	if _, ok := cs.Config(); !ok {
		t.Fatalf("the flow is not protected after 30 ms (%v): %+v", cs.State(), a.Stats().Sender)
	}

	report := func(from netip.Addr, rsrc, rdst netip.Addr, label uint32, h wire.HopEntry) []byte {
		pr := wire.PathReport{Method: wire.MethodNodeDrops, Source: rsrc, Destination: rdst, FlowLabel: label, Hops: []wire.HopEntry{h}}
		body, err := pr.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		return ipPacket(t, from, rsrc, 40000, cremPort, body)
	}
	drop := func(ps ...psn.PSN) wire.HopEntry {
		return wire.HopEntry{NodeID: 5, LostCount: uint32(len(ps)), Cause: wire.CauseCorruption, DroppedPSNs: ps}
	}
	malformed := report(reporter, src, dst, qp, drop(psns[2]))
	malformed = malformed[:len(malformed)-3]
	type counts struct {
		taken, accepted, unlisted, implausible, unknown, extra, malformed uint64
	}
	get := func() counts {
		st := a.Stats()
		return counts{st.Gateway["path_reports_intercepted"], st.Sender.PathReports, st.Sender.PathReportsUnlisted,
			st.Sender.PathReportsImplausible, st.Sender.PathReportDropsUnknown, st.Sender.ExtraSent, st.Gateway["path_reports_malformed"] + st.Sender.PathReportsMalformed}
	}
	for _, tc := range []struct {
		name   string
		pkt    []byte
		want   counts
		passed bool // sent on to its host unchanged
		queued int  // CREM datagrams the report made A's CSF queue
	}{
		{"unlisted reporter", report(stranger, src, dst, qp, drop(psns[2])), counts{taken: 1, unlisted: 1}, false, 0},
		{"absurd count", report(reporter, src, dst, qp, wire.HopEntry{NodeID: 5, LostCount: 0xffffffff, Cause: wire.CauseCongestion}), counts{taken: 1, implausible: 1}, false, 0},
		{"PSN not sent", report(reporter, src, dst, qp, drop(syn.PSN.Add(5))), counts{taken: 1, accepted: 1, unknown: 1}, false, 0},
		// Two drops in a block of m = 1: one symbol beyond what m covers, and one for the burst.
		{"configured reporter", report(reporter, src, dst, qp, drop(psns[2], psns[4])), counts{taken: 1, accepted: 1, extra: 2}, false, 2},
		{"same drops again within an SRTT", report(reporter, src, dst, qp, drop(psns[2], psns[4])), counts{taken: 1, accepted: 1}, false, 0},
		{"another QP", report(reporter, src, dst, qp+1, drop(psns[3])), counts{}, true, 0},
		{"another destination", report(reporter, src, netip.MustParseAddr("10.2.0.9"), qp, drop(psns[3])), counts{}, true, 0},
		// It names the flow at its fixed offsets: the flow's CSF takes it and counts it (G63).
		{"malformed", malformed, counts{taken: 1, malformed: 1}, false, 0},
		{"too short to name a flow", malformed[:20+8+wire.HeaderLen+6], counts{malformed: 1}, true, 0},
	} {
		before := get()
		passed := a.Tun(now, tc.pkt, false)
		after := get()
		got := counts{after.taken - before.taken, after.accepted - before.accepted, after.unlisted - before.unlisted,
			after.implausible - before.implausible, after.unknown - before.unknown, after.extra - before.extra, after.malformed - before.malformed}
		queued := 0
		a.Drain(func(d gateway.Datagram) {
			if d.Kind == gateway.ToCREM {
				queued++
			}
		})
		if got != tc.want || passed != tc.passed || queued != tc.queued {
			t.Errorf("%s: counted %+v, sent on %v, %d datagrams; want %+v, %v, %d", tc.name, got, passed, queued, tc.want, tc.passed, tc.queued)
		}
	}
	if st := a.Stats().Sender; st.BlocksAcked != 0 || st.PathReportsRejected != st.PathReportsUnlisted+st.PathReportsImplausible+st.PathReportsMalformed {
		t.Errorf("after the reports: %+v", st)
	}
}
