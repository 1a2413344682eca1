package fec

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/crem-project/crem/psn"
)

// TestDecodeLateSourceSubtracted: Section 7.4, "If source packets in L arrive late, the CRF
// subtracts their contribution from the retransmitted symbols as well": a coded retransmission
// over L = {1, 2, 5} and an ordinary row, then source 5 arrives after both.
func TestDecodeLateSourceSubtracted(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	enc, d := newEncoder(t), newDecoder(t)
	all := psn.FirstK(8)
	b := newTestBlock(t, rng, 8, 100, all)
	if err := d.Reset(SchemeCauchy, 8, 100, all); err != nil {
		t.Fatal(err)
	}
	for _, j := range []int{0, 3, 4, 6, 7} {
		if err := d.AddSource(j, b.payloads[j]); err != nil {
			t.Fatal(err)
		}
	}
	lost := bitmapOf(1, 2, 5)
	if err := d.AddRepair(0, all, b.repair(t, enc, 0, all)); err != nil {
		t.Fatal(err)
	}
	if err := d.AddRepair(4, lost, b.repair(t, enc, 4, lost)); err != nil {
		t.Fatal(err)
	}
	if s := d.Status(); s.Missing != 1 {
		t.Fatalf("status %+v, want 1 missing", s)
	}
	if err := d.AddSource(5, b.payloads[5]); err != nil {
		t.Fatal(err)
	}
	restored, err := d.Decode()
	if err != nil || restored != bitmapOf(1, 2) {
		t.Fatalf("Decode = %v, %v", restored.Positions(nil), err)
	}
	b.checkRestored(t, d)
}

// TestDecodeNotSolvableChangesNothing: Section 7.1, with too few symbols Decode says what is
// missing and leaves the block as it was, so more symbols can still complete it.
func TestDecodeNotSolvableChangesNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	enc, d := newEncoder(t), newDecoder(t)
	all := psn.FirstK(6)
	b := newTestBlock(t, rng, 6, 30, all)
	if err := d.Reset(SchemeCauchy, 6, 30, all); err != nil {
		t.Fatal(err)
	}
	for _, j := range []int{0, 1, 2} {
		if err := d.AddSource(j, b.payloads[j]); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range []int{0, 1} {
		if err := d.AddRepair(i, all, b.repair(t, enc, i, all)); err != nil {
			t.Fatal(err)
		}
	}
	restored, err := d.Decode()
	if !errors.Is(err, ErrNotSolvable) || !restored.Empty() {
		t.Fatalf("Decode with 3 unknowns and 2 rows = %v, %v", restored.Positions(nil), err)
	}
	if s := d.Status(); s.Unknown != bitmapOf(3, 4, 5) || s.Missing != 1 {
		t.Fatalf("status %+v", s)
	}
	if err := d.AddRepair(7, bitmapOf(3, 4, 5), b.repair(t, enc, 7, bitmapOf(3, 4, 5))); err != nil {
		t.Fatal(err)
	}
	if restored, err := d.Decode(); err != nil || restored != bitmapOf(3, 4, 5) {
		t.Fatalf("Decode = %v, %v", restored.Positions(nil), err)
	}
	b.checkRestored(t, d)
	if restored, err := d.Decode(); err != nil || !restored.Empty() {
		t.Fatalf("Decode of a complete block = %v, %v", restored.Positions(nil), err)
	}
}

// TestDecodeSourceCopy: RULINGS C1 and C8 step 4, a Source Copy symbol (scheme 0, Repair
// Index = position) is source symbol i unmodified, and the decoder takes it as the known source.
func TestDecodeSourceCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	d := newDecoder(t)
	all := psn.FirstK(3)
	b := newTestBlock(t, rng, 3, 20, all)
	if err := d.Reset(SchemeCauchy, 3, 20, all); err != nil {
		t.Fatal(err)
	}
	if err := d.AddSource(0, b.payloads[0]); err != nil {
		t.Fatal(err)
	}
	for _, j := range []int{1, 2} {
		if err := d.AddSourceSymbol(j, b.src[j]); err != nil {
			t.Fatal(err)
		}
	}
	if !d.Status().Complete() {
		t.Fatal("block with all sources by Source Copy is not complete")
	}
	b.checkRestored(t, d)
	if err := d.AddSourceSymbol(1, b.src[1]); !errors.Is(err, ErrDuplicate) {
		t.Errorf("second copy of source 1: %v", err)
	}
	if err := d.Reset(SchemeCauchy, 3, 20, all); err != nil {
		t.Fatal(err)
	}
	bad := append([]byte{}, b.src[1]...)
	bad[0] = 0xff
	if err := d.AddSourceSymbol(1, bad); !errors.Is(err, ErrLengthPrefix) {
		t.Errorf("Source Copy with a bad length prefix: %v", err)
	}
	if err := d.AddSourceSymbol(1, b.src[1][:19]); !errors.Is(err, ErrSymbolLength) {
		t.Errorf("Source Copy of T-1 octets: %v", err)
	}
	if known := d.Known(); known.Count() != 0 {
		t.Errorf("refused symbols left known positions %v", d.Known())
	}
}

// TestDecodeXORScheme: Section 4.3.2, the XOR symbol recovers one lost source; a second loss
// is reported as missing (no coded retransmission in scheme 2).
func TestDecodeXORScheme(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	enc, d := newEncoder(t), newDecoder(t)
	present := bitmapOf(0, 1, 2, 4, 5)
	b := newTestBlock(t, rng, 6, 40, present)
	parity := make([]byte, 40)
	if err := enc.XOR(parity, present, b.src); err != nil {
		t.Fatal(err)
	}
	for lost := range 6 {
		if !present.Has(lost) {
			continue
		}
		if err := d.Reset(SchemeXOR, 6, 40, present); err != nil {
			t.Fatal(err)
		}
		if err := d.AddRepair(0, present, parity); err != nil {
			t.Fatal(err)
		}
		present.Each(func(j int) {
			if j != lost {
				if err := d.AddSource(j, b.payloads[j]); err != nil {
					t.Fatal(err)
				}
			}
		})
		if restored, err := d.Decode(); err != nil || restored != bitmapOf(lost) {
			t.Fatalf("lost %d: Decode = %v, %v", lost, restored.Positions(nil), err)
		}
		b.checkRestored(t, d)
	}
	if err := d.Reset(SchemeXOR, 6, 40, present); err != nil {
		t.Fatal(err)
	}
	if err := d.AddRepair(0, present, parity); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Decode(); !errors.Is(err, ErrNotSolvable) || d.Status().Missing != 4 {
		t.Fatalf("XOR with 5 unknowns: %v, status %+v", err, d.Status())
	}
}

// TestDecoderRefusesBadInput: never a panic, a clear error for symbols of the wrong length,
// bad T, unknown positions asked for, and everything Block refuses.
func TestDecoderRefusesBadInput(t *testing.T) {
	d := newDecoder(t)
	all := psn.FirstK(4)
	if err := d.Reset(SchemeCauchy, 4, 1, all); !errors.Is(err, ErrSymbolLength) {
		t.Errorf("T = 1: %v", err)
	}
	if err := d.Reset(SchemeCauchy, 0, 16, all); !errors.Is(err, ErrK) {
		t.Errorf("k = 0: %v", err)
	}
	if err := d.AddSource(0, nil); !errors.Is(err, ErrArgs) {
		t.Errorf("source before Reset: %v", err)
	}
	if err := d.Reset(SchemeCauchy, 4, 16, all); err != nil {
		t.Fatal(err)
	}
	if err := d.AddSource(0, make([]byte, 15)); !errors.Is(err, ErrPayloadLong) {
		t.Errorf("payload of 15 octets with T = 16: %v", err)
	}
	if known := d.Known(); known.Has(0) {
		t.Error("refused payload left position 0 known")
	}
	if err := d.AddRepair(0, all, make([]byte, 15)); !errors.Is(err, ErrSymbolLength) {
		t.Errorf("repair of 15 octets: %v", err)
	}
	if err := d.AddRepair(252, all, make([]byte, 16)); !errors.Is(err, ErrIndex) {
		t.Errorf("repair index 252 with k = 4: %v", err)
	}
	if _, err := d.Symbol(2); !errors.Is(err, ErrIndex) {
		t.Errorf("Symbol of an unknown source: %v", err)
	}
	if _, err := d.Payload(-1); !errors.Is(err, ErrIndex) {
		t.Errorf("Payload(-1): %v", err)
	}
	if len(d.Rows()) != 0 || d.Present() != all {
		t.Errorf("refused repair left rows %v", d.Rows())
	}
}

// TestDecoderReusesBuffers: Section 7.4 at line rate, a warm Decoder restores block after
// block with no allocation (Reset keeps every buffer), on every codec path.
func TestDecoderReusesBuffers(t *testing.T) {
	eachPath(t, testDecoderReusesBuffers)
}

func testDecoderReusesBuffers(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 30))
	enc, d := newEncoder(t), newDecoder(t)
	all := psn.FirstK(32)
	b := newTestBlock(t, rng, 32, 1058, all)
	rep := make([][]byte, 4)
	for i := range rep {
		rep[i] = b.repair(t, enc, i, all)
	}
	coded := b.repair(t, enc, 9, bitmapOf(3, 9, 17, 30, 31))
	cycle := func() {
		if err := d.Reset(SchemeCauchy, 32, 1058, all); err != nil {
			t.Fatal(err)
		}
		for j := range 32 {
			if j != 3 && j != 9 && j != 17 && j != 30 && j != 31 {
				if err := d.AddSource(j, b.payloads[j]); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i := range rep {
			if err := d.AddRepair(i, all, rep[i]); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.AddRepair(9, bitmapOf(3, 9, 17, 30, 31), coded); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Decode(); err != nil {
			t.Fatal(err)
		}
	}
	cycle()
	b.checkRestored(t, d)
	if allocs := testing.AllocsPerRun(50, cycle); allocs != 0 {
		t.Errorf("%s: %v allocations per block in steady state", CodecPath(), allocs)
	}
}

// TestDecodeSourcesByReference: Section 7.4 with sources held by reference (AddSourceRef): the
// prefix and payload are subtracted without building their symbols, late sources included;
// their symbols and payloads read back exactly, and Reset lets the caller's buffers go.
func TestDecodeSourcesByReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	enc, d := newEncoder(t), newDecoder(t)
	present := bitmapOf(0, 1, 2, 3, 5, 6, 7, 8, 9)
	b := newTestBlock(t, rng, 10, 300, present)
	b.payloads[9] = b.payloads[9][:0] // a zero-length payload
	b.src[9], _ = AppendSymbol(nil, nil, 300)
	if err := d.Reset(SchemeCauchy, 10, 300, present); err != nil {
		t.Fatal(err)
	}
	for _, j := range []int{0, 3, 6, 9} {
		if err := d.AddSourceRef(j, b.payloads[j]); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.AddSource(8, b.payloads[8]); err != nil {
		t.Fatal(err)
	}
	lost := bitmapOf(1, 2, 5, 7)
	if err := d.AddRepair(0, present, b.repair(t, enc, 0, present)); err != nil {
		t.Fatal(err)
	}
	if err := d.AddRepair(1, present, b.repair(t, enc, 1, present)); err != nil {
		t.Fatal(err)
	}
	if err := d.AddRepair(5, lost, b.repair(t, enc, 5, lost)); err != nil {
		t.Fatal(err)
	}
	if err := d.AddSourceRef(7, b.payloads[7]); err != nil { // late, inside the coded row's L
		t.Fatal(err)
	}
	if restored, err := d.Decode(); err != nil || restored != bitmapOf(1, 2, 5) {
		t.Fatalf("Decode = %v, %v", restored.Positions(nil), err)
	}
	b.checkRestored(t, d)
	if err := d.Reset(SchemeCauchy, 10, 300, present); err != nil {
		t.Fatal(err)
	}
	for j := range d.ref {
		if d.ref[j] != nil {
			t.Fatalf("Reset kept a reference to the payload of position %d", j)
		}
	}
}

// TestEncodeCodedRetransmissionAllocatesNothing: a coded retransmission over the lost set
// (Section 6.3) is computed without allocation once the Encoder is warm, on every codec path.
func TestEncodeCodedRetransmissionAllocatesNothing(t *testing.T) {
	eachPath(t, testEncodeCodedRetransmissionAllocatesNothing)
}

func testEncodeCodedRetransmissionAllocatesNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	enc := newEncoder(t)
	b := newTestBlock(t, rng, 32, 1058, psn.FirstK(32))
	dst := symbols(2, 1058)
	lost := bitmapOf(4, 9, 30)
	encode := func() {
		if err := enc.Encode(dst, []int{6, 7}, lost, b.src); err != nil {
			t.Fatal(err)
		}
	}
	encode()
	if allocs := testing.AllocsPerRun(50, encode); allocs != 0 {
		t.Errorf("%s: %v allocations per coded retransmission", CodecPath(), allocs)
	}
}
