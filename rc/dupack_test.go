package rc

import (
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// T6 says a duplicate packet triggers an ACK at once; protocol notes R23 keep one such ACK per
// T_thresh (DupAckInterval) for a burst of duplicates, which would all carry the same state. The
// first duplicate is acknowledged at once, with the cumulative state and the ranges kept (T4);
// the rest of a burst within T_thresh are counted and not acknowledged; a duplicate after
// T_thresh is acknowledged at once again. With DupAckInterval negative every duplicate is (T6
// as written). gbn and sr follow the same rule (R3).
func TestT6DuplicateAckOncePerTThresh(t *testing.T) {
	for _, mode := range []Mode{ModeTCAETH, ModeGBN, ModeSR} {
		for _, strict := range []bool{false, true} {
			cfg := testCfg(mode)
			if strict {
				cfg.DupAckInterval = -1
			}
			q := newTestQP(t, cfg)
			tt := q.Config().TThresh
			if !strict && q.Config().DupAckInterval != tt {
				t.Fatalf("%v: DupAckInterval %v, want T_thresh %v", mode, q.Config().DupAckInterval, tt)
			}
			mem := make([]byte, 64<<10)
			mr, _ := q.RegisterMR(mem, AccessRemoteWrite)
			pr := peerOf(q)
			pl := make([]byte, 1024)
			only := func(p psn.PSN) []byte {
				return pr.write(t, roce.OpWriteOnly, p, roce.RETH{VA: mr.Addr + uint64(p-100)*1024, RKey: mr.RKey, DMALength: 1024}, pl, true)
			}
			now := time.Duration(0)
			for p := psn.PSN(100); p < 110; p++ {
				q.Handle(now, only(p))
			}
			q.Tick(now + tt) // flush whatever the batch holds
			drain(t, q)
			before := q.Stats()
			// A burst of ten duplicates within T_thresh.
			now = 10 * time.Millisecond
			for k := range 10 {
				q.Handle(now+time.Duration(k)*tt/20, only(psn.PSN(100+k)))
			}
			acks := drain(t, q)
			want := 1
			if strict {
				want = 10
			}
			if len(acks) != want {
				t.Fatalf("%v strict=%v: %d ACKs for a burst of 10 duplicates, want %d", mode, strict, len(acks), want)
			}
			for _, a := range acks {
				if a.BTH.OpCode != roce.OpAcknowledge || a.AETH.Type() != roce.AckTypeACK || a.BTH.PSN != 109 ||
					a.Has(roce.HasTCAETH) != (mode == ModeTCAETH) {
					t.Fatalf("%v strict=%v: ACK %+v, want a plain cumulative ACK of 109", mode, strict, a)
				}
			}
			st := q.Stats()
			if st.DuplicatePackets-before.DuplicatePackets != 10 || st.DuplicateAcksHeld-before.DuplicateAcksHeld != uint64(10-want) ||
				st.AckTriggerImmediate-before.AckTriggerImmediate != uint64(want) {
				t.Fatalf("%v strict=%v: counters %+v -> %+v", mode, strict, before, st)
			}
			// T_thresh after the burst's ACK a duplicate is acknowledged at once again.
			q.Handle(now+tt, only(105))
			if got := drain(t, q); len(got) != 1 || got[0].BTH.PSN != 109 {
				t.Fatalf("%v strict=%v: a duplicate T_thresh later drew %d ACKs", mode, strict, len(got))
			}
		}
	}
}
