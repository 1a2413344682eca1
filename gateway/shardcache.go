package gateway

import "net/netip"

// Each shard keeps a few free packet buffers of its own, so that the buffers it takes for the
// engines' output and gives back after sending mostly come and go without the pools' locks,
// which the readers and every other shard share: a shard goes to a pool only to take a buffer
// its stock lacks, or to give back cacheSpill of them at once when its stock is full. The
// stock is the shard's, touched under sh.mu; the trim (trimLoop) hands it back to the pools
// first, so an idle shard holds no buffer beyond the next trim.
const (
	cacheMax   = 128 // buffers of one size a shard keeps
	cacheSpill = 64  // how many go back to the pool when the stock is full
)

// pktCache is a shard's stock of free buffers of one pool.
type pktCache struct {
	free []*pkt
	pool *bufPool
}

func (c *pktCache) get() *pkt {
	if k := len(c.free); k > 0 {
		p := c.free[k-1]
		c.free[k-1] = nil
		c.free = c.free[:k-1]
		return p
	}
	return c.pool.get(true)
}

func (c *pktCache) put(p *pkt) {
	if c.free == nil {
		c.free = make([]*pkt, 0, cacheMax)
	}
	c.free = append(c.free, p)
	if len(c.free) >= cacheMax {
		c.pool.putMany(c.free[cacheMax-cacheSpill:])
		clear(c.free[cacheMax-cacheSpill:])
		c.free = c.free[:cacheMax-cacheSpill]
	}
}

// spill gives the whole stock back to the pool.
func (c *pktCache) spill() {
	if len(c.free) > 0 {
		c.pool.putMany(c.free)
		clear(c.free)
		c.free = c.free[:0]
	}
}

// getPkt returns a buffer that holds n octets from the shard's stock or its pool; it never
// fails (the engines' output is bounded by their own queues). Under sh.mu.
func (sh *shard) getPkt(n int) *pkt {
	if n <= smallSize {
		return sh.smallFree.get()
	}
	return sh.largeFree.get()
}

// putPkt gives a buffer back: to the shard's stock, or, for a datagram of a coalesced receive,
// to its shared buffer, or, for a packet in a received AF_XDP frame, the frame to the kernel.
// Under sh.mu.
func (sh *shard) putPkt(p *pkt) {
	if gb := p.gro; gb != nil {
		sh.g.gro.release(gb)
		return
	}
	if xf := p.xf; xf != nil {
		xf.release()
		return
	}
	p.n, p.ce, p.from = 0, false, netip.AddrPort{}
	if cap(p.buf) == smallSize {
		sh.smallFree.put(p)
	} else {
		sh.largeFree.put(p)
	}
}

// spillCaches gives the shard's stock back to the pools.
func (sh *shard) spillCaches() {
	sh.mu.Lock()
	sh.smallFree.spill()
	sh.largeFree.spill()
	sh.mu.Unlock()
}
