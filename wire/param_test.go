package wire

import (
	"testing"

	"github.com/crem-project/crem/psn"
)

// PARAM_UPDATE: Config ID, Scheme, k, m, T, Reserved, Effective PSN, Reserved; PARAM_ACK:
// Config ID, Status, Reserved. Exact octets.
func TestParamUpdateAndAckLayout(t *testing.T) {
	pu := ParamUpdate{FlowID: 0x5eed, ConfigID: 2, Scheme: SchemeCauchy, K: 32, M: 4, T: 1058, EffectivePSN: 0x123456}
	want := unhex(t, "14 00 0014 00005eed 02 01 20 04 0422 0000 123456 00")
	if got := mustAppend(t, &pu); string(got) != string(want) {
		t.Fatalf("PARAM_UPDATE =\n %x\nwant\n %x", got, want)
	}
	if got, err := ParseParamUpdate(want); err != nil || got != pu {
		t.Fatalf("ParseParamUpdate = %+v, %v", got, err)
	}
	pa := ParamAck{FlowID: 0x5eed, ConfigID: 2, Status: StatusResourcesExhausted}
	want = unhex(t, "15 00 000c 00005eed 02 03 0000")
	if got := mustAppend(t, &pa); string(got) != string(want) {
		t.Fatalf("PARAM_ACK =\n %x\nwant\n %x", got, want)
	}
	if got, err := ParseParamAck(want); err != nil || got != pa {
		t.Fatalf("ParseParamAck = %+v, %v", got, err)
	}
}

// Draft PARAM_ACK statuses 0..3; unassigned and private-use values (RULINGS C1) parse as they are.
func TestParamAckStatusValues(t *testing.T) {
	for _, tc := range []struct {
		s       Status
		name    string
		private bool
	}{
		{0, "accepted", false}, {1, "unsupported scheme", false}, {2, "limits exceeded", false},
		{3, "resources exhausted", false}, {4, "unassigned (4)", false}, {191, "unassigned (191)", false},
		{192, "private use (192)", true}, {255, "private use (255)", true},
	} {
		b := mustAppend(t, &ParamAck{Status: tc.s})
		m, err := ParseParamAck(b)
		if err != nil || m.Status != tc.s {
			t.Fatalf("status %d: %+v, %v", tc.s, m, err)
		}
		if m.Status.String() != tc.name || m.Status.Private() != tc.private {
			t.Errorf("status %d: %q private %v", tc.s, m.Status, m.Status.Private())
		}
	}
}

func TestParamUpdateMalformedFields(t *testing.T) {
	base := mustAppend(t, &ParamUpdate{Scheme: SchemeCauchy, K: 32, M: 4, T: 1058})
	for _, tc := range []struct {
		name  string
		b     []byte
		field string
	}{
		{"k 0", edit(base, set(10, 0)), "k"},
		{"k + m > 255 (C6 a)", edit(base, set(10, 200, 56)), "m"},
		{"XOR with m 2", edit(base, set(9, 2, 32, 2)), "m"},
		{"T 1", edit(base, set(12, 0, 1)), "T"},
		{"T too large for a REPAIR with RETX", edit(base, set(10, 255, 0, 0xff, 0xac)), "T"},
		{"Effective PSN cut", edit(base, cut(2)), "Effective PSN"},
		{"extra octets", edit(base, grow(0)), "Length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseParamUpdate(tc.b)
			wantFieldError(t, err, TypeParamUpdate, tc.field)
		})
	}
	// The largest T whose RETX REPAIR (20 + 2 x 32 + T octets for k = 255) still fits Length.
	largest := ParamUpdate{K: 255, T: 0xffab}
	if _, err := ParseParamUpdate(mustAppend(t, &largest)); err != nil {
		t.Fatalf("T = %d, k = 255: %v", largest.T, err)
	}
	rp := Repair{Retx: true, K: 255, RepairSessionID: 1, Scheme: SchemeCauchy, Present: psn.FirstK(255),
		Lost: bitmapOf(0), Symbol: make([]byte, largest.T)}
	if rp.Length() != MaxLength {
		t.Fatalf("RETX REPAIR with the largest T is %d octets, want %d", rp.Length(), MaxLength)
	}
	mustAppend(t, &rp)
	_, err := (&ParamUpdate{K: 1, T: 2, EffectivePSN: 1 << 24}).Append(nil)
	wantFieldError(t, err, TypeParamUpdate, "Effective PSN")
	_, err = ParseParamAck(edit(mustAppend(t, &ParamAck{}), cut(2)))
	wantFieldError(t, err, TypeParamAck, "Reserved")
}
