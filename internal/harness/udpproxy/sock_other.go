//go:build !linux

package udpproxy

import (
	"net"
	"net/netip"
)

// batchIO on platforms without recvmmsg moves one datagram per call and neither reads nor
// sets the TOS: ECN marking is counted but not carried.
type batchIO struct {
	c     *net.UDPConn
	sock6 bool
}

func newBatchIO(c *net.UDPConn, _ int, sock6, _ bool) (*batchIO, error) {
	return &batchIO{c: c, sock6: sock6}, nil
}

func (b *batchIO) read(ms []dgram) (int, error) {
	m := &ms[0]
	n, _, flags, addr, err := b.c.ReadMsgUDPAddrPort(m.buf[:cap(m.buf)], nil)
	if err != nil {
		return 0, err
	}
	m.buf = m.buf[:n]
	m.addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	m.hasTOS = false
	m.trunc = flags&msgTrunc != 0
	return 1, nil
}

func (b *batchIO) write(ms []dgram) (int, error) {
	for i := range ms {
		m := &ms[i]
		var err error
		if m.addr.IsValid() {
			_, err = b.c.WriteToUDPAddrPort(m.buf, m.addr)
		} else {
			_, err = b.c.Write(m.buf)
		}
		if err != nil {
			return i, err
		}
	}
	return len(ms), nil
}

// msgTrunc is MSG_TRUNC on the BSDs and Darwin.
const msgTrunc = 0x10

func enableTOS(*net.UDPConn, bool) error { return nil }

func socketIs6(c *net.UDPConn) (bool, error) {
	a, ok := c.LocalAddr().(*net.UDPAddr)
	return ok && a.IP.To4() == nil, nil
}

const ecnSupported = false
