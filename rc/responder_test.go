package rc

import (
	"bytes"
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// guarded returns memory with a region in the middle and guards around it, the region
// registered with acc.
func guarded(t testing.TB, q *QP, acc Access) (all []byte, region []byte, mr *MR) {
	all = make([]byte, 3*4096)
	for i := range all {
		all[i] = 0xa5
	}
	region = all[4096:8192:8192]
	mr, err := q.RegisterMR(region, acc)
	if err != nil {
		t.Fatal(err)
	}
	return all, region, mr
}

// nakOf returns the NAK code of the single NAK among pkts.
func nakOf(t *testing.T, pkts []roce.Packet) (roce.NAKCode, psn.PSN) {
	t.Helper()
	for _, p := range pkts {
		if c, ok := p.AETH.NAKCode(); ok && p.BTH.OpCode == roce.OpAcknowledge {
			return c, p.BTH.PSN
		}
	}
	t.Fatalf("no NAK among %+v", pkts)
	return 0, 0
}

// The responder checks R_Key, bounds and access on every WRITE and READ and answers a
// violation with NAK remote access error (0x62), leaving memory untouched.
func TestResponderAccessChecks(t *testing.T) {
	for _, mode := range []Mode{ModeGBN, ModeSR, ModeTCAETH} {
		q := newTestQP(t, testCfg(mode))
		all, _, mr := guarded(t, q, AccessRemoteWrite)
		before := bytes.Clone(all)
		pr := peerOf(q)
		pl := bytes.Repeat([]byte{1}, 64)
		cases := []roce.RETH{
			{VA: mr.Addr, RKey: mr.RKey + 1, DMALength: 64},         // bad R_Key
			{VA: mr.Addr - 1, RKey: mr.RKey, DMALength: 64},         // before the region
			{VA: mr.Addr + 4096 - 63, RKey: mr.RKey, DMALength: 64}, // runs past its end
			{VA: mr.Addr + 1<<40, RKey: mr.RKey, DMALength: 64},     // far beyond
		}
		for i, reth := range cases {
			q.Handle(time.Duration(i), pr.write(t, roce.OpWriteOnly, 100, reth, pl, true))
			code, p := nakOf(t, drain(t, q))
			if mode == ModeTCAETH {
				p++ // an extended NAK's BTH PSN is Last Finished; it names the next PSN (R5)
			}
			if code != roce.NAKRemoteAccessError || p != 100 {
				t.Fatalf("%v case %d: NAK %v at %d", mode, i, code, p)
			}
		}
		// READ of a region without the read right.
		q.Handle(10, pr.seal(t, roce.Packet{BTH: roce.BTH{OpCode: roce.OpReadRequest, PSN: 100, AckReq: true},
			RETH: roce.RETH{VA: mr.Addr, RKey: mr.RKey, DMALength: 16}}))
		if code, _ := nakOf(t, drain(t, q)); code != roce.NAKRemoteAccessError {
			t.Fatalf("%v: READ without right: %v", mode, code)
		}
		if !bytes.Equal(all, before) || q.Stats().AccessNAKs != 5 {
			t.Fatalf("%v: memory changed or %d access NAKs", mode, q.Stats().AccessNAKs)
		}
		// The right request is then accepted.
		q.Handle(20, pr.write(t, roce.OpWriteOnly, 100, roce.RETH{VA: mr.Addr + 10, RKey: mr.RKey, DMALength: 64}, pl, true))
		if !bytes.Equal(all[4096+10:4096+74], pl) || !bytes.Equal(all[:4096+10], before[:4096+10]) {
			t.Fatalf("%v: correct WRITE not placed exactly", mode)
		}
	}
}

// The requester completes a request NAKed with remote access error with that status, flushes
// the rest and enters the error state.
func TestRequesterRemoteAccessError(t *testing.T) {
	q := newTestQP(t, testCfg(ModeGBN))
	pr := peerOf(q)
	q.PostSend(SendWR{ID: 1, Op: OpWrite, Local: []byte("a")})
	q.PostSend(SendWR{ID: 2, Op: OpWrite, Local: []byte("b")})
	q.Tick(0)
	q.Tick(time.Millisecond)
	drain(t, q)
	q.Handle(2*time.Millisecond, pr.ack(t, roce.NAK(roce.NAKRemoteAccessError, 0), 100))
	c := q.PollCompletions(nil)
	if len(c) != 2 || c[0].Status != StatusRemoteAccessError || c[1].Status != StatusFlushed || q.Err() == nil {
		t.Fatalf("%+v", c)
	}
	if err := q.PostSend(SendWR{Op: OpSend}); err == nil {
		t.Fatal("post accepted in the error state")
	}
}

// No receive buffer posted: RNR NAK; the requester waits the RNR timer and sends again.
func TestRNRNAKAndRetry(t *testing.T) {
	r := newTestQP(t, testCfg(ModeGBN))
	pr := peerOf(r)
	r.Handle(0, pr.seal(t, roce.Packet{BTH: roce.BTH{OpCode: roce.OpSendOnly, PSN: 100, AckReq: true}, Payload: []byte("hi")}))
	pk := drain(t, r)
	if len(pk) != 1 || pk[0].AETH.Type() != roce.AckTypeRNRNAK || pk[0].BTH.PSN != 100 || r.Stats().RNRNAKs != 1 {
		t.Fatalf("%+v", pk)
	}
	buf := make([]byte, 10)
	r.PostRecv(RecvWR{ID: 9, Buf: buf})
	r.Handle(1, pr.seal(t, roce.Packet{BTH: roce.BTH{OpCode: roce.OpSendOnly, PSN: 100, AckReq: true}, Payload: []byte("hi")}))
	if c := r.PollCompletions(nil); len(c) != 1 || c[0].ID != 9 || c[0].Len != 2 || string(buf[:2]) != "hi" {
		t.Fatalf("%+v", c)
	}
	// Requester side.
	q := newTestQP(t, testCfg(ModeTCAETH))
	qp := peerOf(q)
	q.PostSend(SendWR{ID: 3, Op: OpSend, Local: []byte("hi")})
	q.Tick(0)
	drain(t, q)
	rnr := qp.seal(t, roce.Packet{BTH: roce.BTH{OpCode: roce.OpAcknowledge, PSN: 99}, Headers: roce.HasTCAETH,
		AETH: roce.RNRNAK(14, 0), TCAETH: roce.TCAETH{LastFinished: 99}})
	q.Handle(time.Millisecond, rnr)
	q.Tick(time.Millisecond + RNRDelay(14) - 1)
	if n := len(drain(t, q)); n != 0 {
		t.Fatalf("resent %d before the RNR timer", n)
	}
	q.Tick(time.Millisecond + RNRDelay(14))
	if re := sentPSNs(drain(t, q)); len(re) != 1 || re[0] != 100 {
		t.Fatalf("after the RNR timer: %v", re)
	}
}

// Malformed packets are dropped and counted: bad ICRC, truncated headers, wrong QP, wrong
// payload length for the opcode.
func TestMalformedDroppedAndCounted(t *testing.T) {
	q := newTestQP(t, testCfg(ModeTCAETH))
	all, _, mr := guarded(t, q, AccessRemoteWrite)
	before := bytes.Clone(all)
	pr := peerOf(q)
	good := pr.write(t, roce.OpWriteOnly, 100, roce.RETH{VA: mr.Addr, RKey: mr.RKey, DMALength: 8}, []byte("12345678"), true)
	bad := bytes.Clone(good)
	bad[len(bad)-5] ^= 1
	q.Handle(0, bad)
	q.Handle(0, good[:20])
	q.Handle(0, good[:3])
	wrongQP := pr.seal(t, roce.Packet{BTH: roce.BTH{OpCode: roce.OpWriteOnly, PSN: 100, DestQP: 0x33},
		RETH: roce.RETH{VA: mr.Addr, RKey: mr.RKey, DMALength: 8}, Payload: []byte("12345678")})
	q.Handle(0, wrongQP)
	short := pr.write(t, roce.OpWriteFirst, 100, roce.RETH{VA: mr.Addr, RKey: mr.RKey, DMALength: 2048}, []byte("x"), false)
	q.Handle(0, short)
	// Headers cut short under a good ICRC: a WRITE_ONLY whose RETH ends early.
	cut := pr.seal(t, roce.Packet{BTH: roce.BTH{OpCode: roce.OpSendOnly, PSN: 100}, Payload: make([]byte, 8)})
	cut[0] = byte(roce.OpWriteOnly)
	pr.h.Seal(cut)
	q.Handle(0, cut)
	st := q.Stats()
	if st.BadICRC != 2 || st.Malformed != 3 || st.WrongQP != 1 || !bytes.Equal(all, before) {
		t.Fatalf("bad ICRC %d, malformed %d, wrong QP %d", st.BadICRC, st.Malformed, st.WrongQP)
	}
}

// gbn: one NAK PSN sequence error per gap, duplicates re-acknowledged, and the requester goes
// back N from the NAK's PSN.
func TestGBNNakOncePerGapAndGoBack(t *testing.T) {
	r := newTestQP(t, testCfg(ModeGBN))
	_, _, mr := guarded(t, r, AccessRemoteWrite)
	pr := peerOf(r)
	pl := make([]byte, 1024)
	reth := roce.RETH{VA: mr.Addr, RKey: mr.RKey, DMALength: 4096}
	r.Handle(0, pr.write(t, roce.OpWriteFirst, 100, reth, pl, false))
	r.Handle(0, pr.write(t, roce.OpWriteMiddle, 102, roce.RETH{}, pl, false))
	r.Handle(0, pr.write(t, roce.OpWriteLast, 103, roce.RETH{}, pl, true))
	pk := drain(t, r)
	if code, p := nakOf(t, pk); code != roce.NAKPSNSequenceError || p != 101 || len(pk) != 1 {
		t.Fatalf("%+v", pk)
	}
	r.Handle(1, pr.write(t, roce.OpWriteFirst, 100, reth, pl, false)) // duplicate
	if pk := drain(t, r); len(pk) != 1 || pk[0].AETH.Type() != roce.AckTypeACK || pk[0].BTH.PSN != 100 {
		t.Fatalf("duplicate: %+v", pk)
	}
	// Requester: a NAK at 102 after 100..104 went out resends 102, 103, 104.
	q := newTestQP(t, testCfg(ModeGBN))
	qp := peerOf(q)
	q.PostSend(SendWR{Op: OpWrite, Local: make([]byte, 5*1024)})
	var now time.Duration
	sendAll(q, &now)
	drain(t, q)
	q.Handle(now, qp.ack(t, roce.NAK(roce.NAKPSNSequenceError, 0), 102))
	sendAll(q, &now)
	if re := sentPSNs(drain(t, q)); len(re) != 3 || re[0] != 102 || re[2] != 104 {
		t.Fatalf("go-back-N resent %v", re)
	}
}

// sr: the responder places out-of-order packets and NAKs each missing PSN once; the
// requester resends only what a NAK names.
func TestSRNakEachMissingAndResendOnlyNamed(t *testing.T) {
	r := newTestQP(t, testCfg(ModeSR))
	all, region, mr := guarded(t, r, AccessRemoteWrite)
	_ = all
	pr := peerOf(r)
	reth := roce.RETH{VA: mr.Addr, RKey: mr.RKey, DMALength: 4096}
	pl := func(b byte) []byte { return bytes.Repeat([]byte{b}, 1024) }
	r.Handle(0, pr.write(t, roce.OpWriteFirst, 100, reth, pl(1), false))
	r.Handle(0, pr.write(t, roce.OpWriteLast, 103, roce.RETH{}, pl(4), true))
	pk := drain(t, r)
	var naked []psn.PSN
	for _, p := range pk {
		if c, ok := p.AETH.NAKCode(); ok && c == roce.NAKPSNSequenceError {
			naked = append(naked, p.BTH.PSN)
		}
	}
	if len(naked) != 2 || naked[0] != 101 || naked[1] != 102 {
		t.Fatalf("NAKed %v", naked)
	}
	if region[3*1024] != 4 || r.Stats().PlacedOutOfOrder != 1 {
		t.Fatal("the out-of-order LAST was not placed (T9)")
	}
	r.Handle(1, pr.write(t, roce.OpWriteMiddle, 102, roce.RETH{}, pl(3), false))
	if n := len(drain(t, r)); n != 0 {
		t.Fatalf("%d more NAKs for a known gap", n)
	}
	r.Handle(1, pr.write(t, roce.OpWriteMiddle, 101, roce.RETH{}, pl(2), false))
	for i := range 4 {
		if region[i*1024] != byte(i+1) {
			t.Fatal("data misplaced")
		}
	}
	q := newTestQP(t, testCfg(ModeSR))
	qp := peerOf(q)
	q.PostSend(SendWR{Op: OpWrite, Local: make([]byte, 5*1024)})
	var now time.Duration
	sendAll(q, &now)
	drain(t, q)
	q.Handle(now, qp.ack(t, roce.NAK(roce.NAKPSNSequenceError, 0), 102))
	sendAll(q, &now)
	if re := sentPSNs(drain(t, q)); len(re) != 1 || re[0] != 102 {
		t.Fatalf("sr resent %v", re)
	}
}

// T9: READ is acknowledged by its responses (placed by offset, in any order) and consumes
// max(1, ceil(len/MTU)) PSNs; atomics are acknowledged by ATOMIC ACKNOWLEDGE, which in
// tcaeth carries the T/C AETH; a duplicate atomic is answered from the saved result.
func TestT9ReadAndAtomics(t *testing.T) {
	r := newTestQP(t, testCfg(ModeTCAETH))
	mem := make([]byte, 8192)
	for i := range mem {
		mem[i] = byte(i)
	}
	mr, _ := r.RegisterMR(mem, AccessRemoteRead|AccessRemoteAtomic)
	want := bytes.Clone(mem[:2500])
	pr := peerOf(r)
	r.Handle(0, pr.seal(t, roce.Packet{BTH: roce.BTH{OpCode: roce.OpReadRequest, PSN: 100, AckReq: true},
		RETH: roce.RETH{VA: mr.Addr, RKey: mr.RKey, DMALength: 2500}}))
	var now time.Duration
	sendAll(r, &now)
	resp := drain(t, r)
	if len(resp) != 3 || resp[0].BTH.OpCode != roce.OpReadResponseFirst || resp[2].BTH.OpCode != roce.OpReadResponseLast ||
		resp[2].BTH.PSN != 102 || len(resp[2].Payload) != 2500-2048 {
		t.Fatalf("%d responses", len(resp))
	}
	// The next request's PSN follows the READ's three.
	r.Handle(now, pr.seal(t, roce.Packet{BTH: roce.BTH{OpCode: roce.OpFetchAdd, PSN: 103, AckReq: true},
		AtomicETH: roce.AtomicETH{VA: mr.Addr + 8, RKey: mr.RKey, SwapAdd: 5}}))
	aa := drain(t, r)
	if len(aa) != 1 || aa[0].BTH.OpCode != roce.OpAtomicAcknowledge || !aa[0].Has(roce.HasTCAETH) ||
		aa[0].AtomicAckETH.OrigRemData != 0x0f0e0d0c0b0a0908 || aa[0].TCAETH.LastFinished != 103 {
		t.Fatalf("atomic ack %+v", aa)
	}
	r.Handle(now, pr.seal(t, roce.Packet{BTH: roce.BTH{OpCode: roce.OpFetchAdd, PSN: 103, AckReq: true},
		AtomicETH: roce.AtomicETH{VA: mr.Addr + 8, RKey: mr.RKey, SwapAdd: 5}}))
	if again := drain(t, r); len(again) != 1 || again[0].AtomicAckETH.OrigRemData != 0x0f0e0d0c0b0a0908 || mem[8] != 0x08+5 {
		t.Fatalf("duplicate atomic re-executed: %+v, mem %x", again, mem[8])
	}
	// Requester: responses out of order land by offset; the READ completes on the last one.
	q := newTestQP(t, testCfg(ModeTCAETH))
	qp := peerOf(q)
	local := make([]byte, 2500)
	q.PostSend(SendWR{ID: 5, Op: OpRead, Local: local, RemoteAddr: mr.Addr, RKey: mr.RKey})
	q.Tick(0)
	if req := drain(t, q); len(req) != 1 || req[0].RETH.DMALength != 2500 {
		t.Fatalf("%+v", req)
	}
	for _, i := range []int{2, 0, 1} {
		p := resp[i]
		p.BTH.DestQP = 0x22
		q.Handle(time.Millisecond, qp.seal(t, p))
	}
	if c := q.PollCompletions(nil); len(c) != 1 || c[0].ID != 5 || !bytes.Equal(local, want) {
		t.Fatalf("%+v", c)
	}
}

// sr: every packet has its own timer, 3 x SRTT from its last transmission; gbn has one
// timeout that goes back to the oldest unacknowledged PSN; both give up after the retry count.
func TestRetransmissionTimers(t *testing.T) {
	for _, mode := range []Mode{ModeSR, ModeGBN} {
		cfg := testCfg(mode)
		cfg.Rate = 0 // unpaced: the three packets leave at once
		q := newTestQP(t, cfg)
		pr := peerOf(q)
		q.PostSend(SendWR{ID: 1, Op: OpWrite, Local: make([]byte, 3*1024)})
		q.Tick(0)
		drain(t, q)
		// An ACK of the first packet at 10 ms: in sr the others' timers still run from 0; in
		// gbn the single timer restarts.
		q.Handle(10*time.Millisecond, pr.ack(t, roce.ACK(roce.CreditInvalid, 0), 100))
		d, ok := q.NextDeadline()
		want := 3 * q.SRTT() // sr: from the packets' transmission at 0, with the present SRTT
		if mode == ModeGBN {
			want += 10 * time.Millisecond // gbn: from the progress
		}
		if !ok || d != want {
			t.Fatalf("%v: deadline %v, want %v", mode, d, want)
		}
		q.Tick(d)
		if re := sentPSNs(drain(t, q)); len(re) != 2 || re[0] != 101 || re[1] != 102 {
			t.Fatalf("%v: timeout resent %v", mode, re)
		}
		for range 10 {
			if d, ok := q.NextDeadline(); ok {
				q.Tick(d)
			}
		}
		c := q.PollCompletions(nil)
		if len(c) != 1 || c[0].Status != StatusRetryExceeded {
			t.Fatalf("%v: %+v", mode, c)
		}
	}
}
