//go:build !linux

package udp

import "net"

var oobSize = 0

// setBuffers asks for size octets of kernel buffer each way (the kernel caps it); the drop
// count is Linux's.
func setBuffers(sock *net.UDPConn, size int) (b Buffers) {
	_ = sock.SetReadBuffer(size)
	_ = sock.SetWriteBuffer(size)
	b.Asked = size
	return b
}

func controlDrops([]byte) (uint32, bool) { return 0, false }

func socketMem(*net.UDPConn) (uint32, int, bool) { return 0, 0, false }
