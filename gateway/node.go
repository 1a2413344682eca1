package gateway

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/pairing"
	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// Node is the gateway's protocol core: the CSFs of the flows leaving toward the peer, the CRF
// of the flows arriving from it, which reverse QP belongs to which flow (package pairing), and
// the rules that tie them to the packets crossing the gateway. It touches no socket and no
// clock: the caller hands it every datagram with the time (now, from any fixed origin), relays
// what it is told to relay, sends what Drain hands out, and calls Tick at NextDeadline.
//
// A Gateway runs one Node per shard and drives it with its sockets and the wall clock; a test
// or a simulation may drive Nodes in virtual time. A Node is not safe for concurrent use.
type Node struct {
	cfg      *resolved
	log      *slog.Logger
	recv     *crf.Receiver
	senders  map[flow.Key]*sender // nil values: flows no rule protects, or that could not be built
	list     []*sender
	byFlowID map[uint32]*sender
	byNonce  map[uint64]*sender
	rng      *rand.Rand
	limits   flow.Limits
	pair     *pairing.Learner
	routes   routes
	stats    NodeStats
	scratch  []byte // a TUN delivery: the template and the packet
	onEvent  func(pairing.Event)
	// rxRoutes are the Flow IDs of the node's CRF entered in routes (the CRF's events): a
	// sweep takes out those the CRF released routeGrace ago.
	rxRoutes map[uint32]rxRoute
	sweepAt  time.Duration // the next sweep of the tables
	at       time.Duration // the latest now a caller gave
	gone     csf.Stats     // the counters of CSFs removed from the table
	// warnedNoPort: the rules whose HELLO refusal (no src_port) has been logged.
	warnedNoPort []bool
}

// Table bounds and expiry (protocol notes: every table a peer or a flood can grow is bounded
// and expires).
const (
	sweepEvery = time.Second
	// maxSenders bounds the CSFs of a node: beyond, a new flow goes unprotected (counted)
	// unless a closed CSF can make room.
	maxSenders = 4096
	// maxRxRoutes bounds the CRF Flow IDs routed to a node. A Flow ID stays routed while the
	// CRF serves it (FlowStats: a flow, or a session pending since its HELLO_ACK), and
	// routeGrace after: the last messages of a released flow are refused by the CRF, counted
	// there, rather than as unknown at the router.
	maxRxRoutes = 4096
	routeGrace  = 2 * time.Second
	// A CSF whose flow sent nothing for the idle timeout (C15, at least minQuiet) stops asking
	// for a session (HELLO every hold-off); closed, it leaves the table lingerPerQuiet idle
	// timeouts after the flow's last source.
	minQuiet       = time.Second
	lingerPerQuiet = 4
)

// sender is one protected flow leaving toward the peer.
type sender struct {
	s        *csf.Sender
	key      flow.Key
	desc     flow.Descriptor
	rule     rule
	flowID   uint32 // the Flow ID the peer assigned to its session, routed to it; 0: none
	nonce    uint64 // the nonce of its latest HELLO, routed to it while hasNonce
	hasNonce bool
	inForce  bool          // it forms blocks under a configuration (its session's, until released)
	lastSeen time.Duration // its latest source packet
	rate     rates         // its smoothed source rate, for the busiest flows' series
}

// routes is told the Flow IDs and nonces that address a node's engines, so that a gateway with
// several nodes routes each CREM message to its node. A lone node needs none.
type routes interface {
	senderFlowID(id uint32, add bool)   // a Flow ID the peer's CRF assigned to one of the node's CSFs
	receiverFlowID(id uint32, add bool) // a Flow ID the node's CRF assigned
	helloNonce(n uint64, add bool)      // the nonce of the latest HELLO of one of the node's CSFs
}

// NodeStats are a Node's own outcomes (its engines count theirs: Node.Stats adds them).
type NodeStats struct {
	PacketsProtected   uint64 // leaving toward the peer while their flow's CSF had a configuration
	PacketsUnprotected uint64 // leaving toward the peer with no CSF, or before it had a configuration
	ForwardedFromPeer  uint64 // arriving from the peer and relayed at once (the CRF did not hold them)
	DeliveredFromCRF   uint64 // packets the CRF released or restored, handed to this side
	RestoredDelivered  uint64 // of those, restored
	Abandoned          uint64 // positions the CRF gave up
	HelloRefusedNoPort uint64 // HELLOs refused: relay mode needs the rule's src_port (G2)
	FlowsStarted       uint64 // CSF sessions started, again after a CLOSE included
	PathReportsTaken   uint64 // TUN mode: PATH_REPORTs taken off the path for a CSF (C10)
	PathReportsPassed  uint64 // TUN mode: PATH_REPORTs to this side's hosts for no flow with a CSF here, sent on
	// PATH_REPORTs the node dropped itself (the CSFs count what they refuse, by kind):
	// PathReportsMalformed did not parse; PathReportsUnknownFlow named no flow with a CSF here
	// (by its logical addresses, or in relay mode by the WAN addresses: reportKey).
	PathReportsMalformed, PathReportsUnknownFlow uint64
	TemplateErrors                               uint64 // TUN mode: deliveries with no header template
	CREMDiscarded                                uint64 // too short, another Version, or an unknown Type
	CREMMalformed                                uint64 // a HELLO_ACK or PATH_REPORT that does not parse
	CREMUnknownFlow                              uint64 // a CREM message for no engine of this node
	// ReverseToSender counts packets passing back that were offered to the CSF of their flow;
	// ReverseToNone those offered to none (no flow paired with their QP: they release nothing).
	ReverseToSender, ReverseToNone uint64
	// SenderReverseQPSet counts reverse QPs set on CSFs (configured, or learned by pairing).
	SenderReverseQPSet uint64
	// SenderReverseQPCleared counts reverse QPs taken from CSFs when their pairing ended.
	SenderReverseQPCleared uint64
	PairingEventsLogged    uint64 // pairings learned and ended, each logged
	// ReadsAskedAgain counts READ requests behind their flow's next PSN told to the CRF of the
	// responses (G25); ReadsAgainUnpaired those it could not tell, the flow not yet paired.
	ReadsAskedAgain, ReadsAgainUnpaired uint64
	// RoutesExpired counts CRF Flow IDs taken out of the routing table, their flow released
	// (or never opened) for routeGrace.
	RoutesExpired uint64
	// SendersQuiet counts CSFs that stopped asking for a session (HELLO), their flow quiet for
	// the idle timeout; SendersExpired CSFs removed, closed and quiet for four times that;
	// FlowsRefusedFull flows left unprotected, the table of CSFs full (maxSenders).
	SendersQuiet, SendersExpired, FlowsRefusedFull uint64
}

// NodeOptions are what NewNode needs besides the configuration.
type NodeOptions struct {
	Logger *slog.Logger // nil: discard
	// Seed seeds the engines' random sources (nonces, Flow IDs, Request IDs); 0 takes one from
	// the operating system. Index sets nodes of one seed apart (a Gateway's shards).
	Seed  uint64
	Index int
	// OnPairing, if set, is called for every pairing learned or ended (after it is applied).
	OnPairing func(pairing.Event)
}

// NewNode validates the configuration (as New does, opening nothing) and returns a Node in
// the configuration's mode. Addresses of sockets (relay.listen, relay.wan_listen) are parsed
// but never bound; relay.target is where Drain's endpoint datagrams are addressed.
func NewNode(c Config, o NodeOptions) (*Node, error) {
	r, err := c.validate()
	if err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	seed := o.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	n, err := newNode(r, log, seed, o.Index, nil)
	if err != nil {
		return nil, err
	}
	n.onEvent = o.OnPairing
	return n, nil
}

func newNode(r *resolved, log *slog.Logger, seed uint64, idx int, rt routes) (*Node, error) {
	n := &Node{cfg: r, log: log, senders: map[flow.Key]*sender{}, byFlowID: map[uint32]*sender{},
		byNonce: map[uint64]*sender{}, rng: rand.New(rand.NewPCG(seed, uint64(idx)+1)), routes: rt,
		rxRoutes: map[uint32]rxRoute{}, warnedNoPort: make([]bool, len(r.rules))}
	n.limits = r.limits
	rr := rand.New(rand.NewPCG(seed, uint64(idx)+1<<32))
	recv, err := crf.New(append(r.crfOptions(rr.Uint64, n.settings, log), crf.WithEvents(n.receiverEvent))...)
	if err != nil {
		return nil, fmt.Errorf("gateway: receiver function: %w", err)
	}
	n.recv = recv
	pl := pairing.DefaultLimits()
	pl.MTU = r.mtu
	if n.pair, err = pairing.New(pl); err != nil {
		return nil, fmt.Errorf("gateway: pairing: %w", err)
	}
	return n, nil
}

// settings chooses a new inbound flow's local settings when its HELLO arrives.
func (n *Node) settings(d flow.Descriptor) (crf.Settings, bool) {
	c := n.cfg
	for i, r := range c.rules {
		if !r.match(d.Src, d.Dst, 0, d.DestQP) {
			continue
		}
		s := crf.Settings{Ordered: r.ordered, Reorder: c.reorder, Idle: c.idle, SrcPort: r.srcPort}
		switch {
		case c.mode == ModeTun && !c.tunLogical:
			s.Verify = crf.VerifyTemplate
		case c.mode == ModeTun:
			// The logical check in TUN mode: without a src_port in the rule the CRF takes the
			// flow's UDP source port from its own packets, which cross the device.
		case r.srcPort == 0:
			// Relay mode checks restored packets under the logical header (C12), whose UDP
			// source port only the configuration can tell the receiving side.
			n.stats.HelloRefusedNoPort++
			if !n.warnedNoPort[i] { // once per rule: a flood of such HELLOs logs one line
				n.warnedNoPort[i] = true
				n.log.Warn("HELLO refused: checking restored packets under the logical header needs the flow's src_port in a protect rule (logged once for the rule; hello_refused_no_src_port counts them)",
					"rule", i, "src", d.Src, "dst", d.Dst, "qp", d.DestQP)
			}
			return crf.Settings{}, false
		}
		return s, true
	}
	return crf.Settings{}, false
}

func isSource(op byte) bool { return op != 0x11 && op != 0x12 && op != 0x81 }

func destQP(b []byte) uint32 { return uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7]) }

// Local takes a RoCEv2 datagram (BTH to ICRC) from this side's endpoint in relay mode, sent from
// UDP source port srcPort; the caller relays it to the peer unchanged, whatever it is.
func (n *Node) Local(now time.Duration, srcPort uint16, pkt []byte) {
	n.Outbound(now, n.cfg.localEP, n.cfg.remoteEP, srcPort, pkt)
}

// Outbound takes a RoCEv2 datagram leaving from src to dst toward the peer (a flow's source
// packets, the ACKs and READ responses of the peer's flows, CM MADs); the caller sends it on
// unchanged. A source packet of a flow a protect rule covers starts its CSF (G4).
func (n *Node) Outbound(now time.Duration, src, dst netip.Addr, srcPort uint16, pkt []byte) {
	if len(pkt) < roce.BTHLen {
		return
	}
	n.pair.Forward(now, src, dst, pkt)
	n.applyPairings()
	if !isSource(pkt[0]) {
		return
	}
	n.at = now
	if s := n.senderFor(now, flow.Key{Src: src, Dst: dst, DestQP: destQP(pkt)}, srcPort); s != nil {
		s.lastSeen = now
		if roce.Opcode(pkt[0]) == roce.OpReadRequest {
			n.readAskedAgain(now, s, pkt)
		}
		s.s.Observe(now, pkt)
		if s.inForce {
			n.stats.PacketsProtected++
		} else {
			n.stats.PacketsUnprotected++
		}
	} else {
		n.stats.PacketsUnprotected++
	}
}

// readAskedAgain tells the CRF of a flow's READ responses when its requester asks for some of
// them again (a READ request behind the flow's next PSN: a re-issue, or the READ sent again):
// the responses that answer it are sent anew and may differ from the originals, so the CRF must
// not decode with them (crf E48). The responses come back on the flow's reverse QP, so this
// needs the pairing.
func (n *Node) readAskedAgain(now time.Duration, s *sender, pkt []byte) {
	next, ok := s.s.NextPSN()
	p := psn.PSN(uint32(pkt[9])<<16 | uint32(pkt[10])<<8 | uint32(pkt[11]))
	if !ok || !p.Before(next) || len(pkt) < roce.BTHLen+roce.RETHLen+roce.ICRCLen {
		return
	}
	rq, ok := n.ReverseQP(s.key)
	if !ok {
		n.stats.ReadsAgainUnpaired++
		return
	}
	id, ok := n.recv.Lookup(flow.Key{Src: s.key.Dst, Dst: s.key.Src, DestQP: rq})
	if !ok {
		return
	}
	dma := binary.BigEndian.Uint32(pkt[roce.BTHLen+12:])
	n.recv.ReadAskedAgain(now, id, p, int(roce.OpReadRequest.PSNs(dma, uint32(s.s.RDMAMTU()))))
	n.stats.ReadsAskedAgain++
}

// WAN takes a RoCEv2 datagram from the peer gateway in relay mode. True: the caller relays it
// to this side's endpoint (relay.target) now; false: the CRF holds it, and Drain hands it out
// later (or never, if it is a duplicate).
func (n *Node) WAN(now time.Duration, pkt []byte, ce bool) bool {
	return n.Inbound(now, n.cfg.remoteEP, n.cfg.localEP, pkt, ce)
}

// Inbound takes a RoCEv2 datagram arriving from the peer, from src to dst on this side, with
// the result of WAN. Packets passing back toward a flow's source (its ACKs and READ responses)
// are offered to the CSF of the flow their destination QP is paired with, and to no other.
func (n *Node) Inbound(now time.Duration, src, dst netip.Addr, pkt []byte, ce bool) bool {
	if len(pkt) < roce.BTHLen {
		n.stats.ForwardedFromPeer++
		return true
	}
	n.reverse(now, src, dst, pkt)
	if id, ok := n.recv.Lookup(flow.Key{Src: src, Dst: dst, DestQP: destQP(pkt)}); ok {
		if n.recv.Observe(now, id, pkt, ce) == crf.Held {
			return false
		}
	}
	n.stats.ForwardedFromPeer++
	return true
}

// reverse offers a packet passing back (from remote to local) to the CSF of the flow it
// belongs to, if the pairing knows one (C9).
func (n *Node) reverse(now time.Duration, remote, local netip.Addr, pkt []byte) {
	k, ok := n.pair.Reverse(now, remote, local, pkt)
	n.applyPairings()
	if !ok {
		n.stats.ReverseToNone++
		return
	}
	if s := n.senders[k]; s != nil {
		n.stats.ReverseToSender++
		s.s.ObserveReverse(now, pkt)
		return
	}
	n.stats.ReverseToNone++
}

// applyPairings applies the pairings the learner found or ended to the CSFs, and logs them.
func (n *Node) applyPairings() {
	n.pair.Events(n.applyEvent)
}

func (n *Node) applyEvent(e pairing.Event) {
	switch e.Kind {
	case pairing.Paired:
		if s := n.senders[e.Flow]; s != nil {
			n.setReverseQP(s, e.ReverseQP)
		}
		n.log.Info("reverse QP paired with flow", "src", e.Flow.Src, "dst", e.Flow.Dst, "qp", e.Flow.DestQP,
			"reverse_qp", e.ReverseQP, "by", e.By.String())
	case pairing.Unpaired:
		if s := n.senders[e.Flow]; s != nil {
			if qp, ok := s.s.ReverseQP(); ok && qp == e.ReverseQP {
				s.s.ClearReverseQP() // releases nothing until the flow is paired again
				n.stats.SenderReverseQPCleared++
			}
		}
		n.log.Info("reverse QP no longer paired with flow", "src", e.Flow.Src, "dst", e.Flow.Dst, "qp", e.Flow.DestQP,
			"reverse_qp", e.ReverseQP, "reason", e.Reason.String())
	}
	n.stats.PairingEventsLogged++
	if n.onEvent != nil {
		n.onEvent(e)
	}
}

// Tun takes an IPv4 packet read from the TUN device (tun mode): packets toward this side's
// prefixes arrive from the peer, all others leave toward it. True: the caller sends it on
// unchanged; false: it was taken (a PATH_REPORT for a CSF, C10) or the CRF holds it.
func (n *Node) Tun(now time.Duration, b []byte, ce bool) bool {
	c := n.cfg
	if len(b) < 20 || b[0]>>4 != 4 {
		return true
	}
	ihl := int(b[0]&0x0f) * 4
	src, dst := netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20]))
	inbound := false
	for _, pr := range c.tunLocal {
		if pr.Contains(dst) {
			inbound = true
			break
		}
	}
	frag := binary.BigEndian.Uint16(b[6:8])&0x3fff != 0
	if b[9] != 17 || frag || ihl < 20 || len(b) < ihl+8+12 {
		return true
	}
	udp := b[ihl : ihl+8]
	sport, dport := binary.BigEndian.Uint16(udp[0:2]), binary.BigEndian.Uint16(udp[2:4])
	payload := b[ihl+8:]
	if ul := int(binary.BigEndian.Uint16(udp[4:6])); ul >= 8 && ul-8 <= len(payload) {
		payload = payload[:ul-8]
	}
	if inbound && dport == c.crem.Port() && len(payload) >= wire.HeaderLen && wire.Type(payload[0]&0x0f) == wire.TypePathReport {
		// C10: a PATH_REPORT addressed to a source this gateway serves is its CSF's, which
		// takes it only from a configured reporter (C14) and counts what it refuses. Any other
		// goes on to the host it is addressed to, counted if it does not parse.
		name, ok := wire.PeekPathReportFlow(payload)
		if !ok {
			n.stats.PathReportsMalformed++
			return true
		}
		if s := n.senders[n.reportKey(name)]; s != nil {
			s.s.Handle(now, netip.AddrPortFrom(src, sport), payload)
			n.stats.PathReportsTaken++
			return false
		}
		n.stats.PathReportsPassed++
		return true
	}
	if dport != roce.UDPPort || len(payload) < roce.BTHLen {
		return true
	}
	if !inbound {
		n.Outbound(now, src, dst, sport, payload)
		return true
	}
	n.reverse(now, src, dst, payload)
	if id, ok := n.recv.Lookup(flow.Key{Src: src, Dst: dst, DestQP: destQP(payload)}); ok {
		if n.recv.ObserveIP(now, id, b[:ihl], udp, payload, ce) == crf.Held {
			return false
		}
	}
	n.stats.ForwardedFromPeer++
	return true
}

// CREM takes a CREM message received on the CREM port from from.
func (n *Node) CREM(now time.Duration, from netip.AddrPort, b []byte, ce bool) {
	n.at = now
	if len(b) < wire.HeaderLen || b[0]>>4 != wire.Version {
		n.stats.CREMDiscarded++
		return
	}
	t := wire.Type(b[0] & 0x0f)
	id := binary.BigEndian.Uint32(b[4:8])
	switch t {
	case wire.TypeHello, wire.TypeParamUpdate, wire.TypeRepair:
		n.recv.Handle(now, from, b, ce)
	case wire.TypeHelloAck:
		nonce, ok := wire.PeekHelloAckNonce(b)
		if !ok {
			n.stats.CREMMalformed++
			return
		}
		if s := n.byNonce[nonce]; s != nil {
			s.s.Handle(now, from, b) // the CSF parses it, once
		} else {
			n.stats.CREMUnknownFlow++
		}
	case wire.TypeParamAck, wire.TypeLossReport, wire.TypeRepairRequest:
		if s := n.byFlowID[id]; s != nil {
			s.s.Handle(now, from, b)
		} else {
			n.stats.CREMUnknownFlow++
		}
	case wire.TypeClose:
		// Either side may close (C2); a CLOSE goes to both halves that know the Flow ID.
		known := false
		if s := n.byFlowID[id]; s != nil {
			s.s.Handle(now, from, b)
			known = true
		}
		if _, ok := n.recv.FlowStats(id); ok {
			n.recv.Handle(now, from, b, ce)
			known = true
		}
		if !known {
			n.stats.CREMUnknownFlow++
		}
	case wire.TypePathReport:
		name, ok := wire.PeekPathReportFlow(b)
		if !ok {
			n.stats.CREMMalformed++
			n.stats.PathReportsMalformed++
			return
		}
		if s := n.senders[n.reportKey(name)]; s != nil {
			s.s.Handle(now, from, b) // C14 and the rest: the CSF's to judge and count
		} else {
			n.stats.CREMUnknownFlow++
			n.stats.PathReportsUnknownFlow++
		}
	default:
		n.stats.CREMDiscarded++
	}
}

// reportKey is the outbound flow a PATH_REPORT names. A report names a flow by the addresses
// a node on the path sees (draft, Path Reports). In tun mode, and in relay mode where the path
// carries the logical addresses, those are the flow's own. Between two relay-mode gateways the
// path carries the datagrams from this gateway's WAN socket (relay.wan_listen) to the peer's
// data address (relay.peer_data), whatever the endpoints' logical addresses (local_endpoint,
// remote_endpoint) are. A report whose Source is this gateway's WAN address (any Destination:
// a proxy or a NAT on the path may show the peer under another address than peer_data), or
// whose Destination is the peer_data address (any Source: a WAN socket bound to the
// unspecified address), names the flow from the local to the remote endpoint with the report's
// destination QP. Every outbound flow of a relay-mode gateway runs between those two endpoints
// and the flows differ by their destination QP alone, so the mapping is one to one. The
// logical addresses are tried first: where they equal the WAN ones nothing changes.
func (n *Node) reportKey(pr wire.FlowName) flow.Key {
	k := flow.Key{Src: pr.Source.Unmap(), Dst: pr.Destination.Unmap(), DestQP: pr.FlowLabel & 0xffffff}
	if n.cfg.mode != ModeRelay {
		return k
	}
	if _, ok := n.senders[k]; ok {
		return k
	}
	if src, dst := n.wanReportAddrs(); !src.IsUnspecified() && k.Src == src || k.Dst == dst {
		k.Src, k.Dst = n.cfg.localEP, n.cfg.remoteEP
	}
	return k
}

// wanReportAddrs are the addresses a relay-mode gateway's relayed datagrams cross the path
// with: from its WAN socket to the peer's data address.
func (n *Node) wanReportAddrs() (src, dst netip.Addr) {
	return n.cfg.wanListen.Addr().Unmap(), n.cfg.peerData.Addr().Unmap()
}

// senderEvent keeps the routes to a CSF as it reports them: the nonce of its latest HELLO,
// the Flow ID the peer assigned, whether a configuration is in force.
func (n *Node) senderEvent(s *sender, e csf.Event) {
	switch e.Kind {
	case csf.EventNonceSent:
		n.setNonce(s, e.Nonce)
	case csf.EventFlowAssigned:
		n.dropFlowID(s)
		s.flowID = e.FlowID
		n.byFlowID[e.FlowID] = s
		if n.routes != nil {
			n.routes.senderFlowID(e.FlowID, true)
		}
	case csf.EventFlowReleased:
		if s.flowID == e.FlowID {
			n.dropFlowID(s)
		}
		s.inForce = false
	case csf.EventConfigInForce:
		s.inForce = true
	}
}

// dropFlowID takes a CSF's Flow ID out of the routes.
func (n *Node) dropFlowID(s *sender) {
	if s.flowID == 0 {
		return
	}
	if n.byFlowID[s.flowID] == s {
		delete(n.byFlowID, s.flowID)
		if n.routes != nil {
			n.routes.senderFlowID(s.flowID, false)
		}
	}
	s.flowID = 0
}

// rxRoute is a Flow ID of the node's CRF in the routes: serving a session or flow, or released
// at a time.
type rxRoute struct {
	released bool
	at       time.Duration
}

// receiverEvent keeps the routes to the CRF as it reports them.
func (n *Node) receiverEvent(e crf.Event) {
	if n.routes == nil {
		return
	}
	switch e.Kind {
	case crf.EventFlowAssigned:
		n.routeReceiver(e.FlowID)
	case crf.EventFlowReleased:
		if _, ok := n.rxRoutes[e.FlowID]; ok {
			n.rxRoutes[e.FlowID] = rxRoute{released: true, at: n.at}
		}
	}
}

// senderFor returns the CSF of an outbound flow, created (and started) on its first source
// packet when a protect rule covers it; nil when none does.
func (n *Node) senderFor(now time.Duration, k flow.Key, srcPort uint16) *sender {
	c := n.cfg
	qp := k.DestQP
	s, known := n.senders[k]
	if known && s == nil {
		return nil // refused before: no rule, or the CSF could not be built (logged once)
	}
	if s != nil {
		if s.s.State() == csf.StateClosed {
			s.s.Start(now) // protected anew after a CLOSE (a new HELLO, nonce and Flow ID)
			n.stats.FlowsStarted++
		}
		return s
	}
	var ru *rule
	for i := range c.rules {
		if c.rules[i].match(k.Src, k.Dst, srcPort, qp) {
			ru = &c.rules[i]
			break
		}
	}
	if ru == nil {
		if len(n.senders) < 1<<16 {
			n.senders[k] = nil
		}
		return nil
	}
	if len(n.list) >= maxSenders && !n.evictSender(now) {
		n.stats.FlowsRefusedFull++
		return nil
	}
	d := flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: k.Src, Dst: k.Dst, DestQP: qp, SrcPort: srcPort}
	s = &sender{key: k, desc: d, rule: *ru, lastSeen: now}
	opts := c.csfOptions(d, *ru, n.rng.Uint64, n.log.With("src", k.Src, "dst", k.Dst, "qp", qp))
	cs, err := csf.New(append(opts, csf.WithEvents(func(e csf.Event) { n.senderEvent(s, e) }))...)
	if err != nil {
		n.log.Error("cannot protect flow", "src", k.Src, "dst", k.Dst, "qp", qp, "err", err)
		n.senders[k] = nil
		return nil
	}
	s.s = cs
	n.senders[k] = s
	n.list = append(n.list, s)
	if ru.reverseQP != 0 {
		// The operator's word: pinned, never unpaired by what passes back.
		n.pair.Configure(k, ru.reverseQP)
		n.applyPairings()
		n.stats.SenderReverseQPSet++
	} else if qp, ok := n.pair.ReverseQP(k); ok {
		n.setReverseQP(s, qp) // learned before the flow's first source (CM)
	}
	cs.Start(now)
	n.stats.FlowsStarted++
	n.log.Info("protecting flow", "src", k.Src, "dst", k.Dst, "qp", qp, "src_port", srcPort, "peer", c.peer)
	return s
}

// Tick runs every timer that is due at now: the engines' and the pairing tables' expiry.
func (n *Node) Tick(now time.Duration) {
	if d, ok := n.recv.NextDeadline(); ok && d <= now {
		n.recv.Tick(now)
	}
	for _, s := range n.list {
		if d, ok := s.s.NextDeadline(); ok && d <= now {
			s.s.Tick(now)
		}
	}
	if d, ok := n.pair.NextDeadline(); ok && d <= now {
		n.pair.Expire(now)
		n.applyPairings()
	}
	n.at = now
	if n.sweepAt <= now && n.hasTables() {
		n.sweep(now)
	}
}

// NextDeadline returns when Tick should next be called, if ever.
func (n *Node) NextDeadline() (time.Duration, bool) {
	var next time.Duration
	has := false
	consider := func(d time.Duration, ok bool) {
		if ok && (!has || d < next) {
			next, has = d, true
		}
	}
	consider(n.recv.NextDeadline())
	for _, s := range n.list {
		consider(s.s.NextDeadline())
	}
	consider(n.pair.NextDeadline())
	consider(n.sweepAt, n.hasTables())
	return next, has
}

// DatagramKind says where a Datagram goes.
type DatagramKind uint8

// Where Drain's datagrams go.
const (
	// ToCREM: a CREM message for Datagram.To (the peer's CREM address, or the sender of the
	// message it answers), sent from this gateway's CREM port.
	ToCREM DatagramKind = iota
	// ToEndpoint: a RoCEv2 datagram (BTH to ICRC) the CRF released or restored, for this
	// side's endpoint at Datagram.To (relay mode: relay.target).
	ToEndpoint
	// ToTun: a whole IPv4 packet the CRF released or restored under its flow's header
	// template, to be sent on (tun mode).
	ToTun
)

// Datagram is one datagram a Node wants sent. Payload is valid only during the call to Drain's
// function; copy what is kept.
type Datagram struct {
	Kind    DatagramKind
	To      netip.AddrPort // ToCREM and ToEndpoint
	Payload []byte
	// Flow and PSN name a ToEndpoint or ToTun packet: the CRF's Flow ID and the packet's PSN.
	Flow uint32
	PSN  uint32
	// Restored: a ToEndpoint or ToTun packet the CRF rebuilt from repair.
	Restored bool
}

// Drain hands out every datagram the engines want sent, in this order: the CSFs' CREM
// messages, the CRF's CREM messages, then the packets the CRF releases or restores.
func (n *Node) Drain(out func(Datagram)) {
	for _, s := range n.list {
		s.s.Drain(func(d flow.Datagram) {
			out(Datagram{Kind: ToCREM, To: d.To, Payload: d.Payload})
		})
	}
	n.recv.Drain(func(d flow.Datagram) {
		out(Datagram{Kind: ToCREM, To: d.To, Payload: d.Payload})
	})
	n.recv.DrainDeliveries(func(d crf.Delivery) {
		switch d.Kind {
		case crf.Abandoned:
			n.stats.Abandoned++
			return
		case crf.Restored:
			n.stats.RestoredDelivered++
		}
		n.stats.DeliveredFromCRF++
		dg := Datagram{Kind: ToEndpoint, To: n.cfg.target, Payload: d.Packet, Flow: d.Flow, PSN: uint32(d.PSN),
			Restored: d.Kind == crf.Restored}
		if n.cfg.mode == ModeTun {
			ip, udp, err := n.recv.Template(d.Flow, d.PSN, len(d.Packet))
			if err != nil {
				n.stats.TemplateErrors++
				return
			}
			n.scratch = append(append(append(n.scratch[:0], ip...), udp...), d.Packet...)
			dg.Kind, dg.To, dg.Payload = ToTun, netip.AddrPort{}, n.scratch
		}
		out(dg)
	})
}

// CloseAll ends every CSF session and every CRF flow with CLOSE reason 0 (normal end); Drain
// then hands out the CLOSE messages.
func (n *Node) CloseAll(now time.Duration) {
	for _, s := range n.list {
		if st := s.s.State(); st != csf.StateClosed && st != csf.StateIdle {
			s.s.Close(now, wire.ReasonNormal)
		}
	}
	for _, id := range n.recv.Flows() {
		n.recv.Close(now, id, wire.ReasonNormal)
	}
}

// Counters returns the node's own counters.
func (n *Node) Counters() NodeStats { return n.stats }

// Pairing returns the reverse-QP learner's counters.
func (n *Node) Pairing() pairing.Stats { return n.pair.Stats() }

// Sender returns the CSF of an outbound flow, or nil.
func (n *Node) Sender(k flow.Key) *csf.Sender {
	if s := n.senders[k]; s != nil {
		return s.s
	}
	return nil
}

// Receiver returns the node's CRF.
func (n *Node) Receiver() *crf.Receiver { return n.recv }

// Flows returns the outbound flows that have a CSF, in the order they started.
func (n *Node) Flows() []flow.Key {
	out := make([]flow.Key, 0, len(n.list))
	for _, s := range n.list {
		out = append(out, s.key)
	}
	return out
}

// ReverseQP returns the reverse QP the node pairs with an outbound flow, if it knows one: the
// rule's reverse_qp, or one learned (CM, or PSN correlation confirmed).
func (n *Node) ReverseQP(k flow.Key) (uint32, bool) { return n.pair.ReverseQP(k) }

// Stats returns every counter of the node: its own (Gateway, by the names of the gateway's
// metrics), its CSFs' summed, its CRF's, and the pairing's.
func (n *Node) Stats() Stats {
	st := Stats{Gateway: map[string]uint64{}}
	var ns NodeStats
	n.addStats(&st, &ns)
	ns.addTo(st.Gateway)
	return st
}

// addStats adds the node's engines' counters into st and its own into ns.
func (n *Node) addStats(st *Stats, ns *NodeStats) {
	addCounters(&st.Sender, &n.gone)
	for _, s := range n.list {
		cs := s.s.Stats()
		addCounters(&st.Sender, &cs)
	}
	st.Flows += len(n.list)
	rs, ps := n.recv.Stats(), n.pair.Stats()
	addCounters(&st.Receiver, &rs)
	addCounters(&st.Pairing, &ps)
	addCounters(ns, &n.stats)
}

// addTo adds the counters into m under the gateway's metric names.
func (ns *NodeStats) addTo(m map[string]uint64) {
	for k, v := range map[string]uint64{
		"packets_protected": ns.PacketsProtected, "packets_unprotected": ns.PacketsUnprotected,
		"forwarded_from_peer": ns.ForwardedFromPeer, "delivered_from_crf": ns.DeliveredFromCRF,
		"restored_delivered": ns.RestoredDelivered, "abandoned": ns.Abandoned,
		"hello_refused_no_src_port": ns.HelloRefusedNoPort, "flows_started": ns.FlowsStarted,
		"path_reports_intercepted": ns.PathReportsTaken, "path_reports_passed": ns.PathReportsPassed, "template_errors": ns.TemplateErrors,
		"path_reports_malformed": ns.PathReportsMalformed, "path_reports_unknown_flow": ns.PathReportsUnknownFlow,
		"crem_discarded": ns.CREMDiscarded, "crem_malformed": ns.CREMMalformed, "crem_unknown_flow": ns.CREMUnknownFlow,
		"reverse_to_sender": ns.ReverseToSender, "reverse_to_none": ns.ReverseToNone,
		"sender_reverse_qp_set": ns.SenderReverseQPSet, "sender_reverse_qp_cleared": ns.SenderReverseQPCleared,
		"pairing_events":    ns.PairingEventsLogged,
		"reads_asked_again": ns.ReadsAskedAgain, "reads_again_unpaired": ns.ReadsAgainUnpaired,
		"routes_expired": ns.RoutesExpired, "senders_quiet": ns.SendersQuiet, "senders_expired": ns.SendersExpired,
		"flows_refused_table_full": ns.FlowsRefusedFull,
	} {
		m[k] += v
	}
}

// setReverseQP gives a CSF the reverse QP learned for its flow.
func (n *Node) setReverseQP(s *sender, qp uint32) {
	if cur, ok := s.s.ReverseQP(); ok && cur == qp {
		return
	}
	s.s.SetReverseQP(qp)
	n.stats.SenderReverseQPSet++
}

// setNonce routes the nonce of a CSF's latest HELLO to it, and no longer its previous one: a
// CSF has one nonce routed at a time, the table is as large as the table of CSFs.
func (n *Node) setNonce(s *sender, nonce uint64) {
	if s.hasNonce && s.nonce == nonce {
		return
	}
	n.dropNonce(s)
	s.nonce, s.hasNonce = nonce, true
	n.byNonce[nonce] = s
	if n.routes != nil {
		n.routes.helloNonce(nonce, true)
	}
}

func (n *Node) dropNonce(s *sender) {
	if !s.hasNonce {
		return
	}
	s.hasNonce = false
	if n.byNonce[s.nonce] == s {
		delete(n.byNonce, s.nonce)
		if n.routes != nil {
			n.routes.helloNonce(s.nonce, false)
		}
	}
}

// routeReceiver enters a Flow ID the CRF assigned (EventFlowAssigned) in the routes; at the bound it
// first takes out every Flow ID with no flow behind it.
func (n *Node) routeReceiver(id uint32) {
	if _, ok := n.rxRoutes[id]; !ok && len(n.rxRoutes) >= maxRxRoutes {
		n.sweepRoutes(n.at, true)
	}
	n.rxRoutes[id] = rxRoute{at: n.at}
	n.routes.receiverFlowID(id, true)
}

func (n *Node) hasTables() bool { return len(n.list) > 0 || len(n.rxRoutes) > 0 }

// sweep takes out of the tables what has expired.
func (n *Node) sweep(now time.Duration) {
	n.sweepAt = now + sweepEvery
	n.sweepRoutes(now, false)
	n.sweepSenders(now)
}

// sweepRoutes takes out the Flow IDs whose flow the CRF no longer serves: released (CLOSE,
// idle, a new session) for routeGrace, or at once with force.
func (n *Node) sweepRoutes(now time.Duration, force bool) {
	for id, rt := range n.rxRoutes {
		if !rt.released {
			continue
		}
		if force || now-rt.at >= routeGrace {
			delete(n.rxRoutes, id)
			n.routes.receiverFlowID(id, false)
			n.stats.RoutesExpired++
		}
	}
}

func (n *Node) quietAfter() time.Duration { return max(n.cfg.idle, minQuiet) }

// sweepSenders stops the CSFs of quiet flows from asking for a session, and removes those
// closed and quiet for long.
func (n *Node) sweepSenders(now time.Duration) {
	quiet := n.quietAfter()
	kept := n.list[:0]
	for _, s := range n.list {
		switch st := s.s.State(); {
		case st == csf.StateClosed || st == csf.StateIdle:
			if now-s.lastSeen >= lingerPerQuiet*quiet {
				n.removeSender(s)
				continue
			}
		case st != csf.StateEstablished && now-s.lastSeen >= quiet:
			// HELLO every hold-off for a flow that sends nothing protects nothing; its next
			// source starts a session again. (An established session closes itself, C15.)
			s.s.Close(now, wire.ReasonIdle)
			n.stats.SendersQuiet++
		}
		kept = append(kept, s)
	}
	clear(n.list[len(kept):])
	n.list = kept
}

// evictSender makes room in a full table of CSFs: the closed one quiet longest goes.
func (n *Node) evictSender(now time.Duration) bool {
	at := -1
	for i, s := range n.list {
		if st := s.s.State(); (st == csf.StateClosed || st == csf.StateIdle) && (at < 0 || s.lastSeen < n.list[at].lastSeen) {
			at = i
		}
	}
	if at < 0 {
		return false
	}
	n.removeSender(n.list[at])
	n.list = append(n.list[:at], n.list[at+1:]...)
	return true
}

// removeSender forgets a CSF (the caller takes it off n.list), keeping its counters.
func (n *Node) removeSender(s *sender) {
	addCounters(&n.gone, ptr(s.s.Stats()))
	n.dropNonce(s)
	n.dropFlowID(s)
	delete(n.senders, s.key)
	n.stats.SendersExpired++
}

func ptr[T any](v T) *T { return &v }

// unspecified is the unspecified address of a's family.
func unspecified(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.IPv4Unspecified()
	}
	return netip.IPv6Unspecified()
}

// ruleFor is the policy rule of a flow under a protect rule: the configured one, except that a
// flow delivered in order (go-back-N receivers, C7 a) keeps the draft's rule. The cost rule prices
// a block that needs a coded retransmission at one round; behind an ordering CRF that round
// stalls the whole flow, and a block it does not restore in time turns into go-back-N's resend of
// everything after it, which the model does not price (protocol notes P13).
func ruleFor(configured policy.Rule, ordered bool) policy.Rule {
	if ordered {
		return policy.RuleDraft
	}
	return configured
}
