//go:build !linux

package gateway

import (
	"errors"
	"fmt"
	"net"
	"sync"
)

// receiver exists where recvmmsg does (Linux).
type receiver struct{}

// readLoop reads one datagram per system call where recvmmsg is not available.
func (g *Gateway) readLoop(s *sock) error {
	p := g.large.get(true)
	var pause readPause
	for {
		n, from, err := s.conn.ReadFromUDPAddrPort(p.buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("gateway: %v: socket closed", s)
			}
			g.c.readErrors.Add(1)
			if !pause.wait(g) {
				return nil
			}
			continue
		}
		pause.reset()
		p.n, p.kind = n, uint8(s.kind)
		p.from = net.UDPAddrFromAddrPort(from).AddrPort()
		g.handOn(s, p, &p)
	}
}

// pairLoop reads the two sockets apart where recvmmsg is not available: run starts the two
// readers among readers.
func (g *Gateway) pairLoop(crem, data *sock, run func(*sync.WaitGroup, func() error), readers *sync.WaitGroup) error {
	run(readers, func() error { return g.readLoop(data) })
	run(readers, func() error { return g.readLoop(crem) })
	return nil
}
