package rc

import (
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/roce"
)

// A READ may take far more PSNs than the send buffer (KV-cache moves READ hundreds of
// MiB; a READ of 64 MiB at MTU 1024 takes 65 536 PSNs against a default buffer of 16 384): its
// responses are kept as records but take no room in the send buffer, which bounds the SEND and
// WRITE PSNs outstanding and one per READ request (T8, protocol notes R24), so WRITEs posted
// behind it go out while it streams. Everything outstanding stays within MaxOutstandingPSNs
// (a quarter of the PSN space, for serial arithmetic): a READ beyond it is refused at post with
// an error naming the limit, and a responder takes such a READ request for malformed.
func TestLargeReadTakesNoSendBufferRoom(t *testing.T) {
	cfg := testCfg(ModeTCAETH)
	cfg.SendBuffer = 64
	cfg.SendPSN = 0xfffc00 // the READ's PSNs cross the wrap
	q := newTestQP(t, cfg)
	if err := q.PostSend(SendWR{ID: 1, Op: OpRead, Local: make([]byte, 1<<20)}); err != nil {
		t.Fatalf("a READ of 1024 PSNs with a send buffer of 64: %v", err)
	}
	if err := q.PostSend(SendWR{ID: 2, Op: OpWrite, Local: make([]byte, 100*1024)}); err != nil {
		t.Fatal(err)
	}
	var now time.Duration
	sendAll(q, &now)
	pkts := drain(t, q)
	if len(pkts) != 64 || pkts[0].BTH.OpCode != roce.OpReadRequest || pkts[0].RETH.DMALength != 1<<20 ||
		pkts[1].BTH.PSN != cfg.SendPSN.Add(1024) {
		t.Fatalf("sent %d packets (first %+v), want the READ request and 63 WRITE packets from PSN %v",
			len(pkts), pkts[0].BTH, cfg.SendPSN.Add(1024))
	}
	if n := q.req.tx.len(); n != 1024+63 {
		t.Fatalf("%d PSNs outstanding, want 1024 + 63", n)
	}
	if st := q.Stats(); st.SendBufferStalls != 1 {
		t.Fatalf("%d send-buffer stalls, want 1 (the WRITE's 64th packet)", st.SendBufferStalls)
	}

	// The bound on everything outstanding.
	big := testCfg(ModeTCAETH)
	big.MTU = 256
	b := newTestQP(t, big)
	err := b.PostSend(SendWR{Op: OpRead, Local: make([]byte, (MaxOutstandingPSNs+1)*256)})
	if err == nil || !strings.Contains(err.Error(), "outstanding") {
		t.Fatalf("a READ of %d PSNs: %v, want a refusal naming the limit", MaxOutstandingPSNs+1, err)
	}
	if err := b.PostSend(SendWR{Op: OpRead, Local: make([]byte, MaxOutstandingPSNs*256)}); err != nil {
		t.Fatalf("a READ of exactly %d PSNs: %v", MaxOutstandingPSNs, err)
	}
	if err := b.PostSend(SendWR{Op: OpWrite, Local: make([]byte, 256)}); err != nil {
		t.Fatal(err)
	}
	now = 0
	sendAll(b, &now)
	if pk := drain(t, b); len(pk) != 1 || b.Stats().SendBufferStalls != 1 {
		t.Fatalf("sent %d packets with %d PSNs outstanding; want the READ request only, the WRITE waiting", len(pk), b.req.tx.len())
	}

	// The responder: a READ request of 65 536 PSNs is answered, one of more than
	// MaxOutstandingPSNs is malformed.
	r := newTestQP(t, testCfg(ModeTCAETH))
	mem := make([]byte, 64<<20)
	mr, _ := r.RegisterMR(mem, AccessRemoteRead)
	pr := peerOf(r)
	r.Handle(0, pr.seal(t, roce.Packet{BTH: roce.BTH{OpCode: roce.OpReadRequest, PSN: 100, AckReq: true},
		RETH: roce.RETH{VA: mr.Addr, RKey: mr.RKey, DMALength: 64 << 20}}))
	if st := r.Stats(); st.ReadsExecuted != 1 || st.Malformed != 0 {
		t.Fatalf("a READ of 64 MiB at MTU 1024: %+v", st)
	}
	rb := big
	rb.QPN, rb.RemoteQPN = 0x22, 0x11
	r2 := newTestQP(t, rb)
	r2.Handle(0, peerOf(r2).seal(t, roce.Packet{BTH: roce.BTH{OpCode: roce.OpReadRequest, PSN: 100, AckReq: true},
		RETH: roce.RETH{VA: 0, RKey: 1, DMALength: 1 << 31}}))
	if st := r2.Stats(); st.Malformed != 1 || st.ReadsExecuted != 0 {
		t.Fatalf("a READ of 2^31 octets at MTU 256 (2^23 PSNs): %+v", st)
	}
}
