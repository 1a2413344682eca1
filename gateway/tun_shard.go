package gateway

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// handleTun takes one IPv4 packet read from the TUN device. Packets toward this side's
// endpoints arrive from the peer (the CRF's half, and the ACKs the CSFs wait for); all others
// leave toward it (the CSF's half). Everything is sent on unchanged unless the CRF holds it.
func (sh *shard) handleTun(now time.Duration, p *pkt) {
	g := sh.g
	b := p.data()
	ihl := int(b[0]&0x0f) * 4
	src, dst := netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20]))
	inbound := false
	for _, pr := range g.cfg.tunLocal {
		if pr.Contains(dst) {
			inbound = true
			break
		}
	}
	frag := binary.BigEndian.Uint16(b[6:8])&0x3fff != 0
	if b[9] != 17 || frag || len(b) < ihl+8+12 || ihl < 20 {
		sh.sendTun(b)
		return
	}
	udp := b[ihl : ihl+8]
	sport, dport := binary.BigEndian.Uint16(udp[0:2]), binary.BigEndian.Uint16(udp[2:4])
	payload := b[ihl+8:]
	if int(binary.BigEndian.Uint16(udp[4:6])) <= len(payload)+8 {
		payload = payload[:binary.BigEndian.Uint16(udp[4:6])-8]
	}
	if inbound && dport == g.cfg.crem.Port() && len(payload) >= wire.HeaderLen && wire.Type(payload[0]&0x0f) == wire.TypePathReport {
		// C10: a PATH_REPORT addressed to a source this gateway serves is its CSF's.
		pr, err := wire.ParsePathReport(payload)
		if err == nil {
			k := flow.Key{Src: pr.Source.Unmap(), Dst: pr.Destination.Unmap(), DestQP: pr.FlowLabel & 0xffffff}
			if s := sh.senders[k]; s != nil {
				s.s.Handle(now, netip.AddrPortFrom(src, sport), payload)
				g.c.pathReportsIntercepted.Add(1)
				return
			}
		}
		sh.sendTun(b)
		return
	}
	if dport != roce.UDPPort {
		sh.sendTun(b)
		return
	}
	qp := uint32(payload[5])<<16 | uint32(payload[6])<<8 | uint32(payload[7])
	if !inbound {
		if isSource(payload[0]) {
			if s := sh.senderForKey(now, flow.Key{Src: src, Dst: dst, DestQP: qp}, sport); s != nil {
				s.s.Observe(now, payload)
				if _, ok := s.s.Config(); ok {
					g.c.protectedPackets.Add(1)
				} else {
					g.c.unprotectedPackets.Add(1)
				}
			} else {
				g.c.unprotectedPackets.Add(1)
			}
		}
		sh.sendTun(b)
		return
	}
	sh.reverse(now, qp, dst, src, payload)
	if id, ok := sh.recv.Lookup(flow.Key{Src: src, Dst: dst, DestQP: qp}); ok {
		if sh.recv.ObserveIP(now, id, b[:ihl], udp, payload, p.ce) == crf.Held {
			return
		}
	}
	g.c.forwardedFromPeer.Add(1)
	sh.sendTun(b)
}

// deliverTun injects a packet the CRF released or restored, under the flow's header template
// (C12).
func (sh *shard) deliverTun(d crf.Delivery) {
	ip, udp, err := sh.recv.Template(d.Flow, d.PSN, len(d.Packet))
	if err != nil {
		sh.g.c.templateErrors.Add(1)
		return
	}
	b := make([]byte, 0, len(ip)+len(udp)+len(d.Packet))
	b = append(append(append(b, ip...), udp...), d.Packet...)
	sh.sendTun(b)
}

func (sh *shard) sendTun(b []byte) {
	g := sh.g
	if g.pcap != nil {
		g.pcap.recordIP(b)
	}
	if err := g.tun.send(b); err != nil {
		g.c.writeErrors.Add(1)
		return
	}
	g.c.tx[kindTun].Add(1)
	g.c.txBytes[kindTun].Add(uint64(len(b)))
}
