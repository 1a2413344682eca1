package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// receiver reads batches with recvmmsg straight into pooled packet buffers, with each
// datagram's source address and TOS (for the CE mark), allocating nothing per datagram (the
// approach of package udpproxy).
type receiver struct {
	s     *sock
	rc    syscall.RawConn
	hs    []mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6
	oob   []byte
	ps    []*pkt
	drops uint32 // the kernel's count of datagrams this socket dropped (buffer full)
	fd    int    // >= 0: read this descriptor directly, never waiting (pairLoop)
	// per call
	n      int
	errno  syscall.Errno
	wait   bool
	readFn func(fd uintptr) bool
}

type mmsghdr struct {
	Hdr unix.Msghdr
	Len uint32
}

// oobSpace holds the TOS (or traffic class) and the socket's drop count (SO_RXQ_OVFL).
var oobSpace = 2 * unix.CmsgSpace(4)

func (g *Gateway) newReceiver(s *sock, n int) (*receiver, error) {
	rc, err := s.conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var serr error
	rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1) // best effort: a counter
		if s.addr.Addr().Is6() {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
		}
	})
	if serr != nil {
		return nil, fmt.Errorf("gateway: %v: IP_RECVTOS: %w", s, serr)
	}
	r := &receiver{s: s, rc: rc, hs: make([]mmsghdr, n), iovs: make([]unix.Iovec, n),
		names: make([]unix.RawSockaddrInet6, n), oob: make([]byte, n*oobSpace), ps: make([]*pkt, n), fd: -1}
	for i := range r.ps {
		r.ps[i] = g.getPkt()
	}
	r.readFn = r.recvmmsg
	return r, nil
}

func (r *receiver) recvmmsg(fd uintptr) bool {
	n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hs[0])), uintptr(len(r.hs)), unix.MSG_DONTWAIT, 0, 0)
	if (e == unix.EAGAIN || e == unix.EINTR) && r.wait {
		return false
	}
	r.errno, r.n = 0, 0
	switch e {
	case 0:
		r.n = int(n)
	case unix.EAGAIN, unix.EINTR:
	default:
		r.errno = e
	}
	return true
}

// read receives a batch into r.ps[:n]; with wait false it returns 0 at once when nothing is
// waiting.
func (r *receiver) read(wait bool) (int, error) {
	for i := range r.hs {
		buf := r.ps[i].buf
		r.iovs[i].Base = &buf[0]
		r.iovs[i].SetLen(len(buf))
		h := &r.hs[i].Hdr
		*h = unix.Msghdr{}
		h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		h.Namelen = unix.SizeofSockaddrInet6
		h.Iov = &r.iovs[i]
		h.SetIovlen(1)
		h.Control = &r.oob[i*oobSpace]
		h.SetControllen(oobSpace)
		r.hs[i].Len = 0
	}
	r.wait = wait
	if r.fd >= 0 {
		r.recvmmsg(uintptr(r.fd))
	} else if err := r.rc.Read(r.readFn); err != nil {
		return 0, err
	}
	if r.errno != 0 {
		return 0, fmt.Errorf("recvmmsg: %w", r.errno)
	}
	for i := range r.n {
		h := &r.hs[i].Hdr
		p := r.ps[i]
		p.n = int(r.hs[i].Len)
		p.kind = uint8(r.s.kind)
		p.from = sockaddrToAddrPort(&r.names[i], h.Namelen)
		p.ce = false
		if h.Flags&unix.MSG_TRUNC != 0 {
			p.n = len(p.buf) + 1 // marks truncation
		}
		tos, ok, drops, hasDrops := parseControl(r.oob[i*oobSpace : i*oobSpace+int(h.Controllen)])
		if ok {
			p.ce = tos&3 == 3
		}
		if hasDrops {
			r.drops = drops
		}
	}
	return r.n, nil
}

func sockaddrToAddrPort(sa *unix.RawSockaddrInet6, n uint32) netip.AddrPort {
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		p := (*[2]byte)(unsafe.Pointer(&sa4.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), uint16(p[0])<<8|uint16(p[1]))
	case unix.AF_INET6:
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(p[0])<<8|uint16(p[1]))
	}
	return netip.AddrPort{}
}

// parseControl finds the TOS (IPv4) or traffic class (IPv6) and the socket's cumulative drop
// count in a datagram's control messages.
func parseControl(oob []byte) (tos uint8, hasTOS bool, drops uint32, hasDrops bool) {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(oob) {
			return
		}
		data := oob[unix.CmsgLen(0):l]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			tos, hasTOS = data[0], true
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			tos, hasTOS = uint8(*(*int32)(unsafe.Pointer(&data[0]))), true
		case h.Level == unix.SOL_SOCKET && h.Type == unix.SO_RXQ_OVFL && len(data) >= 4:
			drops, hasDrops = *(*uint32)(unsafe.Pointer(&data[0])), true
		}
		sp := unix.CmsgSpace(l - unix.CmsgLen(0))
		if sp > len(oob) {
			return
		}
		oob = oob[sp:]
	}
	return
}

// dispatch hands r.ps[:n] to their shards, replacing each buffer handed on.
func (g *Gateway) dispatch(r *receiver, n int) {
	if n > 0 {
		g.c.socketDrops[r.s.kind].Store(uint64(r.drops))
	}
	for i := range n {
		p := r.ps[i]
		if g.accept(r.s, p) {
			r.ps[i] = g.getPkt()
		}
	}
}

// readLoop reads one socket until it is closed.
func (g *Gateway) readLoop(s *sock) {
	r, err := g.newReceiver(s, 32)
	if err != nil {
		g.log.Error("reader", "err", err)
		return
	}
	for {
		n, err := r.read(true)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			g.c.readErrors.Add(1)
			select {
			case <-g.done:
				return
			default:
			}
			continue
		}
		g.dispatch(r, n)
	}
}

// pairLoop reads the CREM socket and the relayed datagrams from the peer in one goroutine:
// each round reads the CREM socket first and then drains the data socket, and hands on the
// data first, so that a REPAIR is never handed on ahead of a source the kernel had received
// before it (the CRF would restore a packet that is already here). Two goroutines wait for the
// sockets in Go's poller (they read nothing) and wake it. It reads the descriptors directly, so
// Run stops it (g.rawReaders) before it closes the sockets.
// waiters has two counts for the two waiting goroutines.
func (g *Gateway) pairLoop(crem, data *sock, waiters *sync.WaitGroup) {
	defer g.rawReaders.Done()
	rc, err := g.newReceiver(crem, 32)
	if err != nil {
		g.log.Error("reader", "err", err)
		return
	}
	rd, err := g.newReceiver(data, 32)
	if err != nil {
		g.log.Error("reader", "err", err)
		return
	}
	for _, r := range []*receiver{rc, rd} {
		r.rc.Control(func(fd uintptr) { r.fd = int(fd) })
	}
	wake := make(chan struct{}, 1)
	for _, r := range []*receiver{rc, rd} {
		go func() {
			defer waiters.Done()
			armed := false
			wait := func(uintptr) bool {
				armed = !armed
				return !armed // the first call asks to wait, the second says: readable
			}
			for {
				armed = false
				if err := r.rc.Read(wait); err != nil {
					return // closed
				}
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		}()
	}
	for {
		nc, errc := rc.read(false)
		if errc != nil {
			g.c.readErrors.Add(1)
		}
		// Everything the data socket held when the CREM messages were read goes first.
		total := 0
		for range 64 {
			nd, errd := rd.read(false)
			if errd != nil {
				g.c.readErrors.Add(1)
			}
			g.dispatch(rd, nd)
			total += nd
			if nd < len(rd.hs) {
				break
			}
		}
		g.dispatch(rc, nc)
		if nc == 0 && total == 0 {
			select {
			case <-wake:
			case <-g.done:
				return
			}
		}
	}
}
