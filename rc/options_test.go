package rc

import (
	"testing"
	"time"

	"github.com/crem-project/crem/roce"
)

// R18: with SkipICRC the QP leaves the ICRC octets zero and accepts a packet whatever its
// ICRC; without it, it seals and verifies as always.
func TestSkipICRC(t *testing.T) {
	for _, skip := range []bool{false, true} {
		cfg := testCfg(ModeTCAETH)
		cfg.SkipICRC = skip
		q := newTestQP(t, cfg)
		mem := make([]byte, 1024)
		mr, _ := q.RegisterMR(mem, AccessRemoteWrite)
		pr := peerOf(q)
		good := pr.write(t, roce.OpWriteOnly, 100, roce.RETH{VA: mr.Addr, RKey: mr.RKey, DMALength: 1024}, make([]byte, 1024), true)
		bad := append([]byte(nil), good...)
		bad[len(bad)-1] ^= 0xff
		q.Handle(0, bad)
		var acks [][]byte
		q.Drain(func(b []byte) { acks = append(acks, b) })
		st := q.Stats()
		if skip {
			if st.BadICRC != 0 || st.RequestsReceived != 1 || len(acks) != 1 {
				t.Fatalf("SkipICRC: a packet with a bad ICRC was not taken: %+v", st)
			}
			if c, _ := roce.CarriedICRC(acks[0]); c != 0 {
				t.Fatalf("SkipICRC: the ACK carries ICRC %#x, want zero", c)
			}
			continue
		}
		if st.BadICRC != 1 || st.RequestsReceived != 0 || len(acks) != 0 {
			t.Fatalf("a bad ICRC was accepted: %+v", st)
		}
		q.Handle(0, good)
		q.Drain(func(b []byte) { acks = append(acks, b) })
		if len(acks) != 1 {
			t.Fatalf("%d ACKs", len(acks))
		}
		in := roce.LogicalHeader{Src: cfg.LocalAddr, Dst: cfg.RemoteAddr, SrcPort: cfg.LocalPort}
		if err := in.Verify(acks[0]); err != nil {
			t.Fatalf("the ACK's ICRC: %v", err)
		}
	}
}

// R18: with SkipICRCCheck the QP takes a packet whatever its ICRC but still seals what it
// sends, so that a CREM receiver can check what it restores from them (C12).
func TestSkipICRCCheckStillSeals(t *testing.T) {
	cfg := testCfg(ModeTCAETH)
	cfg.SkipICRCCheck = true
	q := newTestQP(t, cfg)
	mem := make([]byte, 1024)
	mr, _ := q.RegisterMR(mem, AccessRemoteWrite)
	pr := peerOf(q)
	bad := pr.write(t, roce.OpWriteOnly, 100, roce.RETH{VA: mr.Addr, RKey: mr.RKey, DMALength: 1024}, make([]byte, 1024), true)
	bad[len(bad)-1] ^= 0xff
	q.Handle(0, bad)
	var acks [][]byte
	q.Drain(func(b []byte) { acks = append(acks, b) })
	if st := q.Stats(); st.BadICRC != 0 || st.RequestsReceived != 1 || len(acks) != 1 {
		t.Fatalf("SkipICRCCheck: a packet with a bad ICRC was not taken: %+v, %d ACKs", st, len(acks))
	}
	in := roce.LogicalHeader{Src: cfg.LocalAddr, Dst: cfg.RemoteAddr, SrcPort: cfg.LocalPort}
	if err := in.Verify(acks[0]); err != nil {
		t.Fatalf("SkipICRCCheck: the ACK is not sealed: %v", err)
	}
}

// R18: with ReuseBuffers a drained packet's buffer is reused for later packets (each packet
// is capped at its length, so that a driver cannot write into the next), and steady traffic
// allocates nothing per packet; without it every packet is a buffer of its own.
func TestReuseBuffers(t *testing.T) {
	for _, reuse := range []bool{false, true} {
		ca, cb := benchCfgs(ModeTCAETH, false)
		ca.ReuseBuffers, cb.ReuseBuffers = reuse, reuse
		p := newDirectPair(t, ca, cb)
		const size = 1 << 20
		src := make([]byte, size)
		dst := make([]byte, size)
		mr, err := p.b.RegisterMR(dst, AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		allocs := func(n int) float64 {
			send := func() {
				if err := p.a.PostSend(SendWR{Op: OpWrite, Local: src[:n*4096], RemoteAddr: mr.Addr, RKey: mr.RKey}); err != nil {
					t.Fatal(err)
				}
				p.run(t)
				p.a.PollCompletions(nil)
			}
			send()
			return testing.AllocsPerRun(10, send)
		}
		// Per message there are a few (the request, the responder's record of the message,
		// the completion); per packet there are none.
		small, large := allocs(16), allocs(256)
		t.Logf("reuse %v: %.1f allocations per WRITE of 16 packets, %.1f of 256", reuse, small, large)
		if reuse && (large != small || large > 8) {
			t.Errorf("ReuseBuffers: %.1f allocations per WRITE of 256 packets, %.1f of 16: want no more for more packets", large, small)
		}
		if !reuse && large-small < 240 {
			t.Errorf("default: %.1f allocations per WRITE of 256 packets, %.1f of 16: want a buffer per packet", large, small)
		}
		// Two packets drained one after the other: the same memory with ReuseBuffers.
		var first []*byte
		for range 2 {
			p.a.PostSend(SendWR{Op: OpWrite, Local: src[:1024], RemoteAddr: mr.Addr, RKey: mr.RKey})
			p.a.Tick(p.now)
			p.a.Drain(func(b []byte) {
				if cap(b) != len(b) {
					t.Errorf("packet of %d octets has capacity %d", len(b), cap(b))
				}
				first = append(first, &b[0])
				p.b.Handle(p.now, b)
			})
			p.run(t)
		}
		if same := first[0] == first[1]; same != reuse {
			t.Errorf("reuse %v: second packet in the first one's buffer: %v", reuse, same)
		}
	}
}

// The local ACK timeout follows IBTA's 5-bit code, 4.096 us x 2^code, for codes 1 to 31; code
// 0 (IBTA's infinite timeout) and codes beyond 5 bits are errors; a QP given none takes code
// 14, 67.1 ms, perftest's default (protocol notes R33).
func TestLocalAckTimeoutCode(t *testing.T) {
	for code, want := range map[int]time.Duration{1: 8192 * time.Nanosecond, 14: 67108864 * time.Nanosecond,
		18: 1073741824 * time.Nanosecond, 31: 4096 * time.Nanosecond << 31} {
		if got, err := LocalAckTimeoutOf(code); err != nil || got != want {
			t.Errorf("code %d: %v, %v; want %v", code, got, err, want)
		}
	}
	for _, code := range []int{0, -1, 32} {
		if _, err := LocalAckTimeoutOf(code); err == nil {
			t.Errorf("code %d accepted", code)
		}
	}
	cfg := testCfg(ModeTCAETH)
	q := newTestQP(t, cfg)
	if got := q.Config().LocalAckTimeout; got != 67108864*time.Nanosecond {
		t.Errorf("default local ACK timeout %v, want 67.108864ms", got)
	}
	if !q.Sampled() {
		t.Error("a stated RTT is not taken as a sample")
	}
	cfg.RTT = 0
	if q := newTestQP(t, cfg); q.Sampled() {
		t.Error("a QP with no RTT claims a sample")
	}
	cfg.RTT, cfg.RTTProvisional = 5*time.Millisecond, true
	if q := newTestQP(t, cfg); q.Sampled() || q.SRTT() != 5*time.Millisecond {
		t.Errorf("a provisional RTT: sampled %v, SRTT %v; want an unsampled 5 ms estimate", q.Sampled(), q.SRTT())
	}
}
