package csf

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// layoutEncoder is the package's encoder that also records where the sources and the repair
// symbols it was handed lie, and copies the sources.
type layoutEncoder struct {
	fec.Encoder
	src, dst []uintptr
	got      [][]byte
}

func (e *layoutEncoder) Encode(dst [][]byte, indices []int, over psn.Bitmap, src [][]byte) error {
	e.src, e.dst, e.got = e.src[:0], e.dst[:0], e.got[:0]
	over.Each(func(j int) {
		e.src = append(e.src, uintptr(unsafe.Pointer(unsafe.SliceData(src[j]))))
		e.got = append(e.got, append([]byte(nil), src[j]...))
	})
	for _, d := range dst {
		e.dst = append(e.dst, uintptr(unsafe.Pointer(unsafe.SliceData(d))))
	}
	return e.Encoder.Encode(dst, indices, over, src)
}

// stridedFrom reports whether the addresses lie stride octets apart, one after the other.
func stridedFrom(as []uintptr, stride int) bool {
	for i, a := range as {
		if a-as[0] != uintptr(i*stride) {
			return false
		}
	}
	return true
}

// TestSymbolLayout: the sources of a block that the encoder reads in lockstep, and the repair
// symbols it writes, lie fec.SymbolStride(T) apart in the Sender's buffers, for the symbol
// lengths of RoCEv2 MTUs and for powers of two, where symbols T apart would all share the same
// first-level cache sets (F7); the slab that grew while the block filled kept every source.
func TestSymbolLayout(t *testing.T) {
	for _, T := range []int{1024, 1058, 2048, 4096} { // up to the test CRF's largest T
		enc := &layoutEncoder{}
		s := newSender(t, WithConfig(wire.SchemeCauchy, 32, 4, T), WithAdaptation(false), WithRepairFraction(16),
			WithEncoder(enc))
		establish(t, s, 0, 3)
		if cfg, _ := s.Config(); cfg.T != T || cfg.K != 32 {
			t.Fatalf("configuration %+v, want k = 32, T = %d", cfg, T)
		}
		for round := range 3 { // the slot's first block grows its slab; later ones reuse it
			for j := range 32 {
				s.Observe(0, packet(psn.PSN(0x100+32*round+j), 300))
			}
			drain(s)
			stride := fec.SymbolStride(T)
			if len(enc.src) != 32 || !stridedFrom(enc.src, stride) {
				t.Fatalf("T = %d, block %d: sources not %d octets apart: %d of them", T, round, stride, len(enc.src))
			}
			if len(enc.dst) != 4 || !stridedFrom(enc.dst, stride) {
				t.Fatalf("T = %d, block %d: repair symbols not %d octets apart: %d of them", T, round, stride, len(enc.dst))
			}
			for j, sym := range enc.got {
				want, _ := fec.AppendSymbol(nil, packet(psn.PSN(0x100+32*round+j), 300), T)
				if !bytes.Equal(sym, want) {
					t.Fatalf("T = %d, block %d: source %d handed to the encoder is not its symbol", T, round, j)
				}
			}
		}
	}
}
