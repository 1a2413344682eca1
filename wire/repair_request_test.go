package wire

import (
	"reflect"
	"testing"

	"github.com/crem-project/crem/psn"
)

// Block form: Config ID, Scheme, k, Repairs Held, Block Start PSN, Suggested M, Request ID,
// Reserved, Lost Source Bitmap. The Appendix's request: L = {0,1,2}, r = 2, M = 1.
func TestRepairRequestBlockFormLayout(t *testing.T) {
	m := RepairRequest{FlowID: 0xbeef, RequestID: 7, ConfigID: 1, Scheme: SchemeCauchy, K: 4, RepairsHeld: 2,
		BlockStartPSN: 0x1000, SuggestedM: 1, Lost: psn.Bitmap{0xe0000000}}
	want := unhex(t, "16 00 0018 0000beef 01 01 04 02 001000 01 0007 0000 e0000000")
	if got := mustAppend(t, &m); string(got) != string(want) {
		t.Fatalf("Append =\n %x\nwant\n %x", got, want)
	}
	got, err := ParseRepairRequest(want)
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("Parse = %+v, %v", got, err)
	}
	// FALLBACK combines with the block form.
	m.Fallback = true
	b := mustAppend(t, &m)
	if b[1] != FlagRequestFallback {
		t.Fatalf("flags %#x, want FALLBACK", b[1])
	}
	if got, err := ParseRepairRequest(b); err != nil || !got.Fallback || got.RangeForm {
		t.Fatalf("Parse FALLBACK = %+v, %v", got, err)
	}
}

// PSN-range form (RANGES): Request ID, Range Count, then Start PSN (24) + Count (8) per range;
// FALLBACK combines with it too.
func TestRepairRequestRangeFormLayout(t *testing.T) {
	m := RepairRequest{FlowID: 0x5eed, RangeForm: true, Fallback: true, RequestID: 9,
		Ranges: []psn.Range{{Start: 0xfffffe, Count: 4}, {Start: 0x10, Count: 255}}}
	want := unhex(t, "16 30 0014 00005eed 0009 0002 fffffe04 000010ff")
	if got := mustAppend(t, &m); string(got) != string(want) {
		t.Fatalf("Append =\n %x\nwant\n %x", got, want)
	}
	got, err := ParseRepairRequest(want)
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("Parse = %+v, %v", got, err)
	}
	// The fields of the block form are ignored by Append in the range form.
	m.K, m.SuggestedM = 9, 200
	if again := mustAppend(t, &m); string(again) != string(want) {
		t.Fatalf("block-form fields leaked into the range form: %x", again)
	}
}

func TestRepairRequestMalformedFields(t *testing.T) {
	block := mustAppend(t, &RepairRequest{RequestID: 7, Scheme: SchemeCauchy, K: 4, RepairsHeld: 2,
		SuggestedM: 1, Lost: bitmapOf(0, 1, 2)})
	ranges := mustAppend(t, &RepairRequest{RangeForm: true, RequestID: 9, Ranges: []psn.Range{{Start: 5, Count: 4}}})
	for _, tc := range []struct {
		name  string
		b     []byte
		field string
	}{
		{"Request ID 0 (C4), block form", edit(block, set(16, 0, 0)), "Request ID"},
		{"Request ID 0 (C4), range form", edit(ranges, set(8, 0, 0)), "Request ID"},
		{"k 0", edit(block, set(10, 0)), "k"},
		{"Suggested M 4 > X 3 (M_s MUST NOT exceed X)", edit(block, set(15, 4)), "Suggested M"},
		{"Lost beyond k", edit(block, set(20, 0xe8)), "Lost Source Bitmap"},
		{"Lost empty", edit(block, set(15, 0, 0, 7, 0, 0, 0, 0, 0, 0)), "Lost Source Bitmap"},
		{"Lost bitmap cut", edit(block, cut(1)), "Lost Source Bitmap"},
		{"k 33 needs two words", edit(block, set(10, 33)), "Lost Source Bitmap"},
		{"Range Count 0", edit(ranges, func(b []byte) []byte { b[11] = 0; return b[:12] }), "Range Count"},
		{"Range Count beyond message", edit(ranges, set(11, 2)), "Range Count"},
		{"Range Count short of message", edit(ranges, grow(0, 0, 1, 1)), "Range Count"},
		{"range Count 0", edit(ranges, set(15, 0)), "Count"},
		{"range form cut in Range Count", edit(ranges, func(b []byte) []byte { return b[:11] }), "Range Count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRepairRequest(tc.b)
			wantFieldError(t, err, TypeRepairRequest, tc.field)
		})
	}
	for _, tc := range []struct {
		name  string
		m     RepairRequest
		field string
	}{
		{"range Count 256", RepairRequest{RangeForm: true, RequestID: 1, Ranges: []psn.Range{{Start: 1, Count: 256}}}, "Count"},
		{"range Start over 24 bits", RepairRequest{RangeForm: true, RequestID: 1, Ranges: []psn.Range{{Start: 1 << 24, Count: 1}}}, "Start PSN"},
		{"too many ranges", RepairRequest{RangeForm: true, RequestID: 1, Ranges: make([]psn.Range, MaxRanges+1)}, "Range Count"},
		{"Block Start PSN over 24 bits", RepairRequest{RequestID: 1, K: 1, Lost: bitmapOf(0), BlockStartPSN: 1 << 24}, "Block Start PSN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.m.Append(nil)
			wantFieldError(t, err, TypeRepairRequest, tc.field)
		})
	}
	// The largest range list fits the 16-bit Length exactly.
	big := RepairRequest{RangeForm: true, RequestID: 1, Ranges: make([]psn.Range, MaxRanges)}
	for i := range big.Ranges {
		big.Ranges[i] = psn.Range{Start: psn.PSN(i), Count: 1}
	}
	b := mustAppend(t, &big)
	if got, err := ParseRepairRequest(b); err != nil || len(got.Ranges) != MaxRanges {
		t.Fatalf("%d ranges: %v", len(got.Ranges), err)
	}
}
