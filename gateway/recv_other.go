//go:build !linux

package gateway

import (
	"errors"
	"net"
	"sync"
)

// readLoop reads one datagram per system call where recvmmsg is not available.
func (g *Gateway) readLoop(s *sock) {
	for {
		p := g.getPkt()
		n, from, err := s.conn.ReadFromUDPAddrPort(p.buf)
		if err != nil {
			g.putPkt(p)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			g.c.readErrors.Add(1)
			continue
		}
		p.n, p.kind = n, uint8(s.kind)
		p.from = net.UDPAddrFromAddrPort(from).AddrPort()
		if !g.accept(s, p) {
			g.putPkt(p)
		}
	}
}

// pairLoop reads the two sockets apart where epoll is not available.
// waiters has two counts for the two waiting goroutines.
func (g *Gateway) pairLoop(crem, data *sock, waiters *sync.WaitGroup) {
	g.rawReaders.Done()
	go func() { defer waiters.Done(); g.readLoop(data) }()
	go func() { defer waiters.Done(); g.readLoop(crem) }()
}
