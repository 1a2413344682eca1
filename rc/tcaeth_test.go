package rc

import (
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// sentPSNs returns the BTH PSNs of the request packets among pkts.
func sentPSNs(pkts []roce.Packet) []psn.PSN {
	var out []psn.PSN
	for _, p := range pkts {
		if p.BTH.OpCode.Info().Request {
			out = append(out, p.BTH.PSN)
		}
	}
	return out
}

// sendAll runs the requester until it has sent every packet of its queue, one per pacing slot.
func sendAll(q *QP, now *time.Duration) {
	for {
		d, ok := q.NextDeadline()
		if !ok || !q.havePaced() {
			return
		}
		*now = max(*now, d)
		q.Tick(*now)
	}
}

// The draft's example (section 6) at the wire: the sender has sent 100..599; an extended ACK
// with SegmentNum 3, Last Finished 199, Seg1 300..399 and Seg2 500..599 makes it retransmit
// exactly 200..299 and 400..499, each once, and nothing else.
func TestDraftExampleRetransmitsExactlyTheGaps(t *testing.T) {
	q := newTestQP(t, testCfg(ModeTCAETH))
	pr := peerOf(q)
	if err := q.PostSend(SendWR{Op: OpWrite, Local: make([]byte, 500*1024), RKey: 1, RemoteAddr: 0}); err != nil {
		t.Fatal(err)
	}
	var now time.Duration
	sendAll(q, &now)
	first := sentPSNs(drain(t, q))
	if len(first) != 500 || first[0] != 100 || first[499] != 599 {
		t.Fatalf("sent %d packets %v..%v", len(first), first[0], first[len(first)-1])
	}
	ack := pr.extAck(t, 199, roce.Segment{Left: 300, Right: 399}, roce.Segment{Left: 500, Right: 599})
	p, _ := roce.ParsePacket(ack)
	if p.TCAETH.SegmentNum() != 3 {
		t.Fatalf("SegmentNum %d", p.TCAETH.SegmentNum())
	}
	now += 20 * time.Millisecond
	q.Handle(now, ack)
	sendAll(q, &now)
	re := sentPSNs(drain(t, q))
	seen := map[psn.PSN]int{}
	for _, x := range re {
		seen[x]++
	}
	for x := psn.PSN(100); x < 600; x++ {
		want := 0
		if x >= 200 && x < 300 || x >= 400 && x < 500 {
			want = 1
		}
		if seen[x] != want {
			t.Fatalf("PSN %d retransmitted %d times, want %d", x, seen[x], want)
		}
	}
	if len(re) != 200 || q.Stats().LossRetransmissions != 200 {
		t.Fatalf("%d retransmissions", len(re))
	}
	// The same ACK again changes nothing: one PSN at most once per SRTT (T5).
	q.Handle(now+time.Millisecond, ack)
	sendAll(q, &now)
	if again := sentPSNs(drain(t, q)); len(again) != 0 {
		t.Fatalf("a repeated ACK retransmitted %d more", len(again))
	}
}

// T5: PSNs above the highest reported one are never deemed lost by an ACK; a gap is a
// candidate only when the scoreboard does not mark it (a range reported by an earlier ACK
// stays marked); the reorder window holds back PSNs sent too close to the newest reported one.
func TestT5ScoreboardAndRACK(t *testing.T) {
	cfg := testCfg(ModeTCAETH)
	cfg.ReorderWindow = 50 * 8 * time.Microsecond // about 47 packets at 1 Gbit/s
	q := newTestQP(t, cfg)
	pr := peerOf(q)
	q.PostSend(SendWR{Op: OpWrite, Local: make([]byte, 500*1024)})
	var now time.Duration
	sendAll(q, &now)
	drain(t, q)
	now += 20 * time.Millisecond
	// Report 300..310 only: the gap 200..299 is below it, but 290..299 were sent within the
	// reorder window before 310; 311..599 are above the highest reported: never by an ACK.
	q.Handle(now, pr.extAck(t, 199, roce.Segment{Left: 300, Right: 310}))
	sendAll(q, &now)
	re := sentPSNs(drain(t, q))
	if len(re) == 0 || re[0] != 200 {
		t.Fatalf("retransmitted %v", re)
	}
	for _, x := range re {
		if x >= 300 || x > 200+uint32ToPSN(310-200-47) {
			t.Fatalf("retransmitted %d: inside the reorder window or above the highest reported", x)
		}
	}
	// An ACK that reports only 500..599 (300..310 already marked) resends none of 300..310.
	n := len(re)
	q.Handle(now+time.Millisecond, pr.extAck(t, 199, roce.Segment{Left: 500, Right: 599}))
	sendAll(q, &now)
	for _, x := range sentPSNs(drain(t, q)) {
		if x >= 300 && x <= 310 || x >= 500 || x < 200 {
			t.Fatalf("retransmitted %d", x)
		}
		n++
	}
	if n != 299-200+1+499-311+1 {
		t.Fatalf("%d retransmitted in all, want the 100 + 189 unmarked PSNs below 500", n)
	}
}

func uint32ToPSN(v uint32) psn.PSN { return psn.PSN(v) }

// T6: the default thresholds, the dual trigger, the timer that flushes a tail batch, and
// immediate ACKs for AckReq and duplicates; every ACK is extended (T2) with the cumulative
// Last Finished PSN as BTH PSN, and what an ACK flushes is the batch, not the ranges (T4).
func TestT6BatchTriggersAndTimer(t *testing.T) {
	cfg := testCfg(ModeTCAETH)
	q := newTestQP(t, cfg)
	if got := q.Config().TThresh; got != 20*time.Millisecond/64 {
		t.Fatalf("T_thresh %v, want SRTT/64", got)
	}
	if c := CThresh(1e9, 1024, 20*time.Millisecond/64); c != q.CThresh() || c != 37 {
		t.Fatalf("C_thresh %d (QP %d), want ceil(1e9/(1068*8) x 312.5us) = 37", c, q.CThresh())
	}
	if d := (Config{RTT: time.Millisecond}); true {
		d.setDefaults()
		if d.TThresh != 100*time.Microsecond {
			t.Fatalf("T_thresh floor %v", d.TThresh)
		}
	}
	mem := make([]byte, 1<<20)
	mr, _ := q.RegisterMR(mem, AccessRemoteWrite)
	pr := peerOf(q)
	pl := make([]byte, 1024)
	first := pr.write(t, roce.OpWriteFirst, 100, roce.RETH{VA: mr.Addr, RKey: mr.RKey, DMALength: 1 << 20}, pl, false)
	now := time.Duration(0)
	q.Handle(now, first)
	// Condition B: the 37th packet of the batch triggers the ACK.
	for i := 1; i < 36; i++ {
		q.Handle(now, pr.write(t, roce.OpWriteMiddle, psn.PSN(100+i), roce.RETH{}, pl, false))
	}
	if acks := drain(t, q); len(acks) != 0 {
		t.Fatalf("%d ACKs before C_thresh", len(acks))
	}
	q.Handle(now, pr.write(t, roce.OpWriteMiddle, 136, roce.RETH{}, pl, false))
	acks := drain(t, q)
	if len(acks) != 1 || !acks[0].Has(roce.HasTCAETH) || acks[0].BTH.PSN != 136 || acks[0].TCAETH.LastFinished != 136 {
		t.Fatalf("ACKs %+v", acks)
	}
	// Condition A and the timer: one packet, then T_thresh passes with nothing more.
	q.Handle(now+time.Millisecond, pr.write(t, roce.OpWriteMiddle, 137, roce.RETH{}, pl, false))
	if d, ok := q.NextDeadline(); !ok || d != now+time.Millisecond+cfg.RTT/64 {
		t.Fatalf("timer %v %v", d, ok)
	}
	q.Tick(now + time.Millisecond + cfg.RTT/64)
	if acks := drain(t, q); len(acks) != 1 || acks[0].BTH.PSN != 137 {
		t.Fatalf("timer ACK %+v", acks)
	}
	// Out of order: 140 and 142 arrive; the ACK reports them as segments above 137.
	q.Handle(2*time.Millisecond, pr.write(t, roce.OpWriteMiddle, 140, roce.RETH{}, pl, false))
	q.Handle(2*time.Millisecond, pr.write(t, roce.OpWriteMiddle, 142, roce.RETH{}, pl, true)) // AckReq: at once
	acks = drain(t, q)
	last := acks[len(acks)-1]
	if last.TCAETH.LastFinished != 137 || last.TCAETH.NumSegs != 2 || last.TCAETH.Segs[0] != (roce.Segment{Left: 140, Right: 140}) ||
		last.TCAETH.Segs[1] != (roce.Segment{Left: 142, Right: 142}) {
		t.Fatalf("ACK %+v", last.TCAETH)
	}
	// A duplicate triggers an ACK at once, still reporting the kept ranges.
	q.Handle(5*time.Millisecond, pr.write(t, roce.OpWriteMiddle, 140, roce.RETH{}, pl, false))
	acks = drain(t, q)
	if len(acks) != 1 || acks[0].TCAETH.NumSegs != 2 {
		t.Fatalf("duplicate: %+v", acks)
	}
	if q.Stats().PlacedOutOfOrder != 2 {
		t.Fatalf("placed out of order %d, want 2 (T9)", q.Stats().PlacedOutOfOrder)
	}
}

// T4: with more than three ranges an ACK carries the range of the most recent PSN and two
// others, ascending; successive ACKs cover them all.
func TestT4RangeSelection(t *testing.T) {
	var s rangeSet
	base := psn.PSN(100)
	for _, p := range []psn.PSN{110, 120, 130, 140, 150} {
		s.insert(base, p)
	}
	covered := map[psn.PSN]bool{}
	for seq := uint64(1); seq <= 3; seq++ {
		var tc roce.TCAETH
		tc.LastFinished = 99
		s.report(&tc, base, 130, true, seq)
		if tc.NumSegs != 3 {
			t.Fatalf("%d segments", tc.NumSegs)
		}
		has130 := false
		for i, sg := range tc.Used() {
			if i > 0 && !tc.Segs[i-1].Right.Before(sg.Left) {
				t.Fatalf("not ascending: %v", tc.Used())
			}
			covered[sg.Left] = true
			has130 = has130 || sg.Left == 130
		}
		if !has130 {
			t.Fatalf("ACK %d lacks the most recent range: %v", seq, tc.Used())
		}
		if _, err := tc.Append(nil); err != nil {
			t.Fatal(err)
		}
	}
	if len(covered) != 5 {
		t.Fatalf("three ACKs covered %v", covered)
	}
	// Merging and trimming.
	s.insert(base, 111)
	s.insert(base, 112)
	s.trim(base, 121)
	if s.rs[0].l != 121 && s.rs[0].l != 130 {
		t.Fatalf("trim: %+v", s.rs)
	}
}

// T7: with no extended ACK for the ACK timeout, the sender resends its highest
// min(C_thresh, outstanding) PSNs and restarts the timer; after the retry count the QP fails.
func TestT7FallbackTimeout(t *testing.T) {
	cfg := testCfg(ModeTCAETH)
	q := newTestQP(t, cfg)
	q.PostSend(SendWR{ID: 7, Op: OpWrite, Local: make([]byte, 100*1024)})
	var now time.Duration
	sendAll(q, &now)
	drain(t, q)
	ct := CThresh(cfg.Rate, cfg.MTU, q.Config().TThresh)
	to := q.SRTT() + 3*q.Config().TThresh
	for round := 1; round <= 7; round++ {
		d, ok := q.NextDeadline()
		if !ok {
			t.Fatal("no fallback timer")
		}
		now = d
		q.Tick(now)
		sendAll(q, &now)
		re := sentPSNs(drain(t, q))
		if len(re) != ct || re[0] != psn.PSN(100+100-ct) || re[len(re)-1] != 199 {
			t.Fatalf("round %d: resent %d PSNs %v..%v, want the highest %d", round, len(re), re[0], re[len(re)-1], ct)
		}
		_ = to
	}
	d, _ := q.NextDeadline()
	q.Tick(d)
	comps := q.PollCompletions(nil)
	if len(comps) != 1 || comps[0].Status != StatusRetryExceeded || q.Err() == nil {
		t.Fatalf("after the retry count: %+v, err %v", comps, q.Err())
	}
}

// T8: the sender paces at the preset rate with no window check, and when its send buffer is
// full it waits and counts the stall.
func TestT8PacingAndSendBufferStall(t *testing.T) {
	cfg := testCfg(ModeTCAETH)
	cfg.SendBuffer = 64
	q := newTestQP(t, cfg)
	q.PostSend(SendWR{Op: OpWrite, Local: make([]byte, 100*1024)})
	var now time.Duration
	var times []time.Duration
	for {
		d, ok := q.NextDeadline()
		if !ok || !q.havePaced() {
			break
		}
		now = max(now, d)
		q.Tick(now)
		for range drain(t, q) {
			times = append(times, now)
		}
	}
	if len(times) != 64 {
		t.Fatalf("sent %d with a send buffer of 64", len(times))
	}
	gap := times[2] - times[1]
	want := time.Duration((1024 + 12 + 4 + 28) * 8) // ns at 1 Gbit/s
	if gap != want {
		t.Fatalf("pacing gap %v, want %v", gap, want)
	}
	if q.Stats().SendBufferStalls != 1 {
		t.Fatalf("stalls %d", q.Stats().SendBufferStalls)
	}
	pr := peerOf(q)
	q.Handle(now, pr.extAck(t, 131))
	sendAll(q, &now)
	if n := len(sentPSNs(drain(t, q))); n != 32 {
		t.Fatalf("after an ACK of 32, sent %d more", n)
	}
}

// T2: a plain QP drops an extended ACK and an extended QP a plain one, counting them.
func TestT2ExtendedOnlyWhenAgreed(t *testing.T) {
	for _, mode := range []Mode{ModeGBN, ModeTCAETH} {
		q := newTestQP(t, testCfg(mode))
		pr := peerOf(q)
		q.PostSend(SendWR{Op: OpSend, Local: []byte("x")})
		q.Tick(0)
		drain(t, q)
		if mode == ModeGBN {
			q.Handle(time.Millisecond, pr.extAck(t, 100))
		} else {
			q.Handle(time.Millisecond, pr.ack(t, roce.ACK(roce.CreditInvalid, 1), 100))
		}
		if q.Stats().Malformed != 1 || len(q.PollCompletions(nil)) != 0 {
			t.Fatalf("%v: %+v", mode, q.Stats())
		}
	}
}
