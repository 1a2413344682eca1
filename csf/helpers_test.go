package csf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

var (
	testFlow = flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: netip.MustParseAddr("10.0.0.1"),
		Dst: netip.MustParseAddr("10.0.0.2"), DestQP: 0x11, SrcPort: 49152}
	testCRF = netip.MustParseAddrPort("10.0.0.2:50000")
)

func counter() func() uint64 {
	var n uint64
	return func() uint64 { n++; return n * 0x9e3779b97f4a7c15 }
}

// newSender returns a Sender with the test flow and the given options.
func newSender(t testing.TB, opts ...Option) *Sender {
	t.Helper()
	s, err := New(append([]Option{WithFlow(testFlow), WithCRF(testCRF), WithRandom(counter())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// drain returns every datagram the Sender queued, parsed.
func drain(s *Sender) []wire.Message {
	var out []wire.Message
	s.Drain(func(d flow.Datagram) {
		m, err := wire.Parse(d.Payload)
		if err == nil {
			out = append(out, m)
		}
	})
	return out
}

// establish plays the CRF: HELLO_ACK with flowID, then PARAM_ACK for the first configuration.
func establish(t testing.TB, s *Sender, now time.Duration, flowID uint32) {
	t.Helper()
	s.Start(now)
	var hello *wire.Hello
	for _, m := range drain(s) {
		if h, ok := m.(*wire.Hello); ok {
			hello = h
		}
	}
	if hello == nil {
		t.Fatal("no HELLO")
	}
	ack := wire.HelloAck{FlowID: flowID, Capabilities: flow.DefaultLimits().Capabilities(1024), AF: wire.AF4,
		SenderNonce: hello.SenderNonce, MaxOpenBlocks: 64}
	b, _ := ack.Append(nil)
	s.Handle(now, testCRF, b)
	var pu *wire.ParamUpdate
	for _, m := range drain(s) {
		if p, ok := m.(*wire.ParamUpdate); ok {
			pu = p
		}
	}
	if pu == nil {
		t.Fatal("no PARAM_UPDATE after HELLO_ACK")
	}
	pa := wire.ParamAck{FlowID: flowID, ConfigID: pu.ConfigID}
	b, _ = pa.Append(nil)
	s.Handle(now, testCRF, b)
	if _, ok := s.Config(); !ok {
		t.Fatal("configuration not in force after PARAM_ACK")
	}
}

// packet builds an RDMA WRITE MIDDLE of n payload octets with PSN p, sealed under the logical header.
func packet(p psn.PSN, n int) []byte {
	pl := make([]byte, n)
	for i := range pl {
		pl[i] = byte(int(p) + i)
	}
	pk := roce.Packet{BTH: roce.BTH{OpCode: roce.OpWriteMiddle, DestQP: testFlow.DestQP, PSN: p}, Payload: pl}
	b, _ := pk.Append(nil)
	_ = testFlow.LogicalHeader().Seal(b)
	return b
}

// setPSN rewrites a packet's BTH PSN in place.
func setPSN(pkt []byte, p psn.PSN) { pkt[9], pkt[10], pkt[11] = byte(p>>16), byte(p>>8), byte(p) }

// ackPacket builds the RDMA receiver's ACKNOWLEDGE of every PSN through p.
func ackPacket(p psn.PSN) []byte {
	pk := roce.Packet{BTH: roce.BTH{OpCode: roce.OpAcknowledge, DestQP: 0x22, PSN: p}, AETH: roce.ACK(31, 0)}
	b, _ := pk.Append(nil)
	return b
}
