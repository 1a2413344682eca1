package soak

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/gateway"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// gw is one gateway of the run: the gateway's socket-free core (gateway.Node) in relay mode,
// configured as an operator would for these hosts (protect rules naming each flow's QP and UDP
// source port, ordered delivery for go-back-N QPs, and each flow's reverse QP where the
// scenario's routing says so), driven in virtual time (protocol notes K1).
type gw struct {
	w    *world
	side int
	node *gateway.Node

	dl    time.Duration // the node's next deadline, while not dirty
	hasDL bool
	dirty bool // the node took an input since its deadline was computed
}

// The gateway's policy, as its configuration's defaults (docs/gateway.md) unless the scenario
// says otherwise.
const (
	gwInitialRTT = 10 * time.Millisecond
	gwIdle       = 30 * time.Second
)

func newGW(w *world, side int) (*gw, error) {
	sc := w.sc
	adapt := true
	var rules []gateway.ProtectRule
	for _, p := range w.qps {
		ordered := p.spec.Mode == modeGBN
		for _, f := range p.flows {
			r := gateway.ProtectRule{Src: gateway.HostPrefix(f.key.Src), Dst: gateway.HostPrefix(f.key.Dst), SrcPort: f.srcPort,
				QP: f.key.DestQP, Ordered: &ordered}
			if sc.Routing == RouteConfigured {
				r.ReverseQP = f.reverseQP
			}
			rules = append(rules, r)
		}
	}
	c := gateway.Config{CREMAddress: cremAddr[side], DomainProtection: gateway.ProtectionBoundary, Peer: cremAddr[1-side],
		Protect: rules,
		Policy: gateway.PolicyConfig{K: gateway.Opt(sc.K), M: gateway.Opt(sc.M), Adapt: &adapt, MaxOpenBlocks: gateway.Opt(sc.MaxOpenBlocks), MaxK: gateway.Opt(sc.MaxK),
			MaxM: gateway.Opt(sc.MaxM), MTU: gateway.Opt(sc.MTU)},
		Relay: gateway.RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), WANListen: netip.MustParseAddrPort("127.0.0.1:0"),
			Target: netip.AddrPortFrom(hostAddr[side], roce.UDPPort), PeerData: netip.AddrPortFrom(hostAddr[1-side], roce.UDPPort)}}
	n, err := gateway.NewNode(c, gateway.NodeOptions{Seed: mix(sc.Seed, streamGatewayA), Index: side})
	if err != nil {
		return nil, fmt.Errorf("soak: gateway %c: %w", 'A'+side, err)
	}
	return &gw{w: w, side: side, node: n, dirty: true}, nil
}

// sender returns the CSF of flow f, nil before its first packet.
func (g *gw) sender(f *flowRec) *csf.Sender { return g.node.Sender(f.key) }

// fromLocal takes a RoCEv2 packet the local host sends toward the other: the node observes it,
// and it goes onto the path.
func (g *gw) fromLocal(now time.Duration, srcPort uint16, b []byte) {
	w := g.w
	var f *flowRec
	if len(b) >= roce.BTHLen && isSource(b[0]) {
		if f = w.flows[destQPOf(b)]; f != nil && f.dir == g.side {
			w.chk.observe(f, now, b)
		}
	}
	g.node.Local(now, srcPort, b)
	g.dirty = true
	if f != nil {
		w.chk.csfTouched(f)
	}
	w.toWAN(g.side, b, kindRoCE)
}

func isSource(op byte) bool { return op != 0x11 && op != 0x12 && op != 0x81 }

func destQPOf(b []byte) uint32 { return uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7]) }

// fromWAN takes a RoCEv2 packet from the path: the node offers it to the CSF it acknowledges and
// to the CRF of its flow, and it goes to the host unless the CRF holds it.
func (g *gw) fromWAN(now time.Duration, b []byte, ce bool) {
	w := g.w
	deliver := g.node.WAN(now, b, ce)
	g.dirty = true
	w.chk.reverseObserved(g.side, b)
	if deliver {
		w.toLocal(g.side, b)
	}
}

// fromWANCREM takes a CREM message from the other gateway.
func (g *gw) fromWANCREM(now time.Duration, b []byte, ce bool) {
	w := g.w
	if len(b) < wire.HeaderLen {
		return
	}
	t := wire.Type(b[0] & 0x0f)
	var f *flowRec
	var before csf.Stats
	var s *csf.Sender
	switch t {
	case wire.TypeParamAck, wire.TypeLossReport, wire.TypeRepairRequest:
		if f = w.chk.csfByID[g.side][binary.BigEndian.Uint32(b[4:8])]; f != nil {
			if s = g.sender(f); s != nil {
				before = s.Stats()
			}
		}
	}
	g.node.CREM(now, cremAddr[1-g.side], b, ce)
	g.dirty = true
	switch t {
	case wire.TypeHello, wire.TypeParamUpdate, wire.TypeRepair:
		w.chk.crfHandled(g.side, b)
	}
	if s != nil {
		w.chk.csfHandled(f, s, t, b, &before)
	}
	if f != nil {
		w.chk.csfTouched(f)
	}
}

// tick runs the node's timers when due.
func (g *gw) tick(now time.Duration) {
	if g.dirty || g.hasDL && g.dl <= now {
		g.node.Tick(now)
		g.dirty = true
		for _, f := range g.w.flist {
			if f.dir == g.side {
				g.w.chk.csfTouched(f)
			}
		}
	}
}

// drain sends what the node wants sent and delivers what its CRF releases.
func (g *gw) drain(now time.Duration) {
	if !g.dirty {
		return
	}
	w := g.w
	g.node.Drain(func(d gateway.Datagram) {
		switch d.Kind {
		case gateway.ToCREM:
			w.chk.cremOut(g.side, d.To, d.Payload)
			w.toWAN(g.side, d.Payload, kindCREM)
		case gateway.ToEndpoint:
			w.chk.crfDelivery(g.side, d)
			w.toLocal(g.side, d.Payload)
		}
	})
	g.dl, g.hasDL = g.node.NextDeadline()
	g.dirty = false
}

func (g *gw) nextDeadline() (time.Duration, bool) {
	if g.dirty {
		return g.w.now, true
	}
	return g.dl, g.hasDL
}
