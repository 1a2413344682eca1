package gateway_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/gateway"
	"github.com/crem-project/crem/internal/fault"
	"github.com/crem-project/crem/internal/harness/cremtest"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// faultNet is two Nodes back to back in virtual time, A protecting one flow toward B, with
// faults planted through Config.Faults: the CSF's in A, the CRF's in B.
type faultNet struct {
	t        *testing.T
	a, b     *gateway.Node
	ab, ba   vpath
	now      time.Duration
	syn      cremtest.Synth
	toB, toA []vitem // the CREM messages that crossed, in order
}

var (
	faultEPA, faultEPB     = netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	faultCREMA, faultCREMB = netip.MustParseAddrPort("127.0.0.1:7001"), netip.MustParseAddrPort("127.0.0.2:7001")
	faultStranger          = netip.MustParseAddrPort("127.0.0.3:7001") // neither gateway
)

const faultSrcPort = 5000

func newFaultNet(t *testing.T, seed uint64, faultsA, faultsB fault.Set) *faultNet {
	t.Helper()
	off := false
	mk := func(self, peer netip.AddrPort, local, remote netip.Addr, f fault.Set) *gateway.Node {
		n, err := gateway.NewNode(gateway.Config{CREMAddress: self, Peer: peer,
			Protect: []gateway.ProtectRule{{SrcPort: faultSrcPort}},
			Policy:  gateway.PolicyConfig{K: new(8), M: new(2), Adapt: &off, MTU: new(1024), InitialRTT: gateway.Dur(10 * time.Millisecond), BurstGap: gateway.Dur(time.Millisecond)},
			Relay: gateway.RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), WANListen: netip.MustParseAddrPort("127.0.0.1:0"),
				Target: netip.AddrPortFrom(local, 4791), PeerData: netip.AddrPortFrom(remote, 4791)},
			Faults: f},
			gateway.NodeOptions{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return &faultNet{t: t, a: mk(faultCREMA, faultCREMB, faultEPA, faultEPB, faultsA),
		b:  mk(faultCREMB, faultCREMA, faultEPB, faultEPA, faultsB),
		ab: vpath{delay: time.Millisecond}, ba: vpath{delay: time.Millisecond},
		syn: cremtest.Synth{Desc: flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: faultEPA, Dst: faultEPB, DestQP: 0x200, SrcPort: faultSrcPort}, PSN: 0x1000}}
}

// run moves the flow's packets (one every 100 us while send) and the CREM messages for d.
func (fn *faultNet) run(d time.Duration, send bool) {
	const step = 100 * time.Microsecond
	for end := fn.now + d; fn.now < end; fn.now += step {
		if send {
			pkt := fn.syn.Next(512)
			fn.a.Local(fn.now, faultSrcPort, pkt)
			fn.ab.put(fn.now, gateway.ToEndpoint, pkt)
		}
		fn.deliver()
	}
}

// deliver hands over what is due, runs the timers and collects what the Nodes send.
func (fn *faultNet) deliver() {
	for _, it := range fn.ab.due(fn.now) {
		if it.kind == gateway.ToCREM {
			fn.toB = append(fn.toB, it)
			fn.b.CREM(fn.now, faultCREMA, it.data, false)
		} else {
			fn.b.WAN(fn.now, it.data, false)
		}
	}
	for _, it := range fn.ba.due(fn.now) {
		if it.kind == gateway.ToCREM {
			fn.toA = append(fn.toA, it)
			fn.a.CREM(fn.now, faultCREMB, it.data, false)
		}
	}
	for _, n := range []*gateway.Node{fn.a, fn.b} {
		if d, ok := n.NextDeadline(); ok && d <= fn.now {
			n.Tick(fn.now)
		}
	}
	fn.a.Drain(func(d gateway.Datagram) {
		if d.Kind == gateway.ToCREM {
			fn.ab.put(fn.now, gateway.ToCREM, d.Payload)
		}
	})
	fn.b.Drain(func(d gateway.Datagram) {
		if d.Kind == gateway.ToCREM {
			fn.ba.put(fn.now, gateway.ToCREM, d.Payload)
		}
	})
}

// first returns the first message of type ty among ms.
func first(ms []vitem, ty wire.Type) []byte {
	for _, it := range ms {
		if wire.Type(it.data[0]&0x0f) == ty {
			return it.data
		}
	}
	return nil
}

// TestGatewayPlantsCSFFaults: Config.Faults reaches the gateway's CSFs: with
// fault.FixedFlowNonce gateways of different seeds send HELLOs with one nonce.
func TestGatewayPlantsCSFFaults(t *testing.T) {
	for _, f := range []fault.Set{0, fault.FixedFlowNonce} {
		var nonces []uint64
		for seed := range uint64(2) {
			fn := newFaultNet(t, seed+1, f, 0)
			fn.run(5*time.Millisecond, true)
			h, err := wire.ParseHello(first(fn.toB, wire.TypeHello))
			if err != nil {
				t.Fatal(err)
			}
			nonces = append(nonces, h.SenderNonce)
		}
		if same := nonces[0] == nonces[1]; same != (f != 0) {
			t.Errorf("faults %v: HELLO nonces %#x and %#x under two seeds", f, nonces[0], nonces[1])
		}
	}
}

// TestGatewayPlantsCRFFaults: Config.Faults reaches the gateway's CRF: with
// fault.HelloAckLarger its HELLO_ACK is larger than the HELLO it answers.
func TestGatewayPlantsCRFFaults(t *testing.T) {
	for _, f := range []fault.Set{0, fault.HelloAckLarger} {
		fn := newFaultNet(t, 1, 0, f)
		fn.run(5*time.Millisecond, true)
		hello, ack := first(fn.toB, wire.TypeHello), first(fn.toA, wire.TypeHelloAck)
		if hello == nil || ack == nil {
			t.Fatalf("faults %v: HELLO %d octets, HELLO_ACK %d", f, len(hello), len(ack))
		}
		if larger := len(ack) > len(hello); larger != (f != 0) {
			t.Errorf("faults %v: HELLO of %d octets answered by a HELLO_ACK of %d", f, len(hello), len(ack))
		}
	}
}

// TestGatewaySpoofedClose (Security Considerations): a CLOSE from an address other than the
// peer's ends neither the CSF's session nor the CRF's flow of that Flow ID, unless
// fault.SpoofedCloseHonoured is planted (in both gateways here).
func TestGatewaySpoofedClose(t *testing.T) {
	for _, f := range []fault.Set{0, fault.SpoofedCloseHonoured} {
		fn := newFaultNet(t, 1, f, f)
		fn.run(50*time.Millisecond, true)
		s := fn.a.Sender(fn.syn.Desc.Key())
		if s == nil || s.FlowID() == 0 {
			t.Fatal("no session")
		}
		id := s.FlowID()
		if _, ok := fn.b.Receiver().FlowStats(id); !ok {
			t.Fatalf("B's CRF has no flow %#x", id)
		}
		b, _ := (&wire.Close{FlowID: id, Reason: wire.ReasonNormal}).Append(nil)
		fn.a.CREM(fn.now, faultStranger, b, false)
		fn.b.CREM(fn.now, faultStranger, b, false)
		_, flowOn := fn.b.Receiver().FlowStats(id)
		sessionOn := s.FlowID() == id
		if f == 0 && (!flowOn || !sessionOn) {
			t.Errorf("a stranger's CLOSE ended the CRF's flow (%v) or the CSF's session (%v)", !flowOn, !sessionOn)
		}
		if f != 0 && (flowOn || sessionOn) {
			t.Errorf("fault planted, yet a stranger's CLOSE left the CRF's flow (%v) or the CSF's session (%v)", flowOn, sessionOn)
		}
	}
}

// TestGatewayAnswerRequestSource (Section 7, Security Considerations): a REPAIR_REQUEST from an
// address other than the peer's draws no REPAIR, unless fault.AnswerRequestSource is planted:
// then its answer goes to that address.
func TestGatewayAnswerRequestSource(t *testing.T) {
	for _, f := range []fault.Set{0, fault.AnswerRequestSource} {
		fn := newFaultNet(t, 1, f, 0)
		fn.run(20*time.Millisecond, true)
		fn.run(10*time.Millisecond, false)
		var rep *wire.Repair
		for _, it := range fn.toB {
			if wire.Type(it.data[0]&0x0f) == wire.TypeRepair {
				if r, err := wire.ParseRepair(it.data); err == nil && !r.Retx {
					rep = &r
				}
			}
		}
		if rep == nil {
			t.Fatal("no ordinary REPAIR crossed")
		}
		var l psn.Bitmap
		l.Set(0)
		req := wire.RepairRequest{FlowID: rep.FlowID, RequestID: 99, ConfigID: rep.ConfigID, Scheme: rep.Scheme,
			K: rep.K, BlockStartPSN: rep.BlockStartPSN, SuggestedM: 1, Lost: l}
		b, err := req.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		fn.a.CREM(fn.now, faultStranger, b, false)
		var to []netip.AddrPort
		fn.a.Drain(func(d gateway.Datagram) {
			if d.Kind == gateway.ToCREM && wire.Type(d.Payload[0]&0x0f) == wire.TypeRepair {
				to = append(to, d.To)
			}
		})
		if f == 0 && len(to) != 0 {
			t.Errorf("a stranger's REPAIR_REQUEST answered to %v", to)
		}
		if f != 0 && (len(to) == 0 || to[0] != faultStranger) {
			t.Errorf("fault planted: a stranger's REPAIR_REQUEST answered to %v", to)
		}
	}
}

// TestGatewayEveryFaultRuns: two gateways with every fault planted in both still run a flow
// (whatever the faults break) without a panic: the mutation check may plant any combination.
func TestGatewayEveryFaultRuns(t *testing.T) {
	var all fault.Set
	for _, f := range fault.All() {
		all |= f
	}
	fn := newFaultNet(t, 1, all, all)
	fn.run(100*time.Millisecond, true)
	fn.run(50*time.Millisecond, false)
	if n := len(fn.toB); n == 0 {
		t.Fatal("the faulty gateway sent no CREM message")
	}
}
