package crf

import (
	"testing"
	"time"
	"unsafe"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// TestDecodeSymbolLayout: the decoder a block is solved with holds the block's sources, the
// received and the restored ones, fec.SymbolStride(T) apart, so that the solve's lockstep reads
// find no two in the same first-level cache set at T = 4096 or any other T (F7).
func TestDecodeSymbolLayout(t *testing.T) {
	const k, T = 32, 4096
	r := newReceiver(t, Settings{})
	id := open(t, r, 0, flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: k, M: 2, T: T})
	var syms, pkts [][]byte
	for j := range k {
		p := packet(psn.PSN(0x100+j), 1000+j)
		s, _ := fec.AppendSymbol(nil, p, T)
		pkts, syms = append(pkts, p), append(syms, s)
	}
	for j := range k {
		if j != 2 && j != 5 {
			r.Observe(time.Millisecond, id, pkts[j], true)
		}
	}
	enc, _ := fec.NewEncoder()
	for i := range 2 {
		dst := [][]byte{make([]byte, T)}
		if err := enc.Encode(dst, []int{i}, psn.FirstK(k), syms); err != nil {
			t.Fatal(err)
		}
		m := wire.Repair{FlowID: id, ConfigID: 1, Scheme: wire.SchemeCauchy, K: k, RepairIndex: uint8(i),
			BlockStartPSN: 0x100, Present: psn.FirstK(k), Symbol: dst[0]}
		r.Handle(time.Millisecond, testCSF, msg(t, &m), false)
	}
	if st := r.Stats().Flows; st.Restored != 2 {
		t.Fatalf("restored %d sources, want 2", st.Restored)
	}
	var d *fec.Decoder
	for _, dec := range r.decs {
		if fd, ok := dec.(*fec.Decoder); ok && fd.Known() == psn.FirstK(k) {
			d = fd
		}
	}
	for _, f := range r.order {
		for i := range f.blocks {
			if fd, ok := f.blocks[i].dec.(*fec.Decoder); ok && fd.Known() == psn.FirstK(k) {
				d = fd
			}
		}
	}
	if d == nil {
		t.Fatal("no decoder holds the block")
	}
	var first uintptr
	for j := range k {
		s, err := d.Symbol(j)
		if err != nil {
			t.Fatal(err)
		}
		a := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
		if j == 0 {
			first = a
		}
		if a-first != uintptr(j*fec.SymbolStride(T)) {
			t.Fatalf("source %d at +%d, want +%d", j, a-first, j*fec.SymbolStride(T))
		}
	}
}
