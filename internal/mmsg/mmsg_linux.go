package mmsg

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Hdr is struct mmsghdr of recvmmsg(2) and sendmmsg(2): Go pads it to the alignment of Msghdr
// as C does, on 32- and 64-bit platforms alike.
type Hdr struct {
	Hdr unix.Msghdr
	Len uint32
}

// TOSSpace holds one TOS or traffic class control message, received or to send.
var TOSSpace = unix.CmsgSpace(4)

// SegmentSpace holds one UDP_SEGMENT control message (GSO: the size of the datagrams a send
// is cut into).
var SegmentSpace = unix.CmsgSpace(2)

// GROSpace holds one UDP_GRO control message (the size of the datagrams a coalesced receive
// holds).
var GROSpace = unix.CmsgSpace(4)

// Batch is the storage of one batch of messages, allocated once. It has one owner.
type Batch struct {
	hs    []Hdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6
	oob   []byte
	space int // control octets per message
	per   int // iovecs per message
}

// NewBatch returns a batch of n messages of one buffer each, with oobSpace octets of control
// messages each.
func NewBatch(n, oobSpace int) *Batch { return NewGatherBatch(n, 1, oobSpace) }

// NewGatherBatch returns a batch of n messages that each gather up to bufs buffers (AddBuf),
// with oobSpace octets of control messages each.
func NewGatherBatch(n, bufs, oobSpace int) *Batch {
	return &Batch{
		hs:    make([]Hdr, n),
		iovs:  make([]unix.Iovec, n*bufs),
		names: make([]unix.RawSockaddrInet6, n),
		oob:   make([]byte, n*oobSpace),
		space: oobSpace,
		per:   bufs,
	}
}

// Len is the number of datagrams the batch holds.
func (b *Batch) Len() int { return len(b.hs) }

// SetRecv prepares datagram i to be received into buf, which must not be empty, with its
// source address and control messages.
func (b *Batch) SetRecv(i int, buf []byte) {
	iov := &b.iovs[i*b.per]
	iov.Base = &buf[0]
	iov.SetLen(len(buf))
	h := &b.hs[i].Hdr
	*h = unix.Msghdr{}
	h.Name = (*byte)(unsafe.Pointer(&b.names[i]))
	h.Namelen = unix.SizeofSockaddrInet6
	h.Iov = iov
	h.SetIovlen(1)
	if b.space > 0 {
		h.Control = &b.oob[i*b.space]
		h.SetControllen(b.space)
	}
	b.hs[i].Len = 0
}

// SetSend prepares datagram i to send buf, to `to` or, when it is not valid, to the connected
// peer; sock6 says the socket is AF_INET6. buf may be empty but must have capacity, so the
// iovec points somewhere.
func (b *Batch) SetSend(i int, buf []byte, to netip.AddrPort, sock6 bool) {
	iov := &b.iovs[i*b.per]
	setIov(iov, buf)
	h := &b.hs[i].Hdr
	*h = unix.Msghdr{}
	h.Iov = iov
	h.SetIovlen(1)
	if to.IsValid() {
		h.Name = (*byte)(unsafe.Pointer(&b.names[i]))
		h.Namelen = PutSockaddr(&b.names[i], to, sock6)
	}
}

func setIov(iov *unix.Iovec, buf []byte) {
	full := buf[:cap(buf)]
	iov.Base = &full[0]
	iov.SetLen(len(buf))
}

// AddBuf appends buf to message i, prepared with SetSend: the message sends its buffers'
// octets one after the other. It reports false, adding nothing, when the message holds the
// batch's bufs already. Like SetSend's, buf may be empty but must have capacity.
func (b *Batch) AddBuf(i int, buf []byte) bool {
	h := &b.hs[i].Hdr
	n := int(h.Iovlen)
	if n >= b.per {
		return false
	}
	setIov(&b.iovs[i*b.per+n], buf)
	h.SetIovlen(n + 1)
	return true
}

// control returns room for a control message of space octets after those message i holds,
// and extends the message's control to cover it.
func (b *Batch) control(i, space int) []byte {
	h := &b.hs[i].Hdr
	used := 0
	if h.Control != nil {
		used = int(h.Controllen)
	}
	oob := b.oob[i*b.space+used : i*b.space+used+space]
	h.Control = &b.oob[i*b.space]
	h.SetControllen(used + space)
	return oob
}

// SetTOS adds to datagram i, prepared with SetSend, a control message that sets its TOS (v4)
// or traffic class; the batch needs TOSSpace control octets per datagram.
func (b *Batch) SetTOS(i int, tos uint8, v4 bool) {
	PutTOS(b.control(i, TOSSpace), tos, v4)
}

// SetSegment adds to message i, prepared with SetSend (and AddBuf), a UDP_SEGMENT control
// message: the kernel sends its octets as datagrams of size octets each, the last one
// shorter if need be (UDP GSO). The batch needs SegmentSpace control octets per message
// (TOSSpace more with SetTOS).
func (b *Batch) SetSegment(i int, size uint16) {
	PutSegment(b.control(i, SegmentSpace), size)
}

// Recv calls recvmmsg for datagrams [0, n) on fd and returns how many arrived.
func (b *Batch) Recv(fd uintptr, n, flags int) (int, syscall.Errno) {
	return Recvmmsg(fd, b.hs[:n], flags)
}

// Send calls sendmmsg for datagrams [off, n) on fd and returns how many went.
func (b *Batch) Send(fd uintptr, off, n, flags int) (int, syscall.Errno) {
	return Sendmmsg(fd, b.hs[off:n], flags)
}

// Received is what the kernel reported about one received datagram.
type Received struct {
	N     int  // octets placed in the buffer
	Trunc bool // the datagram did not fit
	From  netip.AddrPort
	Control
}

// Received returns what arrived in datagram i after Recv.
func (b *Batch) Received(i int) Received {
	h := &b.hs[i].Hdr
	return Received{
		N:       int(b.hs[i].Len),
		Trunc:   h.Flags&unix.MSG_TRUNC != 0,
		From:    AddrPort(&b.names[i]),
		Control: ParseControl(b.oob[i*b.space : i*b.space+int(h.Controllen)]),
	}
}

// Recvmmsg is recvmmsg(2) on hs; it returns 0 and no error for an empty hs.
func Recvmmsg(fd uintptr, hs []Hdr, flags int) (int, syscall.Errno) {
	return call(unix.SYS_RECVMMSG, fd, hs, flags)
}

// Sendmmsg is sendmmsg(2) on hs; it returns 0 and no error for an empty hs.
func Sendmmsg(fd uintptr, hs []Hdr, flags int) (int, syscall.Errno) {
	return call(unix.SYS_SENDMMSG, fd, hs, flags)
}

func call(trap, fd uintptr, hs []Hdr, flags int) (int, syscall.Errno) {
	if len(hs) == 0 {
		return 0, 0
	}
	n, _, e := unix.Syscall6(trap, fd, uintptr(unsafe.Pointer(&hs[0])), uintptr(len(hs)), uintptr(flags), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}

// AddrPort reads an AF_INET or AF_INET6 sockaddr (IPv4-mapped addresses unmapped); any other
// family gives the zero AddrPort.
func AddrPort(sa *unix.RawSockaddrInet6) netip.AddrPort {
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

// PutSockaddr writes ap as a sockaddr for a socket of the given family (an IPv6 socket reaches
// IPv4 peers through mapped addresses) and returns its length.
func PutSockaddr(sa *unix.RawSockaddrInet6, ap netip.AddrPort, sock6 bool) uint32 {
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

// Control is what ParseControl found in a datagram's control messages.
type Control struct {
	TOS      uint8 // the IPv4 TOS or IPv6 traffic class
	HasTOS   bool
	Drops    uint32 // the socket's cumulative count of dropped datagrams (SO_RXQ_OVFL)
	HasDrops bool
	// Segment is the size of each datagram of a coalesced receive (UDP_GRO), the last one
	// possibly shorter; HasSegment false: one datagram.
	Segment    int
	HasSegment bool
}

// ParseControl finds the TOS or traffic class, the SO_RXQ_OVFL drop count and the UDP_GRO
// segment size in received control messages; the last of each kind counts. It stops at the first malformed message and
// keeps what it found before. The octets are copied out rather than cast, so oob need not be
// aligned.
func ParseControl(oob []byte) (c Control) {
	for len(oob) >= unix.SizeofCmsghdr {
		var h unix.Cmsghdr
		copy((*[unix.SizeofCmsghdr]byte)(unsafe.Pointer(&h))[:], oob)
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(oob) {
			return c
		}
		data := oob[unix.CmsgLen(0):l]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			c.TOS, c.HasTOS = data[0], true
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			c.TOS, c.HasTOS = uint8(binary.NativeEndian.Uint32(data)), true
		case h.Level == unix.SOL_SOCKET && h.Type == unix.SO_RXQ_OVFL && len(data) >= 4:
			c.Drops, c.HasDrops = binary.NativeEndian.Uint32(data), true
		case h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_GRO && len(data) >= 4:
			if seg := int32(binary.NativeEndian.Uint32(data)); seg > 0 {
				c.Segment, c.HasSegment = int(seg), true
			}
		}
		sp := unix.CmsgSpace(l - unix.CmsgLen(0))
		if sp > len(oob) {
			return c
		}
		oob = oob[sp:]
	}
	return c
}

// PutTOS writes a control message that sets the TOS (v4) or traffic class of one datagram;
// oob must hold TOSSpace octets and need not be aligned.
func PutTOS(oob []byte, tos uint8, v4 bool) {
	clear(oob[:TOSSpace])
	var h unix.Cmsghdr
	if v4 {
		h.Level, h.Type = unix.IPPROTO_IP, unix.IP_TOS
	} else {
		h.Level, h.Type = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
	}
	h.SetLen(unix.CmsgLen(4))
	copy(oob, (*[unix.SizeofCmsghdr]byte)(unsafe.Pointer(&h))[:])
	binary.NativeEndian.PutUint32(oob[unix.CmsgLen(0):], uint32(int32(tos)))
}

// PutSegment writes a UDP_SEGMENT control message of the given segment size; oob must hold
// SegmentSpace octets and need not be aligned.
func PutSegment(oob []byte, size uint16) {
	clear(oob[:SegmentSpace])
	var h unix.Cmsghdr
	h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	copy(oob, (*[unix.SizeofCmsghdr]byte)(unsafe.Pointer(&h))[:])
	binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], size)
}
