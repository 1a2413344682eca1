package lab

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
)

// Ports holds the lab's CREM port on its four addresses from the moment it is chosen to the end
// of the lab: every CREM message of the lab is addressed to it (draft, CREM port). The path's
// two ends (127.0.0.3 and 127.0.0.4) are bound once and handed to each run; the gateways'
// addresses (127.0.0.1 and 127.0.0.2) are held between the CREM runs and let go only for the
// instant in which a gateway binds its own socket there.
type Ports struct {
	port int
	path [2]*net.UDPConn
	gw   [2]*net.UDPConn // nil while a gateway holds the address
}

// ReservePorts binds the CREM port on the lab's four addresses: port, or with 0 one of the
// Dynamic Ports range (49152-65535) free on all four, drawn at random until one is.
func ReservePorts(port int) (*Ports, error) {
	if port < 0 || port > 65535 {
		return nil, fmt.Errorf("lab: CREM port %d", port)
	}
	if port != 0 {
		return reserve(port)
	}
	var last error
	for range 200 {
		ps, err := reserve(49152 + rand.IntN(65536-49152))
		if err == nil {
			return ps, nil
		}
		last = err
	}
	return nil, fmt.Errorf("lab: no CREM port free on 127.0.0.1-4: %w", last)
}

// reserve binds port on the four addresses, or none of them.
func reserve(port int) (*Ports, error) {
	ps := &Ports{port: port}
	for _, x := range []struct {
		c    **net.UDPConn
		addr netip.Addr
	}{{&ps.path[0], addrPathA}, {&ps.path[1], addrPathB}, {&ps.gw[0], addrA}, {&ps.gw[1], addrB}} {
		c, err := bindUDP(netip.AddrPortFrom(x.addr, uint16(ps.port)))
		if err != nil {
			ps.Close()
			return nil, err
		}
		*x.c = c
	}
	return ps, nil
}

func bindUDP(ap netip.AddrPort) (*net.UDPConn, error) {
	return net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
}

// Port is the CREM port.
func (ps *Ports) Port() int { return ps.port }

// Close lets every address go.
func (ps *Ports) Close() error {
	var errs []error
	for _, c := range append(ps.path[:], ps.gw[:]...) {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	ps.path, ps.gw = [2]*net.UDPConn{}, [2]*net.UDPConn{}
	return errors.Join(errs...)
}

// release lets gateway i's address go, for the gateway to bind it.
func (ps *Ports) release(i int) {
	if ps.gw[i] != nil {
		ps.gw[i].Close()
		ps.gw[i] = nil
	}
}

// retake holds gateway i's address again once its gateway has let it go.
func (ps *Ports) retake(i int) error {
	if ps.gw[i] != nil {
		return nil
	}
	c, err := bindUDP(netip.AddrPortFrom([]netip.Addr{addrA, addrB}[i], uint16(ps.port)))
	if err != nil {
		return fmt.Errorf("lab: CREM port %d on gateway %c's address: %w", ps.port, 'A'+i, err)
	}
	ps.gw[i] = c
	return nil
}
