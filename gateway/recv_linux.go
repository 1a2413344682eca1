package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"github.com/crem-project/crem/internal/mmsg"
	"github.com/crem-project/crem/wire"
	"golang.org/x/sys/unix"
)

// receiver reads batches with recvmmsg straight into pooled packet buffers, with each
// datagram's source address and TOS (for the CE mark), allocating nothing per datagram; the
// batch itself is package mmsg's, shared with udpproxy.
type receiver struct {
	s     *sock
	rc    syscall.RawConn
	b     *mmsg.Batch
	ps    []*pkt    // the slots without GRO
	gbs   []*groBuf // the slots with GRO (s.gro), and what each received:
	lens  []int     // the octets it holds
	segs  []int     // the size of each datagram among them (0: one datagram; -1: truncated)
	from  []netip.AddrPort
	ce    []bool
	drops uint32 // the kernel's count of datagrams this socket dropped (buffer full)
	fd    int    // >= 0: read this descriptor directly, never waiting (pairLoop)
	// handed marks the slots of the last read handed on by a control pass (dispatchSome).
	handed []bool
	// per call
	n      int
	errno  syscall.Errno
	wait   bool
	readFn func(fd uintptr) bool
}

// oobSpace holds the TOS (or traffic class), the socket's drop count (SO_RXQ_OVFL) and the
// segment size of a coalesced receive (UDP_GRO).
var oobSpace = 2*unix.CmsgSpace(4) + mmsg.GROSpace

// groSlots is how many coalesced receives one recvmmsg takes (each up to 64 KiB).
const groSlots = 16

func (g *Gateway) newReceiver(s *sock, n int) (*receiver, error) {
	rc, err := s.conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1) // best effort: a counter
		if s.addr.Addr().Is6() {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
		}
	}); err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, fmt.Errorf("gateway: %v: IP_RECVTOS: %w", s, serr)
	}
	r := &receiver{s: s, rc: rc, fd: -1}
	if s.gro {
		n = min(n, groSlots)
		r.gbs, r.lens, r.segs = make([]*groBuf, n), make([]int, n), make([]int, n)
		r.from, r.ce = make([]netip.AddrPort, n), make([]bool, n)
		for i := range r.gbs {
			r.gbs[i] = g.gro.get(true)
		}
	} else {
		r.ps = make([]*pkt, n)
		for i := range r.ps {
			r.ps[i] = g.large.get(true)
		}
	}
	r.b = mmsg.NewBatch(n, oobSpace)
	r.handed = make([]bool, n)
	r.readFn = r.recvmmsg
	if g.testReceiver != nil {
		g.testReceiver(r)
	}
	return r, nil
}

func (r *receiver) recvmmsg(fd uintptr) bool {
	n, e := r.b.Recv(fd, r.b.Len(), unix.MSG_DONTWAIT)
	if (e == unix.EAGAIN || e == unix.EINTR) && r.wait {
		return false
	}
	r.errno, r.n = 0, 0
	switch e {
	case 0:
		r.n = n
	case unix.EAGAIN, unix.EINTR:
	default:
		r.errno = e
	}
	return true
}

// read receives a batch into r.ps[:n]; with wait false it returns 0 at once when nothing is
// waiting.
func (r *receiver) read(wait bool) (int, error) {
	for i, p := range r.ps {
		r.b.SetRecv(i, p.buf)
	}
	for i, gb := range r.gbs {
		r.b.SetRecv(i, gb.b[:])
	}
	r.wait = wait
	if r.fd >= 0 {
		r.readFn(uintptr(r.fd))
	} else if err := r.rc.Read(r.readFn); err != nil {
		return 0, err
	}
	if r.errno != 0 {
		return 0, fmt.Errorf("recvmmsg: %w", r.errno)
	}
	if r.gbs != nil {
		for i := range r.n {
			m := r.b.Received(i)
			r.lens[i], r.segs[i], r.from[i], r.ce[i] = m.N, 0, m.From, m.HasTOS && m.TOS&3 == 3
			if m.HasSegment {
				r.segs[i] = m.Segment
			}
			if m.Trunc { // cannot be: the buffer holds any datagram
				r.segs[i] = -1
			}
			if m.HasDrops {
				r.drops = m.Drops
			}
		}
		return r.n, nil
	}
	for i := range r.n {
		p := r.ps[i]
		m := r.b.Received(i)
		p.n = m.N
		p.kind = uint8(r.s.kind)
		p.from = m.From
		p.ce = false
		if m.Trunc {
			p.n = len(p.buf) + 1 // marks truncation
		}
		if m.HasTOS {
			p.ce = m.TOS&3 == 3
		}
		if m.HasDrops {
			r.drops = m.Drops
		}
	}
	return r.n, nil
}

// dispatch hands r.ps[:n] to their shards, replacing each buffer handed on.
func (g *Gateway) dispatch(r *receiver, n int) { g.dispatchSome(r, n, selectAll) }

// Which messages of a read dispatchSome hands on: all of them, or, in two passes, first the
// ones that are not REPAIR messages and then the REPAIRs (cremFirstLoop).
type dispatchSelect uint8

const (
	selectAll dispatchSelect = iota
	selectControl
	selectRepair
)

// dispatchSome hands on the messages of the last read that sel selects. The control pass
// marks what it handed on, so that the REPAIR pass after it skips those slots (their buffers
// are new ones by then).
func (g *Gateway) dispatchSome(r *receiver, n int, sel dispatchSelect) {
	if n > 0 && sel != selectRepair {
		g.c.socketDrops[r.s.kind].Store(uint64(r.drops))
	}
	if sel == selectControl {
		clear(r.handed[:n])
	}
	// take says whether the message in b goes in this pass, and marks it for the next one.
	take := func(i int, b []byte) bool {
		switch sel {
		case selectAll:
			return true
		case selectRepair:
			return !r.handed[i]
		}
		if len(b) > 0 && wire.Type(b[0]&0x0f) == wire.TypeRepair {
			return false
		}
		r.handed[i] = true
		return true
	}
	if r.gbs != nil {
		for i := range n {
			// A coalesced receive holds datagrams of one size from one sender: its first
			// says what they are.
			if !take(i, r.gbs[i].b[:min(max(r.lens[i], 0), len(r.gbs[i].b))]) {
				continue
			}
			if r.segs[i] < 0 {
				g.c.rx[r.s.kind].Add(1)
				g.c.truncated.Add(1)
				g.c.dropped[r.s.kind].Add(1)
				continue
			}
			g.handOnGRO(r.s, r.gbs[i], r.lens[i], r.segs[i], r.from[i], r.ce[i], &r.gbs[i])
		}
		return
	}
	for i := range n {
		if p := r.ps[i]; take(i, p.buf[:min(max(p.n, 0), len(p.buf))]) {
			g.handOn(r.s, p, &r.ps[i])
		}
	}
}

// readLoop reads one socket until it is closed; a read that fails is tried again after a
// pause (readPause). It returns why it ended: nil when the gateway stops.
func (g *Gateway) readLoop(s *sock) error {
	r, err := g.newReceiver(s, 32)
	if err != nil {
		return fmt.Errorf("gateway: %v: reader: %w", s, err)
	}
	var pause readPause
	for {
		n, err := r.read(true)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("gateway: %v: socket closed", s)
			}
			g.c.readErrors.Add(1)
			if !pause.wait(g) {
				return nil
			}
			continue
		}
		pause.reset()
		g.dispatch(r, n)
	}
}

// pairLoop reads the CREM socket and the relayed datagrams from the peer in one goroutine
// (cremFirstLoop): each round reads the CREM socket first and then drains the data socket, and
// hands on the data first. It reads the descriptors directly, so Run stops it before it closes
// the sockets.
func (g *Gateway) pairLoop(crem, data *sock, run func(*sync.WaitGroup, func() error), waiters *sync.WaitGroup) error {
	rd, err := g.newReceiver(data, 32)
	if err != nil {
		return fmt.Errorf("gateway: %v: reader: %w", data, err)
	}
	if err := rd.rc.Control(func(d uintptr) { rd.fd = int(d) }); err != nil {
		return fmt.Errorf("gateway: %v: reader: %w", data, err)
	}
	drain := func() (int, bool) {
		total := 0
		for range 64 {
			nd, errd := rd.read(false)
			if errd != nil {
				return total, true
			}
			g.dispatch(rd, nd)
			total += nd
			if nd < rd.b.Len() {
				break
			}
		}
		return total, false
	}
	return g.cremFirstLoop(crem, rd.rc, data.String()+": socket closed", drain, run, waiters)
}

// cremFirstLoop reads the CREM socket and a data path (the relay's data socket, or the TUN
// device) in one goroutine: each round reads the CREM socket first and hands on its control
// messages, then drains the data path (drain reads what it holds without waiting and hands it
// on), and hands the REPAIR messages on last, so that a REPAIR is never handed on ahead of a
// source the kernel had received before it (the CRF would restore a packet that is already
// here, and the original would follow: a duplicate). Two goroutines wait in Go's poller for the socket and for data (they read
// nothing) and wake it; run starts them among waiters, and each ends with an error naming
// closed when its descriptor closes. Each round looks for the stop first: a data path that
// never empties does not hold it up.
func (g *Gateway) cremFirstLoop(crem *sock, data syscall.RawConn, closed string, drain func() (int, bool),
	run func(*sync.WaitGroup, func() error), waiters *sync.WaitGroup) error {
	rc, err := g.newReceiver(crem, 32)
	if err != nil {
		return fmt.Errorf("gateway: %v: reader: %w", crem, err)
	}
	if err := rc.rc.Control(func(d uintptr) { rc.fd = int(d) }); err != nil {
		return fmt.Errorf("gateway: %v: reader: %w", crem, err)
	}
	wake := make(chan struct{}, 1)
	for _, w := range []struct {
		c   syscall.RawConn
		why string
	}{{rc.rc, crem.String() + ": socket closed"}, {data, closed}} {
		run(waiters, func() error {
			armed := false
			wait := func(uintptr) bool {
				armed = !armed
				return !armed // the first call asks to wait, the second says: readable
			}
			for {
				armed = false
				if err := w.c.Read(wait); err != nil {
					return errors.New("gateway: " + w.why)
				}
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		})
	}
	var pause readPause
	for {
		select {
		case <-g.done:
			return nil
		default:
		}
		nc, errc := rc.read(false)
		// Messages for the engines' control (HELLO, HELLO_ACK, REPAIR_REQUEST, ...) go on at
		// once: a data path that lags must not hold up a handshake. Everything the data path
		// held when the REPAIRs were read goes before them.
		g.dispatchSome(rc, nc, selectControl)
		total, failed := drain()
		g.dispatchSome(rc, nc, selectRepair)
		if failed || errc != nil {
			g.c.readErrors.Add(1)
			if !pause.wait(g) {
				return nil
			}
			continue
		}
		pause.reset()
		if nc == 0 && total == 0 {
			select {
			case <-wake:
			case <-g.done:
				return nil
			}
		}
	}
}
