//go:build linux

package udpproxy

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/crem-project/crem/internal/mmsg"
	"golang.org/x/sys/unix"
)

// batchIO moves batches of datagrams with recvmmsg and sendmmsg. It is one direction's state
// (one for reading, one for writing) and has one owner. Everything it needs is allocated once,
// so a batch costs no allocation: the source addresses come back as netip.AddrPort and the
// traffic class travels in control messages written and parsed by package mmsg, because x/net's
// ipv4.ControlMessage carries no TOS and its ReadBatch allocates a net.UDPAddr per datagram.
type batchIO struct {
	rc    syscall.RawConn
	sock6 bool // an AF_INET6 socket
	peer4 bool // a connected socket's peer is IPv4
	b     *mmsg.Batch
	// per call
	n, off int
	errno  syscall.Errno
	readFn func(fd uintptr) bool
	sendFn func(fd uintptr) bool
}

func newBatchIO(c *net.UDPConn, n int, sock6, peer4 bool) (*batchIO, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	b := &batchIO{
		rc:    rc,
		sock6: sock6,
		peer4: peer4,
		// one received TOS or traffic class control message, or one to send
		b: mmsg.NewBatch(n, mmsg.TOSSpace),
	}
	b.readFn = b.recvmmsg
	b.sendFn = b.sendmmsg
	return b, nil
}

func (b *batchIO) recvmmsg(fd uintptr) bool {
	n, e := b.b.Recv(fd, b.n, 0)
	if e == unix.EAGAIN || e == unix.EINTR {
		return false
	}
	b.errno = e
	if e == 0 {
		b.n = n
	}
	return true
}

func (b *batchIO) sendmmsg(fd uintptr) bool {
	n, e := b.b.Send(fd, b.off, b.n, 0)
	if e == unix.EAGAIN || e == unix.EINTR {
		return false
	}
	b.errno = e
	if e == 0 {
		b.off += n
	}
	return true
}

// read fills ms[:n] with received datagrams: each ms[i].buf must have room (its capacity is
// used); read sets its length, the source address, the traffic class when the kernel passed it,
// and trunc when the datagram did not fit.
func (b *batchIO) read(ms []dgram) (int, error) {
	n := min(len(ms), b.b.Len())
	for i := range n {
		b.b.SetRecv(i, ms[i].buf[:cap(ms[i].buf)])
	}
	b.n = n
	if err := b.rc.Read(b.readFn); err != nil {
		return 0, err
	}
	if b.errno != 0 {
		return 0, fmt.Errorf("recvmmsg: %w", b.errno)
	}
	for i := range b.n {
		m := &ms[i]
		r := b.b.Received(i)
		m.buf = m.buf[:min(r.N, cap(m.buf))]
		m.trunc = r.Trunc
		m.addr = r.From
		m.tos, m.hasTOS = r.TOS, r.HasTOS
	}
	return b.n, nil
}

// write sends ms, each to its addr (or to the connected peer when addr is not valid) with its
// traffic class when hasTOS is set. It returns how many were sent before the first error; the
// caller counts the failed datagram and calls again with the rest.
func (b *batchIO) write(ms []dgram) (int, error) {
	n := min(len(ms), b.b.Len())
	for i := range n {
		m := &ms[i]
		b.b.SetSend(i, m.buf, m.addr, b.sock6)
		if m.hasTOS {
			v4 := b.peer4 || !b.sock6
			if m.addr.IsValid() {
				v4 = !b.sock6 || m.addr.Addr().Unmap().Is4()
			}
			b.b.SetTOS(i, m.tos, v4)
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
