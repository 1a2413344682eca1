package soak

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/rc"
	"github.com/crem-project/crem/roce"
)

// The hosts and the gateways' CREM endpoints (the CREM port is always explicit, C14).
var (
	hostAddr = [2]netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")}
	cremAddr = [2]netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:50000"), netip.MustParseAddrPort("192.0.2.2:50000")}
)

// Sides: host A and gateway A (the requesters), host B and gateway B (the responders).
const (
	sideA = 0
	sideB = 1
)

// world is one run: the two hosts' queue pairs, the two gateways, the path between them, the
// work and the checks (protocol notes K1).
type world struct {
	sc    *Scenario
	now   time.Duration
	last  time.Duration // the instant the latest step ran
	steps uint64

	qps   []*qpPair
	byQPN [2]map[uint32]*qpPair // each host's QPs by number
	flows map[uint32]*flowRec   // by destination QP: A->B flows by B's QPN, B->A flows by A's
	flist []*flowRec
	gw    [2]*gw
	wan   [2]wanDir // wan[s] carries gateway s's datagrams to the other

	phase      int
	phaseStart time.Duration
	phaseEnd   time.Duration // 0: the phase ends on its condition
	badStart   time.Duration
	badEnd     time.Duration
	haveBad    bool

	work   *workload
	chk    *checker
	reconf []time.Duration // forced configuration changes due in this phase, earliest first
	rrng   *rand.Rand
	forced uint64
	pool   bufPool

	events uint64
	err    error   // a fatal error: the run stops
	faults *faults // injected by the package's tests
}

// qpPair is one RC connection between the hosts.
type qpPair struct {
	idx   int
	spec  QPSpec
	a, b  *rc.QP
	flows [2]*flowRec // [0] A->B (requests), [1] B->A (READ responses)
	name  string

	dl    [2]time.Duration // cached QP deadlines
	hasDL [2]bool
	dirty [2]bool
}

// wanDir is one direction of the path between the gateways. Each phase gets a fresh link with
// its own impairments; the links of earlier phases deliver what they still carry.
type wanDir struct {
	cur  *netem.Link
	old  []*netem.Link
	loss *switchLoss
}

// packet kinds on the path (netem.Packet.ID).
const (
	kindRoCE = 0
	kindCREM = 1
)

func newWorld(sc *Scenario, ft *faults) (*world, error) {
	w := &world{sc: sc, flows: map[uint32]*flowRec{}, rrng: rand.New(rand.NewPCG(sc.Seed, streamReconfig)), faults: ft}
	w.byQPN = [2]map[uint32]*qpPair{{}, {}}
	for i, s := range sc.QPs {
		p := &qpPair{idx: i, spec: s, name: fmt.Sprintf("qp%d(%v)", i, s.Mode)}
		ca, cb := w.qpConfigs(&s)
		var err error
		if p.a, err = rc.NewQP(ca); err != nil {
			return nil, fmt.Errorf("soak: %s: requester: %w", p.name, err)
		}
		if p.b, err = rc.NewQP(cb); err != nil {
			return nil, fmt.Errorf("soak: %s: responder: %w", p.name, err)
		}
		w.byQPN[sideA][s.QPNA] = p
		w.byQPN[sideB][s.QPNB] = p
		for d := range 2 {
			f := newFlowRec(p, d)
			p.flows[d] = f
			w.flows[f.key.DestQP] = f
			w.flist = append(w.flist, f)
		}
		p.dirty = [2]bool{true, true}
		w.qps = append(w.qps, p)
	}
	w.chk = newChecker(w)
	for s := range 2 {
		g, err := newGW(w, s)
		if err != nil {
			return nil, err
		}
		w.gw[s] = g
		w.wan[s].loss = &switchLoss{}
	}
	w.work = newWorkload(w)
	w.enterPhase(0)
	if sc.Routing == RouteCM {
		w.connect()
	}
	return w, nil
}

// connect sends each QP's RDMA CM ConnectRequest from host A (a MAD to QP 1); host B answers
// each with its ConnectReply when it arrives (K1): the gateways may learn both directions'
// reverse QPs from them.
func (w *world) connect() {
	for i, p := range w.qps {
		req := roce.CMReq{LocalCommID: uint32(0x1000 + i), LocalQPN: p.spec.QPNA, StartingPSN: p.spec.SendPSN,
			TransportService: roce.CMTransportRC, PathMTU: mtuCode(w.sc.MTU)}
		mad, err := req.AppendMAD(nil, uint64(i+1))
		if err == nil {
			var pkt []byte
			if pkt, err = roce.AppendGSIPacket(nil, 0xffff, 0, mad); err == nil {
				w.gw[sideA].fromLocal(w.now, p.spec.PortA, pkt)
			}
		}
		if err != nil {
			w.fail(fmt.Errorf("soak: %s: CM REQ: %w", p.name, err))
			return
		}
	}
}

// cmAnswer is host B's CM agent: a ConnectRequest delivered to it gets its QP's ConnectReply.
func (w *world) cmAnswer(pkt []byte) {
	m, err := roce.ParseCM(pkt)
	if err != nil || m.Header.AttributeID != roce.CMAttrREQ {
		return
	}
	for _, p := range w.qps {
		if p.spec.QPNA != m.Req.LocalQPN {
			continue
		}
		rep := roce.CMRep{LocalCommID: 0x2000 + m.Req.LocalCommID, RemoteCommID: m.Req.LocalCommID,
			LocalQPN: p.spec.QPNB, StartingPSN: p.spec.BackPSN}
		mad, err := rep.AppendMAD(nil, m.Header.TransactionID)
		if err == nil {
			var b []byte
			if b, err = roce.AppendGSIPacket(nil, 0xffff, 0, mad); err == nil {
				w.gw[sideB].fromLocal(w.now, p.spec.PortB, b)
			}
		}
		if err != nil {
			w.fail(fmt.Errorf("soak: %s: CM REP: %w", p.name, err))
		}
		return
	}
}

// mtuCode is the IBTA code of an MTU (1: 256 ... 5: 4096).
func mtuCode(mtu int) uint8 {
	c := uint8(1)
	for m := 256; m < mtu; m *= 2 {
		c++
	}
	return c
}

// qpConfigs returns the two QPs' configurations (K2).
func (w *world) qpConfigs(s *QPSpec) (a, b rc.Config) {
	sc := w.sc
	window := min(int(sc.MaxOp/int64(sc.MTU))+64, psn.Modulus/4-1)
	base := rc.Config{MTU: sc.MTU, Mode: s.Mode, Rate: s.Rate, RTT: sc.RTT, SendBuffer: window,
		RecvWindow: 16384, MaxBuffered: 64 << 20, ReuseBuffers: true,
		// The bad minute loses 15 percent for longer than IBTA's seven retries can bridge on a
		// go-back-N QP; CREM leaves recovery to the transport there (C11 f), and the workload
		// checks CREM, not how a QP survives a minute of such loss (K2).
		RetryCount: 1 << 20}
	a, b = base, base
	a.QPN, a.RemoteQPN, b.QPN, b.RemoteQPN = s.QPNA, s.QPNB, s.QPNB, s.QPNA
	a.SendPSN, a.RecvPSN = s.SendPSN, s.BackPSN
	b.SendPSN, b.RecvPSN = s.BackPSN, s.SendPSN
	a.LocalAddr, a.RemoteAddr = hostAddr[sideA], hostAddr[sideB]
	b.LocalAddr, b.RemoteAddr = hostAddr[sideB], hostAddr[sideA]
	a.LocalPort, a.RemotePort, b.LocalPort, b.RemotePort = s.PortA, s.PortB, s.PortB, s.PortA
	b.NotifyWrites = true
	return a, b
}

// enterPhase switches the path to phase i.
func (w *world) enterPhase(i int) {
	w.phase, w.phaseStart = i, w.now
	p := &w.sc.Phases[i]
	w.phaseEnd = 0
	if p.Dur > 0 {
		w.phaseEnd = w.now + p.Dur
	}
	if p.Bad {
		w.badStart, w.haveBad = w.now, true
	}
	if i > 0 && w.sc.Phases[i-1].Bad {
		w.badEnd = w.now
	}
	for s := range 2 {
		d := &w.wan[s]
		seed := mix(w.sc.Seed, streamLink, uint64(i), uint64(s))
		var m netem.LossModel
		switch {
		case p.Loss > 0 && p.Burst > 1:
			m, _ = netem.NewGilbertBurst(p.Loss, p.Burst, seed)
		case p.Loss > 0:
			m, _ = netem.NewBernoulli(p.Loss, seed)
		}
		d.loss.m = m
		cfg := netem.Config{Delay: w.sc.RTT / 2, Jitter: p.Jitter, ReorderProb: p.ReorderProb,
			ReorderDelay: p.ReorderDelay, Seed: seed ^ 0x5eed, Loss: d.loss}
		l, err := netem.NewLink(cfg)
		if err != nil {
			w.fail(fmt.Errorf("soak: phase %s: link: %w", p.Name, err))
			return
		}
		if d.cur != nil {
			d.old = append(d.old, d.cur)
		}
		d.cur = l
	}
	w.reconf = w.reconf[:0]
	if p.Dur > 0 {
		for range p.Reconfigure {
			w.reconf = append(w.reconf, w.now+time.Duration(w.rrng.Int64N(int64(p.Dur))))
		}
		slices.Sort(w.reconf)
	}
	w.chk.enterPhase(i)
	w.work.enterPhase(i)
}

// reconfigure forces a configuration change on a random established flow: to m = 0 from m > 0,
// or from m = 0 to m > 0 (K3), through PARAM_UPDATE as any change (C6 b).
func (w *world) reconfigure() {
	var cands []*csf.Sender
	for _, f := range w.flist {
		if f.cs == nil {
			continue
		}
		if _, ok := f.cs.Config(); ok && f.cs.State() == csf.StateEstablished {
			cands = append(cands, f.cs)
		}
	}
	if len(cands) == 0 {
		return
	}
	s := cands[w.rrng.IntN(len(cands))]
	cfg, _ := s.Config()
	if cfg.M > 0 {
		cfg.M = 0
	} else {
		cfg.M = 1 + w.rrng.IntN(min(4, w.sc.MaxM))
	}
	if s.Reconfigure(w.now, cfg) == nil {
		w.forced++
		w.gw[0].dirty, w.gw[1].dirty = true, true
	}
}

// switchLoss is the loss model of every link: the current phase's, so that a packet sent on an
// old link's queue... never happens (a link takes packets only while current); it also lets the
// probes drop chosen packets.
type switchLoss struct {
	m netem.LossModel
}

func (l *switchLoss) Drop() bool {
	if l.m == nil {
		return false
	}
	return l.m.Drop()
}
func (l *switchLoss) MeanLoss() float64 {
	if l.m == nil {
		return 0
	}
	return l.m.MeanLoss()
}
func (l *switchLoss) String() string {
	if l.m == nil {
		return "none"
	}
	return l.m.String()
}

func (w *world) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// toWAN sends a datagram of gateway s onto the path; the path owns a copy.
func (w *world) toWAN(s int, pkt []byte, kind int) {
	w.events++
	drop := false
	var f *flowRec
	if kind == kindRoCE {
		f = w.chk.roceOut(s, pkt)
		if f != nil && f.probeArmed && w.chk.isFirstTransmission(f, pkt) {
			if f.probeSkip > 0 {
				f.probeSkip--
			} else {
				f.probeArmed, drop = false, true
				w.chk.probed(f, pkt)
			}
		}
	}
	if drop {
		w.chk.dropped(s, pkt, kind, f)
		return
	}
	b := w.pool.get(len(pkt))
	copy(b, pkt)
	v := w.wan[s].cur.Send(w.now, netem.Packet{Data: b, ID: uint64(kind), ECT: true})
	if v != netem.Queued {
		w.chk.dropped(s, b, kind, f)
		w.pool.put(b)
	}
}

// toLocal hands a packet that gateway s delivers to its host's QP.
func (w *world) toLocal(s int, pkt []byte) {
	w.events++
	if len(pkt) < roce.BTHLen {
		w.chk.failf("delivery", nil, "gateway %c delivered a packet of %d octets", 'A'+s, len(pkt))
		return
	}
	qpn := uint32(pkt[5])<<16 | uint32(pkt[6])<<8 | uint32(pkt[7])
	if qpn == roce.GSIQP {
		if s == sideB {
			w.cmAnswer(pkt)
		}
		return
	}
	p := w.byQPN[s][qpn]
	if p == nil {
		w.chk.failf("delivery", nil, "gateway %c delivered a packet for QP %#x, which host %c does not have", 'A'+s, qpn, 'A'+s)
		return
	}
	w.chk.deliveredToQP(s, p, pkt)
	q := p.qp(s)
	q.Handle(w.now, pkt)
	w.markQP(p, s)
}

func (p *qpPair) qp(s int) *rc.QP {
	if s == sideA {
		return p.a
	}
	return p.b
}

func (w *world) markQP(p *qpPair, s int) {
	p.dirty[s] = true
}

// flushQPs drains every QP that may have packets to send, through its gateway.
func (w *world) flushQPs() bool {
	any := false
	for _, p := range w.qps {
		for s := range 2 {
			if !p.dirty[s] {
				continue
			}
			q := p.qp(s)
			g := w.gw[s]
			port := p.spec.PortA
			if s == sideB {
				port = p.spec.PortB
			}
			q.Drain(func(pkt []byte) {
				any = true
				w.events++
				g.fromLocal(w.now, port, pkt)
			})
			w.work.poll(p, s)
		}
	}
	return any
}

// step runs everything due at the current instant, checks the invariants, and advances the
// clock to the next deadline. It returns false when the run is over.
func (w *world) step() bool {
	for round := 0; ; round++ {
		if round > 1<<16 {
			w.fail(fmt.Errorf("soak: no progress at %v after %d rounds", w.now, round))
			return false
		}
		for len(w.reconf) > 0 && w.reconf[0] <= w.now {
			w.reconf = w.reconf[1:]
			w.reconfigure()
		}
		w.work.due(w.now)
		for _, p := range w.qps {
			for s := range 2 {
				if p.hasDL[s] && p.dl[s] <= w.now || p.dirty[s] {
					p.qp(s).Tick(w.now)
					p.dirty[s] = true
				}
			}
		}
		for _, g := range w.gw {
			g.tick(w.now)
		}
		w.flushQPs()
		for s := range 2 {
			w.deliver(s)
		}
		for _, g := range w.gw {
			g.drain(w.now)
		}
		w.flushQPs()
		for _, p := range w.qps {
			for s := range 2 {
				if p.dirty[s] {
					p.dl[s], p.hasDL[s] = p.qp(s).NextDeadline()
					p.dirty[s] = false
				}
			}
		}
		w.last = w.now
		w.steps++
		w.chk.afterStep()
		if w.err != nil {
			return false
		}
		if w.phaseOver() {
			if w.phase+1 == len(w.sc.Phases) {
				return false
			}
			w.enterPhase(w.phase + 1)
			continue
		}
		next, ok := w.next()
		if !ok {
			w.fail(fmt.Errorf("soak: nothing pending at %v in phase %s", w.now, w.sc.Phases[w.phase].Name))
			return false
		}
		if next > w.now {
			w.now = next
			return true
		}
	}
}

// deliver hands gateway 1-s what the path from gateway s delivers now.
func (w *world) deliver(s int) {
	d := &w.wan[s]
	g := w.gw[1-s]
	out := func(k netem.Packet) {
		w.events++
		if k.ID == kindCREM {
			g.fromWANCREM(w.now, k.Data, k.CE)
		} else {
			w.chk.arrived(1-s, k.Data)
			g.fromWAN(w.now, k.Data, k.CE)
		}
		w.pool.put(k.Data)
	}
	n := 0
	for _, l := range d.old {
		l.Deliver(w.now, out)
		if l.InFlight() > 0 {
			d.old[n] = l
			n++
		}
	}
	clear(d.old[n:])
	d.old = d.old[:n]
	d.cur.Deliver(w.now, out)
}

// drained reports whether the links of earlier phases carry nothing more.
func (w *world) drained() bool { return len(w.wan[0].old) == 0 && len(w.wan[1].old) == 0 }

func (w *world) phaseOver() bool {
	p := &w.sc.Phases[w.phase]
	switch {
	case p.Quiesce:
		return !w.work.largeOutstanding() || w.now-w.phaseStart > maxQuiesce
	case p.Drain:
		return w.work.allDone() || w.now-w.phaseStart > maxDrain
	}
	return w.now >= w.phaseEnd
}

// The longest a quiesce or drain phase may take; beyond it the run reports what is left.
const (
	maxQuiesce = 60 * time.Second
	maxDrain   = 60 * time.Second
)

func (w *world) next() (time.Duration, bool) {
	var d time.Duration
	ok := false
	take := func(t time.Duration, has bool) {
		if has && (!ok || t < d) {
			d, ok = t, true
		}
	}
	for _, p := range w.qps {
		take(p.dl[sideA], p.hasDL[sideA])
		take(p.dl[sideB], p.hasDL[sideB])
	}
	for s := range 2 {
		take(w.gw[s].nextDeadline())
		dir := &w.wan[s]
		take(dir.cur.NextDeadline())
		for _, l := range dir.old {
			take(l.NextDeadline())
		}
	}
	take(w.work.nextDeadline())
	if len(w.reconf) > 0 {
		take(w.reconf[0], true)
	}
	take(w.chk.nextDeadline())
	if w.phaseEnd > 0 {
		take(w.phaseEnd, true)
	}
	return d, ok
}

// bufPool recycles the buffers of packets on the path.
type bufPool struct {
	free [][]byte
}

const poolBuf = 4096 + 512

func (p *bufPool) get(n int) []byte {
	if n <= poolBuf {
		if k := len(p.free); k > 0 {
			b := p.free[k-1]
			p.free = p.free[:k-1]
			return b[:n]
		}
		return make([]byte, n, poolBuf)
	}
	return make([]byte, n)
}

func (p *bufPool) put(b []byte) {
	if cap(b) == poolBuf && len(p.free) < 1<<16 {
		p.free = append(p.free, b[:0])
	}
}

// mix derives a stream's seed from the run's seed and some indices.
func mix(seed uint64, vs ...uint64) uint64 {
	x := seed
	for _, v := range vs {
		x ^= v*0x9e3779b97f4a7c15 + 0x632be59bd9b4e019
		x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
		x = (x ^ x>>27) * 0x94d049bb133111eb
		x ^= x >> 31
	}
	return x
}
