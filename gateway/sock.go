package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
)

// sock is one UDP socket of the gateway.
type sock struct {
	conn  *net.UDPConn
	rc    syscall.RawConn
	addr  netip.AddrPort
	kind  int
	sock6 bool // AF_INET6: IPv4 peers are reached by mapped addresses
	// gso: sends may carry UDP_SEGMENT (offload on, the kernel has it, no EIO seen);
	// gsoBelow: only runs of datagrams shorter than this (a larger one was refused, such as
	// one beyond the path MTU). Several shards send on one socket.
	gso      atomic.Bool
	gsoBelow atomic.Int32
	gro      bool // the kernel coalesces what arrives (UDP_GRO)
	off      offloadCounters
}

// offloadCounters are what segmentation offload did on one socket.
type offloadCounters struct {
	gsoSends, gsoDatagrams atomic.Uint64 // sends of several datagrams, and the datagrams they held
	gsoFallbacks           atomic.Uint64 // such sends refused, sent again one datagram per message
	gsoDisabled            atomic.Uint64 // 1 once an EIO turned GSO off for the socket
	groReceives            atomic.Uint64 // receives that held several datagrams
	groDatagrams           atomic.Uint64 // the datagrams they held
	groCopied              atomic.Uint64 // datagrams copied out of a coalesced buffer (none free to replace it)
}

// listen binds a UDP socket, or takes over c if not nil; failing to bind (an address in use)
// is a configuration error. offload asks for UDP GSO and GRO where the kernel has them.
func listen(field string, ap netip.AddrPort, kind int, c *net.UDPConn, offload bool) (*sock, error) {
	if c == nil {
		var err error
		if c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap)); err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return nil, &ConfigError{Key: field, Value: ap.String(), Err: errors.New("address already in use")}
			}
			return nil, &ConfigError{Key: field, Value: ap.String(), Err: err}
		}
	}
	for _, size := range []int{8 << 20, 4 << 20, 1 << 20} {
		if c.SetReadBuffer(size) == nil {
			break
		}
	}
	c.SetWriteBuffer(8 << 20)
	rc, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("gateway: %s %v: %w", field, ap, err)
	}
	s := &sock{conn: c, rc: rc, kind: kind}
	la := c.LocalAddr().(*net.UDPAddr).AddrPort()
	s.addr = netip.AddrPortFrom(la.Addr().Unmap(), la.Port())
	s.sock6 = !(ap.Addr().Is4() || ap.Addr().Is4In6())
	s.setup(offload)
	return s, nil
}

func (s *sock) String() string { return fmt.Sprintf("%s %v", kindNames[s.kind], s.addr) }
