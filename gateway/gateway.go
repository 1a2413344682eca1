package gateway

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crem-project/crem/wire"
)

// Options are what a caller adds to a Config when it builds a Gateway in process.
type Options struct {
	Logger *slog.Logger // nil: discard
	// Pcap, if set, receives a classic pcap of every datagram the gateway receives and sends
	// (Config.Pcap names a file instead).
	Pcap io.Writer
	// Seed seeds the engines' random sources (nonces, Flow IDs, Request IDs); 0 takes one
	// from the operating system.
	Seed uint64
	// Sockets, if set, are sockets bound beforehand that the gateway takes over instead of
	// binding the configuration's addresses: each replaces its address in the configuration (a
	// caller binds its ports once and hands them over, none picked, closed and bound again).
	// The gateway closes them, New too when it fails.
	Sockets Sockets
	// BufferTrim is how often the packet buffers that stayed unused since the last time are
	// released (default 15 s: memory a flood took returns within 30 s of its end).
	BufferTrim time.Duration
	// MaxLargeBuffers bounds the 9 KiB packet buffers held at once, the readers' own
	// included (default 4096, 36 MiB); beyond, a large datagram is dropped as it is read
	// (buffers_exhausted).
	MaxLargeBuffers int
	// Version is the version crem_build_info reports ("": the main module's, else "dev").
	Version string
}

// Sockets are bound UDP sockets handed to New: the CREM socket and, in relay mode, the relay
// socket of this side's endpoints and the WAN socket of the peer's relayed datagrams.
type Sockets struct {
	CREM, Relay, WAN *net.UDPConn
}

func (s Sockets) close() {
	for _, c := range []*net.UDPConn{s.CREM, s.Relay, s.WAN} {
		if c != nil {
			c.Close()
		}
	}
}

const (
	defaultBufferTrim      = 15 * time.Second
	defaultMaxLargeBuffers = 4096
)

// Gateway is a running CREM gateway.
type Gateway struct {
	cfg       *resolved
	log       *slog.Logger
	start     time.Time
	seed      uint64
	hseed     maphash.Seed
	crem      *sock
	local     *sock // relay: this side's endpoints
	wan       *sock // relay: the peer gateway's data
	shards    []*shard
	qps       qpShards // relay: the shards of configured QP pairs (shardkey.go)
	route     router
	pcap      *pcapRec
	c         counters
	small     *bufPool // buffers for reuse: steady traffic allocates none
	large     *bufPool
	gro       *groPool // coalesced receive buffers (UDP_GRO), shared by the datagrams they hold
	trimEvery time.Duration
	tun       *tunPath
	xdp       *xdpPath // tun.datapath = xdp: the AF_XDP data path (g.tun then holds only its raw socket)
	version   string   // Options.Version
	// unknownSaid is when the log last said that CREM messages for unknown flows were dropped
	// (nanoseconds since start, +1; 0: never), and unknownAtSaid the count then.
	unknownSaid, unknownAtSaid atomic.Int64
	unknownClose               unknownCloser // answers to REPAIRs for lost sessions (G58)

	closeOnce sync.Once
	sockOnce  sync.Once
	done      chan struct{} // closed when the loops are to end
	wg        sync.WaitGroup

	life     sync.Mutex // guards state
	state    int
	stop     chan struct{} // Close asks a running gateway to stop
	stopOnce sync.Once
	finished chan struct{} // closed when Run returns

	testReceiver func(*receiver) // tests: adjusts each reader as it is made

	reloadMu sync.Mutex // Reload, one at a time
	live     *resolved  // the configuration the nodes run: cfg's, or the latest Reload's
	handed   [3]*sock   // the sockets of Options.Sockets, by kind: they stand for their addresses
}

// counters are the gateway's own outcomes (the engines count theirs).
type counters struct {
	rx, tx [4]atomic.Uint64 // per socket kind
	// Of the datagrams received, those handed to a shard and those dropped (for whatever
	// reason: not routable, a queue full, no buffer, truncated): rx = handed + dropped.
	handed, dropped         [4]atomic.Uint64
	rxBytes, txBytes        [4]atomic.Uint64
	socketDrops             [4]atomic.Uint64 // the kernel's drops per socket (SO_RXQ_OVFL)
	writeErrors, readErrors atomic.Uint64
	truncated, shardFull    atomic.Uint64
	buffersExhausted        atomic.Uint64 // large datagrams dropped as read: MaxLargeBuffers held
	memoryReturned          atomic.Uint64 // trims that handed a flood's buffers back to the system
	// CREM messages the router could not give to a shard (the nodes count their own).
	cremMalformed, cremUnknownFlw atomic.Uint64
	cremDiscarded                 atomic.Uint64
	pathMalformed                 atomic.Uint64 // PATH_REPORTs among cremMalformed
	notRoCE                       atomic.Uint64
}

const (
	kindCREM = iota
	kindLocal
	kindWAN
	kindTun // a whole IP packet read from the TUN device
)

var kindNames = [4]string{"crem", "local", "wan", "tun"}

// bufSize holds any RoCEv2 datagram of a 4096-octet MTU and any CREM message of T <= 8192.
const bufSize = 9216

type pkt struct {
	buf  []byte
	gro  *groBuf   // set: buf lies in a shared coalesced receive buffer (buffers.go)
	xf   *xdpFrame // set: buf lies in a received AF_XDP frame, given back with the packet (xdp_linux.go)
	n    int
	from netip.AddrPort
	kind uint8
	ce   bool
}

func (p *pkt) data() []byte { return p.buf[:p.n] }

// New validates the configuration, opens the sockets (an address in use is a ConfigError)
// and starts nothing yet; Run starts it.
func New(c Config, o Options) (*Gateway, error) {
	for _, h := range []struct {
		conn *net.UDPConn
		addr *netip.AddrPort
	}{{o.Sockets.CREM, &c.CREMAddress}, {o.Sockets.Relay, &c.Relay.Listen}, {o.Sockets.WAN, &c.Relay.WANListen}} {
		if h.conn != nil {
			*h.addr = h.conn.LocalAddr().(*net.UDPAddr).AddrPort()
		}
	}
	r, err := c.validate()
	if err != nil {
		o.Sockets.close()
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{cfg: r, log: log, start: time.Now(), seed: o.Seed, version: o.Version, hseed: maphash.MakeSeed(), done: make(chan struct{}),
		stop: make(chan struct{}), finished: make(chan struct{})}
	if g.seed == 0 {
		g.seed = rand.Uint64()
	}
	maxLarge := o.MaxLargeBuffers
	if maxLarge <= 0 {
		maxLarge = defaultMaxLargeBuffers
	}
	g.small, g.large = newBufPool(smallSize, 0, prewarmSmall), newBufPool(bufSize, maxLarge, prewarmLarge)
	g.gro = newGROPool(maxLarge * bufSize / groBufSize / 2) // half the octets of the large bound
	g.trimEvery = o.BufferTrim
	if g.trimEvery <= 0 {
		g.trimEvery = defaultBufferTrim
	}
	g.route.init()
	ok := false
	defer func() {
		if !ok {
			g.closeSockets()
			o.Sockets.close()
		}
	}()
	if g.crem, err = listen("crem_address", r.crem, kindCREM, o.Sockets.CREM, r.offload); err != nil {
		return nil, c.placed(err)
	}
	switch r.mode {
	case ModeRelay:
		if g.local, err = listen("relay.listen", r.listen, kindLocal, o.Sockets.Relay, r.offload); err != nil {
			return nil, c.placed(err)
		}
		if g.wan, err = listen("relay.wan_listen", r.wanListen, kindWAN, o.Sockets.WAN, r.offload); err != nil {
			return nil, c.placed(err)
		}
	case ModeTun:
		if err = g.openTunStyle(r); err != nil {
			return nil, err
		}
	}
	if o.Pcap != nil {
		if g.pcap, err = newPcapRec(o.Pcap); err != nil {
			return nil, fmt.Errorf("gateway: pcap: %w", err)
		}
	}
	n := r.shards
	if n == 0 {
		n = runtime.GOMAXPROCS(0)
	}
	for i := range n {
		sh, err := newShard(g, i)
		if err != nil {
			return nil, err
		}
		g.shards = append(g.shards, sh)
	}
	g.qps = newQPShards(r, len(g.shards))
	g.live = r
	for _, h := range []struct {
		conn *net.UDPConn
		s    *sock
		kind int
	}{{o.Sockets.CREM, g.crem, kindCREM}, {o.Sockets.Relay, g.local, kindLocal}, {o.Sockets.WAN, g.wan, kindWAN}} {
		if h.conn != nil {
			g.handed[h.kind] = h.s
		}
	}
	ok = true
	if c, w := g.crem.addr.Addr(), g.WANAddr().Addr(); len(r.reporters) > 0 && g.wan != nil &&
		!c.IsUnspecified() && !w.IsUnspecified() && c != w {
		// A reporter between the gateways names this gateway by its WAN address and sends to
		// it at the CREM port (Node.reportKey): such reports reach no socket of the gateway.
		log.Warn("path reporters on the WAN path send to the WAN address at the CREM port, where the gateway does not listen",
			"crem_address", g.crem.addr, "wan_listen", g.WANAddr())
	}
	return g, nil
}

// openTunStyle opens TUN-style mode's data path: the TUN device, or (tun.datapath xdp or auto)
// the XDP program and AF_XDP sockets with the raw socket for what the kernel must send. With
// auto, a data path that cannot start is logged (the cause and the fix) and the TUN device
// taken instead; with xdp, the start fails.
func (g *Gateway) openTunStyle(r *resolved) error {
	if r.datapath == DatapathTun {
		var err error
		g.tun, err = openTun(r)
		return err
	}
	x, err := openXDP(r, r.crem.Port())
	if err == nil {
		if g.tun, err = openRawTun(r); err != nil {
			x.close()
		}
	}
	switch {
	case err == nil:
		g.xdp = x
		return nil
	case r.datapath == DatapathXDP:
		return err
	}
	g.log.Warn("xdp data path unavailable: taking the TUN device (tun.datapath = \"auto\"); set tun.datapath = \"tun\" to silence this", "cause", err)
	g.tun, err = openTun(r)
	return err
}

// CREMAddr returns the bound CREM address.
func (g *Gateway) CREMAddr() netip.AddrPort { return g.crem.addr }

// RelayAddr returns the relay address this side's endpoints send to (relay mode).
func (g *Gateway) RelayAddr() netip.AddrPort {
	if g.local == nil {
		return netip.AddrPort{}
	}
	return g.local.addr
}

// WANAddr returns the address the peer gateway's relayed datagrams arrive on (relay mode).
func (g *Gateway) WANAddr() netip.AddrPort {
	if g.wan == nil {
		return netip.AddrPort{}
	}
	return g.wan.addr
}

func (g *Gateway) now() time.Duration { return time.Since(g.start) }

// Run drives the gateway until ctx ends or Close is called, then closes every flow with CLOSE
// reason 0 (normal end), sends what the engines want sent, and closes the sockets. A loop that
// ends before (a socket that fails for good) stops the gateway the same way, and Run returns
// why. Run may be called once.
func (g *Gateway) Run(ctx context.Context) error {
	g.life.Lock()
	if g.state != stateNew {
		g.life.Unlock()
		return errRunAgain
	}
	g.state = stateRunning
	g.life.Unlock()
	defer close(g.finished)

	ended := make(chan error, 8) // loops that ended before the stop, and why
	run := func(wg *sync.WaitGroup, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				select {
				case <-g.done: // ending was asked for
				default:
					select {
					case ended <- err:
					default:
					}
				}
			}
		}()
	}
	for _, sh := range g.shards {
		run(&g.wg, func() error { sh.loop(); return nil })
	}
	run(&g.wg, func() error { g.trimLoop(g.trimEvery); return nil })
	// Readers of sockets through Go's poller stop when the sockets close; pairLoop reads the
	// descriptors directly and must stop before (rawReaders).
	var readers, rawReaders sync.WaitGroup
	switch {
	case g.wan != nil:
		run(&rawReaders, func() error { return g.pairLoop(g.crem, g.wan, run, &readers) })
		run(&readers, func() error { return g.readLoop(g.local) })
	case g.xdp != nil:
		g.xdpSay()
		run(&rawReaders, g.xdpLoop)
		run(&readers, func() error { return g.readLoop(g.crem) })
	case g.tun != nil:
		run(&rawReaders, func() error { return g.tunPairLoop(run, &readers) })
	default:
		run(&readers, func() error { return g.readLoop(g.crem) })
	}
	g.log.Info("gateway running", "crem", g.crem.addr, "peer", g.cfg.peer, "mode", g.cfg.mode, "shards", len(g.shards),
		"relay_listen", g.RelayAddr(), "wan_listen", g.WANAddr())
	var err error
	select {
	case <-ctx.Done():
		g.log.Info("gateway stopping: closing flows")
	case <-g.stop:
		g.log.Info("gateway closed: closing flows")
	case err = <-ended:
		g.log.Error("gateway stopping: a loop ended", "err", err)
	}
	for _, sh := range g.shards {
		sh.closeAll()
	}
	g.closeOnce.Do(func() { close(g.done) })
	g.wg.Wait()
	rawReaders.Wait()
	g.closeSockets()
	readers.Wait()
	for _, sh := range g.shards {
		sh.publish(g.now()) // the final counters, exact: no shard runs any more
	}
	st := g.Stats()
	g.log.Info("gateway stopped", "flows", st.Flows, "csf_sources", st.Sender.Sources, "csf_repair_sent", st.Sender.RepairSent,
		"csf_retx_sent", st.Sender.RetxSent, "csf_unprotected", st.Sender.Unprotected,
		"crf_flows", st.Receiver.FlowsOpened, "crf_sources", st.Receiver.Flows.Sources, "crf_repairs", st.Receiver.Flows.Repairs,
		"crf_restored", st.Receiver.Flows.Restored, "crf_icrc_mismatch", st.Receiver.Flows.ICRCMismatch,
		"close_sent", st.Sender.CloseSent+st.Receiver.CloseSent, "write_errors", st.Gateway["write_errors"])
	g.life.Lock()
	g.state = stateDone
	g.life.Unlock()
	if g.pcap != nil {
		err = errors.Join(err, g.pcap.flush())
	}
	return err
}

var errRunAgain = errors.New("gateway: Run called again, or after Close")

// Lifetime states.
const (
	stateNew = iota
	stateRunning
	stateDone // stopped, or closed without running
)

// Close stops the gateway: a running one as the end of Run's context does (Close waits for Run
// to return), one that never ran by closing its sockets. It may be called more than once.
func (g *Gateway) Close() error {
	g.life.Lock()
	switch g.state {
	case stateNew:
		g.state = stateDone
		g.life.Unlock()
		g.closeOnce.Do(func() { close(g.done) })
		g.closeSockets()
		return nil
	case stateRunning:
		g.stopOnce.Do(func() { close(g.stop) })
		g.life.Unlock()
		<-g.finished
		return nil
	}
	g.life.Unlock()
	return nil
}

// closeSockets closes every socket and the TUN device, once.
func (g *Gateway) closeSockets() {
	g.sockOnce.Do(func() {
		for _, s := range []*sock{g.crem, g.local, g.wan} {
			if s != nil {
				s.conn.Close()
			}
		}
		g.xdp.close()
		if g.tun != nil {
			g.tun.close()
		}
	})
}

// accept counts a received datagram and hands it to its shard; false keeps the buffer with
// the caller (dropped, counted).
func (g *Gateway) accept(s *sock, p *pkt) bool {
	g.c.rx[s.kind].Add(1)
	if g.hand(s, p) {
		g.c.handed[s.kind].Add(1)
		return true
	}
	g.c.dropped[s.kind].Add(1)
	return false
}

// hand gives a received datagram to its shard; false when it is dropped (counted by why).
func (g *Gateway) hand(s *sock, p *pkt) bool {
	if p.n > len(p.buf) || p.n >= bufSize {
		g.c.truncated.Add(1)
		return false
	}
	g.c.rxBytes[s.kind].Add(uint64(p.n))
	if g.pcap != nil {
		g.pcap.record(p.from, s.addr, p.data())
	}
	sh := g.shardFor(p)
	if sh == nil {
		return false
	}
	select {
	case sh.in <- p:
		return true
	default:
		g.c.shardFull.Add(1)
		return false
	}
}

// shardFor finds the shard of a datagram, or nil (counted) when it has none.
func (g *Gateway) shardFor(p *pkt) *shard {
	b := p.data()
	switch p.kind {
	case kindLocal:
		if len(b) < 12 {
			g.c.notRoCE.Add(1)
			return g.shards[0] // relayed as it is
		}
		return g.shards[g.dataShard(b)]
	case kindWAN:
		if len(b) < 12 {
			return g.shards[g.pairHash(g.cfg.localEP, g.cfg.remoteEP)]
		}
		return g.shards[g.dataShard(b)]
	}
	// CREM
	if len(b) < wire.HeaderLen || b[0]>>4 != wire.Version {
		g.c.cremDiscarded.Add(1)
		return nil
	}
	t := wire.Type(b[0] & 0x0f)
	id := binary.BigEndian.Uint32(b[4:8])
	switch t {
	case wire.TypeHello:
		h, ok := wire.PeekHelloFlow(b)
		if !ok {
			g.c.cremMalformed.Add(1)
			return nil
		}
		if i, ok := g.flowShard(h.FlowLabel); ok {
			return g.shards[i]
		}
		return g.shards[g.pairHash(h.Source.Unmap(), h.Destination.Unmap())]
	case wire.TypePathReport:
		if g.cfg.mode == ModeRelay {
			// Every outbound flow runs between the two endpoints, whatever addresses the
			// report names them by (Node.reportKey): their shard parses, maps and counts it.
			return g.shards[g.pathReportShard(b)]
		}
		pr, ok := wire.PeekPathReportFlow(b)
		if !ok {
			g.c.cremMalformed.Add(1)
			g.c.pathMalformed.Add(1)
			return nil
		}
		return g.shards[g.pairHash(pr.Source.Unmap(), pr.Destination.Unmap())]
	case wire.TypeHelloAck:
		nonce, ok := wire.PeekHelloAckNonce(b)
		if !ok {
			g.c.cremMalformed.Add(1)
			return nil
		}
		if i, ok := g.route.get(&g.route.nonce, nonce); ok {
			return g.shards[i]
		}
	case wire.TypeParamUpdate, wire.TypeRepair:
		if i, ok := g.route.get32(&g.route.crf, id); ok {
			return g.shards[i]
		}
	case wire.TypeParamAck, wire.TypeLossReport, wire.TypeRepairRequest:
		if i, ok := g.route.get32(&g.route.csf, id); ok {
			return g.shards[i]
		}
	case wire.TypeClose:
		// Either side may close (C2); a CLOSE goes to both halves that know the Flow ID.
		if i, ok := g.route.get32(&g.route.csf, id); ok {
			return g.shards[i]
		}
		if i, ok := g.route.get32(&g.route.crf, id); ok {
			return g.shards[i]
		}
	default:
		g.c.cremDiscarded.Add(1)
		return nil
	}
	g.c.cremUnknownFlw.Add(1)
	g.sayUnknownFlows()
	g.answerUnknownFlow(b, id, p.from) // REPAIR, PARAM_UPDATE: CLOSE reason 5 (G58)
	return nil
}

// unknownFlowsEvery is the least time between two log lines about CREM messages dropped for
// flows the gateway does not know.
const unknownFlowsEvery = time.Minute

// sayUnknownFlows logs, at most once every unknownFlowsEvery, that CREM messages for flows this
// gateway does not know were dropped, and how many since the last line: a peer that still
// sends for a session this gateway lost (it restarted), or messages meant for another gateway.
func (g *Gateway) sayUnknownFlows() {
	now := int64(g.now()) + 1
	last := g.unknownSaid.Load()
	if last != 0 && now-last < int64(unknownFlowsEvery) || !g.unknownSaid.CompareAndSwap(last, now) {
		return
	}
	n := int64(g.c.cremUnknownFlw.Load())
	since := n - g.unknownAtSaid.Swap(n)
	g.log.Warn("CREM messages for flows this gateway does not know were dropped: a peer that still sends for a session lost here (a restart), or messages meant for another gateway",
		"dropped", since, "total", n)
}

// pairHash maps an unordered address pair to a shard, so both directions of a flow meet.
func (g *Gateway) pairHash(a, b netip.Addr) int {
	if len(g.shards) == 1 {
		return 0
	}
	if b.Less(a) {
		a, b = b, a
	}
	var h maphash.Hash
	h.SetSeed(g.hseed)
	x, y := a.As16(), b.As16()
	h.Write(x[:])
	h.Write(y[:])
	return int(h.Sum64() % uint64(len(g.shards)))
}

// router maps Flow IDs and HELLO nonces to shards. Each entry mirrors one of a node's tables
// (its CSFs' Flow IDs and latest nonces, its CRF's Flow IDs), which are bounded and expire: the
// node takes out what it no longer has.
type router struct {
	mu    sync.RWMutex
	crf   map[uint32]int // Flow IDs this gateway's CRFs assigned
	csf   map[uint32]int // Flow IDs the peer assigned to this gateway's CSFs
	nonce map[uint64]int // nonces of this gateway's HELLOs
}

func (r *router) init() {
	r.crf, r.csf, r.nonce = map[uint32]int{}, map[uint32]int{}, map[uint64]int{}
}

func (r *router) get32(m *map[uint32]int, k uint32) (int, bool) {
	r.mu.RLock()
	v, ok := (*m)[k]
	r.mu.RUnlock()
	return v, ok
}

func (r *router) get(m *map[uint64]int, k uint64) (int, bool) {
	r.mu.RLock()
	v, ok := (*m)[k]
	r.mu.RUnlock()
	return v, ok
}

func (r *router) set32(m *map[uint32]int, k uint32, v int) {
	r.mu.Lock()
	(*m)[k] = v
	r.mu.Unlock()
}

// del32 takes out k if shard v holds it (two shards' CRFs may draw one Flow ID).
func (r *router) del32(m *map[uint32]int, k uint32, v int) {
	r.mu.Lock()
	if cur, ok := (*m)[k]; ok && cur == v {
		delete(*m, k)
	}
	r.mu.Unlock()
}

func (r *router) setNonce(k uint64, v int) {
	r.mu.Lock()
	r.nonce[k] = v
	r.mu.Unlock()
}

func (r *router) delNonce(k uint64, v int) {
	r.mu.Lock()
	if cur, ok := r.nonce[k]; ok && cur == v {
		delete(r.nonce, k)
	}
	r.mu.Unlock()
}

// sizes returns the entries of each map.
func (r *router) sizes() (crf, csf, nonce int) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.crf), len(r.csf), len(r.nonce)
}
