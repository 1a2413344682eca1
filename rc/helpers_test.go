package rc

import (
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// testCfg is the configuration of the QP under test (QPN 0x22); the test plays its peer
// (QPN 0x11).
func testCfg(mode Mode) Config {
	return Config{QPN: 0x22, RemoteQPN: 0x11, SendPSN: 100, RecvPSN: 100, MTU: 1024, Mode: mode, Rate: 1e9,
		RTT: 20 * time.Millisecond, LocalAddr: netip.MustParseAddr("192.0.2.2"),
		RemoteAddr: netip.MustParseAddr("192.0.2.1"), LocalPort: 49153, RemotePort: 49152}
}

func newTestQP(t testing.TB, cfg Config) *QP {
	t.Helper()
	q, err := NewQP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// peer builds the packets the QP under test receives, sealed as its peer would.
type peer struct {
	h roce.LogicalHeader
}

func peerOf(q *QP) peer {
	c := q.Config()
	return peer{roce.LogicalHeader{Src: c.RemoteAddr, Dst: c.LocalAddr, SrcPort: c.RemotePort}}
}

func (pr peer) seal(t testing.TB, p roce.Packet) []byte {
	t.Helper()
	if p.BTH.DestQP == 0 {
		p.BTH.DestQP = 0x22
	}
	if p.BTH.PKey == 0 {
		p.BTH.PKey = 0xffff
	}
	b, err := p.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pr.h.Seal(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// write builds an RDMA WRITE packet.
func (pr peer) write(t testing.TB, op roce.Opcode, p psn.PSN, reth roce.RETH, payload []byte, ackReq bool) []byte {
	return pr.seal(t, roce.Packet{BTH: roce.BTH{OpCode: op, PSN: p, AckReq: ackReq}, RETH: reth, Payload: payload})
}

// drain returns the parsed packets the QP sent.
func drain(t testing.TB, q *QP) []roce.Packet {
	t.Helper()
	var out []roce.Packet
	q.Drain(func(b []byte) {
		p, err := roce.ParsePacket(b)
		if err != nil {
			t.Fatalf("QP sent an unparsable packet: %v", err)
		}
		out = append(out, p)
	})
	return out
}

// ackOf builds an extended ACK from the responder side to a requester under test.
func (pr peer) extAck(t testing.TB, lf psn.PSN, segs ...roce.Segment) []byte {
	tc := roce.TCAETH{LastFinished: lf, NumSegs: len(segs)}
	copy(tc.Segs[:], segs)
	return pr.seal(t, roce.Packet{BTH: roce.BTH{OpCode: roce.OpAcknowledge, PSN: lf}, Headers: roce.HasTCAETH,
		AETH: roce.ACK(roce.CreditInvalid, 0), TCAETH: tc})
}

func (pr peer) ack(t testing.TB, a roce.AETH, p psn.PSN) []byte {
	return pr.seal(t, roce.Packet{BTH: roce.BTH{OpCode: roce.OpAcknowledge, PSN: p}, AETH: a})
}
