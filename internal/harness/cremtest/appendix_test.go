package cremtest

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// appendixPair builds the Pair of the draft's Appendix: scheme 1, k = 4, m = 2, T = 16, Flow ID
// 0x0000BEEF, first Request ID 7, payloads "RDMA-PKT-0".."RDMA-PKT-3" (not RoCEv2, so the CRF
// checks them with a verifier of its own).
func appendixPair(t *testing.T) *Pair {
	t.Helper()
	verify := func(pkt []byte) error {
		if !bytes.HasPrefix(pkt, []byte("RDMA-PKT-")) || len(pkt) != 10 {
			return errors.New("not an Appendix packet")
		}
		return nil
	}
	p, err := NewPair(Config{
		Sender:   []csf.Option{csf.WithConfig(wire.SchemeCauchy, 4, 2, 16), csf.WithAdaptation(false)},
		Receiver: []crf.Option{crf.WithRandom(func() uint64 { return 0xBEEF }), crf.WithFirstRequestID(7)},
		Settings: crf.Settings{Verify: crf.VerifyFunc, Verifier: verify},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAppendixEndToEnd runs the draft's Appendix through both engines: sources 0, 1 and 2 are
// lost, the CRF holds S3, R0 and R1 and asks for M_s = 1 with r = 2 (Request ID 7), the CSF
// answers with the coded retransmission of Repair Index 2 over L = {0, 1, 2}, whose REPAIR bytes
// are the Appendix's, and the CRF restores all three.
func TestAppendixEndToEnd(t *testing.T) {
	p := appendixPair(t)
	var retx, req []byte
	p.Trace = func(now time.Duration, pk Packet) {
		if pk.Kind != CREM {
			return
		}
		h, err := wire.ParseHeader(pk.Data)
		if err != nil {
			return
		}
		switch {
		case h.Type == wire.TypeRepair && h.Flags&wire.FlagRepairRetx != 0:
			retx = append([]byte(nil), pk.Data...)
		case h.Type == wire.TypeRepairRequest:
			req = append([]byte(nil), pk.Data...)
		}
	}
	p.Start()
	p.RunFor(10 * time.Millisecond)
	if cfg, ok := p.Sender.Config(); !ok || cfg.ID != 1 || p.FlowID() != 0xBEEF {
		t.Fatalf("session: config %+v (%v), Flow ID %#x", cfg, ok, p.FlowID())
	}
	p.Link.Filter = func(pk *Packet) Fate {
		return Fate{Drop: pk.Dir == Forward && pk.Kind == RDMA && pk.N < 3}
	}
	for i := range 4 {
		p.SendOpaque(psn.PSN(0x1000+i), []byte("RDMA-PKT-"+string(rune('0'+i))))
	}
	p.RunFor(50 * time.Millisecond)

	rq, err := wire.ParseRepairRequest(req)
	if err != nil {
		t.Fatalf("no REPAIR_REQUEST seen: %v", err)
	}
	if rq.SuggestedM != 1 || rq.RepairsHeld != 2 || rq.RequestID != 7 || rq.Lost[0] != 0xE0000000 || rq.K != 4 {
		t.Fatalf("request: M_s %d, r %d, ID %d, L %#x, k %d", rq.SuggestedM, rq.RepairsHeld, rq.RequestID, rq.Lost[0], rq.K)
	}
	want, _ := hex.DecodeString("1180002c0000beef0101040200100000000700" + "10f0000000e0000000" + "00354fdf6d4b40b57e5c400000000000")
	if !bytes.Equal(retx, want) {
		t.Fatalf("coded retransmission:\n got %x\nwant %x", retx, want)
	}
	for i := range 4 {
		o := p.Outcomes[psn.PSN(0x1000+i)]
		if o == nil || o.Wrong != 0 || (i < 3 && o.Restored != 1) || (i == 3 && o.Received != 1) {
			t.Fatalf("PSN %#x: %+v", 0x1000+i, o)
		}
	}
	st := p.Receiver.Stats().Flows
	// C4: the CRF sampled REPAIR_REQUEST -> first RETX REPAIR of session 7 (2 ms on this link).
	if st.Restored != 3 || st.ICRCMismatch != 0 || st.Requests != 1 || st.RTTSamples != 1 {
		t.Fatalf("CRF counters: %+v", st)
	}
	if s := p.Sender.Stats(); s.RetxSent != 1 || s.RepairSent != 2 {
		t.Fatalf("CSF counters: retx %d, ordinary %d", s.RetxSent, s.RepairSent)
	}
}
