package rc

import (
	"testing"

	"github.com/crem-project/crem/roce"
)

// A WRITE that repeats its local buffer carries the repeated content, octet x being
// Local[x mod len(Local)], and a periodic region places it modulo its buffer: after a 1 MiB
// message through 64 KiB buffers at each end, the sink buffer holds the source buffer.
func TestPeriodicWrite(t *testing.T) {
	const period, size = 64 << 10, 1 << 20
	for _, mode := range []Mode{ModeTCAETH, ModeSR, ModeGBN} {
		ca, cb := benchCfgs(mode, false)
		p := newDirectPair(t, ca, cb)
		src := make([]byte, period)
		for i := range src {
			src[i] = byte(i*7 + i>>8)
		}
		dst := make([]byte, period)
		mr, err := p.b.RegisterPeriodicMR(dst, size, AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		if mr.Len() != size || len(mr.Bytes()) != period {
			t.Fatalf("%v: region of %d octets over %d", mode, mr.Len(), len(mr.Bytes()))
		}
		if err := p.a.PostSend(SendWR{ID: 7, Op: OpWrite, Local: src, Length: size, RemoteAddr: mr.Addr, RKey: mr.RKey}); err != nil {
			t.Fatal(err)
		}
		p.run(t)
		c := p.a.PollCompletions(nil)
		if len(c) != 1 || c[0].Status != StatusSuccess || c[0].Len != size || c[0].ID != 7 {
			t.Fatalf("%v: completions %+v", mode, c)
		}
		if want := uint64(size / ca.MTU); p.pkts != want {
			t.Fatalf("%v: %d packets, want %d", mode, p.pkts, want)
		}
		if string(dst) != string(src) {
			t.Fatalf("%v: sink differs from the source", mode)
		}
	}
}

// A periodic region places a WRITE that starts anywhere in it, packets that straddle its
// buffer's end included, and refuses one that runs past its length.
func TestPeriodicRegionPlacement(t *testing.T) {
	cfg := testCfg(ModeTCAETH)
	q := newTestQP(t, cfg)
	buf := make([]byte, 3000) // not a multiple of the MTU: every packet lands somewhere new
	mr, err := q.RegisterPeriodicMR(buf, 10000, AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	pr := peerOf(q)
	msg := make([]byte, 3*1024)
	for i := range msg {
		msg[i] = byte(i%251 + 1)
	}
	const at = 5000 // buffer offset 2000: the message wraps at its 1000th octet
	reth := roce.RETH{VA: mr.Addr + at, RKey: mr.RKey, DMALength: uint32(len(msg))}
	p := cfg.RecvPSN
	q.Handle(0, pr.write(t, roce.OpWriteFirst, p, reth, msg[:1024], false))
	q.Handle(0, pr.write(t, roce.OpWriteMiddle, p.Add(1), roce.RETH{}, msg[1024:2048], false))
	q.Handle(0, pr.write(t, roce.OpWriteLast, p.Add(2), roce.RETH{}, msg[2048:], true))
	want := make([]byte, len(buf))
	for x := range msg {
		want[(at+x)%len(buf)] = msg[x]
	}
	if string(buf) != string(want) {
		t.Fatal("message misplaced")
	}
	if st := q.Stats(); st.AccessNAKs != 0 {
		t.Fatalf("%+v", st)
	}
	drain(t, q)
	// 10000 - 9000 < 3072: past the region's end.
	reth = roce.RETH{VA: mr.Addr + 9000, RKey: mr.RKey, DMALength: uint32(len(msg))}
	q.Handle(0, pr.write(t, roce.OpWriteFirst, p.Add(3), reth, msg[:1024], false))
	if st := q.Stats(); st.AccessNAKs != 1 {
		t.Fatalf("a WRITE past the region's end: %+v", st)
	}
}

// Registration and posting refuse what a repeated buffer cannot be: a periodic region with
// READ or atomic rights or shorter than its buffer, a repeating READ or SEND, a repeated buffer
// that is not a whole number of MTUs, a length shorter than the buffer.
func TestPeriodicRefusals(t *testing.T) {
	cfg := testCfg(ModeTCAETH)
	q := newTestQP(t, cfg)
	buf := make([]byte, 4096)
	for _, acc := range []Access{AccessRemoteRead, AccessRemoteAtomic, AccessRemoteWrite | AccessRemoteRead} {
		if _, err := q.RegisterPeriodicMR(buf, 1<<20, acc); err == nil {
			t.Errorf("periodic region with access %#x registered", acc)
		}
	}
	if _, err := q.RegisterPeriodicMR(buf, 100, AccessRemoteWrite); err == nil {
		t.Error("periodic region shorter than its buffer registered")
	}
	if _, err := q.RegisterPeriodicMR(nil, 100, AccessRemoteWrite); err == nil {
		t.Error("periodic region of no buffer registered")
	}
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
