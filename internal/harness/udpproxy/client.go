package udpproxy

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// client is one source address seen on the listening socket, with the upstream socket that
// carries its datagrams to the forward address and brings the answers back.
type client struct {
	addr   netip.AddrPort
	fwd    netip.AddrPort // where its datagrams go: the forward address, or its route's
	conn   *net.UDPConn   // connected to fwd
	rio    *batchIO       // used by the client's reader
	wio    *batchIO       // used by the forward direction's loop
	last   atomic.Int64   // proxy time of the last datagram either way, in ns
	closed atomic.Bool
}

// clientTable maps client addresses to their upstream sockets. The listen reader opens
// clients, the janitor expires them; both hold mu.
type clientTable struct {
	mu                       sync.Mutex
	m                        map[netip.AddrPort]*client
	opened, evicted, expired atomic.Uint64
}

// client returns the client for addr, opening its upstream socket (and evicting the client
// idle longest when the table is full) if it is new.
func (p *Proxy) client(addr netip.AddrPort, now time.Duration) (*client, error) {
	t := &p.clients
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.m[addr]; ok {
		return c, nil
	}
	if len(t.m) >= p.cfg.MaxClients {
		var oldest *client
		for _, c := range t.m {
			if oldest == nil || c.last.Load() < oldest.last.Load() {
				oldest = c
			}
		}
		p.closeClient(oldest)
		t.evicted.Add(1)
		p.logger.Info("client evicted", "client", oldest.addr, "for", addr)
	}
	fwd := p.fwdAddr
	if to, ok := p.routes[netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())]; ok {
		fwd = to
	}
	conn, err := net.DialUDP(p.fwdNet, nil, net.UDPAddrFromAddrPort(fwd))
	if err != nil {
		return nil, fmt.Errorf("opening a socket to %v: %w", fwd, err)
	}
	conn.SetReadBuffer(socketBuffer)
	conn.SetWriteBuffer(socketBuffer)
	c := &client{addr: addr, fwd: fwd, conn: conn}
	c.last.Store(int64(now))
	sock6, err := socketIs6(conn)
	if err == nil {
		err = enableTOS(conn, sock6)
	}
	if err == nil {
		c.rio, err = newBatchIO(conn, min(p.cfg.Batch, 8), sock6, fwd.Addr().Is4())
	}
	if err == nil {
		c.wio, err = newBatchIO(conn, p.cfg.Batch, sock6, fwd.Addr().Is4())
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("socket to %v: %w", fwd, err)
	}
	t.m[addr] = c
	t.opened.Add(1)
	p.logger.Info("client", "client", addr, "upstream", conn.LocalAddr(), "forward", fwd)
	p.wg.Add(1)
	go p.readClient(c)
	return c, nil
}

// closeClient forgets c and closes its socket; t.mu must be held.
func (p *Proxy) closeClient(c *client) {
	delete(p.clients.m, c.addr)
	c.closed.Store(true)
	c.conn.Close()
}

// expireClients closes the clients quiet since before the given proxy time.
func (p *Proxy) expireClients(before time.Duration) {
	t := &p.clients
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.m {
		if c.last.Load() < int64(before) {
			p.closeClient(c)
			t.expired.Add(1)
			p.logger.Info("client idle, closed", "client", c.addr)
		}
	}
}
