package crf

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
	testCSF = netip.MustParseAddrPort("10.0.0.1:50000")
)

func counter() func() uint64 {
	var n uint64
	return func() uint64 { n++; return n * 0x9e3779b97f4a7c15 }
}

func newReceiver(t testing.TB, set Settings, opts ...Option) *Receiver {
	t.Helper()
	set.SrcPort = testFlow.SrcPort
	r, err := New(append([]Option{WithRandom(counter()),
		WithSettings(func(flow.Descriptor) (Settings, bool) { return set, true })}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func msg(t testing.TB, m wire.Message) []byte {
	t.Helper()
	b, err := m.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func hello(nonce uint64) wire.Hello {
	return wire.Hello{Capabilities: flow.DefaultLimits().Capabilities(1024), SenderNonce: nonce,
		Source: testFlow.Src, Destination: testFlow.Dst, FlowLabel: testFlow.DestQP}
}

// drainMsgs returns every CREM message the Receiver queued, parsed.
func drainMsgs(r *Receiver) []wire.Message {
	var out []wire.Message
	r.Drain(func(d flow.Datagram) {
		if m, err := wire.Parse(d.Payload); err == nil {
			out = append(out, m)
		}
	})
	return out
}

// open plays the CSF: HELLO, then PARAM_UPDATE of cfg; returns the Flow ID.
func open(t testing.TB, r *Receiver, now time.Duration, cfg flow.Config) uint32 {
	t.Helper()
	h := hello(42)
	r.Handle(now, testCSF, msg(t, &h), false)
	var id uint32
	for _, m := range drainMsgs(r) {
		if a, ok := m.(*wire.HelloAck); ok {
			id = a.FlowID
		}
	}
	if id == 0 {
		t.Fatal("no HELLO_ACK")
	}
	pu := wire.ParamUpdate{FlowID: id, ConfigID: cfg.ID, Scheme: cfg.Scheme, K: uint8(cfg.K), M: uint8(cfg.M), T: uint16(cfg.T)}
	r.Handle(now, testCSF, msg(t, &pu), false)
	for _, m := range drainMsgs(r) {
		if a, ok := m.(*wire.ParamAck); ok && a.Status == wire.StatusAccepted {
			return id
		}
	}
	t.Fatal("configuration not accepted")
	return 0
}

// packet builds an RDMA WRITE MIDDLE of n payload octets with PSN p, sealed under the logical header.
func packet(p psn.PSN, n int) []byte {
	pl := make([]byte, n)
	for i := range pl {
		pl[i] = byte(int(p)*3 + i)
	}
	pk := roce.Packet{BTH: roce.BTH{OpCode: roce.OpWriteMiddle, DestQP: testFlow.DestQP, PSN: p}, Payload: pl}
	b, _ := pk.Append(nil)
	_ = testFlow.LogicalHeader().Seal(b)
	return b
}

// readRequest builds an RDMA READ request at PSN p for dma octets.
func readRequest(p psn.PSN, dma uint32) []byte {
	pk := roce.Packet{BTH: roce.BTH{OpCode: roce.OpReadRequest, DestQP: testFlow.DestQP, PSN: p}, RETH: roce.RETH{DMALength: dma}}
	b, _ := pk.Append(nil)
	_ = testFlow.LogicalHeader().Seal(b)
	return b
}
