package gateway

import (
	"net/netip"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Packet buffers come from two pools. Datagrams of smallSize octets or fewer (RDMA ACKs, CREM
// control messages, and what most floods are made of: empty and garbage datagrams, HELLOs) are
// copied out of the receive buffer into a small buffer before they are queued, so a queued
// datagram holds about what it carries; larger ones keep their receive buffer (bufSize). The
// large buffers held at once are bounded (Options.MaxLargeBuffers): beyond, a datagram is
// dropped at the socket and counted (buffers_exhausted). Small buffers need no bound of their
// own: the queues that hold them are bounded.
//
// Every buffer is allocated on its own (one allocation, its header and its octets), so that it
// can be freed: each pool remembers the fewest buffers it held free since its last trim, and a
// trim (every Options.BufferTrim) releases that many, the ones unused longest. Memory a flood
// took is given back within two trim periods; steady traffic keeps its working set and
// allocates nothing. Each pool starts with a reserve (prewarm): queues deeper than any before
// cost nothing up to it, and the reserve's pages are not resident until used (fresh memory
// from the system is zero); unused for two trim periods, it is released like the rest.
const smallSize = 512

// The reserves each pool starts with.
const (
	prewarmSmall = 2048
	prewarmLarge = 1024
)

// bufPool is a free list of packet buffers of one size.
type bufPool struct {
	size int
	max  int // most buffers held at once, free or in use, unless forced (0: no bound)

	mu   sync.Mutex
	free []*pkt // a stack: the top is reused first, the bottom has waited longest
	low  int    // the fewest free since the last trim
	held int    // allocated and not released

	allocated, released atomic.Uint64
	heldNow             atomic.Int64 // held, for the metrics
}

func newBufPool(size, max, prewarm int) *bufPool {
	bp := &bufPool{size: size, max: max}
	if max > 0 {
		prewarm = min(prewarm, max)
	}
	for range prewarm {
		bp.free = append(bp.free, bp.alloc())
	}
	bp.held = prewarm
	bp.heldNow.Store(int64(prewarm))
	bp.allocated.Store(uint64(prewarm))
	return bp
}

type smallPkt struct {
	pkt
	b [smallSize]byte
}

type largePkt struct {
	pkt
	b [bufSize]byte
}

// alloc makes one buffer of the pool's size, header and octets in one allocation.
func (bp *bufPool) alloc() *pkt {
	switch bp.size {
	case smallSize:
		x := new(smallPkt)
		x.buf = x.b[:]
		return &x.pkt
	case bufSize:
		x := new(largePkt)
		x.buf = x.b[:]
		return &x.pkt
	}
	return &pkt{buf: make([]byte, bp.size)}
}

// get returns a buffer, or nil when the pool is at its bound and force is false.
func (bp *bufPool) get(force bool) *pkt {
	bp.mu.Lock()
	if n := len(bp.free); n > 0 {
		p := bp.free[n-1]
		bp.free[n-1] = nil
		bp.free = bp.free[:n-1]
		bp.low = min(bp.low, n-1)
		bp.mu.Unlock()
		return p
	}
	if !force && bp.max > 0 && bp.held >= bp.max {
		bp.mu.Unlock()
		return nil
	}
	bp.held++
	bp.mu.Unlock()
	bp.heldNow.Add(1)
	bp.allocated.Add(1)
	return bp.alloc()
}

// put returns a buffer to the pool.
func (bp *bufPool) put(p *pkt) {
	p.n, p.ce, p.from = 0, false, netip.AddrPort{}
	bp.mu.Lock()
	bp.free = append(bp.free, p)
	bp.mu.Unlock()
}

// putMany returns buffers to the pool under one lock.
func (bp *bufPool) putMany(ps []*pkt) {
	for _, p := range ps {
		p.n, p.ce, p.from = 0, false, netip.AddrPort{}
	}
	bp.mu.Lock()
	bp.free = append(bp.free, ps...)
	bp.mu.Unlock()
}

// trim releases the buffers that stayed free since the last trim, and returns how many.
func (bp *bufPool) trim() int {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	n := min(bp.low, len(bp.free))
	if n > 0 {
		rest := len(bp.free) - n
		copy(bp.free, bp.free[n:])
		clear(bp.free[rest:])
		bp.free = bp.free[:rest]
		bp.held -= n
		bp.heldNow.Add(-int64(n))
		bp.released.Add(uint64(n))
		if cap(bp.free) > 2*rest+64 {
			// The list itself was sized by the flood: let it go too.
			bp.free = append(make([]*pkt, 0, 2*rest+64), bp.free...)
		}
	}
	bp.low = len(bp.free)
	return n
}

// heldCount returns the buffers allocated and not released.
func (bp *bufPool) heldCount() int { return int(bp.heldNow.Load()) }

// getPkt returns a buffer that holds n octets; it never fails (the engines' output is bounded
// by their own queues).
func (g *Gateway) getPkt(n int) *pkt {
	if n <= smallSize {
		return g.small.get(true)
	}
	return g.large.get(true)
}

// putPkt returns a buffer to its pool; a datagram in a coalesced receive buffer lets go of
// it.
func (g *Gateway) putPkt(p *pkt) {
	if gb := p.gro; gb != nil {
		g.gro.release(gb)
		return
	}
	if xf := p.xf; xf != nil {
		xf.release()
		return
	}
	if cap(p.buf) == smallSize {
		g.small.put(p)
	} else {
		g.large.put(p)
	}
}

// handOn gives the datagram received into p (a large receive buffer) to its shard. A small one
// is copied into a small buffer and p stays with the reader (keep true); a large one goes on
// in p, and the reader takes a fresh buffer for its next read (keep false, *next set), unless
// the large buffers are at their bound: then it is dropped (counted) and p stays.
func (g *Gateway) handOn(s *sock, p *pkt, next **pkt) (keep bool) {
	if p.n <= smallSize {
		q := g.small.get(true)
		q.n = copy(q.buf, p.data())
		q.kind, q.from, q.ce = p.kind, p.from, p.ce
		if !g.accept(s, q) {
			g.small.put(q)
		}
		return true
	}
	repl := g.large.get(false)
	if repl == nil {
		g.c.rx[s.kind].Add(1)
		g.c.rxBytes[s.kind].Add(uint64(min(p.n, len(p.buf))))
		g.c.buffersExhausted.Add(1)
		g.c.dropped[s.kind].Add(1)
		return true
	}
	if !g.accept(s, p) {
		g.large.put(repl)
		return true
	}
	*next = repl
	return false
}

// trimLoop releases idle buffers every period until the gateway stops. After a trim that gave
// back a flood's worth it has the runtime return the memory to the system at once (the
// runtime would on its own only after its next collections, which steady traffic, allocating
// nothing, may not cause for minutes).
func (g *Gateway) trimLoop(period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	unreturned := 0 // octets released since the memory was last handed back
	for {
		select {
		case <-g.done:
			return
		case <-t.C:
			if unreturned += g.trim(); unreturned >= freeOSAfter {
				debug.FreeOSMemory()
				g.c.memoryReturned.Add(1)
				unreturned = 0
			}
		}
	}
}

// freeOSAfter is how many octets of buffers trims must have released before the memory is
// handed back to the system at once.
const freeOSAfter = 4 << 20

// trim releases idle buffers of every pool and returns the octets released.
func (g *Gateway) trim() int {
	for _, sh := range g.shards {
		sh.spillCaches()
	}
	return g.small.trim()*smallSize + g.large.trim()*bufSize + g.gro.trim()*groBufSize
}

// Coalesced receives (UDP_GRO, relay mode with offload) land in buffers of groBufSize octets,
// which hold any UDP datagram: a receive of several datagrams of one size from one source
// (GRO) or a single one. The datagrams of such a buffer go on to the shards in place, each a
// pkt of the buffer's own (no copy), the buffer shared: it returns to its pool when the
// reader and every datagram have let go (refs). The buffers held at once are bounded too
// (half the octets of the large ones'): beyond, the reader copies the datagrams out into
// ordinary buffers and keeps its own (groCopied). The pool is trimmed like the others.
const (
	groBufSize = 65536
	maxGROSegs = 64 // the kernel coalesces at most 64 datagrams (UDP_GRO_CNT_MAX)
)

type groBuf struct {
	b    [groBufSize]byte
	segs [maxGROSegs]pkt
	refs atomic.Int32 // the reader (while it hands out) and each datagram handed out
}

// groPool is a free list of coalesced receive buffers, bounded and trimmed like bufPool.
type groPool struct {
	max int

	mu   sync.Mutex
	free []*groBuf
	low  int
	held int

	allocated, released atomic.Uint64
	heldNow             atomic.Int64
}

func newGROPool(max int) *groPool { return &groPool{max: max} }

func newGROBuf() *groBuf {
	gb := new(groBuf)
	for i := range gb.segs {
		gb.segs[i].gro = gb
	}
	return gb
}

// get returns a buffer, or nil when the pool is at its bound and force is false.
func (gp *groPool) get(force bool) *groBuf {
	gp.mu.Lock()
	if n := len(gp.free); n > 0 {
		gb := gp.free[n-1]
		gp.free[n-1] = nil
		gp.free = gp.free[:n-1]
		gp.low = min(gp.low, n-1)
		gp.mu.Unlock()
		return gb
	}
	if !force && gp.held >= gp.max {
		gp.mu.Unlock()
		return nil
	}
	gp.held++
	gp.mu.Unlock()
	gp.heldNow.Add(1)
	gp.allocated.Add(1)
	return newGROBuf()
}

// release drops one hold on gb; the last returns it to the pool.
func (gp *groPool) release(gb *groBuf) {
	if gb.refs.Add(-1) != 0 {
		return
	}
	gp.mu.Lock()
	gp.free = append(gp.free, gb)
	gp.mu.Unlock()
}

// trim releases the buffers that stayed free since the last trim, and returns how many.
func (gp *groPool) trim() int {
	gp.mu.Lock()
	defer gp.mu.Unlock()
	n := min(gp.low, len(gp.free))
	if n > 0 {
		rest := len(gp.free) - n
		copy(gp.free, gp.free[n:])
		clear(gp.free[rest:])
		gp.free = gp.free[:rest]
		gp.held -= n
		gp.heldNow.Add(-int64(n))
		gp.released.Add(uint64(n))
	}
	gp.low = len(gp.free)
	return n
}

// handOnGRO gives the datagrams received into gb (n octets, of seg octets each when the
// kernel coalesced them, seg 0 or n for one datagram) to their shards, as handOn does: small
// ones copied into small buffers; larger ones in place when a fresh buffer can replace gb at
// the reader (*next set), else copied into large buffers (dropped when those are at their
// bound too).
func (g *Gateway) handOnGRO(s *sock, gb *groBuf, n, seg int, from netip.AddrPort, ce bool, next **groBuf) {
	if seg <= 0 || seg > n {
		seg = n
	}
	count := 1
	if seg > 0 {
		count = (n + seg - 1) / seg
	}
	if count > 1 {
		s.off.groReceives.Add(1)
		s.off.groDatagrams.Add(uint64(count))
	}
	var repl *groBuf
	if seg > smallSize {
		repl = g.gro.get(false)
	}
	gb.refs.Store(1) // the reader's, while it hands out
	inPlace := 0
	for k := range count {
		off := k * seg
		d := gb.b[off:min(off+seg, n)]
		if len(d) > smallSize && repl != nil && inPlace < maxGROSegs {
			p := &gb.segs[inPlace]
			p.buf, p.n, p.kind, p.from, p.ce = d[:len(d):len(d)], len(d), uint8(s.kind), from, ce
			gb.refs.Add(1)
			if g.accept(s, p) {
				inPlace++
			} else {
				gb.refs.Add(-1)
			}
			continue
		}
		var q *pkt
		if len(d) <= smallSize {
			q = g.small.get(true)
		} else if q = g.large.get(false); q == nil || len(d) > len(q.buf) {
			if q != nil {
				g.large.put(q)
			}
			g.c.rx[s.kind].Add(1)
			g.c.rxBytes[s.kind].Add(uint64(len(d)))
			if q == nil {
				g.c.buffersExhausted.Add(1)
			} else {
				g.c.truncated.Add(1)
			}
			g.c.dropped[s.kind].Add(1)
			continue
		} else if count > 1 {
			s.off.groCopied.Add(1)
		}
		q.n = copy(q.buf, d)
		q.kind, q.from, q.ce = uint8(s.kind), from, ce
		if !g.accept(s, q) {
			g.putPkt(q)
		}
	}
	if inPlace == 0 {
		gb.refs.Store(0) // nothing went on: the reader keeps gb
		if repl != nil {
			g.gro.put(repl)
		}
		return
	}
	*next = repl
	g.gro.release(gb) // the reader's hold: gb returns when its datagrams are done
}

// put returns a buffer no one holds to the pool.
func (gp *groPool) put(gb *groBuf) {
	gb.refs.Store(1)
	gp.release(gb)
}
