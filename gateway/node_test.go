package gateway_test

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/gateway"
	"github.com/crem-project/crem/internal/harness/cremtest"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// vpath is one direction of a virtual path: a fixed delay, FIFO.
type vpath struct {
	delay time.Duration
	q     []vitem
}

type vitem struct {
	at   time.Duration
	kind gateway.DatagramKind // ToCREM: a CREM message; ToEndpoint: a relayed RoCEv2 datagram
	data []byte
}

func (p *vpath) put(now time.Duration, kind gateway.DatagramKind, b []byte) {
	p.q = append(p.q, vitem{now + p.delay, kind, append([]byte(nil), b...)})
}

func (p *vpath) due(now time.Duration) []vitem {
	n := 0
	for n < len(p.q) && p.q[n].at <= now {
		n++
	}
	out := p.q[:n:n]
	p.q = p.q[n:]
	return out
}

// vqp is one RC connection through two virtual gateways: requests from endpoint A to dest, ACKs
// from endpoint B to rev; B acknowledges cumulatively.
type vqp struct {
	syn      cremtest.Synth
	rev      uint32
	expected psn.PSN // B's next expected PSN
	got      map[psn.PSN]bool
	acked    psn.PSN // the last PSN B acknowledged
}

// TestNodesInVirtualTime (C9): two gateway Nodes back to back in virtual time, with no
// socket and no clock: 6 QPs between one pair of endpoints, random initial PSNs, 2 percent
// loss on the path. Each flow's reverse QP is learned by PSN correlation (no reverse_qp is
// configured), no CSF ever releases past what its own QP acknowledged, and the CRF restores
// lost packets. This is the API the randomized workload drives (/work notes gw-node-api).
func TestNodesInVirtualTime(t *testing.T) {
	const seed = 5
	rng := rand.New(rand.NewPCG(seed, 1))
	epA, epB := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	cremA, cremB := netip.MustParseAddrPort("127.0.0.1:7001"), netip.MustParseAddrPort("127.0.0.2:7001")
	const srcPort = 5000
	off := false
	mk := func(self, peer netip.AddrPort, local, remote netip.Addr) *gateway.Node {
		n, err := gateway.NewNode(gateway.Config{CREMAddress: self, Peer: peer,
			Protect: []gateway.ProtectRule{{SrcPort: srcPort}},
			Policy:  gateway.PolicyConfig{K: new(16), M: new(2), Adapt: &off, MTU: new(1024), InitialRTT: gateway.Dur(10 * time.Millisecond), BurstGap: gateway.Dur(time.Millisecond)},
			Relay: gateway.RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), WANListen: netip.MustParseAddrPort("127.0.0.1:0"),
				Target: netip.AddrPortFrom(local, 4791), PeerData: netip.AddrPortFrom(remote, 4791)}},
			gateway.NodeOptions{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	a, b := mk(cremA, cremB, epA, epB), mk(cremB, cremA, epB, epA)
	ab, ba := &vpath{delay: 5 * time.Millisecond}, &vpath{delay: 5 * time.Millisecond}

	var qps []*vqp
	byDest := map[uint32]*vqp{}
	for i := range 6 {
		q := &vqp{rev: 0x100 + uint32(i), got: map[psn.PSN]bool{}}
		q.syn = cremtest.Synth{Desc: flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: epA, Dst: epB, DestQP: 0x200 + uint32(i), SrcPort: srcPort},
			PSN: psn.PSN(rng.Uint32N(psn.Modulus))}
		q.expected, q.acked = q.syn.PSN, q.syn.PSN.Add(-1)
		qps = append(qps, q)
		byDest[q.syn.Desc.DestQP] = q
	}
	// endpointB takes a packet for B's endpoint (relayed at once or delivered by B's CRF).
	endpointB := func(now time.Duration, pkt []byte) {
		q := byDest[uint32(pkt[5])<<16|uint32(pkt[6])<<8|uint32(pkt[7])]
		if q == nil {
			return
		}
		p := psn.PSN(uint32(pkt[9])<<16 | uint32(pkt[10])<<8 | uint32(pkt[11]))
		q.got[p] = true
		for q.got[q.expected] {
			delete(q.got, q.expected)
			q.expected = q.expected.Add(1)
		}
		if last := q.expected.Add(-1); last != q.acked {
			q.acked = last
			ack := cremtest.Ack(q.rev, last)
			b.Local(now, srcPort, ack)
			ba.put(now, gateway.ToEndpoint, ack)
		}
	}
	var now time.Duration
	drain := func(n *gateway.Node, out *vpath, endpoint func(time.Duration, []byte)) {
		n.Drain(func(d gateway.Datagram) {
			switch d.Kind {
			case gateway.ToCREM:
				out.put(now, gateway.ToCREM, d.Payload)
			case gateway.ToEndpoint:
				endpoint(now, d.Payload)
			}
		})
	}
	lost := 0
	const step = 100 * time.Microsecond
	for i := 0; now < 3*time.Second; i++ {
		if now < 2*time.Second {
			q := qps[rng.IntN(len(qps))]
			pkt := q.syn.Next(1024)
			a.Local(now, srcPort, pkt)
			if rng.Float64() < 0.02 {
				lost++
			} else {
				ab.put(now, gateway.ToEndpoint, pkt)
			}
		}
		for _, it := range ab.due(now) {
			if it.kind == gateway.ToCREM {
				b.CREM(now, cremA, it.data, false)
			} else if b.WAN(now, it.data, false) {
				endpointB(now, it.data)
			}
		}
		for _, it := range ba.due(now) {
			if it.kind == gateway.ToCREM {
				a.CREM(now, cremB, it.data, false)
			} else {
				a.WAN(now, it.data, false) // A's endpoint takes the ACKs: nothing to check there
			}
		}
		for _, n := range []*gateway.Node{a, b} {
			if d, ok := n.NextDeadline(); ok && d <= now {
				n.Tick(now)
			}
		}
		drain(a, ab, func(time.Duration, []byte) {})
		drain(b, ba, endpointB)
		// No CSF releases beyond what its own QP acknowledged.
		for _, q := range qps {
			if s := a.Sender(q.syn.Desc.Key()); s != nil {
				if through, ok := s.AckedThrough(); ok && through.After(q.acked) {
					t.Fatalf("seed %d: flow %#x released through %v, its QP acknowledged %v", seed, q.syn.Desc.DestQP, through, q.acked)
				}
			}
		}
		now += step
	}
	st := b.Stats()
	for _, q := range qps {
		if rq, ok := a.ReverseQP(q.syn.Desc.Key()); !ok || rq != q.rev {
			t.Errorf("flow %#x: reverse QP %#x %v, want %#x", q.syn.Desc.DestQP, rq, ok, q.rev)
		}
	}
	sa := a.Stats()
	t.Logf("lost %d, restored %d; A: pairing %d by correlation, %d ACKs to their CSF, %d to none; CSF blocks acked %d",
		lost, st.Receiver.Flows.Restored, sa.Pairing.PairedByCorrelation, sa.Gateway["reverse_to_sender"],
		sa.Gateway["reverse_to_none"], sa.Sender.BlocksAcked)
	if st.Receiver.Flows.Restored == 0 || sa.Pairing.PairedByCorrelation != 6 || sa.Sender.BlocksAcked == 0 {
		t.Fatalf("restored %d, paired %d, blocks acked %d", st.Receiver.Flows.Restored, sa.Pairing.PairedByCorrelation, sa.Sender.BlocksAcked)
	}
}

// logRecords keeps the messages and attributes of every log record.
type logRecords struct {
	mu   sync.Mutex
	recs []string
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecords) WithGroup(string) slog.Handler            { return h }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	s := r.Message
	r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
	h.mu.Lock()
	h.recs = append(h.recs, s)
	h.mu.Unlock()
	return nil
}

// TestNodeCMPairs (C9): a ConnectRequest from this side's endpoint and its ConnectReply
// from the peer's, relayed through the node like any datagram, pair the flow to the
// responder's QP with the requester's QP before its first source: its CSF gets the reverse QP
// as it starts, the first ACK of that QP reaches it, an ACK of another QP does not, and the
// pairing is logged and counted (pairing.Stats.PairedByCM).
func TestNodeCMPairs(t *testing.T) {
	logs := &logRecords{}
	epA, epB := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	n, err := gateway.NewNode(gateway.Config{CREMAddress: netip.MustParseAddrPort("127.0.0.1:7001"), Peer: netip.MustParseAddrPort("127.0.0.2:7001"),
		Protect: []gateway.ProtectRule{{SrcPort: 5000}},
		Relay: gateway.RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), WANListen: netip.MustParseAddrPort("127.0.0.1:0"),
			Target: netip.AddrPortFrom(epA, 4791), PeerData: netip.AddrPortFrom(epB, 4791)}},
		gateway.NodeOptions{Seed: 1, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	const reqQP, repQP = 0x0a0b0c, 0x0d0e0f
	gsi := func(mad []byte, err error) []byte {
		if err != nil {
			t.Fatal(err)
		}
		b, err := roce.AppendGSIPacket(nil, 0xffff, 0, mad)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	n.Local(0, 5001, gsi(roce.CMReq{LocalCommID: 0x1234, LocalQPN: reqQP, StartingPSN: 0x7ffffe}.AppendMAD(nil, 9)))
	if !n.WAN(time.Millisecond, gsi(roce.CMRep{LocalCommID: 0x99, RemoteCommID: 0x1234, LocalQPN: repQP, StartingPSN: 3}.AppendMAD(nil, 9)), false) {
		t.Fatal("a REP was not relayed")
	}
	k := flow.Key{Src: epA, Dst: epB, DestQP: repQP}
	if rq, ok := n.ReverseQP(k); !ok || rq != reqQP {
		t.Fatalf("after REQ and REP: %#x %v", rq, ok)
	}
	syn := cremtest.Synth{Desc: flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: epA, Dst: epB, DestQP: repQP, SrcPort: 5000}, PSN: 0x7ffffe}
	n.Local(2*time.Millisecond, 5000, syn.Next(64))
	s := n.Sender(k)
	if s == nil {
		t.Fatal("no CSF")
	}
	if rq, ok := s.ReverseQP(); !ok || rq != reqQP {
		t.Fatalf("the CSF's reverse QP: %#x %v", rq, ok)
	}
	n.WAN(3*time.Millisecond, cremtest.Ack(reqQP, 0x7ffffe), false)
	n.WAN(3*time.Millisecond, cremtest.Ack(reqQP+1, 0x7ffffe), false)
	if got := s.Stats().ReverseObserved; got != 1 {
		t.Fatalf("the CSF was offered %d packets passing back, want its own QP's one", got)
	}
	st := n.Stats()
	if st.Pairing.PairedByCM != 2 || st.Gateway["reverse_to_sender"] != 1 || st.Gateway["reverse_to_none"] != 2 || st.Gateway["sender_reverse_qp_set"] != 1 {
		t.Fatalf("pairing %+v, gateway %v", st.Pairing, st.Gateway)
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	found := 0
	for _, r := range logs.recs {
		if strings.HasPrefix(r, "reverse QP paired with flow") && strings.Contains(r, "by=cm") {
			found++
		}
	}
	if found != 2 {
		t.Fatalf("want a log line for each of the two pairings: %q", logs.recs)
	}
}

// TestNodeRestartClearsReverseQP (C9, E32): a flow paired by correlation whose QP is
// created again (a new PSN space, a new requester QP) loses its CSF's reverse QP at the first
// request of the new space, so the old QP's late ACKs release nothing, and gets the new one once
// the new QP's ACKs confirm it.
func TestNodeRestartClearsReverseQP(t *testing.T) {
	epA, epB := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	n, err := gateway.NewNode(gateway.Config{CREMAddress: netip.MustParseAddrPort("127.0.0.1:7001"), Peer: netip.MustParseAddrPort("127.0.0.2:7001"),
		Protect: []gateway.ProtectRule{{SrcPort: 5000}},
		Relay: gateway.RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), WANListen: netip.MustParseAddrPort("127.0.0.1:0"),
			Target: netip.AddrPortFrom(epA, 4791), PeerData: netip.AddrPortFrom(epB, 4791)}},
		gateway.NodeOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	desc := flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: epA, Dst: epB, DestQP: 0x200, SrcPort: 5000}
	syn := cremtest.Synth{Desc: desc, PSN: 0x123456}
	now := time.Duration(0)
	run := func(rev uint32) {
		for range 12 {
			n.Local(now, 5000, syn.Next(64))
			n.WAN(now, cremtest.Ack(rev, syn.PSN.Add(-1)), false)
			now += time.Millisecond
		}
	}
	run(0x100)
	s := n.Sender(desc.Key())
	if qp, ok := s.ReverseQP(); !ok || qp != 0x100 {
		t.Fatalf("before the restart: %#x %v", qp, ok)
	}
	syn.PSN = 0xabcdef // the QP created again: a new random initial PSN
	n.Local(now, 5000, syn.Next(64))
	if qp, ok := s.ReverseQP(); ok {
		t.Fatalf("after the first request of the new space the CSF still has reverse QP %#x", qp)
	}
	before := s.Stats().ReverseObserved
	n.WAN(now, cremtest.Ack(0x100, 0x123456+11), false)
	if s.Stats().ReverseObserved != before {
		t.Fatal("a late ACK of the old connection reached the CSF")
	}
	run(0x101)
	if qp, ok := s.ReverseQP(); !ok || qp != 0x101 {
		t.Fatalf("after the new QP's ACKs: %#x %v", qp, ok)
	}
	if st := n.Stats(); st.Gateway["sender_reverse_qp_cleared"] != 1 || st.Pairing.UnpairedRestart != 1 || st.Pairing.PairedByCorrelation != 2 {
		t.Fatalf("gateway %v, pairing %+v", st.Gateway, st.Pairing)
	}
}
