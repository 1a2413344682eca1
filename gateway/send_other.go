//go:build !linux

package gateway

import "net/netip"

// writer sends one datagram per call where sendmmsg is not available.
type writer struct{}

func newWriter() *writer { return &writer{} }

// written is what one write did.
type written struct {
	datagrams, octets, errors int
	gsoOff                    bool // never: no GSO here
}

// write sends pkts[i] to to[i] on s, in order.
func (w *writer) write(s *sock, pkts []*pkt, to []netip.AddrPort) written {
	var out written
	for i, p := range pkts {
		if _, err := s.conn.WriteToUDPAddrPort(p.data(), to[i]); err != nil {
			out.errors++
			continue
		}
		out.datagrams++
		out.octets += p.n
	}
	return out
}
