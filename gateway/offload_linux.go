package gateway

import (
	"math"

	"github.com/crem-project/crem/internal/mmsg"
	"golang.org/x/sys/unix"
)

// setup finds the socket's family and, with offload, turns on what of UDP GSO and GRO the
// kernel has (GSO: Linux 4.18, GRO: 5.0); without them the socket moves one datagram per
// message, as with offload off.
func (s *sock) setup(offload bool) {
	s.rc.Control(func(fd uintptr) {
		if sa, err := unix.Getsockname(int(fd)); err == nil {
			_, s.sock6 = sa.(*unix.SockaddrInet6)
		}
		if !offload {
			// A socket handed over may have had it on: a coalesced receive would not fit
			// the reader's buffers.
			unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 0)
			return
		}
		if mmsg.GSOSupported(fd) {
			s.gsoBelow.Store(math.MaxInt32)
			s.gso.Store(true)
		}
		s.gro = mmsg.EnableGRO(fd) == nil
	})
}
