package udpproxy

import (
	"net/netip"
	"sync"
	"time"

	"github.com/crem-project/crem/reporter"
)

// dgram is one datagram of a batch read or written by batchIO.
type dgram struct {
	buf    []byte         // read: room (capacity) and then the datagram; write: the datagram
	addr   netip.AddrPort // read: the source; write: the destination, or zero when connected
	tos    uint8          // IPv4 TOS or IPv6 traffic class
	hasTOS bool
	trunc  bool // read: the datagram did not fit in buf
}

// pkt is a datagram on its way through a link. Its storage comes from a pool of size classes
// and goes back when the datagram is forwarded or dropped, so steady traffic allocates nothing.
type pkt struct {
	data   []byte     // the datagram, aliasing buf
	buf    []byte     // the pooled storage
	pool   *sync.Pool // where buf goes back
	tos    uint8
	hasTOS bool
	cl     *client // the client the datagram comes from (forward) or goes to (reverse)
	idx    uint64  // its 0-based index among the datagrams its direction received
	// Alternate Marking metadata (never written into the datagram): the flow, the marking
	// period it entered the link in and when; measured when MP1 counted it.
	key      reporter.FlowKey
	mark     uint64
	entered  time.Duration
	measured bool
}

// sizeClasses are the capacities of pooled buffers: small control datagrams, an Ethernet MTU,
// a jumbo frame (any RoCEv2 MTU fits) and anything UDP can carry.
var sizeClasses = [...]int{512, 2048, 9216, maxDatagram}

// pools holds a proxy's free lists, one per size class.
type pools [len(sizeClasses)]sync.Pool

func classFor(n int) int {
	for i, c := range sizeClasses {
		if n <= c {
			return i
		}
	}
	return len(sizeClasses) - 1
}

// newPkt copies a received datagram into pooled storage.
func (ps *pools) newPkt(m *dgram, c *client) *pkt {
	cls := classFor(len(m.buf))
	pk, _ := ps[cls].Get().(*pkt)
	if pk == nil {
		pk = &pkt{buf: make([]byte, sizeClasses[cls]), pool: &ps[cls]}
	}
	pk.data = pk.buf[:copy(pk.buf, m.buf)]
	pk.tos, pk.hasTOS = m.tos, m.hasTOS
	pk.cl = c
	pk.idx = 0
	pk.measured = false
	return pk
}

// free returns pk's storage to its pool; pk must not be used afterwards.
func (pk *pkt) free() {
	pk.data = nil
	pk.cl = nil
	pk.pool.Put(pk)
}
