package wire

import (
	"reflect"
	"testing"

	"github.com/crem-project/crem/psn"
)

// LOSS_REPORT: eight 32-bit counters in the draft's order.
func TestLossReportLayout(t *testing.T) {
	m := LossReport{FlowID: 0x5eed, IntervalUS: 10000, Expected: 1000, Received: 990, Restored: 9,
		IncompleteBlocks: 1, CEMarked: 3, RepairsReceived: 125, RepairsCEMarked: 0xffffffff}
	want := unhex(t, "17 00 0028 00005eed 00002710 000003e8 000003de 00000009 00000001 00000003 0000007d ffffffff")
	if got := mustAppend(t, &m); string(got) != string(want) {
		t.Fatalf("Append =\n %x\nwant\n %x", got, want)
	}
	if got, err := ParseLossReport(want); err != nil || got != m {
		t.Fatalf("Parse = %+v, %v", got, err)
	}
	for cutN, field := range map[int]string{1: "Repairs CE Marked", 5: "Repairs Received", 32: "Interval"} {
		_, err := ParseLossReport(edit(want, cut(cutN)))
		wantFieldError(t, err, TypeLossReport, field)
	}
}

// PATH_REPORT with hop entries per RULINGS C10, IPv4 and IPv6, the Truncated flag, Flow ID 0.
func TestPathReportLayoutC10(t *testing.T) {
	m := PathReport{Method: MethodNodeDrops, Source: v4src, Destination: v4dst, FlowLabel: 0x11,
		Hops: []HopEntry{{NodeID: 0x0a000001, MarkingPeriodNumber: 5, LostCount: 2, QueueDelayChangeUS: -150,
			Cause: CauseCongestion, DroppedPSNs: []psn.PSN{0x1001, 0xffffff}}}}
	want := unhex(t, "18 00 0034 00000000 03 01 04 00 c000020a c6336414 00000011"+
		"0a000001 00000005 00000002 ffffff6a 01 02 0000 00001001 00ffffff")
	if got := mustAppend(t, &m); string(got) != string(want) {
		t.Fatalf("Append =\n %x\nwant\n %x", got, want)
	}
	got, err := ParsePathReport(want)
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("Parse = %+v, %v", got, err)
	}
	if got.Hops[0].QueueDelayChangeUS != -150 {
		t.Fatalf("Queue Delay Change %d, want -150 (signed)", got.Hops[0].QueueDelayChangeUS)
	}

	v6 := PathReport{Truncated: true, Method: MethodAltMark, Source: v6src, Destination: v6dst, FlowLabel: 0x22,
		Hops: []HopEntry{{NodeID: 1, Cause: CauseCorruption}, {NodeID: 2, LostCount: 1, Cause: 200, DroppedPSNs: []psn.PSN{7}}}}
	b := mustAppend(t, &v6)
	if b[1] != FlagPathTruncated || b[10] != 6 || len(b) != 12+32+4+20+24 {
		t.Fatalf("flags %#x AF %d length %d", b[1], b[10], len(b))
	}
	if got, err := ParsePathReport(b); err != nil || !reflect.DeepEqual(got, v6) {
		t.Fatalf("IPv6 round trip = %+v, %v", got, err)
	}
}

// Entry Count is at most 16; a PATH_REPORT's Flow ID is zero; AF is 4 or 6; PSN Count sizes
// each entry.
func TestPathReportMalformedFields(t *testing.T) {
	base := mustAppend(t, &PathReport{Method: MethodNodeDrops, Source: v4src, Destination: v4dst,
		Hops: []HopEntry{{NodeID: 1, DroppedPSNs: []psn.PSN{5, 6}}}})
	for _, tc := range []struct {
		name  string
		b     []byte
		field string
	}{
		{"Entry Count 17", edit(base, set(9, 17)), "Entry Count"},
		{"Entry Count 2 with one entry", edit(base, set(9, 2)), "Node ID"},
		{"Entry Count 0 with one entry", edit(base, set(9, 0)), "Length"},
		{"Flow ID nonzero", edit(base, set(7, 1)), "Flow ID"},
		{"AF 5", edit(base, set(10, 5)), "AF"},
		{"PSN Count beyond entry", edit(base, set(41, 3)), "Reserved"},
		{"PSN Count short of entry", edit(base, set(41, 1)), "Length"},
		{"dropped PSN cut", edit(base, cut(2)), "Dropped PSN"},
		{"hop entry cut", edit(base, func(b []byte) []byte { return b[:30] }), "Marking Period Number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePathReport(tc.b)
			wantFieldError(t, err, TypePathReport, tc.field)
		})
	}
	_, err := (&PathReport{Source: v4src, Destination: v4dst, Hops: make([]HopEntry, 17)}).Append(nil)
	wantFieldError(t, err, TypePathReport, "Entry Count")
	_, err = (&PathReport{Source: v4src, Destination: v4dst, Hops: []HopEntry{{DroppedPSNs: make([]psn.PSN, 256)}}}).Append(nil)
	wantFieldError(t, err, TypePathReport, "PSN Count")
	_, err = (&PathReport{Source: v4src, Destination: v4dst, Hops: []HopEntry{{DroppedPSNs: []psn.PSN{1 << 24}}}}).Append(nil)
	wantFieldError(t, err, TypePathReport, "Dropped PSN")
	// Sixteen entries of 255 PSNs each are still one message.
	full := PathReport{Source: v6src, Destination: v6dst, Hops: make([]HopEntry, MaxHopEntries)}
	for i := range full.Hops {
		full.Hops[i].DroppedPSNs = make([]psn.PSN, 255)
	}
	b := mustAppend(t, &full)
	if got, err := ParsePathReport(b); err != nil || len(got.Hops) != 16 || len(got.Hops[15].DroppedPSNs) != 255 {
		t.Fatalf("16 full entries: %v", err)
	}
}

// RULINGS C1: Cause 0 unknown, 1 congestion, 2 corruption, 3 other; Methods 1..3; private-use
// values are parsed and flagged.
func TestPathReportCausesAndMethodsC1(t *testing.T) {
	for _, tc := range []struct {
		c       Cause
		name    string
		private bool
	}{{0, "unknown", false}, {1, "congestion", false}, {2, "corruption", false}, {3, "other", false},
		{4, "unassigned (4)", false}, {192, "private use (192)", true}, {255, "private use (255)", true}} {
		m := PathReport{Method: Method(tc.c), Source: v4src, Destination: v4dst, Hops: []HopEntry{{Cause: tc.c}}}
		got, err := ParsePathReport(mustAppend(t, &m))
		if err != nil || got.Hops[0].Cause != tc.c || got.Method != Method(tc.c) {
			t.Fatalf("cause %d: %+v, %v", tc.c, got, err)
		}
		if tc.c.String() != tc.name || tc.c.Private() != tc.private {
			t.Errorf("Cause(%d) = %q private %v", tc.c, tc.c, tc.c.Private())
		}
	}
	for m, name := range map[Method]string{0: "unassigned (0)", 1: "Alternate Marking", 2: "Clustered Alternate Marking",
		3: "node-local drop accounting", 200: "private use (200)"} {
		if m.String() != name {
			t.Errorf("Method(%d) = %q, want %q", m, m, name)
		}
	}
}
