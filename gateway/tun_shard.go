package gateway

import "time"

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
// sent on through the raw socket (tun mode).
func (sh *shard) sendTun(b []byte) {
	if len(b) > bufSize {
		sh.g.c.writeErrors.Add(1)
		return
	}
	p := sh.g.getPkt(len(b))
	p.n = copy(p.buf, b)
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
	sent, octets, failed := g.tun.sendBatch(q)
	g.c.writeErrors.Add(uint64(failed))
	g.c.tx[kindTun].Add(uint64(sent))
	g.c.txBytes[kindTun].Add(octets)
	for i, p := range q.pkts {
		g.putPkt(p)
		q.pkts[i] = nil
	}
	q.pkts = q.pkts[:0]
}
