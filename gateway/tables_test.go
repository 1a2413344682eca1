package gateway

import (
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/internal/harness/cremtest"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// recRoutes records what a node enters in and takes out of its routes.
type recRoutes struct {
	crf, csf map[uint32]bool
	nonce    map[uint64]bool
	maxCRF   int
	addedCRF map[uint32]bool // every CRF Flow ID ever routed
}

func newRecRoutes() *recRoutes {
	return &recRoutes{crf: map[uint32]bool{}, csf: map[uint32]bool{}, nonce: map[uint64]bool{}, addedCRF: map[uint32]bool{}}
}

func setOrDel[K comparable](m map[K]bool, k K, add bool) {
	if add {
		m[k] = true
	} else {
		delete(m, k)
	}
}

func (r *recRoutes) senderFlowID(id uint32, add bool) { setOrDel(r.csf, id, add) }
func (r *recRoutes) receiverFlowID(id uint32, add bool) {
	setOrDel(r.crf, id, add)
	if add {
		r.addedCRF[id] = true
	}
	r.maxCRF = max(r.maxCRF, len(r.crf))
}
func (r *recRoutes) helloNonce(n uint64, add bool) { setOrDel(r.nonce, n, add) }

var (
	epLocal  = netip.MustParseAddr("10.0.0.1")
	epRemote = netip.MustParseAddr("10.0.0.2")
)

// tableNode is a node with routes, driven in virtual time: its flows' endpoints are epLocal
// and epRemote, sources from UDP port 5000.
func tableNode(t *testing.T, pol PolicyConfig, rt routes) *Node {
	t.Helper()
	c := Config{CREMAddress: netip.MustParseAddrPort("127.0.0.1:7001"), Peer: netip.MustParseAddrPort("127.0.0.2:7001"), Protect: []ProtectRule{{SrcPort: 5000}}, Policy: pol,
		Relay: RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), WANListen: netip.MustParseAddrPort("127.0.0.1:0"),
			Target: netip.AddrPortFrom(epLocal, 4791), PeerData: netip.AddrPortFrom(epRemote, 4791)}}
	r, err := c.validate()
	if err != nil {
		t.Fatal(err)
	}
	n, err := newNode(r, slog.New(slog.DiscardHandler), 1, 0, rt)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// step runs the node's timers due by now and drains it; it returns how many CREM messages it
// sent.
func step(n *Node, now time.Duration) (sent int) {
	for {
		d, ok := n.NextDeadline()
		if !ok || d > now {
			break
		}
		n.Tick(d)
	}
	n.Drain(func(d Datagram) {
		if d.Kind == ToCREM {
			sent++
		}
	})
	return sent
}

func hello(t *testing.T, nonce uint64, qp uint32) []byte {
	t.Helper()
	m := wire.Hello{Capabilities: flow.DefaultLimits().Capabilities(4096), SenderNonce: nonce,
		Source: epRemote, Destination: epLocal, FlowLabel: qp}
	b, err := m.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRoutesFollowFlows (C14): the Flow IDs a node's CRF announces in HELLO_ACK are
// routed while the CRF serves them (a flow, or a session pending since its HELLO) and taken
// out routeGrace after it no longer does, and never exceed maxRxRoutes: HELLOs from 3,000
// spoofed addresses, then 3,000 from one address with one descriptor and a new nonce each
// (none proven: their sessions expire), then time for everything to go. Before, the routing
// map gained an entry per HELLO_ACK and lost none.
func TestRoutesFollowFlows(t *testing.T) {
	rt := newRecRoutes()
	n := tableNode(t, PolicyConfig{Idle: Dur(5 * time.Second)}, rt)
	now := time.Duration(0)
	for i := range 3000 {
		from := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)}), 7001)
		now += time.Millisecond
		n.CREM(now, from, hello(t, uint64(i)+1, uint32(0x100+i)), false)
		step(n, now)
	}
	from := netip.MustParseAddrPort("127.0.0.2:7001")
	for i := range 3000 {
		now += 10 * time.Millisecond
		n.CREM(now, from, hello(t, uint64(i)+1<<32, 0x42), false)
		step(n, now)
		// Past the first flows' release and grace, only the last routeGrace's Flow IDs stay.
		fp := n.recv.Footprint()
		if live := fp.Flows + fp.Pending; i >= 2000 && len(rt.crf) > live+int(routeGrace/(10*time.Millisecond))+int(sweepEvery/(10*time.Millisecond))+8 {
			t.Fatalf("HELLO %d: %d Flow IDs routed, %d flows live: released flows stay routed", i, len(rt.crf), live)
		}
	}
	if rt.maxCRF > maxRxRoutes {
		t.Fatalf("%d Flow IDs routed at once, bound %d", rt.maxCRF, maxRxRoutes)
	}
	end := now + 5*time.Second + routeGrace + 2*sweepEvery
	for now < end {
		now += 100 * time.Millisecond
		step(n, now)
	}
	if fp := n.recv.Footprint(); fp.Flows+fp.Pending != 0 || len(rt.crf) != 0 || len(n.rxRoutes) != 0 {
		t.Fatalf("after the sessions expired: %d flows and %d pending, %d routed, %d in the node's table", fp.Flows, fp.Pending, len(rt.crf), len(n.rxRoutes))
	}
	announced := uint64(len(rt.addedCRF))
	if got := n.stats.RoutesExpired; got != announced {
		t.Fatalf("%d routes expired, %d Flow IDs announced", got, announced)
	}
	t.Logf("%d Flow IDs announced (CRF: %d sessions opened), at most %d routed at once", announced, n.recv.Stats().HandshakesOpened, rt.maxCRF)
}

// TestSenderTablesBounded: a node's CSFs and the nonces routed to them stay bounded and
// expire. One flow whose peer never answers sends eight HELLOs, then probes it with a round of
// eight once per hold-off (a new nonce each, E71): one nonce is routed at a time. 5,000 flows of one packet each: 4,096 get a CSF (the rest are
// counted), they stop sending HELLO once their flow has been quiet for the idle timeout and
// leave the table four idle timeouts later, their counters kept in the sums.
func TestSenderTablesBounded(t *testing.T) {
	rt := newRecRoutes()
	n := tableNode(t, PolicyConfig{Idle: Dur(2 * time.Second), HelloHoldOff: Dur(10 * time.Millisecond)}, rt)
	syn := cremtest.Synth{Desc: flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: epLocal, Dst: epRemote, DestQP: 0x42, SrcPort: 5000}, PSN: 1}
	now := time.Duration(0)
	for range 1000 {
		now += 50 * time.Millisecond
		n.Local(now, 5000, syn.Next(64))
		step(n, now)
		if len(n.byNonce) > 1 || len(rt.nonce) > 1 {
			t.Fatalf("%d nonces routed for one CSF", len(rt.nonce))
		}
	}
	st := n.Stats().Sender
	if st.HelloProbes < 100 || st.HelloSent != 8*(1+st.HelloProbes) {
		t.Fatalf("%d HELLOs, %d probes: want eight, then a hundred rounds of eight or more", st.HelloSent, st.HelloProbes)
	}
	for i := range 5000 {
		s := cremtest.Synth{Desc: syn.Desc, PSN: psn.PSN(i)}
		s.Desc.DestQP = uint32(0x1000 + i)
		n.Local(now, 5000, s.Next(64))
	}
	step(n, now)
	if len(n.list) != maxSenders || n.stats.FlowsRefusedFull != 5001-maxSenders {
		t.Fatalf("%d CSFs, %d refused: want %d and %d", len(n.list), n.stats.FlowsRefusedFull, maxSenders, 5001-maxSenders)
	}
	now += 3 * time.Second
	step(n, now)
	before := n.Stats().Sender.HelloSent
	now += 2 * time.Second
	if sent := step(n, now); sent != 0 {
		t.Fatalf("%d CREM messages for quiet flows", sent)
	}
	if n.stats.SendersQuiet < maxSenders {
		t.Fatalf("%d CSFs stopped for quiet flows, want %d", n.stats.SendersQuiet, maxSenders)
	}
	now += 4 * 2 * time.Second
	step(n, now)
	if len(n.list) != 0 || len(n.senders) != 0 || len(n.byNonce) != 0 || len(rt.nonce) != 0 || len(n.byFlowID) != 0 {
		t.Fatalf("tables after expiry: %d CSFs, %d keys, %d nonces (%d routed), %d Flow IDs", len(n.list), len(n.senders), len(n.byNonce), len(rt.nonce), len(n.byFlowID))
	}
	if after := n.Stats().Sender.HelloSent; after != before {
		t.Fatalf("HELLOs sent %d before the CSFs left, %d after: their counters were lost", before, after)
	}
	// A flow that comes back gets a CSF again.
	now += time.Second
	n.Local(now, 5000, syn.Next(64))
	if sent := step(n, now); sent != 1 || len(n.list) != 1 {
		t.Fatalf("a flow back after its CSF left: %d CSFs, %d messages", len(n.list), sent)
	}
}

// TestRoutesFollowTheEnginesEvents (G63): the nonce and Flow IDs a node routes to its CSFs are
// what the CSFs' events said, with no HELLO or HELLO_ACK read on its way: the nonce of the
// HELLO on the wire, the Flow ID of the HELLO_ACK that answered it, none after CLOSE, and the
// new ones of the next session.
func TestRoutesFollowTheEnginesEvents(t *testing.T) {
	rt := newRecRoutes()
	n := tableNode(t, PolicyConfig{Idle: Dur(30 * time.Second)}, rt)
	syn := cremtest.Synth{Desc: flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: epLocal, Dst: epRemote, DestQP: 0x42, SrcPort: 5000}, PSN: 1}
	peer := netip.MustParseAddrPort("127.0.0.2:7001")
	now := time.Duration(0)
	helloOnWire := func() (uint64, bool) {
		var nonce uint64
		seen := false
		n.Drain(func(d Datagram) {
			if m, err := wire.ParseHello(d.Payload); d.Kind == ToCREM && err == nil {
				nonce, seen = m.SenderNonce, true
			}
		})
		return nonce, seen
	}
	agrees := func(step string, wantCSF uint32, wantNonce uint64) {
		t.Helper()
		if wantCSF == 0 && len(rt.csf) != 0 || wantCSF != 0 && (len(rt.csf) != 1 || !rt.csf[wantCSF]) {
			t.Fatalf("%s: CSF Flow IDs routed %v, want %#x", step, rt.csf, wantCSF)
		}
		if wantNonce != 0 && (len(rt.nonce) != 1 || !rt.nonce[wantNonce]) {
			t.Fatalf("%s: nonces routed %v, want %#x", step, rt.nonce, wantNonce)
		}
	}
	for session, flowID := range []uint32{0x5151, 0x6262} {
		n.Local(now, 5000, syn.Next(64))
		nonce, ok := helloOnWire()
		if !ok {
			t.Fatalf("session %d: no HELLO for the flow's first source", session)
		}
		agrees("HELLO sent", 0, nonce)
		ack := wire.HelloAck{FlowID: flowID, Capabilities: flow.DefaultLimits().Capabilities(4096), AF: wire.AF4,
			SenderNonce: nonce, MaxOpenBlocks: 64}
		b, err := ack.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		now += time.Millisecond
		n.CREM(now, peer, b, false)
		agrees("HELLO_ACK taken", flowID, nonce)
		if s := n.byFlowID[flowID]; s == nil || s.s.FlowID() != flowID {
			t.Fatalf("session %d: the node routes Flow ID %#x to %v", session, flowID, s)
		}
		step(n, now)
		cl := wire.Close{FlowID: flowID, Reason: wire.ReasonNormal}
		if b, err = cl.Append(nil); err != nil {
			t.Fatal(err)
		}
		now += time.Millisecond
		n.CREM(now, peer, b, false)
		agrees("CLOSE from the peer", 0, 0)
		if len(n.byFlowID) != 0 {
			t.Fatalf("session %d: %d Flow IDs still routed inside the node", session, len(n.byFlowID))
		}
		now += time.Millisecond
	}
}
