package wire

import (
	"bytes"
	"encoding/hex"
	"reflect"
	"testing"

	"github.com/crem-project/crem/psn"
	"pgregory.net/rapid"
)

// The draft's Appendix gives the REPAIR message of R2[L] octet by octet; it must parse to the
// fields the Appendix names and be produced exactly from them.
func TestRepairAppendixBytes(t *testing.T) {
	wire := unhex(t, appendixRepair)
	if len(wire) != 44 {
		t.Fatalf("Appendix message is %d octets, want 44", len(wire))
	}
	m, err := ParseRepair(wire)
	if err != nil {
		t.Fatalf("ParseRepair(Appendix): %v", err)
	}
	want := Repair{FlowID: 0x0000beef, Retx: true, ConfigID: 1, Scheme: SchemeCauchy, K: 4, RepairIndex: 2,
		BlockStartPSN: 0x001000, RepairSessionID: 7, Present: psn.Bitmap{0xf0000000}, Lost: psn.Bitmap{0xe0000000},
		Symbol: unhex(t, "00354fdf6d4b40b57e5c400000000000")}
	if !repairEqual(m, want) {
		t.Fatalf("parsed\n %+v\nwant\n %+v", m, want)
	}
	if m.Last || m.Info {
		t.Errorf("LAST %v INFO %v, want neither", m.Last, m.Info)
	}
	if m.Length() != 44 {
		t.Errorf("Length() = %d, want 44", m.Length())
	}
	got, err := want.Append(nil)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	if !bytes.Equal(got, wire) {
		t.Fatalf("Append =\n %x\nwant\n %x", got, wire)
	}
	// The symbol aliases the datagram: no copy on the packet path.
	if &m.Symbol[0] != &wire[28] {
		t.Error("ParseRepair copied the symbol instead of aliasing the datagram")
	}
}

func repairEqual(a, b Repair) bool {
	sa, sb := a.Symbol, b.Symbol
	a.Symbol, b.Symbol = nil, nil
	return reflect.DeepEqual(a, b) && bytes.Equal(sa, sb)
}

// REPAIR: the RETX flag adds the Lost Source Bitmap, INFO means Symbol Length 0 and no symbol,
// LAST is carried as a flag; bitmaps are ceil(k/32) words.
func TestRepairFlagsAndBitmapWords(t *testing.T) {
	for _, tc := range []struct {
		name    string
		m       Repair
		wantLen int
		flags   byte
	}{
		{"ordinary k=32 one word", Repair{K: 32, Scheme: SchemeCauchy, Present: psn.FirstK(32), Symbol: make([]byte, 10)}, 20 + 4 + 10, 0},
		{"ordinary k=33 two words LAST", Repair{K: 33, Last: true, Scheme: SchemeCauchy, RepairIndex: 222, Present: psn.FirstK(33), Symbol: make([]byte, 2)}, 20 + 8 + 2, 0x40},
		{"RETX k=255 eight words twice", Repair{K: 255, Retx: true, RepairSessionID: 1, Scheme: SchemeCauchy, Present: psn.FirstK(255), Lost: bitmapOf(254), Symbol: make([]byte, 4)}, 20 + 64 + 4, 0x80},
		{"INFO no symbol", Repair{K: 4, Info: true, Present: bitmapOf(0, 3)}, 20 + 4, 0x20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.m.Append(nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != tc.wantLen || int(b[2])<<8|int(b[3]) != tc.wantLen {
				t.Fatalf("length %d (field %d), want %d", len(b), int(b[2])<<8|int(b[3]), tc.wantLen)
			}
			if b[1] != tc.flags {
				t.Fatalf("flags %#x, want %#x", b[1], tc.flags)
			}
			if symLen := int(b[18])<<8 | int(b[19]); symLen != len(tc.m.Symbol) {
				t.Fatalf("Symbol Length %d, want %d", symLen, len(tc.m.Symbol))
			}
			got, err := ParseRepair(b)
			if err != nil {
				t.Fatal(err)
			}
			if !repairEqual(got, tc.m) {
				t.Fatalf("round trip\n %+v\nwant\n %+v", got, tc.m)
			}
		})
	}
}

// Every malformed REPAIR yields an error naming the field at fault.
func TestRepairMalformedFields(t *testing.T) {
	base := unhex(t, appendixRepair)
	info := mustAppend(t, &Repair{Info: true, K: 4, Present: bitmapOf(0)})
	ordinary := mustAppend(t, &Repair{Scheme: SchemeCauchy, K: 4, Present: bitmapOf(0, 1, 2, 3), Symbol: make([]byte, 16)})
	copy5 := mustAppend(t, &Repair{Scheme: SchemeSourceCopy, K: 8, RepairIndex: 5, RepairSessionID: 3,
		Present: bitmapOf(5, 6), Symbol: make([]byte, 16)})
	for _, tc := range []struct {
		name  string
		b     []byte
		field string
	}{
		{"k 0", edit(base, set(10, 0)), "k"},
		{"present empty", edit(base, set(20, 0, 0, 0, 0)), "Present Bitmap"},
		{"present beyond k", edit(base, set(20, 0xf8)), "Present Bitmap"},
		{"lost empty", edit(base, set(24, 0)), "Lost Source Bitmap"},
		{"lost beyond k", edit(base, set(24, 0xe8)), "Lost Source Bitmap"},
		{"lost names absent position", edit(base, set(20, 0x70)), "Lost Source Bitmap"},
		{"RETX with session 0 (C4)", edit(base, set(16, 0, 0)), "Repair Session ID"},
		{"RETX and INFO", edit(base, set(1, 0xa0)), "Flags"},
		{"ordinary symbol with a session", edit(ordinary, set(17, 1)), "Repair Session ID"},
		{"INFO with a symbol", edit(ordinary, set(1, 0x20)), "Symbol Length"},
		{"INFO flag cleared, no symbol", edit(info, set(1, 0)), "Symbol Length"},
		{"symbol of 1 octet", edit(info, func(b []byte) []byte { b[1] = 0; b[19] = 1; return append(b, 0) }), "Symbol Length"},
		{"Cauchy i + k > 255", edit(base, set(11, 252)), "Repair Index"},
		{"XOR index 1", edit(base, set(9, 2)), "Repair Index"},
		{"Source Copy index beyond k", edit(copy5, set(11, 8)), "Repair Index"},
		{"Source Copy index absent", edit(copy5, set(11, 4)), "Repair Index"},
		{"Symbol Length beyond message", edit(base, set(19, 0x11)), "Repair Symbol"},
		{"Symbol Length short of message", edit(base, set(19, 0x0f)), "Length"},
		{"Symbol Length too big for the datagram", edit(base, cut(1)), "Repair Symbol"},
		{"RETX flag on a message without Lost bitmap", edit(info, set(1, 0x80)), "Lost Source Bitmap"},
		{"bitmap cut", edit(base[:22], func(b []byte) []byte { return b }), "Present Bitmap"},
		{"fixed part cut", edit(base[:17], func(b []byte) []byte { return b }), "Repair Session ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRepair(tc.b)
			wantFieldError(t, err, TypeRepair, tc.field)
		})
	}
}

// Append refuses what Parse refuses, and the fields only Append can get wrong.
func TestRepairAppendValidates(t *testing.T) {
	ok := Repair{Retx: true, K: 4, Scheme: SchemeCauchy, RepairIndex: 2, RepairSessionID: 7,
		Present: bitmapOf(0, 1, 2, 3), Lost: bitmapOf(0, 1, 2), Symbol: make([]byte, 16)}
	for _, tc := range []struct {
		name  string
		edit  func(*Repair)
		field string
	}{
		{"k 0", func(m *Repair) { m.K = 0 }, "k"},
		{"PSN over 24 bits", func(m *Repair) { m.BlockStartPSN = 1 << 24 }, "Block Start PSN"},
		{"Lost without RETX", func(m *Repair) { m.Retx = false }, "Lost Source Bitmap"},
		{"symbol over 65535", func(m *Repair) { m.Symbol = make([]byte, 70000) }, "Symbol Length"},
		{"message over 65535", func(m *Repair) { m.Symbol = make([]byte, 65535-20) }, "Length"},
		{"INFO with symbol", func(m *Repair) { m.Retx, m.Lost, m.Info = false, psn.Bitmap{}, true }, "Symbol Length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := ok
			tc.edit(&m)
			prefix := []byte{0xaa}
			b, err := m.Append(prefix)
			wantFieldError(t, err, TypeRepair, tc.field)
			if !bytes.Equal(b, prefix) {
				t.Fatalf("Append changed the buffer on error: %x", b)
			}
		})
	}
	m := ok
	if got := hex.EncodeToString(mustAppend(t, &m)[:8]); got != "1180002c00000000" {
		t.Fatalf("header %s", got)
	}
}

// The engines parse and build REPAIR on every packet: neither may allocate.
func TestRepairNoAllocations(t *testing.T) {
	wire := unhex(t, appendixRepair)
	m, err := ParseRepair(wire)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 128)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := ParseRepair(wire); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("ParseRepair: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := m.Append(buf[:0]); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Repair.Append: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := ParseHeader(wire); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("ParseHeader: %v allocations, want 0", n)
	}
}

// Any valid REPAIR (random k, bitmaps, flags, scheme, symbol) survives Append then Parse.
func TestRepairRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		k := rapid.IntRange(1, 255).Draw(t, "k")
		m := Repair{
			FlowID:        rapid.Uint32().Draw(t, "flow"),
			Last:          rapid.Bool().Draw(t, "last"),
			ConfigID:      rapid.Uint8().Draw(t, "config"),
			Scheme:        SchemeCauchy,
			K:             uint8(k),
			RepairIndex:   uint8(rapid.IntRange(0, 255-k).Draw(t, "index")),
			BlockStartPSN: psn.PSN(rapid.Uint32Range(0, psn.Mask).Draw(t, "psn")),
		}
		positions := rapid.SliceOfNDistinct(rapid.IntRange(0, k-1), 1, k, rapid.ID[int]).Draw(t, "present")
		m.Present = bitmapOf(positions...)
		switch rapid.IntRange(0, 2).Draw(t, "form") {
		case 0: // ordinary
			m.Symbol = rapid.SliceOfN(rapid.Byte(), 2, 300).Draw(t, "symbol")
		case 1: // coded retransmission over a subset of the present positions
			m.Retx = true
			m.RepairSessionID = rapid.Uint16Range(1, 0xffff).Draw(t, "session")
			lost := rapid.SliceOfNDistinct(rapid.SampledFrom(positions), 1, len(positions), rapid.ID[int]).Draw(t, "lost")
			m.Lost = bitmapOf(lost...)
			m.Symbol = rapid.SliceOfN(rapid.Byte(), 2, 300).Draw(t, "symbol")
		case 2:
			m.Info = true
		}
		b, err := m.Append(nil)
		if err != nil {
			t.Fatalf("Append(%+v): %v", m, err)
		}
		if len(b) != m.Length() {
			t.Fatalf("wrote %d, Length %d", len(b), m.Length())
		}
		got, err := ParseRepair(b)
		if err != nil {
			t.Fatalf("ParseRepair: %v", err)
		}
		if !repairEqual(got, m) {
			t.Fatalf("round trip\n %+v\nwant\n %+v", got, m)
		}
	})
}

func BenchmarkRepairParse(b *testing.B) {
	wire := unhex(b, appendixRepair)
	b.ReportAllocs()
	b.SetBytes(int64(len(wire)))
	for b.Loop() {
		if _, err := ParseRepair(wire); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRepairAppend(b *testing.B) {
	m, err := ParseRepair(unhex(b, appendixRepair))
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	b.SetBytes(int64(m.Length()))
	for b.Loop() {
		if _, err := m.Append(buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRepairInfoNoPositionsW11 (RULINGS C8, protocol notes W11): an INFO message may carry an
// all-zero Present Bitmap, naming k PSNs that belong to no block and carry no source; any other
// REPAIR with an empty Present Bitmap is still refused.
func TestRepairInfoNoPositionsW11(t *testing.T) {
	m := Repair{FlowID: 9, Info: true, ConfigID: 2, Scheme: SchemeCauchy, K: 255, BlockStartPSN: 0xfffff0}
	b := mustAppend(t, &m)
	got, err := ParseRepair(b)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Info || !got.Present.Empty() || got.K != 255 || got.BlockStartPSN != 0xfffff0 || len(got.Symbol) != 0 {
		t.Fatalf("%+v", got)
	}
	if len(b) != 20+32 {
		t.Fatalf("%d octets, want 52 (eight bitmap words for k = 255)", len(b))
	}
	ordinary := m
	ordinary.Info, ordinary.Symbol = false, make([]byte, 16)
	if _, err := ordinary.Append(nil); err == nil {
		t.Fatal("an ordinary REPAIR with no present position was accepted")
	}
}
