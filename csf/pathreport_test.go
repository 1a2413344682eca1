package csf

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

var (
	testReporter = netip.MustParseAddr("10.5.5.5")
	reporterAt   = netip.AddrPortFrom(testReporter, 50000)
)

// pathReport encodes a PATH_REPORT of the test flow with one hop entry.
func pathReport(t testing.TB, method wire.Method, h wire.HopEntry) []byte {
	t.Helper()
	pr := wire.PathReport{Method: method, Source: testFlow.Src, Destination: testFlow.Dst, FlowLabel: testFlow.DestQP,
		Hops: []wire.HopEntry{h}}
	b, err := pr.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// drops is a method 3 hop entry naming ps as dropped (Lost Count: as many).
func drops(cause wire.Cause, ps ...psn.PSN) wire.HopEntry {
	return wire.HopEntry{NodeID: 7, LostCount: uint32(len(ps)), Cause: cause, DroppedPSNs: ps}
}

// unchanged fails unless s queued nothing and holds the same counters as before but for the
// ones named in allowed.
func queuedNothing(t *testing.T, s *Sender, what string) {
	t.Helper()
	if ms := drain(s); len(ms) != 0 {
		t.Fatalf("%s: %d datagrams queued, want none", what, len(ms))
	}
}

// TestPathReportUnlistedSourceC14: a PATH_REPORT from an address not among the configured
// reporters changes nothing, even when it names real dropped PSNs of a held block; it is
// counted as rejected and as unlisted. A CSF with no reporters configured takes none.
func TestPathReportUnlistedSourceC14(t *testing.T) {
	for _, opts := range [][]Option{{WithReporters(testReporter)}, nil} {
		s, now := fullBlock(t, wire.SchemeCauchy, 8, 2, opts...)
		before := s.Stats()
		b := pathReport(t, wire.MethodNodeDrops, drops(wire.CauseCongestion, 0x101, 0x102))
		for _, from := range []netip.AddrPort{netip.MustParseAddrPort("10.6.6.6:50000"), testCRF,
			netip.AddrPortFrom(testFlow.Src, 50000)} {
			s.Handle(now, from, b)
		}
		if len(opts) == 0 {
			s.Handle(now, reporterAt, b) // not configured here
		}
		queuedNothing(t, s, "unlisted reports")
		st := s.Stats()
		n := uint64(3 + 1 - len(opts))
		if st.PathReportsRejected != n || st.PathReportsUnlisted != n || st.PathReports != 0 || st.ExtraSent != 0 ||
			st.RepairSent != before.RepairSent || st.PathReportDrops != 0 || s.pathCong != 0 || s.pathDelay {
			t.Fatalf("unlisted reports acted on or not counted: %+v", st)
		}
	}
}

// TestPathReportWrongFlowC14: a listed reporter's PATH_REPORT naming another flow (another QP,
// other addresses, the flow's addresses reversed) changes nothing and is counted as wrong flow;
// with WithReportAddresses the flow is also named by that address pair (relay mode: the WAN
// addresses), and an unspecified source there matches any source.
func TestPathReportWrongFlowC14(t *testing.T) {
	wan, peer := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.9")
	s, now := fullBlock(t, wire.SchemeCauchy, 8, 2, WithReporters(testReporter), WithReportAddresses(wan, peer))
	// Two drops in a block with m = 2: one extra symbol (beyond m, and reportMargin more).
	h := drops(wire.CauseCorruption, 0x101, 0x102)
	for _, pr := range []wire.PathReport{
		{Method: 3, Source: testFlow.Src, Destination: testFlow.Dst, FlowLabel: testFlow.DestQP + 1},
		{Method: 3, Source: testFlow.Dst, Destination: testFlow.Src, FlowLabel: testFlow.DestQP},
		{Method: 3, Source: testFlow.Src, Destination: peer, FlowLabel: testFlow.DestQP},
		{Method: 3, Source: wan, Destination: testFlow.Dst, FlowLabel: testFlow.DestQP},
		{Method: 3, Source: peer, Destination: wan, FlowLabel: testFlow.DestQP},
	} {
		pr.Hops = []wire.HopEntry{h}
		b, _ := pr.Append(nil)
		s.Handle(now, reporterAt, b)
	}
	queuedNothing(t, s, "reports for other flows")
	if st := s.Stats(); st.PathReportsWrongFlow != 5 || st.PathReportsRejected != 5 || st.PathReports != 0 {
		t.Fatalf("wrong-flow reports: %+v", st)
	}
	// The WAN pair names the flow: one extra symbol for the drops.
	pr := wire.PathReport{Method: 3, Source: wan, Destination: peer, FlowLabel: testFlow.DestQP | 0x7f000000, Hops: []wire.HopEntry{h}}
	b, _ := pr.Append(nil)
	s.Handle(now, reporterAt, b)
	if rs := repairs(drain(s)); len(rs) != 1 || s.Stats().ExtraSent != 1 || s.Stats().PathReports != 1 {
		t.Fatalf("report by the WAN addresses: %d symbols, %+v", len(rs), s.Stats())
	}

	any := newSender(t, WithReporters(testReporter), WithReportAddresses(netip.IPv4Unspecified(), peer))
	for _, src := range []netip.Addr{wan, netip.MustParseAddr("203.0.113.4")} {
		pr := wire.PathReport{Method: 1, Source: src, Destination: peer, FlowLabel: testFlow.DestQP, Hops: []wire.HopEntry{{NodeID: 1}}}
		b, _ := pr.Append(nil)
		any.Handle(0, reporterAt, b)
	}
	if st := any.Stats(); st.PathReports != 2 || st.PathReportsWrongFlow != 0 {
		t.Fatalf("unspecified report source: %+v", st)
	}
	if _, err := New(WithFlow(testFlow), WithCRF(testCRF), WithRandom(counter()),
		WithReportAddresses(netip.IPv4Unspecified(), netip.IPv4Unspecified())); err == nil {
		t.Fatal("a report address pair that matches any flow accepted")
	}
}

// TestPathReportUnknownMethodC1: a PATH_REPORT with a Method the draft does not define, or one
// of private use, is parsed and never acted on (C1).
func TestPathReportUnknownMethodC1(t *testing.T) {
	s, now := fullBlock(t, wire.SchemeCauchy, 8, 2, WithReporters(testReporter))
	for _, m := range []wire.Method{0, 4, 191, 192, 255} {
		s.Handle(now, reporterAt, pathReport(t, m, drops(wire.CauseCongestion, 0x101)))
	}
	queuedNothing(t, s, "unknown methods")
	if st := s.Stats(); st.PathReportsUnknownMethod != 5 || st.PathReportsRejected != 5 || st.PathReports != 0 || s.pathCong != 0 {
		t.Fatalf("unknown methods: %+v", st)
	}
}

// TestPathReportAbsurdCountsC10: Lost Counts no flow could have (0xFFFFFFFF; two entries whose
// 32-bit sum wraps; more than the packets the flow sent in the last second or two; fewer than
// the PSNs the entry lists) are implausible: the report is refused and counted, and nothing
// changes (no repair, no congestion share). Plausible counts with Cause congestion add up
// saturating, never beyond what the flow sent: the interval's sum never wraps, and the estimate
// that follows is the one a report of exactly as many drops as the flow sent gives. A report
// that comes long after the LOSS_REPORTs of its packets (a marking period of 100 ms) is
// plausible; one about a flow silent for two seconds is not.
func TestPathReportAbsurdCountsC10(t *testing.T) {
	s, now := fullBlock(t, wire.SchemeCauchy, 8, 2, WithReporters(testReporter)) // 8 sources sent
	for _, h := range []wire.HopEntry{
		{NodeID: 1, LostCount: 0xffffffff, Cause: wire.CauseCongestion},
		{NodeID: 1, LostCount: 9, Cause: wire.CauseCongestion},
		{NodeID: 1, LostCount: 1, Cause: wire.CauseCorruption, DroppedPSNs: []psn.PSN{0x101, 0x102}},
	} {
		s.Handle(now, reporterAt, pathReport(t, wire.MethodNodeDrops, h))
	}
	// Two entries whose sum is beyond what was sent, and whose uint32 sum wraps to 7.
	pr := wire.PathReport{Method: wire.MethodAltMark, Source: testFlow.Src, Destination: testFlow.Dst, FlowLabel: testFlow.DestQP,
		Hops: []wire.HopEntry{{NodeID: 1, LostCount: 0xfffffff8, Cause: wire.CauseCongestion}, {NodeID: 2, LostCount: 15, Cause: wire.CauseCongestion}}}
	b, _ := pr.Append(nil)
	s.Handle(now, reporterAt, b)
	queuedNothing(t, s, "implausible reports")
	if st := s.Stats(); st.PathReportsImplausible != 4 || st.PathReportsRejected != 4 || st.PathReports != 0 || s.pathCong != 0 || st.ExtraSent != 0 {
		t.Fatalf("implausible reports: %+v, congestion share %d", st, s.pathCong)
	}
	// Plausible one by one, 8 each of the 8 sent: the share saturates at 8.
	for range 1000 {
		s.Handle(now, reporterAt, pathReport(t, wire.MethodAltMark, wire.HopEntry{NodeID: 1, LostCount: 8, Cause: wire.CauseCongestion}))
	}
	if st := s.Stats(); s.pathCong != 8 || st.PathReports != 1000 || st.PathReportCongestionCapped != 999 {
		t.Fatalf("congestion share %d after 1000 reports of 8 (capped %d)", s.pathCong, st.PathReportCongestionCapped)
	}
	// The LOSS_REPORT: 8 expected, all lost, all of them congestion: no transmission loss.
	lossReport(t, s, now+10*time.Millisecond, 8, 0, 0, 0, 10*time.Millisecond)
	if p := s.est.P(); p != 0 {
		t.Fatalf("estimate %v after an interval whose loss was all congestion", p)
	}
	// 150 ms and several LOSS_REPORTs later, a marking period's report of those 8: plausible.
	for i := range 10 {
		lossReport(t, s, now+time.Duration(20+10*i)*time.Millisecond, 0, 0, 0, 0, 10*time.Millisecond)
	}
	s.Handle(now+150*time.Millisecond, reporterAt, pathReport(t, wire.MethodAltMark, wire.HopEntry{NodeID: 1, LostCount: 8, Cause: wire.CauseCongestion}))
	// More than the 8 sent, or anything about a flow silent for two seconds: implausible.
	s.Handle(now+150*time.Millisecond, reporterAt, pathReport(t, wire.MethodAltMark, wire.HopEntry{NodeID: 1, LostCount: 9, Cause: wire.CauseCongestion}))
	s.Handle(now+2100*time.Millisecond, reporterAt, pathReport(t, wire.MethodAltMark, wire.HopEntry{NodeID: 1, LostCount: 1, Cause: wire.CauseCongestion}))
	if st := s.Stats(); st.PathReportsImplausible != 6 || st.PathReports != 1001 {
		t.Fatalf("reports beyond the packets of the last second or two: %+v", st)
	}
}

// TestPathReportDropsCauseNoRepairSection4: dropped PSNs of no held block, not sent yet, of an
// absent position, of a block the RDMA transport acknowledged, or in a method 1 or 2 report
// (which name no drops) cause no repair and are counted; a PSN named again within an SRTT
// causes no second symbol.
func TestPathReportDropsCauseNoRepairSection4(t *testing.T) {
	// The CRF says nothing for a virtual second here: no silence (E31) ends the session.
	s, now := fullBlock(t, wire.SchemeCauchy, 8, 2, WithReporters(testReporter), WithPeerSilence(time.Minute)) // block 0x100..0x107
	// A second block, closed at a burst's end, with position 2 absent (PSN 0x10a skipped).
	for _, p := range []psn.PSN{0x108, 0x109, 0x10b} {
		s.Observe(now, packet(p, 300))
	}
	s.Tick(now + time.Second)
	drain(s)
	before := s.Stats()
	for _, h := range []wire.HopEntry{
		drops(wire.CauseCongestion, 0x0ff),    // before every block
		drops(wire.CauseCongestion, 0x10c),    // not sent yet
		drops(wire.CauseCongestion, 0x10a),    // absent
		drops(wire.CauseCongestion, 0x800000), // half the PSN space away
	} {
		s.Handle(now+time.Second, reporterAt, pathReport(t, wire.MethodNodeDrops, h))
	}
	s.Handle(now+time.Second, reporterAt, pathReport(t, wire.MethodAltMark, drops(wire.CauseCorruption, 0x101)))
	s.Handle(now+time.Second, reporterAt, pathReport(t, wire.MethodClusteredAltMark, drops(wire.CauseCorruption, 0x101)))
	queuedNothing(t, s, "drops of no held position")
	if st := s.Stats(); st.PathReportDrops != 6 || st.PathReportDropsUnknown != 6 || st.PathReports != 6 || st.RepairSent != before.RepairSent {
		t.Fatalf("drops of no held position: %+v", st)
	}
	// Acknowledged: the first block released, the second acknowledged in part.
	s.Acknowledge(0x108)
	s.Handle(now+time.Second, reporterAt, pathReport(t, wire.MethodNodeDrops, drops(wire.CauseCorruption, 0x101, 0x108)))
	queuedNothing(t, s, "drops already acknowledged")
	// Once, not twice, within an SRTT; again after one. The block's m = 2 symbols cover two
	// drops: two named get one more symbol (reportMargin); named again after an SRTT (the
	// RDMA transport sent them again and they were dropped again) the earlier symbols are not
	// counted, and they get three.
	s.Handle(now+time.Second, reporterAt, pathReport(t, wire.MethodNodeDrops, drops(wire.CauseCorruption, 0x109, 0x10b)))
	s.Handle(now+time.Second, reporterAt, pathReport(t, wire.MethodNodeDrops, drops(wire.CauseCorruption, 0x109, 0x10b)))
	if rs := repairs(drain(s)); len(rs) != 1 {
		t.Fatalf("%d symbols for two drops named twice within an SRTT, want 1", len(rs))
	}
	s.Handle(now+time.Second+100*time.Millisecond, reporterAt, pathReport(t, wire.MethodNodeDrops, drops(wire.CauseCorruption, 0x109, 0x10b)))
	if rs := repairs(drain(s)); len(rs) != 2+reportMargin {
		t.Fatalf("%d symbols for two drops named again after an SRTT, want %d", len(rs), 2+reportMargin)
	}
	if st := s.Stats(); st.PathReportDropsUnknown != 8 || st.PathReportDropsRepeated != 2 || st.ExtraSent != 1+2+reportMargin {
		t.Fatalf("counters: %+v", st)
	}
}

// TestPathReportOpenBlockC16: drops a reporter names while their block is still open get their
// extra ordinary symbols when the block closes, with the block's own (fresh indices, LAST on
// the final one, counted as extra); with m = 0 they are the block's only repair.
func TestPathReportOpenBlockC16(t *testing.T) {
	for _, m := range []int{0, 2, 4} {
		s := newSender(t, WithConfig(wire.SchemeCauchy, 8, m, 0), WithAdaptation(false), WithRepairFraction(16), WithReporters(testReporter))
		establish(t, s, 0, 3)
		now := time.Millisecond
		for j := range 5 {
			s.Observe(now, packet(psn.PSN(0x100+j), 300))
		}
		s.Handle(now, reporterAt, pathReport(t, wire.MethodNodeDrops, drops(wire.CauseCorruption, 0x101, 0x103, 0x106)))
		if rs := repairs(drain(s)); len(rs) != 0 {
			t.Fatalf("m = %d: %d symbols before the block closed", m, len(rs))
		}
		for j := 5; j < 8; j++ {
			s.Observe(now, packet(psn.PSN(0x100+j), 300))
		}
		// Two present positions named: the block gets symbols for the drops beyond what m
		// covers, and one more (reportMargin).
		extra := max(0, 2+reportMargin-m)
		rs := repairs(drain(s))
		if len(rs) != m+extra || s.Stats().ExtraSent != uint64(extra) || s.Stats().PathReportDropsUnknown != 1 {
			t.Fatalf("m = %d: %d symbols at close, want %d; %+v", m, len(rs), m+extra, s.Stats())
		}
		if covered := s.Stats().PathReportDropsCovered; (extra == 0) != (covered == 2) {
			t.Fatalf("m = %d: %d named PSNs counted as covered by the block's own symbols", m, covered)
		}
		for i, r := range rs {
			if int(r.RepairIndex) != i || r.Retx || r.Last != (i == len(rs)-1) {
				t.Fatalf("m = %d: symbol %d: %+v", m, i, r)
			}
		}
	}
}

// TestPathReportNeverDeliversSection4: a PATH_REPORT never makes the CSF deem data delivered:
// no block is released by one, whatever it says (every PSN named dropped, huge and zero counts,
// every method), and the block's REPAIR_REQUEST is answered after it as before.
func TestPathReportNeverDeliversSection4(t *testing.T) {
	s, now := fullBlock(t, wire.SchemeCauchy, 8, 2, WithReporters(testReporter))
	var all []psn.PSN
	for j := range 8 {
		all = append(all, psn.PSN(0x100+j))
	}
	for _, m := range []wire.Method{1, 2, 3} {
		s.Handle(now, reporterAt, pathReport(t, m, drops(wire.CauseCorruption, all...)))
		s.Handle(now, reporterAt, pathReport(t, m, wire.HopEntry{NodeID: 1}))
		s.Handle(now, reporterAt, pathReport(t, m, wire.HopEntry{NodeID: 1, LostCount: 0xffffffff, QueueDelayChangeUS: -1 << 31}))
	}
	drain(s)
	if st := s.Stats(); st.BlocksAcked != 0 || s.find(0x100) < 0 || s.find(0x107) < 0 {
		t.Fatalf("a path report released data: %+v", st)
	}
	req := wire.RepairRequest{RequestID: 9, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, RepairsHeld: 2,
		BlockStartPSN: 0x100, SuggestedM: 2, Lost: lost(0, 1, 2, 3)}
	for j := range 8 { // the next block's sources refill the repair budget the reports spent
		s.Observe(now, packet(psn.PSN(0x108+j), 300))
	}
	drain(s)
	if rs := sendRequest(t, s, now+time.Second, req); len(rs) != 2 || !rs[0].Retx {
		t.Fatalf("the block's request after the reports: %d symbols; %+v", len(rs), s.Stats())
	}
}

// TestPathReportQueueDelayClassifiesSection4: a method 1 report whose Queue Delay Change rises
// with its loss marks the interval congested (C6 c): the LOSS_REPORTs that raise m without it
// leave m alone with it; a falling queue delay does not.
func TestPathReportQueueDelayClassifiesSection4(t *testing.T) {
	run := func(delay int32) bool {
		s := newSender(t, WithConfig(wire.SchemeCauchy, 32, 0, 0), WithReporters(testReporter))
		establish(t, s, 0, 3)
		now, next := time.Millisecond, psn.PSN(0x100)
		raised := false
		for range 2 {
			for range 1000 {
				s.Observe(now, packet(next, 100))
				next++
			}
			s.Handle(now, reporterAt, pathReport(t, wire.MethodAltMark, wire.HopEntry{NodeID: 9, LostCount: 10, QueueDelayChangeUS: delay}))
			now += 10 * time.Millisecond
			lossReport(t, s, now, 1000, 990, 0, 0, 10*time.Millisecond)
			for _, m := range drain(s) {
				if pu, ok := m.(*wire.ParamUpdate); ok && pu.M > 0 {
					raised = true
				}
			}
		}
		return raised
	}
	if run(500) {
		t.Error("loss with a rising queue delay raised m")
	}
	if !run(-500) {
		t.Error("the same loss with a falling queue delay did not raise m: the test shows nothing")
	}
}

// establishRTT is establish with an RTT: HELLO_ACK and PARAM_ACK arrive rtt after HELLO and
// PARAM_UPDATE. It returns when the configuration is in force.
func establishRTT(t testing.TB, s *Sender, rtt time.Duration, flowID uint32) time.Duration {
	t.Helper()
	s.Start(0)
	hello := drain(s)[0].(*wire.Hello)
	ack := wire.HelloAck{FlowID: flowID, Capabilities: flow.DefaultLimits().Capabilities(1024), AF: wire.AF4,
		SenderNonce: hello.SenderNonce, MaxOpenBlocks: 64}
	b, _ := ack.Append(nil)
	s.Handle(rtt, testCRF, b)
	pu := drain(s)[0].(*wire.ParamUpdate)
	b, _ = (&wire.ParamAck{FlowID: flowID, ConfigID: pu.ConfigID}).Append(nil)
	s.Handle(2*rtt, testCRF, b)
	if _, ok := s.Config(); !ok {
		t.Fatal("configuration not in force")
	}
	return 2 * rtt
}

// TestPathReportFloodBoundedC11: 10,000 PATH_REPORTs a second for one virtual second from a
// listed reporter, each naming 8 real PSNs (present positions of held blocks, 32 packets
// behind the newest at most), while the flow sends 100,000 packets of 1,000 octets (k = 32,
// m = 2, Max m 16, SRTT 10 ms). The repair sent stays within what the draft bounds it by
// (Security Considerations; C11, C16): all repair octets within the budget (half the source
// octets plus one block), at most Max m ordinary symbols per block with fresh Repair Indices,
// at most one extra symbol per position named per SRTT; nothing released, nothing else sent.
// A flood naming the same 4 PSNs of one closed block gets it 4 extra symbols per SRTT, and
// never more than Max m - m in all.
func TestPathReportFloodBoundedC11(t *testing.T) {
	const (
		rtt     = 10 * time.Millisecond
		k, m    = 32, 2
		maxM    = 16
		payload = 1000
		gap     = 10 * time.Microsecond // 100,000 packets a second
		every   = 100 * time.Microsecond
	)
	s := newSender(t, WithConfig(wire.SchemeCauchy, k, m, 0), WithAdaptation(false), WithReporters(testReporter),
		WithInitialRTT(rtt), WithPeerSilence(time.Minute)) // a CRF that says nothing for the second
	now := establishRTT(t, s, rtt, 3)
	rng := rand.New(rand.NewPCG(1, 2))
	type blk struct {
		indices  map[uint8]bool
		named    map[psn.PSN]bool
		ordinary int
	}
	blocks := map[psn.PSN]*blk{}
	var repairOctets, sourceOctets int
	var T int
	check := func() {
		for _, msg := range drain(s) {
			r, ok := msg.(*wire.Repair)
			if !ok {
				t.Fatalf("a %T sent in the flood", msg)
			}
			if r.Retx || r.Scheme != wire.SchemeCauchy {
				t.Fatalf("not an ordinary symbol: %+v", r)
			}
			b := blocks[r.BlockStartPSN]
			if b == nil {
				b = &blk{indices: map[uint8]bool{}, named: map[psn.PSN]bool{}}
				blocks[r.BlockStartPSN] = b
			}
			if b.indices[r.RepairIndex] {
				t.Fatalf("block %v: Repair Index %d sent twice", r.BlockStartPSN, r.RepairIndex)
			}
			b.indices[r.RepairIndex] = true
			b.ordinary++
			T = len(r.Symbol)
			repairOctets += len(r.Symbol)
		}
	}
	start := now
	next := psn.PSN(0x1000)
	reports := 0
	namedBy := map[psn.PSN]map[int]bool{} // block start -> positions named in the flood
	for t0 := now; now < t0+time.Second; now += gap {
		pk := packet(next, payload)
		s.Observe(now, pk)
		sourceOctets += len(pk)
		next++
		if d, ok := s.NextDeadline(); ok && d <= now {
			s.Tick(now)
		}
		if (now-t0)%every == 0 && psn.PSN(0x1000).Forward(next) > 64 {
			var ps []psn.PSN
			for range 8 {
				p := next.Add(-1 - rng.IntN(32))
				ps = append(ps, p)
				bs := psn.PSN(0x1000).Add(int(psn.PSN(0x1000).Forward(p)) / k * k)
				if namedBy[bs] == nil {
					namedBy[bs] = map[int]bool{}
				}
				namedBy[bs][int(bs.Forward(p))] = true
			}
			s.Handle(now, reporterAt, pathReport(t, wire.MethodNodeDrops, drops(wire.CauseCorruption, ps...)))
			reports++

		}
		check()
	}
	st := s.Stats()
	t.Logf("%d reports in %v; %d sources, %d repair symbols (%d extra, %d denied by the budget), %d blocks",
		reports, now-start, st.Sources, st.RepairSent, st.ExtraSent, st.RepairDeniedBudget, len(blocks))
	if reports < 9900 || st.PathReports != uint64(reports) {
		t.Fatalf("%d reports sent, %d taken: %+v", reports, st.PathReports, st)
	}
	if st.ExtraSent == 0 {
		t.Fatal("the reports caused no extra symbol: the test shows nothing")
	}
	if budget := sourceOctets/2 + k*T; repairOctets > budget {
		t.Errorf("repair octets %d beyond the budget %d (half of %d source octets and one block)", repairOctets, budget, sourceOctets)
	}
	for bs, b := range blocks {
		if b.ordinary > maxM {
			t.Errorf("block %v: %d ordinary symbols, beyond Max m %d", bs, b.ordinary, maxM)
		}
		// Each position named once per SRTT at most: the flood lasts a few ms per block
		// (32 packets behind the newest), less than an SRTT, so each at most once.
		if extra := b.ordinary - m; extra > len(namedBy[bs])+reportMargin {
			t.Errorf("block %v: %d extra symbols for %d positions named", bs, extra, len(namedBy[bs]))
		}
	}
	if st.BlocksAcked != 0 || st.RetxSent != 0 || st.SourceCopySent != 0 {
		t.Errorf("the flood released or retransmitted: %+v", st)
	}

	// The same 4 PSNs of one closed block, 10,000 a second for 200 ms.
	s2, now2 := fullBlock(t, wire.SchemeCauchy, k, m, WithReporters(testReporter), WithInitialRTT(rtt))
	srtt := max(s2.SRTT(), time.Millisecond)
	var perWindow []int
	windowEnd := now2
	for t0 := now2; now2 < t0+200*time.Millisecond; now2 += every {
		if now2 >= windowEnd {
			perWindow = append(perWindow, 0)
			windowEnd = now2 + srtt
		}
		s2.Handle(now2, reporterAt, pathReport(t, wire.MethodNodeDrops, drops(wire.CauseCorruption, 0x101, 0x104, 0x108, 0x110)))
		perWindow[len(perWindow)-1] += len(repairs(drain(s2)))
	}
	total := 0
	for _, n := range perWindow {
		total += n
		if n > 4+reportMargin {
			t.Errorf("%d extra symbols in one SRTT for 4 named positions: %v", n, perWindow)
		}
	}
	// The first window: the drops beyond the block's m, and reportMargin more.
	if perWindow[0] != 4+reportMargin-m || total != maxM-m || s2.Stats().ExtraSent != uint64(maxM-m) {
		t.Errorf("extra symbols per SRTT %v (%d in all, %d counted), want %d at once and %d in all", perWindow, total, s2.Stats().ExtraSent, 4+reportMargin-m, maxM-m)
	}
}

// BenchmarkPathReport: one PATH_REPORT from a listed reporter naming 8 held PSNs (within an
// SRTT of the last, so repeated: the cost of the checks, without sending) and one from an
// unlisted address.
func BenchmarkPathReport(b *testing.B) {
	for _, bc := range []struct {
		name string
		from netip.AddrPort
	}{{"listed", reporterAt}, {"unlisted", netip.MustParseAddrPort("10.6.6.6:1")}} {
		b.Run(bc.name, func(b *testing.B) {
			s := newSender(b, WithConfig(wire.SchemeCauchy, 32, 2, 0), WithAdaptation(false), WithReporters(testReporter))
			establish(b, s, 0, 3)
			for j := range 64 {
				s.Observe(time.Millisecond, packet(psn.PSN(0x100+j), 1000))
			}
			drain(s)
			var ps []psn.PSN
			for j := range 8 {
				ps = append(ps, psn.PSN(0x100+4*j))
			}
			msg := pathReport(b, wire.MethodNodeDrops, drops(wire.CauseCorruption, ps...))
			s.Handle(time.Millisecond, bc.from, msg)
			drain(s)
			b.ReportAllocs()
			for b.Loop() {
				s.Handle(time.Millisecond, bc.from, msg)
			}
		})
	}
}

// TestPathReportsNeverTripTheBreaker: the circuit breaker reads the receiver's LOSS_REPORTs
// only (C11 f). Two virtual seconds of PATH_REPORTs from the listed reporter, every kind a
// forger can make (congestion, corruption and unknown causes; Lost Counts up to what the flow
// sent and absurd ones; PSNs of held blocks, of none, and far away), beside LOSS_REPORTs that
// say nothing was lost: the breaker never opens, m stays, no PARAM_UPDATE and no CLOSE go out.
// The same LOSS_REPORTs with 20 percent loss do open it, so the check can fail.
func TestPathReportsNeverTripTheBreaker(t *testing.T) {
	run := func(lossy bool) *Sender {
		s, now := fullBlock(t, wire.SchemeCauchy, 8, 2, WithReporters(testReporter))
		rng := rand.New(rand.NewPCG(5, 6))
		next := psn.PSN(0x108)
		for i := range 200 {
			now += 10 * time.Millisecond
			for range 10 {
				s.Observe(now, packet(next, 300))
				next++
			}
			for range 20 {
				var h wire.HopEntry
				switch rng.IntN(4) {
				case 0:
					h = drops(wire.Cause(rng.IntN(3)), next.Add(-1-rng.IntN(64)), next.Add(-1-rng.IntN(64)))
				case 1:
					h = drops(wire.CauseCongestion, next.Add(1<<22+rng.IntN(1<<20)))
				case 2:
					h = wire.HopEntry{NodeID: 1, LostCount: uint32(rng.IntN(20)), Cause: wire.CauseCongestion}
				default:
					h = wire.HopEntry{NodeID: 1, LostCount: 0xffffffff, Cause: wire.Cause(rng.IntN(3))}
				}
				method := wire.MethodNodeDrops
				if len(h.DroppedPSNs) == 0 {
					method = wire.MethodAltMark
				}
				s.Handle(now, reporterAt, pathReport(t, method, h))
			}
			recv := uint32(10)
			if lossy {
				recv = 8
			}
			lossReport(t, s, now, 10, recv, 0, 0, 10*time.Millisecond)
			if s.Tick(now); i%50 == 49 {
				for _, msg := range drain(s) {
					switch msg.(type) {
					case *wire.ParamUpdate, *wire.Close:
						t.Fatalf("a %T after %d PATH_REPORTs", msg, s.Stats().PathReports)
					}
				}
			}
		}
		return s
	}
	s := run(false)
	st := s.Stats()
	if st.BreakerTrips != 0 || s.BreakerState() != policy.BreakerClosed || s.M() != 2 || st.MChanges != 0 {
		t.Errorf("after %d PATH_REPORTs taken and %d refused: %d breaker trips, breaker %v, m %d, %d m changes",
			st.PathReports, st.PathReportsRejected, st.BreakerTrips, s.BreakerState(), s.M(), st.MChanges)
	}
	t.Logf("%d PATH_REPORTs taken, %d refused (%d implausible), %d extra symbols", st.PathReports, st.PathReportsRejected, st.PathReportsImplausible, st.ExtraSent)
	if st.PathReports == 0 || st.PathReportsImplausible == 0 {
		t.Fatalf("the flood was not taken and refused both: %+v", st)
	}
	if s := run(true); s.Stats().BreakerTrips == 0 {
		t.Error("20 percent loss in the LOSS_REPORTs did not open the breaker: the test shows nothing")
	}
}
