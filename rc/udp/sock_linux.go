package udp

import (
	"net"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/crem-project/crem/internal/mmsg"
)

// oobSize holds the one control message the read loop asks for: the socket's drop count.
var oobSize = unix.CmsgSpace(4)

// setBuffers asks for size octets of kernel buffer each way: first with SO_RCVBUFFORCE and
// SO_SNDBUFFORCE, which pass net.core.rmem_max and wmem_max but need CAP_NET_ADMIN, then with
// SO_RCVBUF and SO_SNDBUF, which the kernel caps at them. It turns on SO_RXQ_OVFL (each
// datagram then carries the socket's drop count) and returns what the kernel granted, as its
// getsockopt reports it (Linux doubles what it accepted, for its bookkeeping). All best effort.
func setBuffers(sock *net.UDPConn, size int) (b Buffers) {
	rc, err := sock.SyscallConn()
	if err != nil {
		return b
	}
	rc.Control(func(fd uintptr) {
		s := int(fd)
		if unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size) == nil {
			b.ReadForced = true
		} else {
			unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUF, size)
		}
		if unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size) == nil {
			b.WriteForced = true
		} else {
			unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_SNDBUF, size)
		}
		b.Read, _ = unix.GetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUF)
		b.Write, _ = unix.GetsockoptInt(s, unix.SOL_SOCKET, unix.SO_SNDBUF)
		b.Asked = size
		b.DropsCounted = unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1) == nil
	})
	return b
}

// controlDrops is the socket's drop count a datagram's control messages carry (SO_RXQ_OVFL).
func controlDrops(oob []byte) (uint32, bool) {
	c := mmsg.ParseControl(oob)
	return c.Drops, c.HasDrops
}

// socketMem asks the kernel for the socket's drop count now (SO_MEMINFO's SK_MEMINFO_DROPS,
// the counter SO_RXQ_OVFL reports: it also has the drops after the last datagram read) and the
// memory its receive queue holds (SK_MEMINFO_RMEM_ALLOC: datagrams not yet read).
func socketMem(sock *net.UDPConn) (drops uint32, queued int, ok bool) {
	rc, err := sock.SyscallConn()
	if err != nil {
		return 0, 0, false
	}
	var mem [16]uint32
	rc.Control(func(fd uintptr) {
		l := uint32(unsafe.Sizeof(mem))
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO,
			uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&l)), 0)
		ok = e == 0 && l >= 4*(unix.SK_MEMINFO_DROPS+1)
	})
	if !ok {
		return 0, 0, false
	}
	return mem[unix.SK_MEMINFO_DROPS], int(mem[unix.SK_MEMINFO_RMEM_ALLOC]), true
}
