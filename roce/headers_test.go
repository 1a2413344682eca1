package roce

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/crem-project/crem/psn"
)

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// appender is what every header offers.
type appender interface {
	Append([]byte) ([]byte, error)
	Len() int
}

// roundTrip checks that h encodes to want, that the parser gives h back from want (with junk
// after it, which it must not read), and that every shorter input is refused as short.
func roundTrip[H appender](t *testing.T, name string, h H, want []byte, parse func([]byte) (H, int, error)) {
	t.Helper()
	got, err := h.Append([]byte{0xee})
	if err != nil {
		t.Fatalf("%s: append: %v", name, err)
	}
	if !bytes.Equal(got[1:], want) || got[0] != 0xee {
		t.Fatalf("%s: encodes to % x, want ee % x", name, got, want)
	}
	if h.Len() != len(want) {
		t.Errorf("%s: Len %d, encoded %d", name, h.Len(), len(want))
	}
	back, n, err := parse(append(append([]byte{}, want...), 0xaa, 0xbb))
	if err != nil || n != len(want) {
		t.Fatalf("%s: parse read %d octets: %v", name, n, err)
	}
	if any(back) != any(h) {
		t.Errorf("%s: parses back to %+v, want %+v", name, back, h)
	}
	for i := range len(want) {
		if _, n, err := parse(want[:i]); !errors.Is(err, ErrShort) || n != 0 {
			t.Errorf("%s: %d octets parse with n=%d err=%v, want ErrShort", name, i, n, err)
		}
	}
}

// Section 5: the BTH with every field at a distinct value, bit for bit.
func TestBTHRoundTripSection5(t *testing.T) {
	h := BTH{OpCode: OpWriteOnlyWithImmediate, SE: true, M: false, PadCount: 2, TVer: 0, PKey: 0xffff,
		Resv8: 0x5a, DestQP: 0x123456, AckReq: true, Resv7: 0x11, PSN: 0xabcdef}
	roundTrip(t, "BTH", h, mustHex(t, "0ba0ffff5a12345691abcdef"), ParseBTH)
	h = BTH{OpCode: OpSendFirst, M: true, PadCount: 3, TVer: 0xf, DestQP: 1, PSN: 0}
	roundTrip(t, "BTH", h, mustHex(t, "007f00000000000100000000"), ParseBTH)
	for _, bad := range []BTH{{PadCount: 4}, {TVer: 16}, {DestQP: 1 << 24}, {Resv7: 0x80}, {PSN: psn.Modulus}} {
		if _, err := bad.Append(nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: append err %v, want ErrInvalid", bad, err)
		}
	}
}

// Section 5: RETH, AtomicETH, AtomicAckETH, ImmDt, IETH and DETH, field by field.
func TestExtensionHeadersRoundTripSection5(t *testing.T) {
	roundTrip(t, "RETH", RETH{VA: 0x0102030405060708, RKey: 0x090a0b0c, DMALength: 0x0d0e0f10},
		mustHex(t, "0102030405060708090a0b0c0d0e0f10"), ParseRETH)
	roundTrip(t, "AtomicETH", AtomicETH{VA: 0x1111111122222222, RKey: 0x33333333, SwapAdd: 0x4444444455555555, Compare: 0x6666666677777777},
		mustHex(t, "111111112222222233333333444444445555555566666666"+"77777777"), ParseAtomicETH)
	roundTrip(t, "AtomicAckETH", AtomicAckETH{OrigRemData: 0xfedcba9876543210},
		mustHex(t, "fedcba9876543210"), ParseAtomicAckETH)
	roundTrip(t, "ImmDt", ImmDt(0xdeadbeef), mustHex(t, "deadbeef"), ParseImmDt)
	roundTrip(t, "IETH", IETH(0xcafef00d), mustHex(t, "cafef00d"), ParseIETH)
	roundTrip(t, "DETH", DETH{QKey: 0x80010000, Resv8: 0, SrcQP: 0x000001}, mustHex(t, "8001000000000001"), ParseDETH)
	if _, err := (DETH{SrcQP: 1 << 24}).Append(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("DETH SrcQP over 24 bits: %v, want ErrInvalid", err)
	}
}

// Section 5: AETH syndromes: ACK with credit count, RNR NAK with timer, NAK codes 0x60..0x64.
func TestAETHSyndromesSection5(t *testing.T) {
	cases := []struct {
		a        AETH
		syndrome byte
		typ      AckType
		value    uint8
		text     string
	}{
		{ACK(6, 1), 0x06, AckTypeACK, 6, "ACK credit 6 msn 1"},
		{ACK(CreditInvalid, 0xffffff), 0x1f, AckTypeACK, 31, "ACK credit 31 msn 16777215"},
		{RNRNAK(0x12, 7), 0x32, AckTypeRNRNAK, 0x12, "RNR NAK timer 18 msn 7"},
		{NAK(NAKPSNSequenceError, 9), 0x60, AckTypeNAK, 0, "NAK PSN sequence error msn 9"},
		{NAK(NAKInvalidRequest, 9), 0x61, AckTypeNAK, 1, "NAK invalid request msn 9"},
		{NAK(NAKRemoteAccessError, 9), 0x62, AckTypeNAK, 2, "NAK remote access error msn 9"},
		{NAK(NAKRemoteOperationalError, 9), 0x63, AckTypeNAK, 3, "NAK remote operational error msn 9"},
		{NAK(NAKInvalidRDRequest, 9), 0x64, AckTypeNAK, 4, "NAK invalid RD request msn 9"},
		{AETH{Syndrome: 0x40, MSN: 2}, 0x40, AckTypeReserved, 0, "reserved syndrome 0x40 msn 2"},
	}
	for _, c := range cases {
		if c.a.Syndrome != c.syndrome || c.a.Type() != c.typ {
			t.Errorf("%v: syndrome %#02x type %v, want %#02x %v", c.a, c.a.Syndrome, c.a.Type(), c.syndrome, c.typ)
		}
		credit, isACK := c.a.Credit()
		timer, isRNR := c.a.RNRTimer()
		code, isNAK := c.a.NAKCode()
		if isACK != (c.typ == AckTypeACK) || isRNR != (c.typ == AckTypeRNRNAK) || isNAK != (c.typ == AckTypeNAK) {
			t.Errorf("%v: accessor kinds ACK %v RNR %v NAK %v", c.a, isACK, isRNR, isNAK)
		}
		switch c.typ {
		case AckTypeACK:
			if credit != c.value {
				t.Errorf("%v: credit %d, want %d", c.a, credit, c.value)
			}
		case AckTypeRNRNAK:
			if timer != c.value {
				t.Errorf("%v: timer %d, want %d", c.a, timer, c.value)
			}
		case AckTypeNAK:
			if uint8(code) != c.value {
				t.Errorf("%v: code %d, want %d", c.a, code, c.value)
			}
		}
		if s := c.a.String(); s != c.text {
			t.Errorf("String %q, want %q", s, c.text)
		}
		want := []byte{c.syndrome, byte(c.a.MSN >> 16), byte(c.a.MSN >> 8), byte(c.a.MSN)}
		roundTrip(t, "AETH", c.a, want, ParseAETH)
	}
	if _, err := (AETH{MSN: 1 << 24}).Append(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("AETH MSN over 24 bits: %v, want ErrInvalid", err)
	}
}

// RULINGS T1 and the draft's section 6 example: received 100..199, 300..399, 500..599 gives
// SegmentNum 3, Last Finished 199, Seg1 300..399, Seg2 500..599: ten 24-bit fields, the unused
// and reserved ones zero, then two octets of padding, 32 octets in all.
func TestTCAETHDraftExampleT1(t *testing.T) {
	tc := TCAETH{LastFinished: 199, NumSegs: 2, Segs: [3]Segment{{300, 399}, {500, 599}}}
	want := mustHex(t, "000003"+"0000c7"+"00012c"+"00018f"+"0001f4"+"000257"+
		"000000"+"000000"+"000000"+"000000"+"0000")
	if len(want) != TCAETHLen || TCAETHLen != 32 {
		t.Fatalf("T/C AETH is %d octets, want 30 + 2 = 32", len(want))
	}
	if tc.SegmentNum() != 3 {
		t.Errorf("SegmentNum %d, want 3", tc.SegmentNum())
	}
	roundTrip(t, "T/C AETH", tc, want, ParseTCAETH)
	if got := tc.Used(); len(got) != 2 || got[1] != (Segment{500, 599}) {
		t.Errorf("Used %v", got)
	}
	// Receivers ignore the reserved fields and the padding (T1).
	junk := append([]byte{}, want...)
	for i := 24; i < 32; i++ {
		junk[i] = 0xa5
	}
	if back, _, err := ParseTCAETH(junk); err != nil || back != tc {
		t.Errorf("with reserved octets set: %+v, %v", back, err)
	}
}

// RULINGS T3: SegmentNum is 1 + the Seg pairs used (so 1..4), the segments ascend above Last
// Finished PSN, each Left <= Right, none overlaps, across the 24-bit wrap too; anything else is
// refused by both the encoder and the parser, naming the field.
func TestTCAETHSegmentRulesT3(t *testing.T) {
	good := []TCAETH{
		{LastFinished: 5},
		{LastFinished: 5, NumSegs: 1, Segs: [3]Segment{{7, 7}}},
		{LastFinished: 5, NumSegs: 3, Segs: [3]Segment{{7, 9}, {11, 20}, {30, 40}}},
		{LastFinished: 0xfffffe, NumSegs: 2, Segs: [3]Segment{{0xffffff, 2}, {4, 4}}}, // across the wrap
	}
	for _, tc := range good {
		b, err := tc.Append(nil)
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		if back, _, err := ParseTCAETH(b); err != nil || back != tc {
			t.Errorf("%+v: parses back to %+v, %v", tc, back, err)
		}
		if got := uint32(b[2]); got != tc.SegmentNum() || got != uint32(1+tc.NumSegs) {
			t.Errorf("%+v: SegmentNum on the wire %d", tc, got)
		}
	}
	bad := []struct {
		tc    TCAETH
		field string
	}{
		{TCAETH{NumSegs: 4}, "SegmentNum"},
		{TCAETH{NumSegs: -1}, "SegmentNum"},
		{TCAETH{LastFinished: 10, NumSegs: 1, Segs: [3]Segment{{10, 12}}}, "Seg1 Left"},
		{TCAETH{LastFinished: 10, NumSegs: 1, Segs: [3]Segment{{5, 12}}}, "Seg1 Left"},
		{TCAETH{LastFinished: 10, NumSegs: 1, Segs: [3]Segment{{14, 12}}}, "Seg1 Right"},
		{TCAETH{LastFinished: 10, NumSegs: 2, Segs: [3]Segment{{12, 20}, {20, 22}}}, "Seg2 Left"},
		{TCAETH{LastFinished: 10, NumSegs: 3, Segs: [3]Segment{{12, 14}, {16, 18}, {17, 30}}}, "Seg3 Left"},
		{TCAETH{LastFinished: 10, NumSegs: 2, Segs: [3]Segment{{12, 14}, {16, 10 + 1<<23}}}, "Seg2 Right"},
		{TCAETH{LastFinished: psn.Modulus}, "Last Finished PSN"},
	}
	for _, c := range bad {
		_, err := c.tc.Append(nil)
		if !errors.Is(err, ErrInvalid) || !bytes.Contains([]byte(err.Error()), []byte(c.field)) {
			t.Errorf("%+v: append err %v, want ErrInvalid naming %s", c.tc, err, c.field)
		}
	}
	// The parser refuses the same, and SegmentNum 0 or 5.
	wire := func(fields ...uint32) []byte {
		b := make([]byte, TCAETHLen)
		for i, f := range fields {
			put24(b[3*i:], f)
		}
		return b
	}
	for _, b := range [][]byte{wire(0, 1), wire(5, 1), wire(2, 10, 9, 12), wire(3, 10, 12, 14, 13, 15)} {
		if _, n, err := ParseTCAETH(b); !errors.Is(err, ErrInvalid) || n != 0 {
			t.Errorf("% x: parse n=%d err=%v, want ErrInvalid", b[:18], n, err)
		}
	}
}
