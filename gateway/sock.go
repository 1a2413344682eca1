package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// message is one datagram of a batch sent with sendmmsg on Linux through golang.org/x/net.
type message = ipv4.Message

type batchConn interface {
	ReadBatch(ms []message, flags int) (int, error)
	WriteBatch(ms []message, flags int) (int, error)
}

// sock is one UDP socket of the gateway.
type sock struct {
	conn *net.UDPConn
	bc   batchConn
	addr netip.AddrPort
	kind int
}

// listen binds a UDP socket, or takes over c if not nil; failing to bind (an address in use)
// is a configuration error.
func listen(field string, ap netip.AddrPort, kind int, c *net.UDPConn) (*sock, error) {
	if c == nil {
		var err error
		if c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap)); err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return nil, configErr("%s %v: address already in use", field, ap)
			}
			return nil, configErr("%s %v: %v", field, ap, err)
		}
	}
	for _, size := range []int{8 << 20, 4 << 20, 1 << 20} {
		if c.SetReadBuffer(size) == nil {
			break
		}
	}
	c.SetWriteBuffer(8 << 20)
	s := &sock{conn: c, kind: kind}
	la := c.LocalAddr().(*net.UDPAddr).AddrPort()
	s.addr = netip.AddrPortFrom(la.Addr().Unmap(), la.Port())
	if ap.Addr().Is4() || ap.Addr().Is4In6() {
		s.bc = ipv4.NewPacketConn(c)
	} else {
		s.bc = ipv6.NewPacketConn(c)
	}
	return s, nil
}

func (s *sock) String() string { return fmt.Sprintf("%s %v", kindNames[s.kind], s.addr) }
