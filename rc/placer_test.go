package rc

import (
	"testing"

	"github.com/crem-project/crem/roce"
)

// placements records what a Placer region was given.
type placements struct {
	period []byte // what was placed, modulo its length
	offs   []int
	octets int
}

func (pl *placements) Place(off int, p []byte) {
	pl.offs = append(pl.offs, off)
	pl.octets += len(p)
	for i, c := range p {
		pl.period[(off+i)%len(pl.period)] = c
	}
}

// A WRITE that repeats its local buffer carries the repeated content, octet x being
// Local[x mod len(Local)], and a Placer region hands each packet's payload to its Placer at
// its offset, once: a 1 MiB message from a 64 KiB buffer arrives whole and in place.
func TestRepeatedWriteToPlacer(t *testing.T) {
	const period, size = 64 << 10, 1 << 20
	for _, mode := range []Mode{ModeTCAETH, ModeSR, ModeGBN} {
		ca, cb := benchCfgs(mode, false)
		p := newDirectPair(t, ca, cb)
		src := make([]byte, period)
		for i := range src {
			src[i] = byte(i*7 + i>>8)
		}
		pl := &placements{period: make([]byte, period)}
		mr, err := p.b.RegisterPlacer(size, pl, AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		if mr.Len() != size || mr.Bytes() != nil {
			t.Fatalf("%v: region of %d octets, memory %d", mode, mr.Len(), len(mr.Bytes()))
		}
		if err := p.a.PostSend(SendWR{ID: 7, Op: OpWrite, Local: src, Length: size, RemoteAddr: mr.Addr, RKey: mr.RKey}); err != nil {
			t.Fatal(err)
		}
		p.run(t)
		c := p.a.PollCompletions(nil)
		if len(c) != 1 || c[0].Status != StatusSuccess || c[0].Len != size || c[0].ID != 7 {
			t.Fatalf("%v: completions %+v", mode, c)
		}
		if want := uint64(size / ca.MTU); p.pkts != want || len(pl.offs) != int(want) || pl.octets != size {
			t.Fatalf("%v: %d packets, %d placements of %d octets, want %d", mode, p.pkts, len(pl.offs), pl.octets, want)
		}
		for i, off := range pl.offs {
			if off != i*ca.MTU {
				t.Fatalf("%v: placement %d at %d", mode, i, off)
			}
		}
		if string(pl.period) != string(src) {
			t.Fatalf("%v: placed content differs from the source", mode)
		}
	}
}

// A Placer region takes a WRITE anywhere in it, its packets out of order included, each at its
// offset in the region, and refuses one that runs past its length.
func TestPlacerRegion(t *testing.T) {
	cfg := testCfg(ModeTCAETH)
	q := newTestQP(t, cfg)
	pl := &placements{period: make([]byte, 10000)}
	mr, err := q.RegisterPlacer(10000, pl, AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	pr := peerOf(q)
	msg := make([]byte, 3*1024)
	for i := range msg {
		msg[i] = byte(i%251 + 1)
	}
	const at = 5000
	reth := roce.RETH{VA: mr.Addr + at, RKey: mr.RKey, DMALength: uint32(len(msg))}
	p := cfg.RecvPSN
	q.Handle(0, pr.write(t, roce.OpWriteFirst, p, reth, msg[:1024], false))
	q.Handle(0, pr.write(t, roce.OpWriteLast, p.Add(2), roce.RETH{}, msg[2048:], true))
	q.Handle(0, pr.write(t, roce.OpWriteMiddle, p.Add(1), roce.RETH{}, msg[1024:2048], false))
	if string(pl.period[at:at+len(msg)]) != string(msg) || pl.octets != len(msg) {
		t.Fatalf("message misplaced: %d octets at %v", pl.octets, pl.offs)
	}
	if st := q.Stats(); st.AccessNAKs != 0 || st.PlacedOutOfOrder != 1 {
		t.Fatalf("%+v", st)
	}
	drain(t, q)
	// 10000 - 9000 < 3072: past the region's end.
	reth = roce.RETH{VA: mr.Addr + 9000, RKey: mr.RKey, DMALength: uint32(len(msg))}
	q.Handle(0, pr.write(t, roce.OpWriteFirst, p.Add(3), reth, msg[:1024], false))
	if st := q.Stats(); st.AccessNAKs != 1 || pl.octets != len(msg) {
		t.Fatalf("a WRITE past the region's end: %+v", st)
	}
}

// Registration and posting refuse what has no memory behind it: a Placer region with READ or
// atomic rights, of no length or no Placer; a repeating READ or SEND, a repeated buffer that is
// not a whole number of MTUs, a length shorter than the buffer.
func TestPlacerAndRepeatRefusals(t *testing.T) {
	cfg := testCfg(ModeTCAETH)
	q := newTestQP(t, cfg)
	pl := &placements{period: make([]byte, 4096)}
	for _, acc := range []Access{AccessRemoteRead, AccessRemoteAtomic, AccessRemoteWrite | AccessRemoteRead} {
		if _, err := q.RegisterPlacer(1<<20, pl, acc); err == nil {
			t.Errorf("placer region with access %#x registered", acc)
		}
	}
	if _, err := q.RegisterPlacer(0, pl, AccessRemoteWrite); err == nil {
		t.Error("placer region of no octets registered")
	}
	if _, err := q.RegisterPlacer(100, nil, AccessRemoteWrite); err == nil {
		t.Error("placer region without a placer registered")
	}
	buf := make([]byte, 4096)
	for _, wr := range []SendWR{
		{Op: OpRead, Local: buf, Length: 1 << 20},
		{Op: OpSend, Local: buf, Length: 1 << 20},
		{Op: OpWrite, Local: buf[:1000], Length: 1 << 20},
		{Op: OpWrite, Local: buf, Length: 100},
		{Op: OpWrite, Local: nil, Length: 1 << 20},
	} {
		if err := q.PostSend(wr); err == nil {
			t.Errorf("posted %v of %d local octets, length %d", wr.Op, len(wr.Local), wr.Length)
		}
	}
	if q.Pending() != 0 {
		t.Fatalf("%d pending", q.Pending())
	}
}
