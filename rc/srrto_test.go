package rc

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// sr without NAKs (protocol notes R19). The responder NAKs no missing PSN; it reports each run
// received above the expected PSN, in R15's encoding, with the ACKs and when a new gap opens,
// until it has reported the run twice in its present extent. The requester marks what the
// reports name and never resends on them (no fast retransmit): its per-packet timers resend
// only the PSNs not known received, each an RTO after its last transmission.
func TestSRNoNAKSelectiveAck(t *testing.T) {
	cfg := testCfg(ModeSR)
	cfg.SRNoNAK, cfg.AckEvery = true, 5
	r := newTestQP(t, cfg)
	region := make([]byte, 10*1024)
	mr, err := r.RegisterMR(region, AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	pr := peerOf(r)
	pl := func(b byte) []byte { return bytes.Repeat([]byte{b}, 1024) }
	reth := roce.RETH{VA: mr.Addr, RKey: mr.RKey, DMALength: 10 * 1024}
	r.Handle(0, pr.write(t, roce.OpWriteFirst, 100, reth, pl(1), false))
	r.Handle(0, pr.write(t, roce.OpWriteMiddle, 102, roce.RETH{}, pl(3), false))
	if pk := drain(t, r); len(pk) != 0 {
		t.Fatalf("102 after 100 sent %d packets, want no NAK", len(pk))
	}
	r.Handle(0, pr.write(t, roce.OpWriteMiddle, 103, roce.RETH{}, pl(4), false))
	r.Handle(0, pr.write(t, roce.OpWriteMiddle, 105, roce.RETH{}, pl(6), false))
	// 105 opens a gap: the run 102..103 is reported in its final extent, and no NAK names 104.
	if got := seqNAKs(drain(t, r)); !slices.Equal(got, [][2]uint32{{101, 103}}) {
		t.Fatalf("105 opens a gap: reports %v, want the run 102..103", got)
	}
	// The fifth packet brings the ACK, which carries each run reported fewer than twice.
	r.Handle(0, pr.write(t, roce.OpWriteMiddle, 106, roce.RETH{}, pl(7), false))
	pk := drain(t, r)
	if got := seqNAKs(pk); !slices.Equal(got, [][2]uint32{{101, 103}, {104, 106}}) {
		t.Fatalf("ACK's reports %v, want 102..103 again and 104..106", got)
	}
	if pk[0].AETH.Type() != roce.AckTypeACK || pk[0].BTH.PSN != 100 {
		t.Fatalf("first packet %v PSN %d, want the ACK of 100", pk[0].AETH, pk[0].BTH.PSN)
	}
	r.Handle(0, pr.write(t, roce.OpWriteMiddle, 107, roce.RETH{}, pl(8), false))
	r.Handle(0, pr.write(t, roce.OpWriteMiddle, 108, roce.RETH{}, pl(9), false))
	r.Handle(0, pr.write(t, roce.OpWriteMiddle, 107, roce.RETH{}, pl(8), false)) // a duplicate: ACK at once
	if got := seqNAKs(drain(t, r)); !slices.Equal(got, [][2]uint32{{104, 108}}) {
		t.Fatalf("duplicate's ACK reports %v, want only the grown run 104..108", got)
	}
	r.Handle(0, pr.write(t, roce.OpWriteMiddle, 101, roce.RETH{}, pl(2), false))
	r.Handle(0, pr.write(t, roce.OpWriteMiddle, 104, roce.RETH{}, pl(5), false))
	r.Handle(0, pr.write(t, roce.OpWriteLast, 109, roce.RETH{}, pl(10), true))
	for i := range 10 {
		if region[i*1024] != byte(i+1) {
			t.Fatalf("data misplaced at packet %d", i)
		}
	}
	if st := r.Stats(); st.SeqNAKs != 4 || st.NAKPackets != 4 {
		t.Fatalf("responder: %d reports, %d NAK packets, want 4 and 4 (reports only)", st.SeqNAKs, st.NAKPackets)
	}

	// The requester sends 100..109 and hears reports of 102..103 and 105..109; 100 is
	// acknowledged. The report of 105..109 has a PSN sent after 104's transmission, which
	// with NAKs would resend 104 at once; here nothing is resent before the timers.
	q := newTestQP(t, cfg)
	qp := peerOf(q)
	q.PostSend(SendWR{ID: 7, Op: OpWrite, Local: make([]byte, 10*1024)})
	var now time.Duration
	sendAll(q, &now)
	drain(t, q)
	sent := now
	rep := func(m, top psn.PSN) []byte { return qp.ack(t, roce.NAK(roce.NAKPSNSequenceError, uint32(top)), m) }
	now += time.Millisecond
	q.Handle(now, qp.ack(t, roce.ACK(roce.CreditInvalid, 0), 100))
	q.Handle(now, rep(101, 103))
	q.Handle(now, rep(104, 109))
	q.Tick(now)
	if re := sentPSNs(drain(t, q)); len(re) != 0 {
		t.Fatalf("reports resent %v; without NAKs only the timers resend", re)
	}
	var re []psn.PSN
	for {
		d, ok := q.NextDeadline()
		if !ok || d > sent+q.req.rto()+time.Millisecond {
			break
		}
		now = max(now, d)
		q.Tick(now)
		re = append(re, sentPSNs(drain(t, q))...)
	}
	if !slices.Equal(re, []psn.PSN{101, 104}) {
		t.Fatalf("timers resent %v, want only 101 and 104, the PSNs not known received", re)
	}
	if now < q.req.rto() {
		t.Fatalf("resent at %v, before the RTO %v", now, q.req.rto())
	}
	if st := q.Stats(); st.TimeoutRetransmissions != 2 || st.NAKRetransmissions != 0 {
		t.Fatalf("%+v", st)
	}
	q.Handle(now+time.Millisecond, qp.ack(t, roce.ACK(roce.CreditInvalid, 0), 109))
	if c := q.PollCompletions(nil); len(c) != 1 || c[0].ID != 7 || c[0].Status != StatusSuccess {
		t.Fatalf("%+v", c)
	}
}

// R19's setup flag (R1's flags bit 3): set exactly with mode sr and NAKs off, so that a peer
// whose sr without NAKs sends no reports refuses the connection.
func TestSRNoNAKReportSetupFlag(t *testing.T) {
	checkSetupFlag(t, 8, []setupFlagCase{{ModeSR, true, true}, {ModeSR, false, false}, {ModeGBN, false, false}, {ModeTCAETH, false, false}})
}
