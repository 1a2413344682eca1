package gateway

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/wire"
)

// shard drives the engines of the flows whose address pair hashes to it. Only its goroutine
// touches them, under mu (which the metrics collector and the shutdown take too).
type shard struct {
	g   *Gateway
	idx int
	in  chan *pkt

	mu        sync.Mutex
	recv      *crf.Receiver
	senders   map[flow.Key]*sender
	list      []*sender
	byFlowID  map[uint32]*sender
	byNonce   map[uint64]*sender
	rng       *rand.Rand
	out       [3]outq
	addrs     map[netip.AddrPort]*net.UDPAddr
	next      time.Duration
	hasNext   bool
	batch     []*pkt
	cremBatch []*pkt
	// byReverseQP finds the CSFs whose rule names the QP their ACKs go to; anyReverse holds
	// the others, which see every packet passing back between their endpoints (G5).
	byReverseQP map[uint32][]*sender
	anyReverse  []*sender
	limits      flow.Limits
}

// sender is one protected flow leaving toward the peer.
type sender struct {
	s      *csf.Sender
	key    flow.Key
	desc   flow.Descriptor
	rule   rule
	flowID uint32
}

// outq is a batch of datagrams waiting for one socket.
type outq struct {
	msgs []message
	pkts []*pkt
}

func newShard(g *Gateway, idx int) (*shard, error) {
	sh := &shard{g: g, idx: idx, in: make(chan *pkt, 8192), senders: map[flow.Key]*sender{},
		byFlowID: map[uint32]*sender{}, byNonce: map[uint64]*sender{}, byReverseQP: map[uint32][]*sender{}, addrs: map[netip.AddrPort]*net.UDPAddr{},
		rng: rand.New(rand.NewPCG(g.seed, uint64(idx)+1))}
	c := g.cfg
	sh.limits = flow.DefaultLimits()
	sh.limits.MaxK, sh.limits.MaxM, sh.limits.MaxOpenBlocks = c.maxK, c.maxM, c.maxOpen
	sh.limits.MaxT = max(sh.limits.MaxT, c.mtu+128)
	rr := rand.New(rand.NewPCG(g.seed, uint64(idx)+1<<32))
	recv, err := crf.New(crf.WithRandom(rr.Uint64), crf.WithLimits(sh.limits), crf.WithInitialRTT(c.initialRTT),
		crf.WithSettings(sh.settings))
	if err != nil {
		return nil, fmt.Errorf("gateway: receiver function: %w", err)
	}
	sh.recv = recv
	return sh, nil
}

// settings chooses a new inbound flow's local settings when its HELLO arrives.
func (sh *shard) settings(d flow.Descriptor) (crf.Settings, bool) {
	c := sh.g.cfg
	for _, r := range c.rules {
		if !r.match(d.Src, d.Dst, 0, d.DestQP) {
			continue
		}
		s := crf.Settings{Ordered: r.ordered, Reorder: c.reorder, Idle: c.idle, SrcPort: r.srcPort}
		if c.mode == "tun" && !c.tunLogical {
			s.Verify = crf.VerifyTemplate
		} else if r.srcPort == 0 {
			// Relay mode checks restored packets under the logical header (C12), whose UDP
			// source port only the configuration can tell the receiving side.
			sh.g.c.helloRefusedNoPort.Add(1)
			sh.g.log.Warn("HELLO refused: checking restored packets under the logical header needs the flow's src_port in a protect rule", "src", d.Src, "dst", d.Dst, "qp", d.DestQP)
			return crf.Settings{}, false
		}
		return s, true
	}
	return crf.Settings{}, false
}

func isSource(op byte) bool { return op != 0x11 && op != 0x12 && op != 0x81 }

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
		if len(b) >= 12 && isSource(b[0]) {
			qp := uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7])
			if s := sh.senderFor(now, qp, p.from.Port()); s != nil {
				s.s.Observe(now, b)
				if _, ok := s.s.Config(); ok {
					g.c.protectedPackets.Add(1)
				} else {
					g.c.unprotectedPackets.Add(1)
				}
			} else {
				g.c.unprotectedPackets.Add(1)
			}
		}
		sh.queue(kindWAN, g.cfg.peerData, p)
	case kindWAN:
		if len(b) >= 12 {
			qp := uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7])
			sh.reverse(now, qp, g.cfg.localEP, g.cfg.remoteEP, b)
			if id, ok := sh.recv.Lookup(flow.Key{Src: g.cfg.remoteEP, Dst: g.cfg.localEP, DestQP: qp}); ok {
				if sh.recv.Observe(now, id, b, p.ce) == crf.Held {
					g.putPkt(p)
					return
				}
			}
		}
		g.c.forwardedFromPeer.Add(1)
		sh.queue(kindLocal, g.cfg.target, p)
	case kindCREM:
		sh.handleCREM(now, p)
		g.putPkt(p)
	case kindTun:
		sh.handleTun(now, p)
		g.putPkt(p)
	}
}

func (sh *shard) handleCREM(now time.Duration, p *pkt) {
	b := p.data()
	t := wire.Type(b[0] & 0x0f)
	id := binary.BigEndian.Uint32(b[4:8])
	switch t {
	case wire.TypeHello, wire.TypeParamUpdate, wire.TypeRepair:
		sh.recv.Handle(now, p.from, b, p.ce)
	case wire.TypeHelloAck:
		h, err := wire.ParseHelloAck(b)
		if err != nil {
			sh.g.c.cremMalformed.Add(1)
			return
		}
		if s := sh.byNonce[h.SenderNonce]; s != nil {
			s.s.Handle(now, p.from, b)
			sh.learnFlowID(s)
		} else {
			sh.g.c.cremUnknownFlw.Add(1)
		}
	case wire.TypeParamAck, wire.TypeLossReport, wire.TypeRepairRequest:
		if s := sh.byFlowID[id]; s != nil {
			s.s.Handle(now, p.from, b)
			sh.learnFlowID(s)
		} else {
			sh.g.c.cremUnknownFlw.Add(1)
		}
	case wire.TypeClose:
		if s := sh.byFlowID[id]; s != nil {
			s.s.Handle(now, p.from, b)
			sh.learnFlowID(s)
		}
		if _, ok := sh.g.route.get32(&sh.g.route.crf, id); ok {
			sh.recv.Handle(now, p.from, b, p.ce)
		}
	case wire.TypePathReport:
		pr, err := wire.ParsePathReport(b)
		if err != nil {
			sh.g.c.cremMalformed.Add(1)
			return
		}
		k := flow.Key{Src: pr.Source.Unmap(), Dst: pr.Destination.Unmap(), DestQP: pr.FlowLabel & 0xffffff}
		if s := sh.senders[k]; s != nil {
			s.s.Handle(now, p.from, b)
		} else {
			sh.g.c.cremUnknownFlw.Add(1)
		}
	}
}

// learnFlowID records the Flow ID the peer assigned to a sender.
func (sh *shard) learnFlowID(s *sender) {
	id := s.s.FlowID()
	if id == s.flowID {
		return
	}
	if s.flowID != 0 {
		delete(sh.byFlowID, s.flowID)
		sh.g.route.del32(&sh.g.route.csf, s.flowID)
	}
	s.flowID = id
	if id != 0 {
		sh.byFlowID[id] = s
		sh.g.route.set32(&sh.g.route.csf, id, sh.idx)
	}
}

// senderFor returns the CSF of an outbound flow, created (and started) on its first source
// packet when a protect rule covers it; nil when none does.
func (sh *shard) senderFor(now time.Duration, qp uint32, srcPort uint16) *sender {
	c := sh.g.cfg
	return sh.senderForKey(now, flow.Key{Src: c.localEP, Dst: c.remoteEP, DestQP: qp}, srcPort)
}

func (sh *shard) senderForKey(now time.Duration, k flow.Key, srcPort uint16) *sender {
	c := sh.g.cfg
	qp := k.DestQP
	s, known := sh.senders[k]
	if known && s == nil {
		return nil // refused before: no rule, or the CSF could not be built (logged once)
	}
	if s != nil {
		if s.s.State() == csf.StateClosed {
			s.s.Start(now) // protected anew after a CLOSE (a new HELLO, nonce and Flow ID)
			sh.g.c.flowsStarted.Add(1)
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
		if len(sh.senders) < 1<<16 {
			sh.senders[k] = nil
		}
		return nil
	}
	d := flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: k.Src, Dst: k.Dst, DestQP: qp, SrcPort: srcPort}
	opts := []csf.Option{csf.WithFlow(d), csf.WithCRF(c.peer), csf.WithRandom(sh.rng.Uint64),
		csf.WithConfig(wire.SchemeCauchy, c.k, c.m, 0), csf.WithRDMAMTU(c.mtu), csf.WithLimits(sh.limits),
		csf.WithInitialRTT(c.initialRTT), csf.WithHoldOff(c.holdOff), csf.WithIdleTimeout(c.idle),
		csf.WithAdaptation(c.adapt), csf.WithPolicy(c.epsilon, c.rho), csf.WithRepairFraction(c.repairFrac),
		csf.WithLogger(sh.g.log.With("src", k.Src, "dst", k.Dst, "qp", qp))}
	if len(c.reporters) > 0 {
		opts = append(opts, csf.WithReporters(c.reporters...))
	}
	if c.burstGap > 0 {
		opts = append(opts, csf.WithBurstGap(c.burstGap))
	}
	if ru.reverseQP != 0 {
		opts = append(opts, csf.WithReverseQP(ru.reverseQP))
	}
	cs, err := csf.New(opts...)
	if err != nil {
		sh.g.log.Error("cannot protect flow", "src", k.Src, "dst", k.Dst, "qp", qp, "err", err)
		sh.senders[k] = nil
		return nil
	}
	s = &sender{s: cs, key: k, desc: d, rule: *ru}
	sh.senders[k] = s
	sh.list = append(sh.list, s)
	if ru.reverseQP != 0 {
		sh.byReverseQP[ru.reverseQP] = append(sh.byReverseQP[ru.reverseQP], s)
	} else {
		sh.anyReverse = append(sh.anyReverse, s)
	}
	cs.Start(now)
	sh.g.c.flowsStarted.Add(1)
	sh.g.log.Info("protecting flow", "src", k.Src, "dst", k.Dst, "qp", qp, "src_port", srcPort, "peer", c.peer)
	return s
}

// after runs the due timers, drains the engines and sends what they want sent.
func (sh *shard) after(now time.Duration) {
	g := sh.g
	if d, ok := sh.recv.NextDeadline(); ok && d <= now {
		sh.recv.Tick(now)
	}
	for _, s := range sh.list {
		if d, ok := s.s.NextDeadline(); ok && d <= now {
			s.s.Tick(now)
			sh.learnFlowID(s)
		}
	}
	sh.drain()
	sh.flush()
	sh.hasNext = false
	consider := func(d time.Duration, ok bool) {
		if ok && (!sh.hasNext || d < sh.next) {
			sh.next, sh.hasNext = d, true
		}
	}
	consider(sh.recv.NextDeadline())
	for _, s := range sh.list {
		consider(s.s.NextDeadline())
	}
	_ = g
}

func (sh *shard) drain() {
	g := sh.g
	for _, s := range sh.list {
		s.s.Drain(func(d flow.Datagram) {
			if len(d.Payload) > 0 && wire.Type(d.Payload[0]&0x0f) == wire.TypeHello {
				if h, err := wire.ParseHello(d.Payload); err == nil {
					sh.byNonce[h.SenderNonce] = s
					g.route.setNonce(h.SenderNonce, sh.idx)
				}
			}
			sh.send(kindCREM, d.To, d.Payload)
		})
	}
	sh.recv.Drain(func(d flow.Datagram) {
		if len(d.Payload) >= wire.HeaderLen && wire.Type(d.Payload[0]&0x0f) == wire.TypeHelloAck {
			g.route.set32(&g.route.crf, binary.BigEndian.Uint32(d.Payload[4:8]), sh.idx)
		}
		sh.send(kindCREM, d.To, d.Payload)
	})
	sh.recv.DrainDeliveries(func(d crf.Delivery) {
		switch d.Kind {
		case crf.Abandoned:
			g.c.abandoned.Add(1)
			return
		case crf.Restored:
			g.c.restored.Add(1)
		}
		g.c.delivered.Add(1)
		sh.deliver(d)
	})
}

// deliver hands a packet the CRF released or restored to this side's endpoint.
func (sh *shard) deliver(d crf.Delivery) {
	if sh.g.tun != nil {
		sh.deliverTun(d)
		return
	}
	sh.send(kindLocal, sh.g.cfg.target, d.Packet)
}

// send queues a copy of b for the socket of kind.
func (sh *shard) send(kind int, to netip.AddrPort, b []byte) {
	if len(b) > bufSize {
		sh.g.c.writeErrors.Add(1)
		return
	}
	p := sh.g.getPkt()
	p.n = copy(p.buf, b)
	sh.queue(kind, to, p)
}

// queue puts p (owned from now on) on the out queue of kind.
func (sh *shard) queue(kind int, to netip.AddrPort, p *pkt) {
	ua := sh.addrs[to]
	if ua == nil {
		ua = net.UDPAddrFromAddrPort(to)
		if len(sh.addrs) > 4096 {
			clear(sh.addrs)
		}
		sh.addrs[to] = ua
	}
	q := &sh.out[kind]
	p.iov[0] = p.data()
	q.msgs = append(q.msgs, message{Buffers: p.iov[:], Addr: ua})
	q.pkts = append(q.pkts, p)
	if len(q.msgs) >= 64 {
		sh.flush()
	}
}

// flush sends every out queue, the relayed RoCEv2 datagrams before the CREM messages: a
// block's REPAIR must not overtake the block's last sources on the path (the CRF would
// decode, restore, and then see the original arrive late).
func (sh *shard) flush() {
	for _, k := range [...]int{kindWAN, kindLocal, kindCREM} {
		sh.flushOne(k)
	}
}

func (sh *shard) flushOne(kind int) {
	g := sh.g
	q := &sh.out[kind]
	if len(q.msgs) == 0 {
		return
	}
	s := g.sockOf(kind)
	if s == nil {
		g.c.writeErrors.Add(uint64(len(q.msgs)))
	} else {
		if g.pcap != nil {
			for i, m := range q.msgs {
				g.pcap.record(s.addr, m.Addr.(*net.UDPAddr).AddrPort(), q.pkts[i].data())
			}
		}
		ms := q.msgs
		for len(ms) > 0 {
			n, err := s.bc.WriteBatch(ms, 0)
			if err != nil || n <= 0 {
				g.c.writeErrors.Add(1)
				ms = ms[1:]
				continue
			}
			for _, m := range ms[:n] {
				g.c.tx[kind].Add(1)
				g.c.txBytes[kind].Add(uint64(len(m.Buffers[0])))
			}
			ms = ms[n:]
		}
	}
	for i, p := range q.pkts {
		p.iov[0] = nil
		g.putPkt(p)
		q.pkts[i] = nil
		q.msgs[i] = message{}
	}
	q.msgs, q.pkts = q.msgs[:0], q.pkts[:0]
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
	now := sh.g.now()
	for _, s := range sh.list {
		if st := s.s.State(); st != csf.StateClosed && st != csf.StateIdle {
			s.s.Close(now, wire.ReasonNormal)
		}
	}
	for _, id := range sh.recv.Flows() {
		sh.recv.Close(now, id, wire.ReasonNormal)
	}
	sh.drain()
	sh.flush()
}

// reverse offers an RDMA packet passing back toward this side (destination QP qp, from remote
// to local) to the CSFs of the flows it may acknowledge (C9).
func (sh *shard) reverse(now time.Duration, qp uint32, local, remote netip.Addr, b []byte) {
	for _, s := range sh.byReverseQP[qp] {
		if s.key.Src == local && s.key.Dst == remote {
			s.s.ObserveReverse(now, b)
		}
	}
	for _, s := range sh.anyReverse {
		if s.key.Src == local && s.key.Dst == remote {
			s.s.ObserveReverse(now, b)
		}
	}
}
