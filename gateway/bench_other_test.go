//go:build !linux

package gateway_test

import (
	"net"
	"net/netip"
	"testing"
)

// benchSender returns a function that sends datagrams one per call (no sendmmsg here).
func benchSender(tb testing.TB, c *net.UDPConn) func(ps [][]byte, to netip.AddrPort) {
	return func(ps [][]byte, to netip.AddrPort) {
		for _, p := range ps {
			c.WriteToUDPAddrPort(p, to)
		}
	}
}

// benchReceive reads c one datagram per call until it is closed.
func benchReceive(c *net.UDPConn, k *benchSink) {
	buf := make([]byte, 9216)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		k.arrived([][]byte{buf[:n]})
	}
}
