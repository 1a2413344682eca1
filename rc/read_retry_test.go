package rc

import (
	"bytes"
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// A re-issued READ (a duplicate READ request whose PSN lies inside a range an earlier READ
// consumed, IBTA 9.9.2) is answered from its PSN on, at the offset its RETH names, ahead of the
// READs still streaming; the responses it covers that the original had not sent yet go out
// once, by it (protocol notes R17).
func TestReissuedReadAnsweredFirst(t *testing.T) {
	for _, c := range []struct {
		name      string
		from, n   int   // the re-issued part of READ A (PSNs 100..107)
		want      []int // the PSNs the responder sends, in order
		retx, dup int   // responses sent again; out of
	}{
		// sr and tcaeth: one lost response, while A is still sending.
		{"run", 1, 1, []int{100, 101, 102, 101, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115}, 1, 1},
		// A part of A not sent yet: A stops before it.
		{"tail", 5, 3, []int{100, 101, 102, 105, 106, 107, 103, 104, 108, 109, 110, 111, 112, 113, 114, 115}, 0, 1},
		// gbn: from the first lost response to the end.
		{"gbn", 1, 7, []int{100, 101, 102, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115}, 2, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := newTestQP(t, testCfg(ModeSR))
			mem := make([]byte, 16*1024)
			for i := range mem {
				mem[i] = byte(i * 7 / 1024)
			}
			mr, _ := q.RegisterMR(mem, AccessRemoteRead)
			pr := peerOf(q)
			read := func(p psn.PSN, off, n int) []byte {
				return pr.seal(t, roce.Packet{BTH: roce.BTH{OpCode: roce.OpReadRequest, PSN: p, AckReq: true},
					RETH: roce.RETH{VA: mr.Addr + uint64(off), RKey: mr.RKey, DMALength: uint32(n)}})
			}
			q.Handle(0, read(100, 0, 8*1024))      // READ A
			q.Handle(0, read(108, 8*1024, 8*1024)) // READ B
			for range 2 {                          // Handle sent 100
				q.resp.sendRead(q)
			}
			q.Handle(0, read(psn.PSN(100+c.from), c.from*1024, c.n*1024))
			var now time.Duration
			sendAll(q, &now)
			var got []int
			for _, p := range drain(t, q) {
				k := int(p.BTH.PSN) - 100
				got = append(got, int(p.BTH.PSN))
				if !bytes.Equal(p.Payload, mem[k*1024:(k+1)*1024]) {
					t.Fatalf("response at PSN %d carries the wrong octets", p.BTH.PSN)
				}
				if len(got) == 4 && (c.n == 1 && p.BTH.OpCode != roce.OpReadResponseOnly ||
					c.n > 1 && p.BTH.OpCode != roce.OpReadResponseFirst) {
					t.Fatalf("re-issued READ's first response is %v", p.BTH.OpCode)
				}
			}
			if len(got) != len(c.want) {
				t.Fatalf("responses %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("responses %v, want %v", got, c.want)
				}
			}
			st := q.Stats()
			if st.RetransmittedPackets != uint64(c.retx) || st.DataPackets != 16 || st.DuplicateReads != uint64(c.dup) {
				t.Fatalf("data %d retransmitted %d duplicate READs %d", st.DataPackets, st.RetransmittedPackets, st.DuplicateReads)
			}
		})
	}
}

// On a gap in a READ's responses the requester re-issues the READ from the first missing
// response: PSN that response's, RETH VA and length offset by the octets before it (IBTA's
// READ retry). gbn discards the responses beyond the gap and re-issues once until the missing
// one arrives, to the end of the READ; sr and tcaeth place them and ask for the missing run
// only, a reorder window after the gap showed (protocol notes R16, R22).
func TestReadGapReissue(t *testing.T) {
	for _, mode := range []Mode{ModeGBN, ModeSR} {
		t.Run(mode.String(), func(t *testing.T) {
			q := newTestQP(t, testCfg(mode))
			pr := peerOf(q)
			remote := make([]byte, 4096)
			for i := range remote {
				remote[i] = byte(i*13 + i/1024)
			}
			local := make([]byte, 4096)
			const va = 0x10000
			q.PostSend(SendWR{ID: 1, Op: OpRead, Local: local, RemoteAddr: va, RKey: 7})
			q.Tick(0)
			if req := drain(t, q); len(req) != 1 || req[0].BTH.PSN != 100 || req[0].RETH.DMALength != 4096 {
				t.Fatalf("READ request %+v", req)
			}
			resp := func(k int) []byte {
				op := []roce.Opcode{roce.OpReadResponseFirst, roce.OpReadResponseMiddle, roce.OpReadResponseMiddle, roce.OpReadResponseLast}[k]
				return pr.seal(t, roce.Packet{BTH: roce.BTH{OpCode: op, PSN: psn.PSN(100 + k)}, AETH: roce.ACK(roce.CreditInvalid, 0),
					Payload: remote[k*1024 : (k+1)*1024]})
			}
			now := time.Millisecond
			q.Handle(now, resp(0))
			q.Handle(now, resp(2)) // 1 is lost
			q.Handle(now, resp(3))
			sendAll(q, &now)
			if mode != ModeGBN {
				// sr waits a reorder window on the evidence (protocol notes R22).
				if re := drain(t, q); len(re) != 0 {
					t.Fatalf("re-issued at once: %+v", re)
				}
				now += q.Config().ReorderWindow
				q.Tick(now)
			}
			re := drain(t, q)
			wantLen := uint32(1024) // sr: the missing run
			if mode == ModeGBN {
				wantLen = 3 * 1024 // gbn: to the end
			}
			if len(re) != 1 || re[0].BTH.OpCode != roce.OpReadRequest || re[0].BTH.PSN != 101 ||
				re[0].RETH.VA != va+1024 || re[0].RETH.DMALength != wantLen || re[0].RETH.RKey != 7 {
				t.Fatalf("re-issue %+v", re)
			}
			q.Handle(now, resp(1))
			if mode == ModeGBN {
				q.Handle(now, resp(2))
				q.Handle(now, resp(3))
			}
			var comps []Completion
			if comps = q.PollCompletions(comps); len(comps) != 1 || comps[0].Status != StatusSuccess || !bytes.Equal(local, remote) {
				t.Fatalf("completions %+v, data equal %v", comps, bytes.Equal(local, remote))
			}
			st := q.Stats()
			if st.ReadResponsesReceived != 4 || st.RetransmittedPackets != 1 || st.Timeouts != 0 {
				t.Fatalf("taken %d, re-issues %d, timeouts %d", st.ReadResponsesReceived, st.RetransmittedPackets, st.Timeouts)
			}
		})
	}
}
