package sim

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/rc"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// Shim sits between a QP and its link: the CREM sender function beside the requester, the CREM
// receiver function beside the responder. It sees every packet its QP sends and every packet
// the link delivers, and may send packets of its own. A nil Shim passes everything through.
type Shim interface {
	// Egress takes a packet the local QP sends; the shim passes it on with pass (or not) and
	// may send packets of its own with send.
	Egress(now time.Duration, pkt []byte, pass, send func([]byte))
	// Ingress takes a packet the link delivers, with whether it is the peer shim's (a CREM
	// message) and whether a queue marked it CE; the shim hands packets for the QP to deliver
	// and may answer with send.
	Ingress(now time.Duration, pkt []byte, shim, ce bool, deliver, send func([]byte))
	// Tick runs the shim's timers at now; what becomes ready for the QP goes to deliver.
	Tick(now time.Duration, deliver, send func([]byte))
	// NextDeadline returns when the shim next wants Tick.
	NextDeadline() (time.Duration, bool)
}

// Counts are what one direction of a connection carried.
type Counts struct {
	Packets, Octets       uint64 // sent onto the link, lost ones included, with IPv4 and UDP headers
	Dropped               uint64
	DataDropped           uint64 // of which data packets (see DataPackets)
	DataPackets           uint64 // packets that take a PSN (requests, READ responses)
	RepeatPackets         uint64 // data packets whose PSN was sent before: retransmissions
	RepeatOctets          uint64
	ShimPackets, ShimOcts uint64 // packets the shims sent (CREM messages)
}

// Conn is one connection in virtual time: requester QP A, responder QP B, the shims beside
// them and the two links. Its loop runs every engine due at the current instant, then jumps to
// the earliest deadline.
type Conn struct {
	QP   [2]*rc.QP
	Shim [2]Shim
	Link [2]*netem.Link // Link[0] carries A's side to B, Link[1] the reverse
	Now  time.Duration
	// Last is the instant the latest Step ran (Now has moved on to the next deadline).
	Last  time.Duration
	Count [2]Counts
	// Events counts packet events: each packet sent onto a link and each one delivered.
	Events uint64
	// CopySent makes the connection copy every packet it keeps on a link other than the small
	// WRITE form (see flights), for QPs that reuse their buffers once Drain's callback returns
	// (rc.Config.ReuseBuffers).
	CopySent bool

	fl    flights // A's WRITE packets in flight, stored small
	sent  *sentPackets
	seen  [2]psnSet
	sendf [2]func([]byte)
	shimf [2]func([]byte) // a shim's own sends
	egres [2]func([]byte) // what a QP drains, through its shim
	deliv [2]func(netem.Packet)
	toQP  [2]func([]byte)

	// nodes are the path reporters' nodes on each link (nil: none); track measures recovery.
	nodes [2]*pathNode
	track *recoveryLog
}

// wireOverhead is what each UDP payload carries beyond itself on the wire: IPv4 and UDP headers,
// the count rc's pacer uses.
const wireOverhead = 28

// NewConn wires a and b over links ab (A to B) and ba (B to A) with optional shims.
func NewConn(a, b *rc.QP, ab, ba netem.Config, shimA, shimB Shim) (*Conn, error) {
	l0, err := netem.NewLink(ab)
	if err != nil {
		return nil, fmt.Errorf("sim: link A to B: %w", err)
	}
	l1, err := netem.NewLink(ba)
	if err != nil {
		return nil, fmt.Errorf("sim: link B to A: %w", err)
	}
	c := &Conn{QP: [2]*rc.QP{a, b}, Shim: [2]Shim{shimA, shimB}, Link: [2]*netem.Link{l0, l1}}
	for s := range 2 {
		c.sendf[s] = func(pkt []byte) { c.put(s, pkt, false) }
		c.shimf[s] = func(pkt []byte) { c.put(s, pkt, true) }
		c.egres[s] = func(pkt []byte) { c.Shim[s].Egress(c.Now, pkt, c.sendf[s], c.shimf[s]) }
		c.toQP[s] = func(pkt []byte) {
			if s == 1 && c.track != nil {
				c.track.arrive(pkt, c.Now)
			}
			c.QP[s].Handle(c.Now, pkt)
		}
		c.deliv[s] = func(k netem.Packet) {
			c.Events++
			to := 1 - s
			data, owned := k.Data, c.CopySent
			switch {
			case data == nil && k.ID != 0:
				data, owned = c.fl.unpack(k.ID), true
			case k.Tag != nil:
				data, owned = c.fl.untrim(data, k.Size-wireOverhead), true
			}
			if sh := c.Shim[to]; sh != nil {
				sh.Ingress(c.Now, data, k.Tag != nil, k.CE, c.toQP[to], c.shimf[to])
			} else {
				c.toQP[to](data)
			}
			if owned {
				c.fl.recycle(data) // the engines copy what they keep
			}
		}
	}
	return c, nil
}

// put sends pkt from side s onto its link.
func (c *Conn) put(s int, pkt []byte, shim bool) {
	c.Events++
	size := len(pkt) + wireOverhead
	cnt := &c.Count[s]
	cnt.Packets++
	cnt.Octets += uint64(size)
	if shim {
		cnt.ShimPackets++
		cnt.ShimOcts += uint64(size)
	}
	k := netem.Packet{Data: pkt, Size: size, ECT: true}
	if shim {
		k.Tag = shimMark{}
	} else if s == 0 {
		if h := c.fl.pack(pkt); h != 0 {
			k.Data, k.ID = nil, h
		}
	}
	source := !shim && len(pkt) >= roce.BTHLen && roce.Opcode(pkt[0]).Info().Source
	var p uint32
	if source {
		cnt.DataPackets++
		p = uint32(pkt[9])<<16 | uint32(pkt[10])<<8 | uint32(pkt[11])
		if c.seen[s].add(p) {
			cnt.RepeatPackets++
			cnt.RepeatOctets += uint64(size)
		} else if s == 0 && c.sent != nil && k.ID != 0 {
			c.sent.put(psn.PSN(p), c.fl.ents[k.ID-1]) // the record of what was sent, packed once
		}
	}
	switch {
	case shim:
		// A shim's datagram is valid only while it is handed over; what travels is its copy
		// without trailing zeros (a symbolic repair symbol is a stamp and zeros, S12), restored
		// to its length on delivery.
		k.Data = c.fl.clone(trimZeros(pkt))
	case k.Data != nil && c.CopySent:
		k.Data = c.fl.clone(pkt)
	}
	v := c.Link[s].Send(c.Now, k)
	if n := c.nodes[s]; n != nil && !shim {
		n.sent(c.Now, pkt, v, c.Link[s].BusyUntil())
	}
	if v != netem.Queued {
		cnt.Dropped++
		if source {
			cnt.DataDropped++
			if s == 0 && c.track != nil {
				c.track.drop(psn.PSN(p), c.Now)
			}
		}
		if k.ID != 0 {
			c.fl.release(k.ID)
		} else if c.CopySent || shim {
			c.fl.recycle(k.Data)
		}
	}
}

// CompactWrites lets the connection carry A's WRITE packets of the message whose first packet
// has PSN first as their headers and place while they are on the link (see flights). The
// message is WRITEs of span octets (a multiple of mtu, but for the last), each repeating src: its
// octet x is src[(x mod span) mod len(src)] (len(src) a multiple of mtu when shorter than span).
func (c *Conn) CompactWrites(src []byte, span int64, first psn.PSN, mtu int) {
	c.fl.src, c.fl.span, c.fl.first, c.fl.mtu = src, span, first, mtu
}

// flush hands what each QP wants sent to its shim or its link.
func (c *Conn) flush() {
	for s := range 2 {
		if sh := c.Shim[s]; sh != nil {
			c.QP[s].Drain(c.egres[s])
		} else {
			c.QP[s].Drain(c.sendf[s])
		}
	}
}

// Step runs everything due at the current instant, then advances the clock to the next
// deadline. It returns false when nothing is pending anywhere.
func (c *Conn) Step() bool {
	for range 1 << 20 {
		for s := range 2 {
			c.QP[s].Tick(c.Now)
			if sh := c.Shim[s]; sh != nil {
				sh.Tick(c.Now, c.toQP[s], c.shimf[s])
			}
		}
		c.flush()
		c.Link[0].Deliver(c.Now, c.deliv[0])
		c.Link[1].Deliver(c.Now, c.deliv[1])
		for s, n := range c.nodes {
			if n != nil {
				n.run(c.Now, func(to, from netip.AddrPort, pkt []byte) { c.report(s, to, from, pkt) })
			}
		}
		c.flush()
		c.Last = c.Now
		next, ok := c.next()
		if !ok {
			return false
		}
		if next > c.Now {
			c.Now = next
			return true
		}
	}
	panic("sim: no progress at one instant after a million rounds")
}

func (c *Conn) next() (time.Duration, bool) {
	var d time.Duration
	ok := false
	take := func(t time.Duration, has bool) {
		if has && (!ok || t < d) {
			d, ok = t, true
		}
	}
	for s := range 2 {
		take(c.Link[s].NextDeadline())
		take(c.QP[s].NextDeadline())
		if n := c.nodes[s]; n != nil {
			take(n.NextDeadline())
		}
		if sh := c.Shim[s]; sh != nil {
			take(sh.NextDeadline())
		}
	}
	return d, ok
}

// report hands a PATH_REPORT that came back from the node on link s to the CSF beside the
// flow's source (side s), if it is addressed to it.
func (c *Conn) report(s int, to, from netip.AddrPort, pkt []byte) {
	n := c.nodes[s]
	snd, ok := c.Shim[s].(*cremSender)
	if !ok || to != snd.self {
		n.stats.ReportsNoCSF++
		return
	}
	n.stats.ReportsDelivered++
	if m, err := wire.ParsePathReport(pkt); err == nil {
		for _, h := range m.Hops {
			if h.QueueDelayChangeUS > 0 {
				n.stats.DelayRising++
				break
			}
		}
	}
	snd.report(c.Now, from, pkt, c.shimf[s])
}

// RunUntil steps until done returns true; it fails when nothing is pending and done is still
// false, or when the virtual time passes limit.
func (c *Conn) RunUntil(done func() bool, limit time.Duration) error {
	for !done() {
		if c.Now > limit {
			return fmt.Errorf("sim: not done after %v of virtual time", limit)
		}
		if !c.Step() {
			if done() {
				return nil
			}
			return fmt.Errorf("sim: idle at %v and not done", c.Now)
		}
	}
	return nil
}

// trimZeros returns pkt without its trailing zero octets.
func trimZeros(pkt []byte) []byte {
	var zeros [256]byte // compared a block at a time first
	n := len(pkt)
	for n >= len(zeros) && string(pkt[n-len(zeros):n]) == string(zeros[:]) {
		n -= len(zeros)
	}
	for n >= 8 && binary.NativeEndian.Uint64(pkt[n-8:]) == 0 {
		n -= 8
	}
	for n > 0 && pkt[n-1] == 0 {
		n--
	}
	return pkt[:n]
}

// shimMark tags a shim's packets on the link.
type shimMark struct{}

// psnSet remembers which 24-bit PSNs were sent, one bit each, in chunks of 64 Ki PSNs
// allocated as they are first touched: a message of a few thousand packets costs 8 KiB, not the
// 2 MiB of the whole PSN space.
type psnSet struct {
	chunks [psnChunks]*[psnChunkWords]uint64
}

const (
	psnChunkBits  = 16
	psnChunks     = 1 << (24 - psnChunkBits)
	psnChunkWords = 1 << psnChunkBits / 64
)

// has reports whether p is marked.
func (s *psnSet) has(p uint32) bool {
	p &= 1<<24 - 1
	c := s.chunks[p>>psnChunkBits]
	i := p & (1<<psnChunkBits - 1)
	return c != nil && c[i/64]&(1<<(i%64)) != 0
}

// add marks p and reports whether it was already marked.
func (s *psnSet) add(p uint32) bool {
	p &= 1<<24 - 1
	c := s.chunks[p>>psnChunkBits]
	if c == nil {
		c = new([psnChunkWords]uint64)
		s.chunks[p>>psnChunkBits] = c
	}
	i := p & (1<<psnChunkBits - 1)
	w, b := i/64, uint64(1)<<(i%64)
	had := c[w]&b != 0
	c[w] |= b
	return had
}
