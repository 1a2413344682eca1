package rc

import (
	"bytes"
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// TestReadResponseOpcodeSequenceR27 (IBTA's opcode sequence; protocol notes R27): a READ
// response whose opcode cannot stand at its PSN (a FIRST or ONLY where no request for the READ's
// responses began, a LAST or ONLY where none ended, a MIDDLE at the READ's first or last PSN) is
// discarded whatever its ICRC, and counted; the responses of a re-issued READ, which begin and
// end where the re-issue asked, are taken.
func TestReadResponseOpcodeSequenceR27(t *testing.T) {
	for _, mode := range []Mode{ModeGBN, ModeSR, ModeTCAETH} {
		t.Run(mode.String(), func(t *testing.T) {
			q := newTestQP(t, testCfg(mode))
			pr := peerOf(q)
			remote := make([]byte, 8*1024)
			for i := range remote {
				remote[i] = byte(i*7 + i/1024)
			}
			local := make([]byte, len(remote))
			q.PostSend(SendWR{ID: 1, Op: OpRead, Local: local, RemoteAddr: 0x10000, RKey: 7})
			now := time.Duration(0)
			sendAll(q, &now)
			drain(t, q)
			resp := func(k int, op roce.Opcode, payload []byte) []byte {
				pk := roce.Packet{BTH: roce.BTH{OpCode: op, PSN: psn.PSN(100 + k)}, Payload: payload}
				if op != roce.OpReadResponseMiddle {
					pk.AETH = roce.ACK(roce.CreditInvalid, 0)
				}
				return pr.seal(t, pk)
			}
			good := func(k int) []byte { return remote[k*1024 : (k+1)*1024] }
			wrong := bytes.Repeat([]byte{0xee}, 1024)
			now = time.Millisecond
			q.Handle(now, resp(0, roce.OpReadResponseFirst, good(0)))
			q.Handle(now, resp(1, roce.OpReadResponseMiddle, good(1)))
			for _, bad := range []struct {
				k  int
				op roce.Opcode
			}{
				{2, roce.OpReadResponseFirst}, {3, roce.OpReadResponseLast}, {4, roce.OpReadResponseOnly},
				{7, roce.OpReadResponseMiddle}, {7, roce.OpReadResponseFirst}, {0, roce.OpReadResponseLast},
			} {
				q.Handle(now, resp(bad.k, bad.op, wrong))
			}
			if st := q.Stats(); st.ResponseOutOfSequence != 6 || st.ReadResponsesReceived != 2 {
				t.Fatalf("out of sequence %d, received %d", st.ResponseOutOfSequence, st.ReadResponsesReceived)
			}
			if bytes.Contains(local, wrong[:16]) {
				t.Fatal("an out-of-sequence response was placed")
			}
			for k := 2; k < 7; k++ {
				q.Handle(now, resp(k, roce.OpReadResponseMiddle, good(k)))
			}
			q.Handle(now, resp(7, roce.OpReadResponseLast, good(7)))
			comps := q.PollCompletions(nil)
			if len(comps) != 1 || comps[0].Status != StatusSuccess || !bytes.Equal(local, remote) {
				t.Fatalf("completions %+v", comps)
			}
		})
	}
}

// TestReissuedReadResponsesInSequenceR27: the responses to a re-issued READ begin with FIRST
// where the re-issue asked and end with LAST where it ends, inside the READ, and are taken.
func TestReissuedReadResponsesInSequenceR27(t *testing.T) {
	q := newTestQP(t, testCfg(ModeSR))
	pr := peerOf(q)
	remote := make([]byte, 8*1024)
	for i := range remote {
		remote[i] = byte(i*5 + i/1024)
	}
	local := make([]byte, len(remote))
	q.PostSend(SendWR{ID: 1, Op: OpRead, Local: local, RemoteAddr: 0x10000, RKey: 7})
	now := time.Duration(0)
	sendAll(q, &now)
	drain(t, q)
	resp := func(k int, op roce.Opcode) []byte {
		pk := roce.Packet{BTH: roce.BTH{OpCode: op, PSN: psn.PSN(100 + k)}, Payload: remote[k*1024 : (k+1)*1024]}
		if op != roce.OpReadResponseMiddle {
			pk.AETH = roce.ACK(roce.CreditInvalid, 0)
		}
		return pr.seal(t, pk)
	}
	now = time.Millisecond
	for _, k := range []int{0, 1, 5, 6} { // 2, 3, 4 and 7 lost
		op := roce.OpReadResponseMiddle
		if k == 0 {
			op = roce.OpReadResponseFirst
		}
		q.Handle(now, resp(k, op))
	}
	now += q.Config().ReorderWindow + 50*time.Millisecond
	q.Tick(now)
	sendAll(q, &now)
	var asked []psn.PSN
	for _, p := range drain(t, q) {
		if p.BTH.OpCode == roce.OpReadRequest {
			asked = append(asked, p.BTH.PSN)
		}
	}
	if len(asked) == 0 {
		t.Fatal("no re-issue")
	}
	if len(asked) != 1 || asked[0] != 102 {
		t.Fatalf("re-issues %v, want one from 102", asked)
	}
	// The re-issue of 2..4 answered FIRST, MIDDLE, LAST; 7 (never deemed lost: nothing above it
	// came) by the original LAST.
	q.Handle(now, resp(2, roce.OpReadResponseFirst))
	q.Handle(now, resp(3, roce.OpReadResponseMiddle))
	q.Handle(now, resp(4, roce.OpReadResponseLast))
	q.Handle(now, resp(7, roce.OpReadResponseLast))
	comps := q.PollCompletions(nil)
	if st := q.Stats(); st.ResponseOutOfSequence != 0 || len(comps) != 1 || !bytes.Equal(local, remote) {
		t.Fatalf("re-issues %v: out of sequence %d, completions %+v", asked, st.ResponseOutOfSequence, comps)
	}
}
