//go:build linux

package udpproxy

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/reporter"
	"github.com/crem-project/crem/wire"
)

// mergeAggregation is the reporter's aggregation interval in the merging tests: a drop's
// report waits this long for downstream reports to join it. A downstream report reaches the
// proxy one loopback round trip after the drop, which even a loaded machine does well within
// it.
const mergeAggregation = 2 * time.Second

// sync returns what the CSF has received once everything sent to it before the call has
// arrived: a sentinel sent now from a socket of its own comes after it on loopback. The
// sentinel is left out.
func (f *fakeCSF) sync(t *testing.T) (reports, bad []gotReport) {
	t.Helper()
	s := dialClient(t)
	sentinel, err := (&wire.PathReport{Method: wire.MethodNodeDrops, Source: loopback, Destination: loopback,
		FlowLabel: 0xfffff}).Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteToUDPAddrPort(sentinel, f.conn.LocalAddr().(*net.UDPAddr).AddrPort()); err != nil {
		t.Fatal(err)
	}
	from := s.LocalAddr().(*net.UDPAddr).AddrPort()
	if !eventually(func() bool {
		return slices.ContainsFunc(f.reports(), func(g gotReport) bool { return g.from == from })
	}) {
		t.Fatal("the sentinel did not reach the CSF")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, g := range f.got {
		if g.from != from {
			reports = append(reports, g)
		}
	}
	return reports, slices.Clone(f.badGot)
}

// from returns the reports that came from a.
func from(gs []gotReport, a netip.AddrPort) []gotReport {
	var out []gotReport
	for _, g := range gs {
		if g.from == a {
			out = append(out, g)
		}
	}
	return out
}

// pathReport encodes a method 3 PATH_REPORT for flow k with the given hop entries.
func pathReport(t *testing.T, k reporter.FlowKey, hops ...wire.HopEntry) []byte {
	t.Helper()
	b, err := (&wire.PathReport{Method: wire.MethodNodeDrops, Source: k.Src, Destination: k.Dst,
		FlowLabel: k.FlowLabel, Hops: hops}).Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// downstreamHops returns n hop entries of a downstream reporter, Node IDs from id on.
func downstreamHops(n int, id uint32) []wire.HopEntry {
	hops := make([]wire.HopEntry, n)
	for i := range hops {
		hops[i] = wire.HopEntry{NodeID: id + uint32(i), MarkingPeriodNumber: 9, LostCount: 2, QueueDelayChangeUS: -3,
			Cause: wire.CauseCongestion, DroppedPSNs: []psn.PSN{psn.PSN(1100 + 2*i), psn.PSN(1101 + 2*i)}}
	}
	return hops
}

// mergeRig is the deployment of a proxy on the path toward a CSF: the CSF (its socket, on the
// CREM port) is the client and sends a RoCEv2 flow through the proxy to the forward address,
// where a downstream reporter sits; the downstream reporter's PATH_REPORTs for the flow come
// back through the proxy's reverse direction, addressed to the CSF.
type mergeRig struct {
	csf  *fakeCSF
	down *net.UDPConn
	pr   running
	up   netip.AddrPort   // the proxy's upstream socket for the CSF, as the downstream sees it
	flow reporter.FlowKey // the RoCEv2 flow, CSF to downstream
}

// startMergeRig starts the rig with the reporter's routes and Merge as given; the flow's first
// datagram (PSN 1000) is dropped by the forward link and its second reaches the downstream
// reporter before startMergeRig returns, so the proxy's reporter has a report of the drop
// pending (for mergeAggregation).
func startMergeRig(t *testing.T, merge bool, routes []reporter.Route) *mergeRig {
	return startMergeRigFrom(t, merge, routes, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})
}

// startMergeRigFrom is startMergeRig with the downstream reporters whose reports may merge.
func startMergeRigFrom(t *testing.T, merge bool, routes []reporter.Route, from []netip.Prefix) *mergeRig {
	t.Helper()
	csf := startCSF(t)
	down := dialClient(t)
	downAddr := down.LocalAddr().(*net.UDPAddr).AddrPort()
	pr := startProxy(t, Config{
		Forward:     downAddr.String(),
		ForwardLink: netem.Config{Loss: mustLoss(t, "script:0", 1)},
		Report: &ReportConfig{Reporter: reporter.Config{NodeID: 5, Port: csf.port(), Aggregation: mergeAggregation,
			Routes: routes}, Listen: netip.AddrPortFrom(loopback, 0), Drops: true, Merge: merge, MergeFrom: from},
	})
	const qp = 0x42
	for _, n := range []psn.PSN{1000, 1001} {
		if _, err := csf.conn.WriteToUDPAddrPort(rocePacket(t, qp, n, []byte("data")), pr.p.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, maxDatagram)
	down.SetReadDeadline(time.Now().Add(patience))
	n, up, err := down.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("the downstream reporter got nothing: %v", err)
	}
	if h, ok := RoCE(buf[:n]); !ok || h.PSN != 1001 {
		t.Fatalf("the downstream reporter got %x, want PSN 1001", buf[:n])
	}
	return &mergeRig{csf: csf, down: down, pr: pr, up: up,
		flow: reporter.FlowKey{Src: loopback, Dst: downAddr.Addr(), FlowLabel: qp}}
}

// send sends b from the downstream reporter toward the CSF, through the proxy.
func (r *mergeRig) send(t *testing.T, b []byte) {
	t.Helper()
	if _, err := r.down.WriteToUDPAddrPort(b, r.up); err != nil {
		t.Fatal(err)
	}
}

// ownHop checks the proxy's own entry for the drop of PSN 1000.
func ownHop(t *testing.T, h wire.HopEntry) {
	t.Helper()
	if h.NodeID != 5 || h.Cause != wire.CauseCorruption || h.LostCount != 1 || !slices.Equal(h.DroppedPSNs, []psn.PSN{1000}) {
		t.Errorf("the proxy's own hop entry %+v, want Node ID 5, PSN 1000", h)
	}
}

// TestReportMergeDownstreamPathReports (draft, Path Reports: a Path Reporter that forwards
// PATH_REPORT messages from downstream reporters for the same CSF MAY merge their Hop Entries
// with its own into one PATH_REPORT, up to 16 entries, within an aggregation interval): a
// downstream reporter's PATH_REPORT for a flow of which the proxy's reporter has a report
// pending (a drop just before) is not forwarded; the CSF receives one PATH_REPORT, from the
// reporter's socket, with both entries, the proxy's first. One whose entries would take the
// report beyond 16, one for another flow and a malformed one (version 1, type 8, Entry
// Count 17) go on unchanged through the reverse link, each counted.
func TestReportMergeDownstreamPathReports(t *testing.T) {
	t.Parallel()
	r := startMergeRig(t, true, nil)
	downHop := downstreamHops(1, 77)
	merged := pathReport(t, r.flow, downHop...)
	r.send(t, merged)
	// Wait until it was offered, so that the reports below come after it.
	if !eventually(func() bool { return r.pr.p.Stats().Report.Offered == 1 }) {
		t.Fatalf("not offered: %+v", r.pr.p.Stats().Report)
	}
	tooMany := pathReport(t, r.flow, downstreamHops(15, 300)...) // 2 + 15 > 16
	other := r.flow
	other.FlowLabel = 0x43
	otherFlow := pathReport(t, other, downHop...)
	malformed := slices.Clone(otherFlow)
	malformed[wire.HeaderLen+1] = 17 // Entry Count
	for _, b := range [][]byte{tooMany, otherFlow, malformed} {
		r.send(t, b)
	}
	ok := eventually(func() bool {
		gs := r.csf.reports()
		r.csf.mu.Lock()
		nbad := len(r.csf.badGot)
		r.csf.mu.Unlock()
		return len(from(gs, r.pr.p.ReportAddr())) >= 1 && len(from(gs, r.pr.p.Addr())) >= 2 && nbad >= 1
	})
	st := r.pr.stop()
	if !ok {
		t.Fatalf("reports %+v; stats %+v", r.csf.reports(), st.Report)
	}
	reports, bad := r.csf.sync(t)

	own := from(reports, r.pr.p.ReportAddr())
	if len(own) != 1 {
		t.Fatalf("%d reports from the reporter's socket, want 1: %+v", len(own), own)
	}
	rep := own[0].rep
	if k := (reporter.FlowKey{Src: rep.Source, Dst: rep.Destination, FlowLabel: rep.FlowLabel}); k != r.flow ||
		rep.Method != wire.MethodNodeDrops || len(rep.Hops) != 2 || len(rep.Hops) > wire.MaxHopEntries {
		if st.Report.Reporter.Merged == 0 && st.Report.Reporter.PassedOn > 0 {
			t.Fatalf("the drop's report left before the downstream report came (more than %v): %+v", mergeAggregation, st.Report)
		}
		t.Fatalf("merged report %+v, want the flow %+v with 2 hop entries", rep, r.flow)
	}
	ownHop(t, rep.Hops[0])
	if h := rep.Hops[1]; h.NodeID != 77 || h.MarkingPeriodNumber != 9 || h.LostCount != 2 || h.QueueDelayChangeUS != -3 ||
		h.Cause != wire.CauseCongestion || !slices.Equal(h.DroppedPSNs, downHop[0].DroppedPSNs) {
		t.Errorf("the downstream hop entry %+v, want %+v", h, downHop[0])
	}
	fwd := from(reports, r.pr.p.Addr())
	if len(fwd) != 2 || !bytes.Equal(fwd[0].raw, tooMany) || !bytes.Equal(fwd[1].raw, otherFlow) {
		t.Errorf("forwarded %+v, want the 17-entry one and the other flow's, unchanged (the merged one not at all)", fwd)
	}
	if len(bad) != 1 || !bytes.Equal(bad[0].raw, malformed) || bad[0].from != r.pr.p.Addr() {
		t.Errorf("not PATH_REPORTs at the CSF %+v, want the malformed one unchanged", bad)
	}
	rs := st.Report
	if rs.Offered != 4 || rs.Merged != 1 || rs.PassedOn != 3 || rs.Malformed != 1 || rs.OtherCSF != 0 ||
		rs.Reporter.Merged != 1 || rs.Reporter.PassedOn != 2 || rs.Reporter.Reports != 1 || rs.Sent != 1 || rs.EventsLost != 0 {
		t.Errorf("report stats %+v", rs)
	}
	if v := st.Reverse; v.Received != 4 || v.Merged != 1 || v.Forwarded != 3 || v.MergedBytes != uint64(len(merged)) {
		t.Errorf("reverse %+v", v)
	}
	checkSums(t, "forward", st.Forward)
	checkSums(t, "reverse", st.Reverse)
}

// TestReportMergeForwardDirectionPathReports: merging works in the forward direction too (a
// CSF at the forward address, a flow coming back from it with a drop in the reverse link, a
// downstream reporter at the client), and fills the report to exactly 16 entries (draft, Path
// Reports: up to 16): the proxy's one and 15 downstream ones merge; one more entry would not,
// and goes on unchanged.
func TestReportMergeForwardDirectionPathReports(t *testing.T) {
	t.Parallel()
	csf := startCSF(t)
	pr := startProxy(t, Config{
		Forward:     csf.conn.LocalAddr().String(),
		ReverseLink: netem.Config{Loss: mustLoss(t, "script:0", 2)},
		Report: &ReportConfig{Reporter: reporter.Config{NodeID: 5, Port: csf.port(), Aggregation: mergeAggregation},
			Listen: netip.AddrPortFrom(loopback, 0), Drops: true, Merge: true, MergeFrom: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
	})
	c := dialClient(t)
	if _, err := c.WriteToUDPAddrPort([]byte("hello"), pr.p.Addr()); err != nil {
		t.Fatal(err)
	}
	var up netip.AddrPort
	if !eventually(func() bool {
		csf.mu.Lock()
		defer csf.mu.Unlock()
		if len(csf.badGot) > 0 {
			up = csf.badGot[0].from
		}
		return up.IsValid()
	}) {
		t.Fatal("the client's datagram did not reach the forward address")
	}
	const qp = 0x21
	for _, n := range []psn.PSN{1000, 1001} {
		csf.conn.WriteToUDPAddrPort(rocePacket(t, qp, n, []byte("back")), up)
	}
	buf := make([]byte, maxDatagram)
	c.SetReadDeadline(time.Now().Add(patience))
	if n, _, err := c.ReadFromUDPAddrPort(buf); err != nil {
		t.Fatal(err)
	} else if h, ok := RoCE(buf[:n]); !ok || h.PSN != 1001 {
		t.Fatalf("the client got %x, want PSN 1001", buf[:n])
	}
	flow := reporter.FlowKey{Src: loopback, Dst: c.LocalAddr().(*net.UDPAddr).AddrPort().Addr(), FlowLabel: qp}
	fill := pathReport(t, flow, downstreamHops(15, 100)...)
	oneMore := pathReport(t, flow, downstreamHops(1, 200)...)
	c.WriteToUDPAddrPort(fill, pr.p.Addr())
	if !eventually(func() bool { return pr.p.Stats().Report.Offered == 1 }) {
		t.Fatalf("not offered: %+v", pr.p.Stats().Report)
	}
	c.WriteToUDPAddrPort(oneMore, pr.p.Addr())
	ok := eventually(func() bool {
		gs := csf.reports()
		return len(from(gs, pr.p.ReportAddr())) >= 1 && len(from(gs, up)) >= 1
	})
	st := pr.stop()
	if !ok {
		t.Fatalf("reports %+v; stats %+v", csf.reports(), st.Report)
	}
	reports, _ := csf.sync(t)
	own := from(reports, pr.p.ReportAddr())
	if len(own) != 1 || len(own[0].rep.Hops) != wire.MaxHopEntries {
		t.Fatalf("reports from the reporter %+v, want one with 16 entries; stats %+v", own, st.Report)
	}
	ownHop(t, own[0].rep.Hops[0])
	for i, h := range own[0].rep.Hops[1:] {
		if h.NodeID != 100+uint32(i) {
			t.Errorf("entry %d: Node ID %d, want %d", i+1, h.NodeID, 100+i)
		}
	}
	if fwd := from(reports, up); len(fwd) != 1 || !bytes.Equal(fwd[0].raw, oneMore) {
		t.Errorf("forwarded %+v, want only the one that does not fit, unchanged", fwd)
	}
	if f := st.Forward; f.Merged != 1 || f.Forwarded != 2 || st.Report.Merged != 1 || st.Report.PassedOn != 1 {
		t.Errorf("forward %+v, report %+v", f, st.Report)
	}
	checkSums(t, "forward", st.Forward)
}

// TestReportMergeOffPathReports: without Merge nothing changes: the downstream PATH_REPORT is
// forwarded unchanged even though a report of its flow is pending, the proxy's report goes out
// alone, and nothing is offered.
func TestReportMergeOffPathReports(t *testing.T) {
	t.Parallel()
	r := startMergeRig(t, false, nil)
	down := pathReport(t, r.flow, downstreamHops(1, 77)...)
	r.send(t, down)
	ok := eventually(func() bool {
		gs := r.csf.reports()
		return len(from(gs, r.pr.p.ReportAddr())) >= 1 && len(from(gs, r.pr.p.Addr())) >= 1
	})
	st := r.pr.stop()
	if !ok {
		t.Fatalf("reports %+v; stats %+v", r.csf.reports(), st.Report)
	}
	reports, _ := r.csf.sync(t)
	own := from(reports, r.pr.p.ReportAddr())
	if len(own) != 1 || len(own[0].rep.Hops) != 1 {
		t.Fatalf("reports from the reporter %+v, want one with the proxy's entry alone", own)
	}
	ownHop(t, own[0].rep.Hops[0])
	if fwd := from(reports, r.pr.p.Addr()); len(fwd) != 1 || !bytes.Equal(fwd[0].raw, down) {
		t.Errorf("forwarded %+v, want the downstream report unchanged", fwd)
	}
	if rs := st.Report; rs.Offered != 0 || rs.Merged != 0 || rs.PassedOn != 0 || rs.Reporter.Merged != 0 ||
		rs.Reporter.PassedOn != 0 || rs.Reporter.MalformedInput != 0 {
		t.Errorf("report stats %+v", rs)
	}
	if st.Reverse.Merged != 0 || st.Reverse.Forwarded != 1 {
		t.Errorf("reverse %+v", st.Reverse)
	}
}

// TestReportMergeOtherCSFPathReports: only reports for the same CSF merge (draft, Path
// Reports): with the flow's reports routed to a CSF elsewhere, a downstream PATH_REPORT of the
// flow addressed to the client is forwarded unchanged, counted OtherCSF, though a report of
// the flow is pending.
func TestReportMergeOtherCSFPathReports(t *testing.T) {
	t.Parallel()
	r := startMergeRig(t, true, []reporter.Route{{Prefix: netip.PrefixFrom(loopback, 32), CSF: netip.MustParseAddr("127.0.0.2")}})
	down := pathReport(t, r.flow, downstreamHops(1, 77)...)
	r.send(t, down)
	ok := eventually(func() bool { return len(from(r.csf.reports(), r.pr.p.Addr())) >= 1 })
	st := r.pr.stop()
	if !ok {
		t.Fatalf("reports %+v; stats %+v", r.csf.reports(), st.Report)
	}
	reports, _ := r.csf.sync(t)
	if len(reports) != 1 || reports[0].from != r.pr.p.Addr() || !bytes.Equal(reports[0].raw, down) {
		t.Errorf("the CSF got %+v, want the downstream report unchanged and nothing else", reports)
	}
	if rs := st.Report; rs.Offered != 1 || rs.OtherCSF != 1 || rs.PassedOn != 1 || rs.Merged != 0 ||
		rs.Reporter.Merged != 0 || rs.Reporter.PassedOn != 0 || rs.Reporter.Drops != 1 {
		t.Errorf("report stats %+v", rs)
	}
}

// TestReportMergeUntrustedSourcePathReportsC14: a merged entry reaches the CSF from the
// reporter's address, which the CSF trusts (C14), so only the reports of the configured
// downstream reporters (MergeFrom) merge: one from any other address goes on unchanged, for
// the CSF to judge by its own source address, and is counted; merging without MergeFrom is
// refused.
func TestReportMergeUntrustedSourcePathReportsC14(t *testing.T) {
	t.Parallel()
	r := startMergeRigFrom(t, true, nil, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")})
	down := pathReport(t, r.flow, downstreamHops(1, 77)...)
	r.send(t, down)
	ok := eventually(func() bool { return len(from(r.csf.reports(), r.pr.p.Addr())) >= 1 })
	st := r.pr.stop()
	if !ok {
		t.Fatalf("reports %+v; stats %+v", r.csf.reports(), st.Report)
	}
	reports, _ := r.csf.sync(t)
	relayed := from(reports, r.pr.p.Addr())
	if len(relayed) != 1 || !bytes.Equal(relayed[0].raw, down) {
		t.Errorf("the CSF got %+v, want the downstream report unchanged", reports)
	}
	for _, rp := range from(reports, r.pr.p.ReportAddr()) {
		if len(rp.rep.Hops) != 1 {
			t.Errorf("the reporter's own report carries %d hop entries: an untrusted report merged", len(rp.rep.Hops))
		}
	}
	if rs := st.Report; rs.Offered != 1 || rs.Untrusted != 1 || rs.PassedOn != 1 || rs.Merged != 0 || rs.Reporter.Merged != 0 {
		t.Errorf("report stats %+v", rs)
	}
	if _, err := New(Config{Listen: "127.0.0.1:0", Forward: "127.0.0.1:9",
		Report: &ReportConfig{Reporter: reporter.Config{NodeID: 5, Port: 50000}, Drops: true, Merge: true}}); err == nil {
		t.Error("merging without MergeFrom accepted")
	}
}

// TestReportMergeAfterQueuedDropPathReports: a PATH_REPORT offered while the drop before it
// still waits in the queue to the reporter's loop (which is not even running here) finds the
// drop applied: the offer applies the waiting events first, in order, so the ordering of a
// drop and a later report never depends on how fast the reporter's loop is.
func TestReportMergeAfterQueuedDropPathReports(t *testing.T) {
	p, err := New(Config{Listen: "127.0.0.1:0", Forward: "127.0.0.1:9",
		Report: &ReportConfig{Reporter: reporter.Config{NodeID: 5, Port: 50000}, Drops: true, Merge: true,
			MergeFrom: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	flow := reporter.FlowKey{Src: loopback, Dst: netip.MustParseAddr("127.0.0.9"), FlowLabel: 7}
	p.rep.post(event{kind: evDrop, now: time.Millisecond, port: portForward, key: flow, psn: 1000,
		cause: wire.CauseCorruption}, false)
	csf := netip.AddrPortFrom(loopback, 50000)
	if !p.rep.offer(2*time.Millisecond, pathReport(t, flow, downstreamHops(1, 77)...), netip.AddrPortFrom(loopback, 40000), csf) {
		t.Fatalf("not merged with the queued drop: %+v", p.rep.stats())
	}
	other := flow
	other.FlowLabel = 8
	if p.rep.offer(2*time.Millisecond, pathReport(t, other, downstreamHops(1, 77)...), netip.AddrPortFrom(loopback, 40000), csf) {
		t.Error("a report of a flow without a pending report was merged")
	}
	if s := p.rep.stats(); s.Offered != 2 || s.Merged != 1 || s.PassedOn != 1 || s.Reporter.Drops != 1 ||
		s.Reporter.Merged != 1 || len(p.rep.events) != 0 {
		t.Errorf("stats %+v, %d events waiting", s, len(p.rep.events))
	}
}
