package wire

import (
	"encoding/hex"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/crem-project/crem/psn"
)

// appendixRepair is the REPAIR message of the draft's Appendix: the coded retransmission R2[L]
// for L = {0, 1, 2} of the block at PSN 0x001000, k = 4, T = 16.
const appendixRepair = "11 80 00 2c 00 00 be ef 01 01 04 02 00 10 00 00 00 07 00 10 f0 00 00 00 e0 00 00 00" +
	" 00354fdf6d4b40b57e5c400000000000"

// unhex decodes hex that may contain spaces; it is for literals in tests only.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("bad hex in test: %v", err)
	}
	return b
}

func mustAppend(t testing.TB, m Message) []byte {
	t.Helper()
	b, err := m.Append(nil)
	if err != nil {
		t.Fatalf("Append(%T): %v", m, err)
	}
	if len(b) != m.Length() {
		t.Fatalf("Append(%T) wrote %d octets, Length() says %d", m, len(b), m.Length())
	}
	return b
}

// bitmapOf returns the bitmap with the given positions set.
func bitmapOf(positions ...int) psn.Bitmap {
	var b psn.Bitmap
	for _, j := range positions {
		b.Set(j)
	}
	return b
}

var (
	v4src = netip.MustParseAddr("192.0.2.10")
	v4dst = netip.MustParseAddr("198.51.100.20")
	v6src = netip.MustParseAddr("2001:db8::10")
	v6dst = netip.MustParseAddr("2001:db8:1::20")
)

func caps() Capabilities {
	return Capabilities{
		FlowKind: FlowKindRoCEv2,
		Schemes:  SchemeSet(0).With(SchemeSourceCopy).With(SchemeCauchy).With(SchemeXOR),
		MaxK:     64, MaxM: 16, MaxT: 4130, RDMAMTU: 4096,
	}
}

// seedMessages returns a valid message of every type and form, IPv4 and IPv6 where the message
// carries addresses. Tests and fuzz seeds start from these.
func seedMessages() []Message {
	sym := []byte("\x00\x0aRDMA-PKT-0\x00\x00\x00\x00")
	return []Message{
		&Repair{FlowID: 0xbeef, Retx: true, ConfigID: 1, Scheme: SchemeCauchy, K: 4, RepairIndex: 2,
			BlockStartPSN: 0x1000, RepairSessionID: 7, Present: bitmapOf(0, 1, 2, 3), Lost: bitmapOf(0, 1, 2),
			Symbol: []byte{0x00, 0x35, 0x4f, 0xdf, 0x6d, 0x4b, 0x40, 0xb5, 0x7e, 0x5c, 0x40, 0, 0, 0, 0, 0}},
		&Repair{FlowID: 9, Last: true, ConfigID: 3, Scheme: SchemeCauchy, K: 40, RepairIndex: 1,
			BlockStartPSN: 0xfffff0, Present: bitmapOf(0, 5, 33, 39), Symbol: sym},
		&Repair{FlowID: 9, Info: true, ConfigID: 3, Scheme: SchemeCauchy, K: 255, BlockStartPSN: 77,
			Present: bitmapOf(0, 128, 254)},
		&Repair{FlowID: 2, ConfigID: 0, Scheme: SchemeSourceCopy, K: 8, RepairIndex: 5, RepairSessionID: 12,
			Present: bitmapOf(5, 6), Symbol: sym},
		&Repair{FlowID: 2, ConfigID: 0, Scheme: SchemeXOR, K: 3, Present: bitmapOf(0, 1, 2), Symbol: sym},
		&Hello{Capabilities: caps(), SenderNonce: 0x0123456789abcdef, Source: v4src, Destination: v4dst, FlowLabel: 0x000011},
		&Hello{Capabilities: caps(), SenderNonce: 1, Source: v6src, Destination: v6dst, FlowLabel: 0xab0000ff},
		&HelloAck{FlowID: 0x5eed, Capabilities: caps(), AF: AF4, SenderNonce: 0x0123456789abcdef, MaxOpenBlocks: 64},
		&HelloAck{FlowID: 1, Capabilities: caps(), AF: AF6, SenderNonce: 1, MaxOpenBlocks: 1},
		&ParamUpdate{FlowID: 0x5eed, ConfigID: 2, Scheme: SchemeCauchy, K: 32, M: 4, T: 1058, EffectivePSN: 0x123456},
		&ParamAck{FlowID: 0x5eed, ConfigID: 2, Status: StatusLimitsExceeded},
		&RepairRequest{FlowID: 0x5eed, RequestID: 7, ConfigID: 1, Scheme: SchemeCauchy, K: 4, RepairsHeld: 2,
			BlockStartPSN: 0x1000, SuggestedM: 1, Lost: bitmapOf(0, 1, 2)},
		&RepairRequest{FlowID: 0x5eed, RequestID: 8, Fallback: true, ConfigID: 1, Scheme: SchemeCauchy, K: 33,
			BlockStartPSN: 0xffffff, Lost: bitmapOf(32)},
		&RepairRequest{FlowID: 0x5eed, RangeForm: true, RequestID: 9,
			Ranges: []psn.Range{{Start: 0xfffffe, Count: 4}, {Start: 0x10, Count: 255}}},
		&LossReport{FlowID: 0x5eed, IntervalUS: 10000, Expected: 1000, Received: 990, Restored: 9,
			IncompleteBlocks: 1, CEMarked: 3, RepairsReceived: 125, RepairsCEMarked: 1},
		&PathReport{Method: MethodNodeDrops, Source: v4src, Destination: v4dst, FlowLabel: 0x11,
			Hops: []HopEntry{{NodeID: 0x0a000001, MarkingPeriodNumber: 5, LostCount: 2, QueueDelayChangeUS: -150,
				Cause: CauseCongestion, DroppedPSNs: []psn.PSN{0x1001, 0xffffff}}}},
		&PathReport{Truncated: true, Method: MethodAltMark, Source: v6src, Destination: v6dst, FlowLabel: 0x22,
			Hops: []HopEntry{{NodeID: 1, QueueDelayChangeUS: 40, Cause: CauseCorruption}, {NodeID: 2, LostCount: 1, Cause: 200,
				DroppedPSNs: []psn.PSN{7}}}},
		&Close{FlowID: 0x5eed, Reason: ReasonCircuitBreaker},
	}
}

// seedBytes returns the encodings of seedMessages of type t (every type when t is 0).
func seedBytes(t testing.TB, typ Type) [][]byte {
	var out [][]byte
	for _, m := range seedMessages() {
		if typ == 0 || m.Type() == typ {
			out = append(out, mustAppend(t, m))
		}
	}
	return out
}

// wantFieldError fails unless err is a *FieldError for message typ and the named field.
func wantFieldError(t testing.TB, err error, typ Type, field string) {
	t.Helper()
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T), want a *FieldError naming %v %s", err, err, typ, field)
	}
	if fe.Message != typ || fe.Field != field {
		t.Fatalf("error %q names %v %q, want %v %q", err, fe.Message, fe.Field, typ, field)
	}
	if errors.Is(err, ErrDiscard) {
		t.Fatalf("field error %q also matches ErrDiscard", err)
	}
}

// edit returns a copy of b changed by f, with Length set to the new size unless keepLength.
func edit(b []byte, f func([]byte) []byte) []byte {
	c := f(append([]byte(nil), b...))
	if len(c) >= 4 {
		c[2], c[3] = byte(len(c)>>8), byte(len(c))
	}
	return c
}

// set returns an edit that writes v at offset off.
func set(off int, v ...byte) func([]byte) []byte {
	return func(b []byte) []byte { copy(b[off:], v); return b }
}

// cut returns an edit that drops the last n octets.
func cut(n int) func([]byte) []byte {
	return func(b []byte) []byte { return b[:len(b)-n] }
}

// grow returns an edit that appends octets.
func grow(v ...byte) func([]byte) []byte {
	return func(b []byte) []byte { return append(b, v...) }
}

// reservedMask returns, for an encoded message, the bits that are reserved or undefined flags:
// Append writes them as zero and parsing ignores them. It walks the layout of the draft's
// figures independently of the package's own parsers.
func reservedMask(b []byte) []byte {
	mask := make([]byte, len(b))
	if len(b) < HeaderLen {
		return mask
	}
	flagsDefined := map[Type]byte{TypeRepair: 0xe0, TypeRepairRequest: 0x30, TypePathReport: 0x80}
	typ := Type(b[0] & 0x0f)
	mask[1] = ^flagsDefined[typ]
	mark := func(offs ...int) {
		for _, o := range offs {
			if o < len(mask) {
				mask[o] = 0xff
			}
		}
	}
	switch typ {
	case TypeRepair:
		mark(15)
	case TypeHello:
		mark(18, 19)
	case TypeHelloAck:
		mark(18, 19, 30, 31)
	case TypeParamUpdate:
		mark(14, 15, 19)
	case TypeParamAck:
		mark(10, 11)
	case TypeRepairRequest:
		if b[1]&FlagRequestRanges == 0 {
			mark(18, 19)
		}
	case TypeClose:
		mark(9, 10, 11)
	case TypePathReport:
		mark(11)
		if len(b) < 12 {
			break
		}
		addrLen := map[byte]int{4: 4, 6: 16}[b[10]]
		off := 12 + 2*addrLen + 4
		for e := 0; e < int(b[9]) && off+20 <= len(b); e++ {
			n := int(b[off+17])
			mark(off+18, off+19)
			off += 20
			for w := 0; w < n; w++ {
				mark(off)
				off += 4
			}
		}
	}
	return mask
}
