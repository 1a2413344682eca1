package rc

import (
	"slices"
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// delayPair is two QPs joined by a path of fixed one-way delay in virtual time; drop decides
// which packets the path loses.
type delayPair struct {
	qp    [2]*QP
	now   time.Duration
	delay time.Duration
	fl    [2][]flying // in flight from side s, in order of arrival
	drop  func(from int, p *roce.Packet) bool
	sent  [2]int
}

type flying struct {
	at  time.Duration
	pkt []byte
}

func (d *delayPair) flush(t *testing.T) {
	for s := range 2 {
		d.qp[s].Drain(func(b []byte) {
			d.sent[s]++
			p, err := roce.ParsePacket(b)
			if err != nil {
				t.Fatal(err)
			}
			if d.drop != nil && d.drop(s, &p) {
				return
			}
			d.fl[s] = append(d.fl[s], flying{d.now + d.delay, append([]byte(nil), b...)})
		})
	}
}

// runUntil steps until done or until nothing is pending; it reports whether done. When done,
// now is the instant it became so.
func (d *delayPair) runUntil(t *testing.T, done func() bool, limit time.Duration) bool {
	for d.now <= limit {
		for s := range 2 {
			d.qp[s].Tick(d.now)
		}
		d.flush(t)
		for s := range 2 {
			for len(d.fl[s]) > 0 && d.fl[s][0].at <= d.now {
				d.qp[1-s].Handle(d.now, d.fl[s][0].pkt)
				d.fl[s] = d.fl[s][1:]
			}
		}
		d.flush(t)
		if done() {
			return true
		}
		next, ok := time.Duration(0), false
		take := func(t time.Duration, has bool) {
			if has && (!ok || t < next) {
				next, ok = t, true
			}
		}
		for s := range 2 {
			take(d.qp[s].NextDeadline())
			if len(d.fl[s]) > 0 {
				take(d.fl[s][0].at, true)
			}
		}
		if !ok {
			break
		}
		d.now = max(d.now, next)
	}
	return false
}

// newDelayPair makes a requester and a responder of mode at 400 Gbit/s, MTU 4096 and a 25 ms
// round trip, the simulator's path, and posts a WRITE of size octets.
func newDelayPair(t *testing.T, mode Mode, size int) (*delayPair, func() bool) {
	ca, cb := benchCfgs(mode, false)
	ca.RTO = 0
	d := &delayPair{qp: [2]*QP{newTestQP(t, ca), newTestQP(t, cb)}, delay: ca.RTT / 2}
	mem := make([]byte, size)
	mr, err := d.qp[1].RegisterMR(mem, AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.qp[0].PostSend(SendWR{ID: 1, Op: OpWrite, Local: make([]byte, size), RemoteAddr: mr.Addr, RKey: mr.RKey}); err != nil {
		t.Fatal(err)
	}
	var comps []Completion
	return d, func() bool {
		comps = d.qp[0].PollCompletions(comps)
		for _, c := range comps {
			if c.Status != StatusSuccess {
				t.Fatalf("%+v", c)
			}
		}
		return len(comps) == 1
	}
}

// R20: the tcaeth responder repeats its latest ACK T_thresh after it, and once more T_thresh
// later, when nothing new arrives. A 1 MiB WRITE at 400 Gbit/s leaves in 21 us; when the ACK of
// its last packet (T6: at once for AckReq) is lost, the first repeat completes it about
// T_thresh later, within RTT + 2 T_thresh, where the fallback timeout (T7: SRTT + 3 T_thresh,
// then a retransmission's round trip) took over 2 RTT. Without loss the flow sends exactly
// AckRepeats extra ACKs, and gbn and sr none.
func TestTCAETHRepeatsLastAck(t *testing.T) {
	const size = 1 << 20
	d, done := newDelayPair(t, ModeTCAETH, size)
	cfg := d.qp[1].Config()
	last := cfg.RecvPSN.Add(size/cfg.MTU - 1)
	dropped := 0
	d.drop = func(from int, p *roce.Packet) bool {
		if from == 1 && dropped == 0 && p.BTH.OpCode == roce.OpAcknowledge && p.BTH.PSN == last {
			dropped++
			return true
		}
		return false
	}
	if !d.runUntil(t, done, 10*time.Second) {
		t.Fatalf("not done at %v: %+v", d.now, d.qp[0].Stats())
	}
	bound := cfg.RTT + 2*cfg.TThresh
	t.Logf("completed at %v with the last packet's ACK lost (RTT + 2 T_thresh = %v)", d.now, bound)
	if dropped != 1 {
		t.Fatal("the last packet's ACK was never sent")
	}
	if d.now > bound {
		t.Errorf("completed at %v, after RTT + 2 T_thresh = %v", d.now, bound)
	}
	if st := d.qp[0].Stats(); st.RetransmittedPackets != 0 || st.Timeouts != 0 {
		t.Errorf("requester retransmitted %d (%d timeouts); the repeat alone should complete it",
			st.RetransmittedPackets, st.Timeouts)
	}

	for _, mode := range []Mode{ModeTCAETH, ModeGBN, ModeSR} {
		d, done := newDelayPair(t, mode, size)
		if !d.runUntil(t, done, 10*time.Second) {
			t.Fatalf("%v: not done", mode)
		}
		d.runUntil(t, func() bool { return false }, 10*time.Second) // until nothing is pending
		st := d.qp[1].Stats()
		want := uint64(0)
		if mode == ModeTCAETH {
			want = AckRepeats
		}
		t.Logf("%v lossless: %d ACKs, %d of them repeats, idle at %v", mode, st.AckPackets, st.AckRepeats, d.now)
		if st.AckRepeats != want || uint64(d.sent[1]) != st.AckPackets+st.NAKPackets {
			t.Errorf("%v lossless: %d repeats of %d ACKs (%d packets), want %d repeats", mode, st.AckRepeats, st.AckPackets, d.sent[1], want)
		}
		if _, ok := d.qp[1].NextDeadline(); ok {
			t.Errorf("%v: the responder keeps a timer at an idle end", mode)
		}
	}
}

// A repeated extended ACK is harmless at the requester (R20): it acknowledges and marks
// nothing new, so it neither restarts the fallback timer (T7), which alone recovers a lost
// tail, nor resets the retry count, nor causes a retransmission.
func TestTCAETHDuplicateAckHarmless(t *testing.T) {
	cfg := testCfg(ModeTCAETH)
	q := newTestQP(t, cfg)
	pr := peerOf(q)
	q.PostSend(SendWR{ID: 1, Op: OpWrite, Local: make([]byte, 10*1024)})
	var now time.Duration
	sendAll(q, &now)
	drain(t, q)
	// 100..105 and 108 arrived; 106 and 107 are lost with 109, the tail.
	now += 20 * time.Millisecond
	ack := pr.extAck(t, 105, roce.Segment{Left: 108, Right: 108})
	q.Handle(now, ack)
	sendAll(q, &now)
	re := sentPSNs(drain(t, q))
	d0, ok := q.NextDeadline()
	if !ok {
		t.Fatal("no fallback timer")
	}
	before := q.Stats()
	for k := 1; k <= AckRepeats; k++ {
		q.Handle(now+time.Duration(k)*cfg.TThresh, ack)
		q.Tick(now + time.Duration(k)*cfg.TThresh)
		if more := sentPSNs(drain(t, q)); len(more) != 0 {
			t.Fatalf("repeat %d resent %v", k, more)
		}
	}
	if d, _ := q.NextDeadline(); d != d0 {
		t.Fatalf("fallback timer moved from %v to %v on repeated ACKs", d0, d)
	}
	after := q.Stats()
	if after.AcksReceived != before.AcksReceived+AckRepeats || after.RetransmittedPackets != before.RetransmittedPackets ||
		after.RTTSamples != before.RTTSamples || after.StaleAcks != before.StaleAcks {
		t.Fatalf("repeats changed more than the ACK count: %+v -> %+v", before, after)
	}
	q.Tick(d0)
	sendAll(q, &now)
	fb := sentPSNs(drain(t, q))
	if !slices.Contains(fb, psn.PSN(109)) {
		t.Fatalf("fallback resent %v (loss decision resent %v), want the tail 109", fb, re)
	}
}

// R21: when the packet that fills the last gap below a message's AckReq arrives (a
// retransmission, or a packet the CREM receiver restored after the AckReq went by), Last
// Finished passes the AckReq and the tcaeth responder acknowledges at once, as T6 does for the
// AckReq itself, instead of T_thresh later.
func TestTCAETHAckWhenAckReqPassed(t *testing.T) {
	q := newTestQP(t, testCfg(ModeTCAETH))
	mem := make([]byte, 4*1024)
	mr, _ := q.RegisterMR(mem, AccessRemoteWrite)
	pr := peerOf(q)
	pl := make([]byte, 1024)
	reth := roce.RETH{VA: mr.Addr, RKey: mr.RKey, DMALength: 4 * 1024}
	q.Handle(0, pr.write(t, roce.OpWriteFirst, 100, reth, pl, false))
	q.Handle(0, pr.write(t, roce.OpWriteMiddle, 102, roce.RETH{}, pl, false))
	q.Handle(0, pr.write(t, roce.OpWriteLast, 103, roce.RETH{}, pl, true))
	acks := drain(t, q)
	if n := len(acks); n == 0 || acks[n-1].TCAETH.LastFinished != 100 {
		t.Fatalf("AckReq behind a gap: %+v", acks)
	}
	now := time.Millisecond
	q.Handle(now, pr.write(t, roce.OpWriteMiddle, 101, roce.RETH{}, pl, false))
	acks = drain(t, q)
	if len(acks) != 1 || acks[0].TCAETH.LastFinished != 103 || acks[0].TCAETH.NumSegs != 0 {
		t.Fatalf("the gap's last packet: ACKs %+v, want one at once with Last Finished 103", acks)
	}
	// Filling a gap below no AckReq waits for the batch triggers as before.
	q.Handle(now, pr.write(t, roce.OpWriteMiddle, 105, roce.RETH{}, pl, false))
	drain(t, q) // the new gap's ACK (R6)
	q.Handle(now, pr.write(t, roce.OpWriteFirst, 104, reth, pl, false))
	if acks := drain(t, q); len(acks) != 0 {
		t.Fatalf("a gap filled below no AckReq: %d ACKs at once", len(acks))
	}
}

// R21 when a READ fills the gap: the READ is acknowledged by its responses (T9), but the WRITE
// behind it that asked for an ACK gets one at once.
func TestTCAETHAckReqPassedByRead(t *testing.T) {
	q := newTestQP(t, testCfg(ModeTCAETH))
	mem := make([]byte, 4*1024)
	mr, _ := q.RegisterMR(mem, AccessRemoteWrite|AccessRemoteRead)
	pr := peerOf(q)
	pl := make([]byte, 1024)
	q.Handle(0, pr.write(t, roce.OpWriteOnly, 101, roce.RETH{VA: mr.Addr, RKey: mr.RKey, DMALength: 1024}, pl, true))
	if acks := drain(t, q); len(acks) == 0 || acks[len(acks)-1].TCAETH.LastFinished != 99 {
		t.Fatalf("AckReq behind a gap: %+v", acks)
	}
	read := pr.seal(t, roce.Packet{BTH: roce.BTH{OpCode: roce.OpReadRequest, PSN: 100, AckReq: true},
		RETH: roce.RETH{VA: mr.Addr, RKey: mr.RKey, DMALength: 512}})
	q.Handle(10*time.Microsecond, read) // before the repeat of R20 is due
	var lf []psn.PSN
	for _, p := range drain(t, q) {
		if p.BTH.OpCode == roce.OpAcknowledge {
			lf = append(lf, p.TCAETH.LastFinished)
		}
	}
	if !slices.Equal(lf, []psn.PSN{101}) {
		t.Fatalf("ACKs after the READ filled the gap: Last Finished %v, want one of 101", lf)
	}
}
