package reporter

import (
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

const port = 50123

var flowA = FlowKey{Src: netip.MustParseAddr("10.0.1.5"), Dst: netip.MustParseAddr("10.0.9.7"), FlowLabel: 0x000123}

func newReporter(t *testing.T, cfg Config) *Reporter {
	t.Helper()
	if cfg.Port == 0 {
		cfg.Port = port
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func drain(t *testing.T, r *Reporter) []Datagram {
	t.Helper()
	var got []Datagram
	r.Drain(func(d Datagram) { got = append(got, d) })
	return got
}

func parse(t *testing.T, d Datagram) wire.PathReport {
	t.Helper()
	rep, err := wire.ParsePathReport(d.Payload)
	if err != nil {
		t.Fatalf("the reporter sent a malformed PATH_REPORT: %v", err)
	}
	return rep
}

// TestPortRequiredC14: a reporter needs the domain's CREM port; there is no default.
func TestPortRequiredC14(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("a reporter without a CREM port was accepted")
	}
}

// TestReportGoesToTheFlowSourceOrItsCSF: PATH_REPORT goes to the CREM port of the CSF configured
// for the flow's source prefix, by default to the flow's source address (draft, Path Reports).
func TestReportGoesToTheFlowSourceOrItsCSF(t *testing.T) {
	r := newReporter(t, Config{NodeID: 7})
	r.Drop(0, flowA, 1, 0x1001, wire.CauseCongestion)
	r.Tick(time.Millisecond)
	got := drain(t, r)
	if len(got) != 1 || got[0].To != netip.MustParseAddrPort("10.0.1.5:50123") {
		t.Fatalf("sent %v", got)
	}
	r = newReporter(t, Config{NodeID: 7, Routes: []Route{
		{Prefix: netip.MustParsePrefix("10.0.0.0/8"), CSF: netip.MustParseAddr("10.255.0.1")},
		{Prefix: netip.MustParsePrefix("10.0.1.0/24"), CSF: netip.MustParseAddr("10.0.1.254")},
	}})
	r.Drop(0, flowA, 1, 0x1001, wire.CauseCongestion)
	r.Tick(time.Millisecond)
	if got := drain(t, r); len(got) != 1 || got[0].To != netip.MustParseAddrPort("10.0.1.254:50123") {
		t.Fatalf("longest prefix not used: %v", got)
	}
}

// TestReportContentC10: method 3 (node-local drops), the flow named by addresses and Flow
// Label, one hop entry per cause with Lost Count and the dropped PSNs (RULINGS C10).
func TestReportContentC10(t *testing.T) {
	r := newReporter(t, Config{NodeID: 0xABCD})
	r.Drop(0, flowA, 1, 0x1001, wire.CauseCongestion)
	r.Drop(10*time.Microsecond, flowA, 1, 0x1002, wire.CauseCongestion)
	r.Drop(20*time.Microsecond, flowA, 1, 0x1005, wire.CauseCorruption)
	if d, ok := r.NextDeadline(); !ok || d != 50*time.Microsecond {
		t.Fatalf("deadline %v %v: want the first drop + 50 us aggregation", d, ok)
	}
	r.Tick(49 * time.Microsecond)
	if len(drain(t, r)) != 0 {
		t.Fatal("sent before the aggregation interval ended")
	}
	r.Tick(50 * time.Microsecond)
	got := drain(t, r)
	if len(got) != 1 {
		t.Fatalf("%d reports", len(got))
	}
	rep := parse(t, got[0])
	if rep.Method != wire.MethodNodeDrops || rep.Source != flowA.Src || rep.Destination != flowA.Dst || rep.FlowLabel != flowA.FlowLabel || rep.Truncated {
		t.Fatalf("header %+v", rep)
	}
	if len(rep.Hops) != 2 {
		t.Fatalf("%d hop entries, want one per cause", len(rep.Hops))
	}
	c, k := rep.Hops[0], rep.Hops[1]
	if c.NodeID != 0xABCD || c.Cause != wire.CauseCongestion || c.LostCount != 2 || len(c.DroppedPSNs) != 2 || c.DroppedPSNs[1] != 0x1002 {
		t.Fatalf("congestion entry %+v", c)
	}
	if k.Cause != wire.CauseCorruption || k.LostCount != 1 || k.DroppedPSNs[0] != 0x1005 || k.MarkingPeriodNumber != 1 {
		t.Fatalf("corruption entry %+v", k)
	}
}

// TestReportFitsPathMTU: a PATH_REPORT MUST fit in the path MTU; the reporter truncates the
// dropped-PSN lists and sets the Truncated flag, and Lost Count keeps the true number.
func TestReportFitsPathMTU(t *testing.T) {
	r := newReporter(t, Config{PathMTU: 576})
	for i := 0; i < 300; i++ {
		r.Drop(0, flowA, 1, psn.PSN(i), wire.CauseCorruption)
	}
	r.Tick(time.Millisecond)
	got := drain(t, r)
	if len(got) != 1 {
		t.Fatalf("%d reports", len(got))
	}
	if len(got[0].Payload) > 576-28 {
		t.Fatalf("%d octets do not fit a 576-octet MTU", len(got[0].Payload))
	}
	rep := parse(t, got[0])
	if !rep.Truncated || rep.Hops[0].LostCount != 300 || len(rep.Hops[0].DroppedPSNs) >= 255 {
		t.Fatalf("truncated=%v lost=%d listed=%d", rep.Truncated, rep.Hops[0].LostCount, len(rep.Hops[0].DroppedPSNs))
	}
	if s := r.Stats(); s.Truncated != 1 || s.PSNsCut != uint64(300-len(rep.Hops[0].DroppedPSNs)) {
		t.Fatalf("stats %+v", s)
	}
}

// TestRateLimitPerFlowAndPort: reporters MUST rate-limit PATH_REPORT per flow and per port.
func TestRateLimitPerFlowAndPort(t *testing.T) {
	r := newReporter(t, Config{FlowInterval: time.Millisecond, PortRate: 1000, PortBurst: 2})
	r.Drop(0, flowA, 1, 1, wire.CauseCongestion)
	r.Tick(50 * time.Microsecond)
	if len(drain(t, r)) != 1 {
		t.Fatal("first report not sent")
	}
	r.Drop(100*time.Microsecond, flowA, 1, 2, wire.CauseCongestion)
	if d, _ := r.NextDeadline(); d != 50*time.Microsecond+time.Millisecond {
		t.Fatalf("second report of the flow due at %v, want one flow interval after the first", d)
	}
	r.Tick(500 * time.Microsecond)
	if len(drain(t, r)) != 0 {
		t.Fatal("per-flow limit not kept")
	}
	r.Tick(time.Millisecond + 50*time.Microsecond)
	if len(drain(t, r)) != 1 {
		t.Fatal("deferred report not sent")
	}
	// Per port: a burst of 2 over many flows, then one per millisecond.
	r = newReporter(t, Config{PortRate: 1000, PortBurst: 2})
	for i := 0; i < 5; i++ {
		k := flowA
		k.FlowLabel = uint32(i)
		r.Drop(0, k, 3, 1, wire.CauseCongestion)
	}
	r.Tick(50 * time.Microsecond)
	if n := len(drain(t, r)); n != 2 {
		t.Fatalf("%d reports in a burst of 2", n)
	}
	r.Tick(50*time.Microsecond + time.Millisecond)
	if n := len(drain(t, r)); n != 1 {
		t.Fatalf("%d reports after one token's time", n)
	}
	if s := r.Stats(); s.DeferredPort == 0 {
		t.Fatal("port deferrals not counted")
	}
	// Another port has its own budget.
	k := flowA
	k.FlowLabel = 99
	r.Drop(2*time.Millisecond, k, 4, 1, wire.CauseCongestion)
	r.Tick(2*time.Millisecond + 50*time.Microsecond)
	sent99 := false
	for _, d := range drain(t, r) {
		sent99 = sent99 || parse(t, d).FlowLabel == 99
	}
	if !sent99 {
		t.Fatal("a second port was limited by the first")
	}
}

// TestMergeDownstreamUpTo16: a reporter MAY merge the hop entries of downstream reports for the
// same CSF into its own, up to 16 entries; others pass on unchanged.
func TestMergeDownstreamUpTo16(t *testing.T) {
	down := wire.PathReport{Method: wire.MethodNodeDrops, Source: flowA.Src, Destination: flowA.Dst, FlowLabel: flowA.FlowLabel,
		Hops: []wire.HopEntry{{NodeID: 2, MarkingPeriodNumber: 5, LostCount: 1, Cause: wire.CauseOther, DroppedPSNs: []psn.PSN{77}}}}
	msg, err := down.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := newReporter(t, Config{NodeID: 1})
	r.Drop(0, flowA, 1, 5, wire.CauseCongestion)
	if r.Forward(10*time.Microsecond, msg) {
		t.Fatal("merged although merging is off")
	}
	r = newReporter(t, Config{NodeID: 1, Merge: true})
	if r.Forward(0, msg) {
		t.Fatal("merged with no report of its own pending")
	}
	r.Drop(0, flowA, 1, 5, wire.CauseCongestion)
	if !r.Forward(10*time.Microsecond, msg) {
		t.Fatal("not merged")
	}
	for i := 0; i < 14; i++ {
		r.Forward(10*time.Microsecond, msg)
	}
	if r.Forward(10*time.Microsecond, msg) {
		t.Fatal("merged beyond 16 entries")
	}
	if r.Forward(0, []byte{0x81, 0, 0, 8, 0, 0, 0, 0}) {
		t.Fatal("garbage merged")
	}
	r.Tick(time.Millisecond)
	got := drain(t, r)
	rep := parse(t, got[0])
	if len(rep.Hops) != 16 || rep.Hops[0].NodeID != 1 || rep.Hops[1].NodeID != 2 || rep.Hops[1].DroppedPSNs[0] != 77 {
		t.Fatalf("merged report: %d entries, first %+v", len(rep.Hops), rep.Hops[0])
	}
	if s := r.Stats(); s.Merged != 15 || s.PassedOn != 2 || s.MalformedInput != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestBoundedFlows: pending reports are bounded; drops beyond are counted, not stored.
func TestBoundedFlows(t *testing.T) {
	r := newReporter(t, Config{MaxFlows: 2})
	for i := 0; i < 5; i++ {
		k := flowA
		k.FlowLabel = uint32(i)
		r.Drop(0, k, 1, 1, wire.CauseCongestion)
	}
	if s := r.Stats(); s.FlowsOverflow != 3 || len(r.flows) != 2 {
		t.Fatalf("stats %+v, %d flows", s, len(r.flows))
	}
}

// FuzzForward: Forward parses what downstream reporters send. Whatever the input, it never
// panics, counts every datagram that is not a valid PATH_REPORT in MalformedInput (and only
// those), and no report the reporter then sends exceeds the path MTU or fails to parse.
func FuzzForward(f *testing.F) {
	down := wire.PathReport{Method: wire.MethodNodeDrops, Source: flowA.Src, Destination: flowA.Dst, FlowLabel: flowA.FlowLabel,
		Hops: []wire.HopEntry{{NodeID: 2, LostCount: 1, DroppedPSNs: []psn.PSN{77}}}}
	seed, _ := down.Append(nil)
	f.Add(seed)
	big := down
	big.Truncated = true
	big.Hops = nil
	for i := range 15 {
		h := wire.HopEntry{NodeID: uint32(10 + i), LostCount: 255, Cause: wire.CauseCongestion}
		for j := range 255 {
			h.DroppedPSNs = append(h.DroppedPSNs, psn.PSN(i*255+j))
		}
		big.Hops = append(big.Hops, h)
	}
	if b, err := big.Append(nil); err == nil {
		f.Add(b)
	}
	am := down
	am.Method = wire.MethodAltMark
	am.Hops = []wire.HopEntry{{NodeID: 1, MarkingPeriodNumber: 9}, {NodeID: 2, MarkingPeriodNumber: 9, LostCount: 3, QueueDelayChangeUS: -40}}
	if b, err := am.Append(nil); err == nil {
		f.Add(b)
	}
	v6 := down
	v6.Source, v6.Destination = netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	if b, err := v6.Append(nil); err == nil {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x18, 0, 0, 8, 0, 0, 0, 0})
	f.Add(seed[:len(seed)-1])
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := New(Config{Port: port, Merge: true, PathMTU: 576})
		if err != nil {
			t.Fatal(err)
		}
		r.Drop(0, flowA, 1, 1, wire.CauseCongestion)
		r.Report(0, flowA, 1, wire.MethodAltMark, []wire.HopEntry{{NodeID: 1}, {NodeID: 2, LostCount: 1}})
		_, perr := wire.ParsePathReport(b)
		r.Forward(0, b)
		if got, want := r.Stats().MalformedInput, map[bool]uint64{true: 1, false: 0}[perr != nil]; got != want {
			t.Fatalf("MalformedInput = %d for a datagram whose parse error is %v", got, perr)
		}
		r.Tick(time.Second)
		r.Drain(func(d Datagram) {
			if len(d.Payload) > 576-28 {
				t.Fatalf("report of %d octets", len(d.Payload))
			}
			if _, err := wire.ParsePathReport(d.Payload); err != nil {
				t.Fatalf("sent malformed: %v", err)
			}
		})
	})
}

// TestReportMeasurementsC10: Report sends a measurement's hop entries as given, for its own
// method, apart from the drop report of the same flow, through the same routing and per-flow
// limit; entries beyond 16 are refused and counted.
func TestReportMeasurementsC10(t *testing.T) {
	csf := netip.MustParseAddr("10.9.9.9")
	r := newReporter(t, Config{NodeID: 7, Routes: []Route{{Prefix: netip.MustParsePrefix("10.0.0.0/16"), CSF: csf}}})
	hops := []wire.HopEntry{{NodeID: 7, MarkingPeriodNumber: 41}, {NodeID: 8, MarkingPeriodNumber: 41, LostCount: 2, QueueDelayChangeUS: 120}}
	r.Drop(0, flowA, 0, 0x55, wire.CauseCongestion)
	if !r.Report(0, flowA, 0, wire.MethodAltMark, hops) {
		t.Fatal("measurement refused")
	}
	if r.Report(0, flowA, 0, wire.MethodNodeDrops, hops) {
		t.Fatal("method 3 entries taken through Report")
	}
	r.Tick(time.Millisecond)
	got := drain(t, r)
	if len(got) != 2 {
		t.Fatalf("%d reports, want one per method", len(got))
	}
	methods := map[wire.Method]wire.PathReport{}
	for _, d := range got {
		if d.To != netip.AddrPortFrom(csf, port) {
			t.Fatalf("report to %v, want the route's CSF", d.To)
		}
		rep := parse(t, d)
		methods[rep.Method] = rep
	}
	am, ok := methods[wire.MethodAltMark]
	if !ok || len(am.Hops) != 2 || am.Hops[1].LostCount != 2 || am.Hops[1].QueueDelayChangeUS != 120 ||
		am.Hops[0].MarkingPeriodNumber != 41 || am.Hops[1].NodeID != 8 || len(am.Hops[1].DroppedPSNs) != 0 {
		t.Fatalf("method 1 report %+v", am)
	}
	if d, ok := methods[wire.MethodNodeDrops]; !ok || d.Hops[0].DroppedPSNs[0] != 0x55 {
		t.Fatalf("method 3 report %+v", d)
	}
	// The per-flow interval holds for measurements as well; eight periods of two entries fit
	// one report, the ninth is refused.
	for i := range 9 {
		ok := r.Report(1100*time.Microsecond, flowA, 0, wire.MethodAltMark, hops)
		if ok != (i < 8) {
			t.Fatalf("measurement %d accepted: %v", i, ok)
		}
	}
	if d, _ := r.NextDeadline(); d != 2*time.Millisecond {
		t.Fatalf("next report due at %v, want one flow interval after the last", d)
	}
	r.Tick(2 * time.Millisecond)
	got = drain(t, r)
	if len(got) != 1 || len(parse(t, got[0]).Hops) != 16 {
		t.Fatalf("%d reports", len(got))
	}
	if s := r.Stats(); s.Measurements != 11 || s.MeasurementReports != 2 || s.HopsOverflow != 4 || s.DeferredFlow != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestQueueDelayChangeC10: Queue Delay Change is the change of the port's queueing delay since
// the flow's previous report; a first report compares with the least delay the port showed.
func TestQueueDelayChangeC10(t *testing.T) {
	r := newReporter(t, Config{NodeID: 3})
	r.QueueDelay(0, 1, 200*time.Microsecond)
	r.QueueDelay(time.Microsecond, 1, 700*time.Microsecond)
	r.Drop(time.Microsecond, flowA, 1, 0x10, wire.CauseCongestion)
	r.Tick(time.Millisecond)
	got := drain(t, r)
	if len(got) != 1 {
		t.Fatalf("sent %d reports", len(got))
	}
	if h := parse(t, got[0]).Hops[0]; h.QueueDelayChangeUS != 500 || h.MarkingPeriodNumber != 1 {
		t.Fatalf("first report: change %d us, period %d; want 500 us against the least delay, period 1",
			h.QueueDelayChangeUS, h.MarkingPeriodNumber)
	}
	r.QueueDelay(3*time.Millisecond, 1, 400*time.Microsecond)
	r.Drop(3*time.Millisecond, flowA, 1, 0x20, wire.CauseCongestion)
	r.Tick(4 * time.Millisecond)
	got = drain(t, r)
	if len(got) != 1 {
		t.Fatalf("sent %d reports", len(got))
	}
	if h := parse(t, got[0]).Hops[0]; h.QueueDelayChangeUS != -300 || h.MarkingPeriodNumber != 2 {
		t.Fatalf("second report: change %d us, period %d; want -300 us against the previous report, period 2",
			h.QueueDelayChangeUS, h.MarkingPeriodNumber)
	}
	// Without delays told, the change is 0.
	r2 := newReporter(t, Config{NodeID: 3})
	r2.Drop(0, flowA, 1, 0x10, wire.CauseCorruption)
	r2.Tick(time.Millisecond)
	if h := parse(t, drain(t, r2)[0]).Hops[0]; h.QueueDelayChangeUS != 0 {
		t.Fatalf("change %d us with no delay known", h.QueueDelayChangeUS)
	}
}

// TestUnnamedDropsCountInLostCountTruncated: drops whose PSNs the node does not know join the
// flow's entry for their cause in Lost Count only, and the report is marked Truncated (its
// PSN list is not the whole of Lost Count).
func TestUnnamedDropsCountInLostCountTruncated(t *testing.T) {
	r := newReporter(t, Config{})
	r.Drop(0, flowA, 1, 7, wire.CauseCongestion)
	r.DropUnnamed(0, flowA, 1, 5, wire.CauseCongestion)
	r.DropUnnamed(0, flowA, 1, 0, wire.CauseCongestion)
	r.Tick(time.Millisecond)
	got := drain(t, r)
	if len(got) != 1 {
		t.Fatalf("%d reports, want 1", len(got))
	}
	rep := parse(t, got[0])
	if !rep.Truncated || len(rep.Hops) != 1 || rep.Hops[0].LostCount != 6 || len(rep.Hops[0].DroppedPSNs) != 1 || rep.Hops[0].DroppedPSNs[0] != 7 {
		t.Fatalf("report %+v: want Truncated, one entry, Lost Count 6, PSN 7", rep)
	}
	if s := r.Stats(); s.Drops != 6 || s.PSNsCut != 5 {
		t.Fatalf("stats %+v: want 6 drops, 5 PSNs cut", s)
	}
}
