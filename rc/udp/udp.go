// Package udp drives rc queue pairs over real UDP sockets: one socket per Host (port 4791 by
// default), shared by every QP the host carries, demultiplexed by destination QP; the wall
// clock; an optional in-process impairment (netem) on each QP's outbound path; and an
// optional pcap of every packet as sent, dropped ones included.
package udp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/rc"
	"github.com/crem-project/crem/roce"
)

// DefaultPort is the RoCEv2 UDP port.
const DefaultPort = roce.UDPPort

// Options configures a Host.
type Options struct {
	// Pcap, if set, receives a classic pcap of every packet the host's QPs send, framed in
	// Ethernet, IPv4 or IPv6 and UDP under each flow's logical header (so that the ICRCs verify
	// and decoders see port 4791), including the packets the impairment drops.
	Pcap io.Writer
	// SocketBuffer is the kernel buffer size asked for each direction (default 8 MiB): with
	// CAP_NET_ADMIN beyond net.core.rmem_max and wmem_max (SO_RCVBUFFORCE, SO_SNDBUFFORCE),
	// otherwise capped by them. Host.Socket says what the kernel granted.
	SocketBuffer int
}

// Buffers is what a host asked of the kernel for its socket and what it got.
type Buffers struct {
	Asked int // octets asked for each direction
	// Read and Write are the buffers granted, as the kernel reports them (Linux doubles what
	// it accepted, for its bookkeeping); 0 where unknown.
	Read, Write int
	// ReadForced and WriteForced: the kernel took SO_RCVBUFFORCE / SO_SNDBUFFORCE (the process
	// has CAP_NET_ADMIN), so net.core.rmem_max / wmem_max did not cap the buffer.
	ReadForced, WriteForced bool
	// DropsCounted: every datagram read carries the socket's drop count (SO_RXQ_OVFL).
	DropsCounted bool
}

// SocketStats is what the kernel says of a host's socket.
type SocketStats struct {
	Buffers
	// Drops is the kernel's count of datagrams it dropped on the socket since it was opened
	// (its receive queue was full: the reader did not keep up), from the count the datagrams
	// carry (SO_RXQ_OVFL) and, on Linux, the socket's own counter (SO_MEMINFO), which also
	// has the drops after the last datagram read. DropsKnown is false where there is none.
	Drops      uint64
	DropsKnown bool
	// Queued is the memory the socket's receive queue holds now, datagrams not yet read
	// (Linux's SK_MEMINFO_RMEM_ALLOC, which counts the kernel's bookkeeping; 0 where unknown).
	Queued int
}

// Counts counts what a QP's outbound path did.
type Counts struct {
	Sent, Dropped         uint64
	DataSent, DataDropped uint64 // packets that take a PSN: requests and READ responses
	AckSent, AckDropped   uint64
	WriteErrors           uint64
	// Received and DataReceived count the datagrams the socket handed to this QP: with the
	// peer's counts they tell what the sockets lost beyond the impairment.
	Received, DataReceived uint64
	// FirstDataAt is when (host time: since the host started) the QP sent its first data
	// packet; FirstRetransmissionAt when it sent its first retransmission, if Retransmitted.
	FirstDataAt, FirstRetransmissionAt time.Duration
	Retransmitted                      bool
}

// Host is a UDP socket and the QPs it carries. Its methods are safe for concurrent use.
type Host struct {
	sock  *net.UDPConn
	local netip.AddrPort
	start time.Time

	mu    sync.Mutex
	conns map[uint32]*Conn
	pcap  *capture.Writer
	pbuf  *bufio.Writer
	err   error // the first pcap error

	// Counters of datagrams no QP took.
	unknownQP, runts uint64
	// The socket: its buffers, and the latest drop count a datagram carried.
	bufs         Buffers
	ctlDrops     uint32
	ctlDropsSeen bool

	wake      chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup
}

// Conn is one QP on a host and its peer.
type Conn struct {
	h      *Host
	qp     *rc.QP
	peer   netip.AddrPort
	link   *netem.Link
	onComp func(rc.Completion)
	out    roce.LogicalHeader
	counts Counts
	comps  []rc.Completion
}

// Listen opens a host's socket on addr (host:port; port 0 picks one).
func Listen(addr string, opt Options) (*Host, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("rc/udp: listen address %q: %w", addr, err)
	}
	sock, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("rc/udp: %w", err)
	}
	sz := opt.SocketBuffer
	if sz <= 0 {
		sz = 8 << 20
	}
	bufs := setBuffers(sock, sz) // best effort
	h := &Host{sock: sock, local: sock.LocalAddr().(*net.UDPAddr).AddrPort(), start: time.Now(), bufs: bufs,
		conns: map[uint32]*Conn{}, wake: make(chan struct{}, 1), closed: make(chan struct{})}
	if opt.Pcap != nil {
		h.pbuf = bufio.NewWriterSize(opt.Pcap, 1<<20)
		if h.pcap, err = capture.NewWriter(h.pbuf); err != nil {
			sock.Close()
			return nil, err
		}
	}
	h.wg.Add(2)
	go h.readLoop()
	go h.timerLoop()
	return h, nil
}

// LocalAddr returns the socket's address.
func (h *Host) LocalAddr() netip.AddrPort { return h.local }

// Close stops the host, closes its socket and flushes the pcap. It returns the first pcap error.
// It may be called more than once, from any goroutine: every call waits for the host to stop
// and returns the same error.
func (h *Host) Close() error {
	h.closeOnce.Do(func() {
		close(h.closed)
		h.sock.Close()
		h.wg.Wait()
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.pbuf != nil && h.err == nil {
			h.err = h.pbuf.Flush()
		}
		h.closeErr = h.err
	})
	return h.closeErr
}

// Dropped returns the datagrams that named no QP of this host and those too short for a BTH.
func (h *Host) Dropped() (unknownQP, runts uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unknownQP, h.runts
}

// Socket returns the socket's buffers and the kernel's count of the datagrams it dropped there.
func (h *Host) Socket() SocketStats {
	h.mu.Lock()
	st := SocketStats{Buffers: h.bufs, Drops: uint64(h.ctlDrops), DropsKnown: h.ctlDropsSeen}
	h.mu.Unlock()
	if d, q, ok := socketMem(h.sock); ok {
		st.Drops, st.DropsKnown, st.Queued = max(st.Drops, uint64(d)), true, q
	}
	return st
}

// Settle waits, at most max, until the socket's receive queue is empty: every datagram that
// reached the socket has been read, so that counts taken after it do not miss those still
// queued (a reader behind the senders holds many). It reports whether the queue emptied
// (false too where the queue cannot be seen).
func (h *Host) Settle(max time.Duration) bool {
	deadline := time.Now().Add(max)
	for {
		_, q, ok := socketMem(h.sock)
		if !ok {
			return false
		}
		if q == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

// Add puts qp on the host, sending to peer. impair, if not nil, configures the in-process
// impairment of its outbound path. onComp, if not nil, sees each completion as soon as the QP
// produces it, under the host's lock, before any later packet is handled; it may call the QP
// (post more work) but not the host. Without it, poll the QP's completions inside Do.
func (h *Host) Add(qp *rc.QP, peer netip.AddrPort, impair *netem.Config, onComp func(rc.Completion)) (*Conn, error) {
	cfg := qp.Config()
	c := &Conn{h: h, qp: qp, peer: peer, onComp: onComp,
		out: roce.LogicalHeader{Src: cfg.LocalAddr, Dst: cfg.RemoteAddr, SrcPort: cfg.LocalPort}}
	if impair != nil {
		l, err := netem.NewLink(*impair)
		if err != nil {
			return nil, fmt.Errorf("rc/udp: impairment: %w", err)
		}
		c.link = l
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conns[cfg.QPN] != nil {
		return nil, fmt.Errorf("rc/udp: QP %#x already on this host", cfg.QPN)
	}
	h.conns[cfg.QPN] = c
	h.kick()
	return c, nil
}

// Remove takes a QP off the host.
func (h *Host) Remove(c *Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.conns, c.qp.Config().QPN)
}

// Do runs f with the QP under the host's lock (post work, read stats), then lets the host send
// what it wants.
func (c *Conn) Do(f func(qp *rc.QP)) {
	h := c.h
	h.mu.Lock()
	f(c.qp)
	now := h.now()
	c.qp.Tick(now)
	c.flush(now)
	h.mu.Unlock()
	h.kick()
}

// Counts returns what the QP's outbound path did.
func (c *Conn) Counts() Counts {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	return c.counts
}

func (h *Host) now() time.Duration { return time.Since(h.start) }

func (h *Host) kick() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// flush sends what the QP drained: to the pcap, through the impairment, to the socket; then
// hands out its completions.
func (c *Conn) flush(now time.Duration) {
	c.qp.Drain(func(pkt []byte) { c.send(now, pkt) })
	c.noteRetransmission(now)
	for c.onComp != nil { // without a callback the owner polls the QP itself, under Do
		c.comps = c.qp.PollCompletions(c.comps[:0])
		if len(c.comps) == 0 {
			return
		}
		for _, x := range c.comps {
			c.onComp(x)
		}
		// Work posted by the callback goes out now.
		c.qp.Tick(now)
		c.qp.Drain(func(pkt []byte) { c.send(now, pkt) })
		c.noteRetransmission(now)
	}
}

// noteRetransmission records the time of the QP's first retransmission, once it has made one.
func (c *Conn) noteRetransmission(now time.Duration) {
	if !c.counts.Retransmitted && c.qp.Stats().RetransmittedPackets > 0 {
		c.counts.Retransmitted, c.counts.FirstRetransmissionAt = true, now
	}
}

func (c *Conn) send(now time.Duration, pkt []byte) {
	h := c.h
	data := roce.Opcode(pkt[0]).Info().Source
	c.counts.Sent++
	if data {
		c.counts.DataSent++
		if c.counts.DataSent == 1 {
			c.counts.FirstDataAt = now
		}
	} else {
		c.counts.AckSent++
	}
	if h.pcap != nil && h.err == nil {
		fh := capture.FrameHeader{Src: netip.AddrPortFrom(c.out.Src, c.out.SrcPort),
			Dst: netip.AddrPortFrom(c.out.Dst, roce.UDPPort)}
		if err := h.pcap.WriteUDP(h.start.Add(now), fh, pkt); err != nil {
			h.err = fmt.Errorf("rc/udp: pcap: %w", err)
		}
	}
	if c.link != nil {
		if v := c.link.Send(now, netem.Packet{Data: pkt}); v != netem.Queued {
			c.counts.Dropped++
			if data {
				c.counts.DataDropped++
			} else {
				c.counts.AckDropped++
			}
		}
		return
	}
	c.write(pkt)
}

func (c *Conn) write(pkt []byte) {
	if _, err := c.h.sock.WriteToUDPAddrPort(pkt, c.peer); err != nil {
		c.counts.WriteErrors++
	}
}

func (h *Host) readLoop() {
	defer h.wg.Done()
	buf := make([]byte, 65536)
	oob := make([]byte, oobSize)
	pause := time.Duration(0)
	for {
		n, oobn, _, _, err := h.sock.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// An error that lasts (a broken socket) must not spin: back off up to 100 ms.
			pause = min(max(2*pause, time.Millisecond), 100*time.Millisecond)
			select {
			case <-h.closed:
				return
			case <-time.After(pause):
			}
			continue
		}
		pause = 0
		pkt := buf[:n]
		drops, dropsOK := controlDrops(oob[:oobn])
		h.mu.Lock()
		if dropsOK {
			h.ctlDrops, h.ctlDropsSeen = drops, true
		}
		if n < roce.BTHLen+roce.ICRCLen {
			h.runts++
			h.mu.Unlock()
			continue
		}
		qpn := uint32(pkt[5])<<16 | uint32(pkt[6])<<8 | uint32(pkt[7])
		c := h.conns[qpn]
		if c == nil {
			h.unknownQP++
			h.mu.Unlock()
			continue
		}
		c.counts.Received++
		if roce.Opcode(pkt[0]).Info().Source {
			c.counts.DataReceived++
		}
		now := h.now()
		c.qp.Handle(now, pkt)
		c.flush(now)
		h.mu.Unlock()
		h.kick()
	}
}

// timerLoop is the one loop that owns a real timer: it wakes the QPs and the impairment links
// at their deadlines.
func (h *Host) timerLoop() {
	defer h.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		h.mu.Lock()
		now := h.now()
		var next time.Duration
		have := false
		for _, c := range h.conns {
			c.qp.Tick(now)
			c.flush(now)
			if c.link != nil {
				c.link.Deliver(now, func(p netem.Packet) { c.write(p.Data) })
			}
			if d, ok := c.qp.NextDeadline(); ok && (!have || d < next) {
				next, have = d, true
			}
			if c.link != nil {
				if d, ok := c.link.NextDeadline(); ok && (!have || d < next) {
					next, have = d, true
				}
			}
		}
		h.mu.Unlock()
		wait := time.Hour
		if have {
			wait = max(next-h.now(), 0)
		}
		t.Reset(wait)
		select {
		case <-h.closed:
			return
		case <-h.wake:
		case <-t.C:
		}
	}
}
