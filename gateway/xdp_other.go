//go:build !linux

package gateway

import (
	"errors"
	"net/netip"
)

// xdpPath is the AF_XDP data path; it exists on Linux only.
type xdpPath struct{}

func openXDP(r *resolved, cremPort uint16) (*xdpPath, error) {
	return nil, errors.New("gateway: the xdp data path needs Linux")
}

func openRawTun(r *resolved) (*tunPath, error) { return openTun(r) }

// xdpFrame is a packet in a received AF_XDP frame; there are none here.
type xdpFrame struct{}

func (xf *xdpFrame) release() {}

func (x *xdpPath) close()                          {}
func (x *xdpPath) addCounters(m map[string]uint64) {}

func (g *Gateway) xdpLoop() error { return errors.New("gateway: the xdp data path needs Linux") }

func (g *Gateway) sendXDP(idx int, q *tunQueue) (int, uint64, int)         { return 0, 0, len(q.pkts) }
func (g *Gateway) xdpSay()                                                 {}
func (g *Gateway) sendCREMXDP(idx int, ps []*pkt, to []netip.AddrPort) int { return len(ps) }
