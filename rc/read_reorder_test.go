package rc

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// In sr and tcaeth a gap in READ responses is acted on only once it is a reorder window old
// (protocol notes R22): a missing response that arrives within the window after the evidence
// (a later response of its READ, or a response of a later READ, R17), as one CREM restored
// does, costs no re-issue; one still missing when the window has passed is re-issued then, for
// its run only. gbn re-issues at once (IBTA).
func TestReadReissueWaitsReorderWindow(t *testing.T) {
	const window = 5 * time.Millisecond
	for _, mode := range []Mode{ModeSR, ModeTCAETH, ModeGBN} {
		for _, c := range []struct {
			name     string
			lost     int // the response held back (READ A is responses 0-3, READ B 4-7)
			evidence int // the response that arrives in its place first
			restore  time.Duration
		}{
			{"within-read/restored", 1, 2, window - time.Microsecond},
			{"within-read/missing", 1, 2, -1},
			{"later-read/restored", 3, 4, window - time.Microsecond},
			{"later-read/missing", 3, 4, -1},
		} {
			t.Run(fmt.Sprintf("%v/%s", mode, c.name), func(t *testing.T) {
				cfg := testCfg(mode)
				cfg.ReorderWindow = window
				q := newTestQP(t, cfg)
				pr := peerOf(q)
				remote := make([]byte, 8*1024)
				for i := range remote {
					remote[i] = byte(i*13 + i/1024)
				}
				local := [2][]byte{make([]byte, 4096), make([]byte, 4096)}
				const va = 0x10000
				for i := range 2 {
					q.PostSend(SendWR{ID: uint64(i), Op: OpRead, Local: local[i], RemoteAddr: va + uint64(i*4096), RKey: 7})
				}
				now := time.Duration(0)
				sendAll(q, &now)
				if req := drain(t, q); len(req) != 2 {
					t.Fatalf("READ requests %+v", req)
				}
				resp := func(k int) []byte {
					op := []roce.Opcode{roce.OpReadResponseFirst, roce.OpReadResponseMiddle, roce.OpReadResponseMiddle, roce.OpReadResponseLast}[k%4]
					return pr.seal(t, roce.Packet{BTH: roce.BTH{OpCode: op, PSN: psn.PSN(100 + k)}, AETH: roce.ACK(roce.CreditInvalid, 0),
						Payload: remote[k*1024 : (k+1)*1024]})
				}
				now = time.Millisecond
				for k := 0; k < c.evidence; k++ {
					if k != c.lost {
						q.Handle(now, resp(k))
					}
				}
				seen := now
				for k := c.evidence; k < 8; k++ {
					q.Handle(now, resp(k))
					now += 100 * time.Microsecond
				}
				// Run the timers up to just before the window ends, then on.
				var re []roce.Packet
				end := seen + window
				if c.restore >= 0 {
					end = seen + c.restore
				}
				for now < end {
					q.Tick(now)
					re = append(re, drain(t, q)...)
					if mode != ModeGBN && len(re) > 0 {
						t.Fatalf("re-issued %v after the evidence, inside the window: %+v", now-seen, re)
					}
					now += 100 * time.Microsecond
				}
				if c.restore >= 0 {
					q.Handle(seen+c.restore, resp(c.lost))
					now = seen + 3*window
					q.Tick(now)
				} else {
					now = seen + window
					q.Tick(now)
				}
				re = append(re, drain(t, q)...)
				wantReissue := c.restore < 0 || mode == ModeGBN
				if !wantReissue {
					if len(re) != 0 || q.Stats().RetransmittedPackets != 0 {
						t.Fatalf("restored within the window, yet re-issued: %+v", re)
					}
				} else {
					wantLen := uint32(1024)
					if mode == ModeGBN {
						wantLen = uint32(4-c.lost%4) * 1024
					}
					if len(re) != 1 || re[0].BTH.OpCode != roce.OpReadRequest || re[0].BTH.PSN != psn.PSN(100+c.lost) ||
						re[0].RETH.VA != va+uint64(c.lost*1024) || re[0].RETH.DMALength != wantLen {
						t.Fatalf("want one re-issue at PSN %d, got %+v", 100+c.lost, re)
					}
					if c.restore < 0 {
						q.Handle(now, resp(c.lost))
					}
					if mode == ModeGBN {
						for k := c.lost + 1; k < 4; k++ { // gbn discarded those beyond the gap
							q.Handle(now, resp(k))
						}
					}
				}
				comps := q.PollCompletions(nil)
				if len(comps) != 2 || comps[0].Status != StatusSuccess || comps[1].Status != StatusSuccess ||
					!bytes.Equal(local[0], remote[:4096]) || !bytes.Equal(local[1], remote[4096:]) {
					t.Fatalf("completions %+v", comps)
				}
				if st := q.Stats(); st.Timeouts != 0 {
					t.Fatalf("%d timeouts", st.Timeouts)
				}
			})
		}
	}
}

// A lost re-issue is found without the READ timeout: re-issues are answered in PSN order
// (R17), so a re-issued response that arrives shows every response below it asked no later and
// still missing lost, not only the one just below it (protocol notes R22).
func TestReadLostReissueFoundByLaterReissue(t *testing.T) {
	for _, mode := range []Mode{ModeSR, ModeTCAETH} {
		t.Run(mode.String(), func(t *testing.T) {
			q := newTestQP(t, testCfg(mode))
			pr := peerOf(q)
			window := q.Config().ReorderWindow
			remote := make([]byte, 8*1024)
			for i := range remote {
				remote[i] = byte(i*7 + i/1024)
			}
			local := make([]byte, len(remote))
			q.PostSend(SendWR{ID: 1, Op: OpRead, Local: local, RemoteAddr: 0x10000, RKey: 7})
			now := time.Duration(0)
			sendAll(q, &now)
			drain(t, q)
			resp := func(k int) []byte {
				op := roce.OpReadResponseMiddle
				switch k {
				case 0:
					op = roce.OpReadResponseFirst
				case 7:
					op = roce.OpReadResponseLast
				}
				return pr.seal(t, roce.Packet{BTH: roce.BTH{OpCode: op, PSN: psn.PSN(100 + k)}, AETH: roce.ACK(roce.CreditInvalid, 0),
					Payload: remote[k*1024 : (k+1)*1024]})
			}
			reissues := func() []psn.PSN {
				var ps []psn.PSN
				sendAll(q, &now)
				for _, p := range drain(t, q) {
					if p.BTH.OpCode == roce.OpReadRequest {
						ps = append(ps, p.BTH.PSN)
					}
				}
				return ps
			}
			now = time.Millisecond
			for _, k := range []int{0, 1, 3, 4, 6, 7} { // 2 and 5 lost
				q.Handle(now, resp(k))
			}
			now += window
			q.Tick(now)
			if got := reissues(); len(got) != 2 || got[0] != 102 || got[1] != 105 {
				t.Fatalf("re-issues %v, want 102 and 105", got)
			}
			// The re-issue of 102 is lost; the response to 105's arrives.
			now += 20 * time.Millisecond
			q.Handle(now, resp(5))
			now += window
			q.Tick(now)
			if got := reissues(); len(got) != 1 || got[0] != 102 {
				t.Fatalf("re-issues %v after the response to the later re-issue, want 102", got)
			}
			q.Handle(now, resp(2))
			comps := q.PollCompletions(nil)
			if len(comps) != 1 || comps[0].Status != StatusSuccess || !bytes.Equal(local, remote) {
				t.Fatalf("completions %+v", comps)
			}
			if st := q.Stats(); st.Timeouts != 0 || st.RetransmittedPackets != 3 {
				t.Fatalf("%d timeouts, %d re-issues", st.Timeouts, st.RetransmittedPackets)
			}
		})
	}
}
