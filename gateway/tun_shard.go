package gateway

import (
	"encoding/binary"
	"time"

	"github.com/crem-project/crem/internal/vnethdr"
)

// handleTun takes a packet read from the TUN device: the node keeps it, or it goes on (in p,
// no copy) with the shard's next batch.
func (sh *shard) handleTun(now time.Duration, p *pkt) {
	if sh.n.Tun(now, p.data(), p.ce) {
		sh.queueTun(p)
		return
	}
	sh.g.putPkt(p)
}

// sendTun queues a copy of one whole IPv4 packet (released or restored by the CRF) to be
// sent on (tun mode). Its headers are the flow's template, taken from another packet of the
// flow: a UDP checksum there is that packet's, so it is computed again (none, zero, stays
// none), or the receiving host would drop the packet.
func (sh *shard) sendTun(b []byte) {
	if len(b) > bufSize {
		sh.g.c.writeErrors.Add(1)
		return
	}
	p := sh.g.getPkt(len(b))
	p.n = copy(p.buf, b)
	if q := p.data(); len(q) >= 20 && q[0]>>4 == 4 {
		l4 := int(q[0]&0x0f) * 4
		// The IPv4 header's checksum too: the raw socket fills it in, the device (write =
		// device) drops a packet whose checksum is wrong.
		if l4 >= 20 && len(q) >= l4 {
			q[10], q[11] = 0, 0
			binary.BigEndian.PutUint16(q[10:], vnethdr.Checksum(q[:l4]))
		}
		if len(q) >= l4+8 && q[l4+6]|q[l4+7] != 0 {
			if c, ok := vnethdr.IPv4UDPChecksum(q); ok {
				binary.BigEndian.PutUint16(q[l4+6:], c)
			}
		}
	}
	sh.queueTun(p)
}

// queueTun puts p (owned from now on) on the shard's raw-socket queue, sent when it is full
// and at the end of the shard's round (flushTun).
func (sh *shard) queueTun(p *pkt) {
	g := sh.g
	if b := p.data(); len(b) < 20 || b[0]>>4 != 4 {
		g.c.writeErrors.Add(1)
		g.putPkt(p)
		return
	}
	q := g.tun.queue(sh.idx)
	q.pkts = append(q.pkts, p)
	if len(q.pkts) == tunBatch {
		sh.flushTun()
	}
}

// flushTun sends the shard's queued packets on, in one sendmmsg where the socket takes them.
func (sh *shard) flushTun() {
	g := sh.g
	if g.tun == nil {
		return
	}
	q := g.tun.out[sh.idx]
	if q == nil || len(q.pkts) == 0 {
		return
	}
	if g.pcap != nil {
		for _, p := range q.pkts {
			g.pcap.recordIP(p.data())
		}
	}
	var sent, failed int
	var octets uint64
	if g.xdp != nil {
		sent, octets, failed = g.sendXDP(sh.idx, q)
	} else {
		sent, octets, failed = g.tun.sendBatch(q)
	}
	g.c.writeErrors.Add(uint64(failed))
	g.c.tx[kindTun].Add(uint64(sent))
	g.c.txBytes[kindTun].Add(octets)
	for i, p := range q.pkts {
		g.putPkt(p)
		q.pkts[i] = nil
	}
	q.pkts = q.pkts[:0]
}
