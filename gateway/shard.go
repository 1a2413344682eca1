package gateway

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crem-project/crem/crf"
)

// shard drives one Node, the engines of the flows whose address pair hashes to it, with the
// sockets and the wall clock. Only its goroutine touches the node, under mu (which the metrics
// collector and the shutdown take too).
type shard struct {
	g   *Gateway
	idx int
	in  chan *pkt

	mu  sync.Mutex
	n   *Node
	out [3]outq
	w   *writer
	// The shard's own free buffers (shardcache.go).
	smallFree, largeFree pktCache
	next                 time.Duration
	hasNext              bool
	batch                []*pkt
	cremBatch            []*pkt

	// What the shard publishes for Stats and the metrics (snapshot.go).
	snap                   atomic.Pointer[snapshot]
	pubAt, pubLast         time.Duration
	dirty                  bool
	ranks                  []rank
	crfRates, crfRatesNext map[uint32]rates
	fp                     crf.Footprint
	fpAt                   time.Duration
}

// outq is a batch of datagrams waiting for one socket, each with its destination.
type outq struct {
	pkts []*pkt
	to   []netip.AddrPort
}

// outqFlush is how many datagrams an out queue holds before it is sent: enough for a few
// GSO runs of 4 KiB datagrams in one sendmmsg.
const outqFlush = 128

func newShard(g *Gateway, idx int) (*shard, error) {
	sh := &shard{g: g, idx: idx, in: make(chan *pkt, 8192), w: newWriter(),
		crfRates: map[uint32]rates{}, crfRatesNext: map[uint32]rates{}}
	n, err := newNode(g.cfg, g.log, g.seed, idx, shardRoutes{g, idx})
	if err != nil {
		return nil, err
	}
	sh.n = n
	sh.smallFree.pool, sh.largeFree.pool = g.small, g.large
	sh.publish(0)
	return sh, nil
}

// shardRoutes enters a node's Flow IDs and nonces in the gateway's router.
type shardRoutes struct {
	g   *Gateway
	idx int
}

func (r shardRoutes) senderFlowID(id uint32, add bool) {
	if add {
		r.g.route.set32(&r.g.route.csf, id, r.idx)
	} else {
		r.g.route.del32(&r.g.route.csf, id, r.idx)
	}
}

func (r shardRoutes) receiverFlowID(id uint32, add bool) {
	if add {
		r.g.route.set32(&r.g.route.crf, id, r.idx)
	} else {
		r.g.route.del32(&r.g.route.crf, id, r.idx)
	}
}

func (r shardRoutes) helloNonce(n uint64, add bool) {
	if add {
		r.g.route.setNonce(n, r.idx)
	} else {
		r.g.route.delNonce(n, r.idx)
	}
}

func (sh *shard) loop() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case p := <-sh.in:
			// A batch: datagrams from the sockets' readers, which run apart. The relayed
			// packets of the batch go to the engines before its CREM messages, so a REPAIR
			// read a moment before the block's last sources does not make the CRF restore a
			// packet that is already here.
			batch := append(sh.batch[:0], p)
		more:
			for range 255 {
				select {
				case p = <-sh.in:
					batch = append(batch, p)
				default:
					break more
				}
			}
			// Split before handling: a handled packet may already be back in the pool.
			crem := sh.cremBatch[:0]
			n := 0
			for _, p := range batch {
				if p.kind == kindCREM {
					crem = append(crem, p)
				} else {
					batch[n] = p
					n++
				}
			}
			sh.mu.Lock()
			now := sh.g.now()
			for _, p := range batch[:n] {
				sh.handle(now, p)
			}
			for _, p := range crem {
				sh.handle(now, p)
			}
			clear(batch)
			clear(crem)
			sh.cremBatch = crem[:0]
			sh.batch = batch[:0]
			sh.after(now)
			sh.mu.Unlock()
		case <-timer.C:
			sh.mu.Lock()
			sh.after(sh.g.now())
			sh.mu.Unlock()
		case <-sh.g.done:
			return
		}
		sh.mu.Lock()
		d, ok := sh.next, sh.hasNext
		if sh.dirty && (!ok || sh.pubAt < d) {
			d, ok = sh.pubAt, true // what happened gets published, even if nothing follows
		}
		sh.mu.Unlock()
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if ok {
			timer.Reset(max(d-sh.g.now(), 0))
		} else {
			timer.Reset(time.Hour)
		}
	}
}

// handle takes one received datagram; p goes back to the pool or onto an out queue.
func (sh *shard) handle(now time.Duration, p *pkt) {
	g := sh.g
	b := p.data()
	switch p.kind {
	case kindLocal:
		sh.n.Local(now, p.from.Port(), b)
		sh.queue(kindWAN, g.cfg.peerData, p)
	case kindWAN:
		if sh.n.WAN(now, b, p.ce) {
			sh.queue(kindLocal, g.cfg.target, p)
		} else {
			sh.putPkt(p)
		}
	case kindCREM:
		sh.n.CREM(now, p.from, b, p.ce)
		g.putPkt(p)
	case kindTun:
		sh.handleTun(now, p)
	}
}

// after runs the due timers, drains the node, sends what it wants sent, and publishes the
// node's counters when it is time.
func (sh *shard) after(now time.Duration) {
	sh.n.Tick(now)
	sh.drain()
	sh.flush()
	sh.next, sh.hasNext = sh.n.NextDeadline()
	sh.dirty = true
	if now >= sh.pubAt {
		sh.publish(now)
	}
}

func (sh *shard) drain() {
	sh.n.Drain(func(d Datagram) {
		switch d.Kind {
		case ToCREM:
			sh.send(kindCREM, d.To, d.Payload)
		case ToEndpoint:
			sh.send(kindLocal, d.To, d.Payload)
		case ToTun:
			sh.sendTun(d.Payload)
		}
	})
}

// send queues a copy of b for the socket of kind.
func (sh *shard) send(kind int, to netip.AddrPort, b []byte) {
	if len(b) > bufSize {
		sh.g.c.writeErrors.Add(1)
		return
	}
	p := sh.getPkt(len(b))
	p.n = copy(p.buf, b)
	sh.queue(kind, to, p)
}

// queue puts p (owned from now on) on the out queue of kind.
func (sh *shard) queue(kind int, to netip.AddrPort, p *pkt) {
	q := &sh.out[kind]
	q.pkts = append(q.pkts, p)
	q.to = append(q.to, to)
	if len(q.pkts) >= outqFlush {
		sh.flush()
	}
}

// flush sends every out queue, the relayed RoCEv2 datagrams before the CREM messages: a
// block's REPAIR must not overtake the block's last sources on the path (the CRF would
// decode, restore, and then see the original arrive late).
func (sh *shard) flush() {
	sh.flushTun()
	for _, k := range [...]int{kindWAN, kindLocal, kindCREM} {
		sh.flushOne(k)
	}
}

func (sh *shard) flushOne(kind int) {
	g := sh.g
	q := &sh.out[kind]
	if len(q.pkts) == 0 {
		return
	}
	if kind == kindCREM && g.xdp != nil {
		n := g.sendCREMXDP(sh.idx, q.pkts, q.to)
		clear(q.pkts[n:])
		q.pkts, q.to = q.pkts[:n], q.to[:n]
		if n == 0 {
			return
		}
	}
	s := g.sockOf(kind)
	if s == nil {
		g.c.writeErrors.Add(uint64(len(q.pkts)))
	} else {
		if g.pcap != nil {
			for i, p := range q.pkts {
				g.pcap.record(s.addr, q.to[i], p.data())
			}
		}
		out := sh.w.write(s, q.pkts, q.to)
		g.c.tx[kind].Add(uint64(out.datagrams))
		g.c.txBytes[kind].Add(uint64(out.octets))
		if out.errors > 0 {
			g.c.writeErrors.Add(uint64(out.errors))
		}
		if out.gsoOff {
			g.log.Warn("UDP GSO send failed with EIO (the device cannot checksum it): sending one datagram per message from now on", "socket", s.String())
		}
	}
	for i, p := range q.pkts {
		sh.putPkt(p)
		q.pkts[i] = nil
	}
	q.pkts, q.to = q.pkts[:0], q.to[:0]
}

func (g *Gateway) sockOf(kind int) *sock {
	switch kind {
	case kindCREM:
		return g.crem
	case kindLocal:
		return g.local
	default:
		return g.wan
	}
}

// closeAll ends every flow with CLOSE reason 0 and sends what follows (SIGTERM).
func (sh *shard) closeAll() {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.n.CloseAll(sh.g.now())
	sh.drain()
	sh.flush()
}
