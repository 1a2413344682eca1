package rc

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// seqNAKs returns the sr NAK PSN sequence errors among pkts as (named PSN, MSN field) pairs.
func seqNAKs(pkts []roce.Packet) [][2]uint32 {
	var out [][2]uint32
	for _, p := range pkts {
		if c, ok := p.AETH.NAKCode(); ok && p.BTH.OpCode == roce.OpAcknowledge && c == roce.NAKPSNSequenceError {
			out = append(out, [2]uint32{uint32(p.BTH.PSN), p.AETH.MSN})
		}
	}
	return out
}

// sr's selective acknowledgement (protocol notes R15). The responder: a NAK PSN sequence
// error names the missing PSN m in its BTH and carries in the AETH's MSN field the last PSN of
// the run received directly above m (m itself when it reports none); a packet that opens a new
// gap first reports the runs below it in their final extent, and each ACK carries the runs that
// changed since they were last reported. The requester: PSNs reported received are never
// resent, by NAK or by timer; the PSN below a reported run is resent only when a PSN of the run
// went out after its last transmission.
func TestSRSelectiveAck(t *testing.T) {
	r := newTestQP(t, testCfg(ModeSR))
	region := make([]byte, 6*1024)
	mr, err := r.RegisterMR(region, AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	pr := peerOf(r)
	pl := func(b byte) []byte { return bytes.Repeat([]byte{b}, 1024) }
	reth := roce.RETH{VA: mr.Addr, RKey: mr.RKey, DMALength: 6 * 1024}
	r.Handle(0, pr.write(t, roce.OpWriteFirst, 100, reth, pl(1), false))
	r.Handle(0, pr.write(t, roce.OpWriteMiddle, 102, roce.RETH{}, pl(3), false))
	if got := seqNAKs(drain(t, r)); !slices.Equal(got, [][2]uint32{{101, 102}}) {
		t.Fatalf("102 after 100: NAKs %v, want 101 with run ..102", got)
	}
	r.Handle(0, pr.write(t, roce.OpWriteMiddle, 103, roce.RETH{}, pl(4), false))
	if n := len(drain(t, r)); n != 0 {
		t.Fatalf("103 extends the run: %d packets before the ACK is due", n)
	}
	r.Handle(0, pr.write(t, roce.OpWriteLast, 105, roce.RETH{}, pl(6), true))
	pk := drain(t, r)
	if got := seqNAKs(pk); !slices.Equal(got, [][2]uint32{{101, 103}, {104, 105}}) {
		t.Fatalf("105 opens a gap: NAKs %v, want the run 102..103 in its final extent, then 104 with 105", got)
	}
	if last := pk[len(pk)-1]; last.AETH.Type() != roce.AckTypeACK || last.BTH.PSN != 100 {
		t.Fatalf("the AckReq's ACK: %v PSN %d", last.AETH, last.BTH.PSN)
	}
	r.Handle(0, pr.write(t, roce.OpWriteMiddle, 101, roce.RETH{}, pl(2), false))
	r.Handle(0, pr.write(t, roce.OpWriteMiddle, 104, roce.RETH{}, pl(5), false))
	for i := range 6 {
		if region[i*1024] != byte(i+1) {
			t.Fatal("data misplaced")
		}
	}

	// The requester sends 100..105 and hears the responder above.
	q := newTestQP(t, testCfg(ModeSR))
	qp := peerOf(q)
	q.PostSend(SendWR{ID: 7, Op: OpWrite, Local: make([]byte, 6*1024)})
	var now time.Duration
	sendAll(q, &now)
	drain(t, q)
	nak := func(m, top psn.PSN) []byte { return qp.ack(t, roce.NAK(roce.NAKPSNSequenceError, uint32(top)), m) }
	now += time.Millisecond
	q.Handle(now, qp.ack(t, roce.ACK(roce.CreditInvalid, 0), 100))
	q.Handle(now, nak(101, 102))
	sendAll(q, &now)
	if re := sentPSNs(drain(t, q)); !slices.Equal(re, []psn.PSN{101}) {
		t.Fatalf("NAK 101 with run ..102: resent %v", re)
	}
	// The same run, grown, while 101's retransmission is on its way: nothing to resend.
	q.Handle(now, nak(101, 103))
	sendAll(q, &now)
	if re := sentPSNs(drain(t, q)); len(re) != 0 {
		t.Fatalf("a report older than 101's retransmission resent %v", re)
	}
	q.Handle(now, nak(104, 105))
	sendAll(q, &now)
	if re := sentPSNs(drain(t, q)); !slices.Equal(re, []psn.PSN{104}) {
		t.Fatalf("NAK 104 with run ..105: resent %v", re)
	}
	// The timers: only the two retransmissions, not 102, 103 or 105, which arrived.
	d, ok := q.NextDeadline()
	if !ok {
		t.Fatal("no timer")
	}
	var re []psn.PSN
	for end := d + time.Millisecond; d < end; { // both retransmissions' timers, a pacing slot apart
		now = d
		q.Tick(now)
		re = append(re, sentPSNs(drain(t, q))...)
		if d, ok = q.NextDeadline(); !ok {
			break
		}
	}
	if !slices.Equal(re, []psn.PSN{101, 104}) {
		t.Fatalf("timeout resent %v, want 101 and 104", re)
	}
	if st := q.Stats(); st.TimeoutRetransmissions != 2 || st.NAKRetransmissions != 2 {
		t.Fatalf("%+v", st)
	}
	q.Handle(now+time.Millisecond, qp.ack(t, roce.ACK(roce.CreditInvalid, 0), 105))
	if c := q.PollCompletions(nil); len(c) != 1 || c[0].ID != 7 || c[0].Status != StatusSuccess {
		t.Fatalf("%+v", c)
	}
}

// sr's probe (protocol notes R15): when every outstanding PSN was reported received and the
// ACK that would pass them is lost, no per-packet timer runs; one RTO after the last progress
// the requester resends the oldest of them, and the duplicate's ACK completes the request.
func TestSRProbeDrawsLostAck(t *testing.T) {
	q := newTestQP(t, testCfg(ModeSR))
	qp := peerOf(q)
	q.PostSend(SendWR{ID: 3, Op: OpWrite, Local: make([]byte, 3*1024)})
	var now time.Duration
	sendAll(q, &now)
	drain(t, q)
	now += time.Millisecond
	// 100 was NAKed and resent; 101 and 102 arrived.
	q.Handle(now, qp.ack(t, roce.NAK(roce.NAKPSNSequenceError, 102), 100))
	sendAll(q, &now)
	if re := sentPSNs(drain(t, q)); !slices.Equal(re, []psn.PSN{100}) {
		t.Fatalf("resent %v", re)
	}
	// 100's retransmission arrives; the ACK for 102 is lost. 100's own timer fires first.
	d, _ := q.NextDeadline()
	q.Tick(d)
	if re := sentPSNs(drain(t, q)); !slices.Equal(re, []psn.PSN{100}) {
		t.Fatalf("100's timer resent %v", re)
	}
	// The ACK this draws passes 100 only; the next one, that would pass 102, is lost.
	q.Handle(d+time.Millisecond, qp.ack(t, roce.ACK(roce.CreditInvalid, 0), 100))
	d2, ok := q.NextDeadline()
	if !ok || d2 != d+time.Millisecond+q.req.rto() {
		t.Fatalf("probe deadline %v (%v), want one RTO after the progress at %v", d2, ok, d+time.Millisecond)
	}
	q.Tick(d2)
	if re := sentPSNs(drain(t, q)); !slices.Equal(re, []psn.PSN{101}) {
		t.Fatalf("probe resent %v, want the oldest outstanding, 101", re)
	}
	q.Handle(d2+time.Millisecond, qp.ack(t, roce.ACK(roce.CreditInvalid, 0), 102))
	if c := q.PollCompletions(nil); len(c) != 1 || c[0].ID != 3 || c[0].Status != StatusSuccess {
		t.Fatalf("%+v", c)
	}
}

// The setup flag of R15 (R1's flags bit 2): set exactly with mode sr and NAKs on, so that a
// peer that reads sr NAKs by R4 alone refuses the connection instead of misreading them.
func TestSRSelectiveAckSetupFlag(t *testing.T) {
	checkSetupFlag(t, 4, []setupFlagCase{{ModeSR, false, true}, {ModeSR, true, false}, {ModeGBN, false, false}})
}

// setupFlagCase is a mode, whether sr's NAKs are off, and whether the flag bit must be set.
type setupFlagCase struct {
	mode  Mode
	noNAK bool
	flag  bool
}

// checkSetupFlag checks that the setup message carries flag bit exactly in the cases that ask
// for it, that it parses back, and that a message with the bit flipped is refused.
func checkSetupFlag(t *testing.T, bit byte, cases []setupFlagCase) {
	t.Helper()
	for _, c := range cases {
		m := sampleSetup()
		m.Mode, m.TCAETH, m.SRNoNAK = c.mode, c.mode == ModeTCAETH, c.noNAK
		b, err := m.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		if b[23]&bit != 0 != c.flag {
			t.Fatalf("%v noNAK %v: flags %#x", c.mode, c.noNAK, b[23])
		}
		if got, _, err := ParseSetup(b); err != nil || got.SRNoNAK != c.noNAK {
			t.Fatalf("%v noNAK %v: %+v, %v", c.mode, c.noNAK, got, err)
		}
		b[23] ^= bit
		if _, _, err := ParseSetup(b); err == nil {
			t.Errorf("%v noNAK %v: parse accepted flags %#x", c.mode, c.noNAK, b[23])
		}
	}
}
