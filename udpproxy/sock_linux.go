//go:build linux

package udpproxy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// batchIO moves batches of datagrams with recvmmsg and sendmmsg. It is one direction's state
// (one for reading, one for writing) and has one owner. Everything it needs is allocated once,
// so a batch costs no allocation: the source addresses come back as netip.AddrPort and the
// traffic class travels in control messages written and parsed here, because x/net's
// ipv4.ControlMessage carries no TOS and its ReadBatch allocates a net.UDPAddr per datagram.
type batchIO struct {
	rc    syscall.RawConn
	sock6 bool // an AF_INET6 socket
	peer4 bool // a connected socket's peer is IPv4
	hs    []mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6
	oob   []byte
	// per call
	n, off int
	errno  syscall.Errno
	readFn func(fd uintptr) bool
	sendFn func(fd uintptr) bool
}

// mmsghdr is struct mmsghdr of recvmmsg(2) and sendmmsg(2): Go pads it to the alignment of
// Msghdr as C does, on 32- and 64-bit platforms alike.
type mmsghdr struct {
	Hdr unix.Msghdr
	Len uint32
}

// oobSpace holds one received TOS or traffic class control message, or one to send.
var oobSpace = unix.CmsgSpace(4)

func newBatchIO(c *net.UDPConn, n int, sock6, peer4 bool) (*batchIO, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	b := &batchIO{
		rc:    rc,
		sock6: sock6,
		peer4: peer4,
		hs:    make([]mmsghdr, n),
		iovs:  make([]unix.Iovec, n),
		names: make([]unix.RawSockaddrInet6, n),
		oob:   make([]byte, n*oobSpace),
	}
	b.readFn = b.recvmmsg
	b.sendFn = b.sendmmsg
	return b, nil
}

func (b *batchIO) recvmmsg(fd uintptr) bool {
	n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.hs[0])),
		uintptr(b.n), 0, 0, 0)
	if e == unix.EAGAIN || e == unix.EINTR {
		return false
	}
	b.errno = e
	if e == 0 {
		b.n = int(n)
	}
	return true
}

func (b *batchIO) sendmmsg(fd uintptr) bool {
	n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&b.hs[b.off])),
		uintptr(b.n-b.off), 0, 0, 0)
	if e == unix.EAGAIN || e == unix.EINTR {
		return false
	}
	b.errno = e
	if e == 0 {
		b.off += int(n)
	}
	return true
}

// read fills ms[:n] with received datagrams: each ms[i].buf must have room (its capacity is
// used); read sets its length, the source address, the traffic class when the kernel passed it,
// and trunc when the datagram did not fit.
func (b *batchIO) read(ms []dgram) (int, error) {
	n := min(len(ms), len(b.hs))
	for i := range n {
		buf := ms[i].buf[:cap(ms[i].buf)]
		b.iovs[i].Base = &buf[0]
		b.iovs[i].SetLen(len(buf))
		h := &b.hs[i].Hdr
		*h = unix.Msghdr{}
		h.Name = (*byte)(unsafe.Pointer(&b.names[i]))
		h.Namelen = unix.SizeofSockaddrInet6
		h.Iov = &b.iovs[i]
		h.SetIovlen(1)
		h.Control = &b.oob[i*oobSpace]
		h.SetControllen(oobSpace)
		b.hs[i].Len = 0
	}
	b.n = n
	if err := b.rc.Read(b.readFn); err != nil {
		return 0, err
	}
	if b.errno != 0 {
		return 0, fmt.Errorf("recvmmsg: %w", b.errno)
	}
	for i := range b.n {
		h := &b.hs[i].Hdr
		m := &ms[i]
		m.buf = m.buf[:min(int(b.hs[i].Len), cap(m.buf))]
		m.trunc = h.Flags&unix.MSG_TRUNC != 0
		m.addr = sockaddrToAddrPort(&b.names[i], h.Namelen)
		m.tos, m.hasTOS = parseTOS(b.oob[i*oobSpace : i*oobSpace+int(h.Controllen)])
	}
	return b.n, nil
}

// write sends ms, each to its addr (or to the connected peer when addr is not valid) with its
// traffic class when hasTOS is set. It returns how many were sent before the first error; the
// caller counts the failed datagram and calls again with the rest.
func (b *batchIO) write(ms []dgram) (int, error) {
	n := min(len(ms), len(b.hs))
	for i := range n {
		m := &ms[i]
		buf := m.buf[:cap(m.buf)]
		b.iovs[i].Base = &buf[0]
		b.iovs[i].SetLen(len(m.buf))
		h := &b.hs[i].Hdr
		*h = unix.Msghdr{}
		h.Iov = &b.iovs[i]
		h.SetIovlen(1)
		v4 := b.peer4 || !b.sock6
		if m.addr.IsValid() {
			h.Name = (*byte)(unsafe.Pointer(&b.names[i]))
			h.Namelen = addrPortToSockaddr(&b.names[i], m.addr, b.sock6)
			v4 = !b.sock6 || m.addr.Addr().Unmap().Is4()
		}
		if m.hasTOS {
			oob := b.oob[i*oobSpace : (i+1)*oobSpace]
			putTOS(oob, m.tos, v4)
			h.Control = &oob[0]
			h.SetControllen(oobSpace)
		}
	}
	b.n, b.off = n, 0
	if err := b.rc.Write(b.sendFn); err != nil {
		return b.off, err
	}
	if b.errno != 0 {
		return b.off, fmt.Errorf("sendmmsg: %w", b.errno)
	}
	return b.off, nil
}

func sockaddrToAddrPort(sa *unix.RawSockaddrInet6, n uint32) netip.AddrPort {
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		p := (*[2]byte)(unsafe.Pointer(&sa4.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), uint16(p[0])<<8|uint16(p[1]))
	case unix.AF_INET6:
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		a := netip.AddrFrom16(sa.Addr).Unmap()
		return netip.AddrPortFrom(a, uint16(p[0])<<8|uint16(p[1]))
	}
	return netip.AddrPort{}
}

// addrPortToSockaddr writes ap as a sockaddr for a socket of the given family (an IPv6 socket
// reaches IPv4 peers through mapped addresses) and returns its length.
func addrPortToSockaddr(sa *unix.RawSockaddrInet6, ap netip.AddrPort, sock6 bool) uint32 {
	port := ap.Port()
	if !sock6 {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		*sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: ap.Addr().Unmap().As4()}
		p := (*[2]byte)(unsafe.Pointer(&sa4.Port))
		p[0], p[1] = byte(port>>8), byte(port)
		return unix.SizeofSockaddrInet4
	}
	*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: ap.Addr().As16()}
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	p[0], p[1] = byte(port>>8), byte(port)
	return unix.SizeofSockaddrInet6
}

// parseTOS finds the IPv4 TOS or IPv6 traffic class in received control messages.
func parseTOS(oob []byte) (uint8, bool) {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(oob) {
			return 0, false
		}
		data := oob[unix.CmsgLen(0):l]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			return data[0], true
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			return uint8(*(*int32)(unsafe.Pointer(&data[0]))), true
		}
		sp := unix.CmsgSpace(l - unix.CmsgLen(0))
		if sp > len(oob) {
			return 0, false
		}
		oob = oob[sp:]
	}
	return 0, false
}

// putTOS writes a control message that sets the TOS (IPv4) or traffic class (IPv6) of one
// datagram; oob must hold oobSpace octets.
func putTOS(oob []byte, tos uint8, v4 bool) {
	clear(oob)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	if v4 {
		h.Level, h.Type = unix.IPPROTO_IP, unix.IP_TOS
	} else {
		h.Level, h.Type = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
	}
	h.SetLen(unix.CmsgLen(4))
	*(*int32)(unsafe.Pointer(&oob[unix.CmsgLen(0)])) = int32(tos)
}

// enableTOS asks the kernel to pass the TOS (and, on IPv6 sockets, the traffic class) of every
// received datagram.
func enableTOS(c *net.UDPConn, sock6 bool) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		// IPv4 datagrams on a dual-stack IPv6 socket report their TOS through IP_RECVTOS too.
		e4 := unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		if sock6 {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
			if e4 != nil && serr == nil && !errors.Is(e4, unix.ENOPROTOOPT) {
				serr = e4
			}
			return
		}
		serr = e4
	})
	if err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("enabling IP_RECVTOS: %w", serr)
	}
	return nil
}

// socketIs6 reports whether c is an AF_INET6 socket (which may also carry IPv4 through mapped
// addresses).
func socketIs6(c *net.UDPConn) (bool, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return false, err
	}
	var dom int
	var serr error
	if err := rc.Control(func(fd uintptr) {
		dom, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN)
	}); err != nil {
		return false, err
	}
	if serr != nil {
		return false, fmt.Errorf("reading the socket's family: %w", serr)
	}
	return dom == unix.AF_INET6, nil
}

// ecnSupported says whether this platform reads and writes the TOS of each datagram.
const ecnSupported = true
