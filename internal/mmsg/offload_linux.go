package mmsg

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// UDP segmentation offload (GSO: one send of many equal datagrams) and receive coalescing
// (GRO: one receive of many), as quic-go and wireguard-go use them. Both are optional: a
// kernel without them refuses the socket option, and a device that cannot checksum a GSO
// send (some NICs, IPsec transforms) fails the send with EIO, after which the caller sends
// one datagram per message again.

// Most datagrams one GSO send or one GRO receive may hold (the kernel's UDP_MAX_SEGMENTS and
// UDP_GRO_CNT_MAX), and the most octets: an IPv6 datagram's payload minus its UDP header, so
// that the bound holds on either family.
const (
	MaxSegments     = 64
	MaxSegmentBytes = 65535 - 40 - 8
)

// GROBufSize holds any coalesced receive.
const GROBufSize = 65536

// GSOSupported reports whether the kernel accepts UDP_SEGMENT on the socket (Linux 4.18).
func GSOSupported(fd uintptr) bool {
	_, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT)
	return err == nil
}

// EnableGRO asks the kernel to coalesce the socket's received datagrams (Linux 5.0); each
// coalesced receive then carries a UDP_GRO control message (GROSpace).
func EnableGRO(fd uintptr) error {
	return unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 1)
}

// DisablesGSO reports whether a send error says the path cannot take GSO sends at all: EIO,
// the kernel's answer when the device cannot checksum them. Other errors (a full buffer, a
// segment larger than the path MTU) say nothing of GSO as such.
func DisablesGSO(e syscall.Errno) bool { return e == unix.EIO }
