package gateway

import (
	"net/netip"
	"syscall"

	"github.com/crem-project/crem/internal/mmsg"
	"golang.org/x/sys/unix"
)

// writeMsgs is the most messages of one sendmmsg.
const writeMsgs = 64

// writer sends a shard's out queues with sendmmsg, allocating nothing. With GSO each run of
// datagrams of one size to one address (the last may be shorter; at most mmsg.MaxSegments
// and mmsg.MaxSegmentBytes) leaves as one message gathered from the datagrams' own buffers,
// which the kernel cuts back into them (UDP_SEGMENT): no copy, one pass through the stack
// per run. A run the kernel refuses is sent again one datagram per message; EIO (a device
// that cannot checksum GSO sends) turns GSO off for the socket for good, as quic-go and
// wireguard-go do.
type writer struct {
	b            *mmsg.Batch
	first, count [writeMsgs]int // each message's first datagram and how many it holds
	// per call of send
	off, m, n int
	errno     syscall.Errno
	sendFn    func(fd uintptr) bool
}

func newWriter() *writer {
	w := &writer{b: mmsg.NewGatherBatch(writeMsgs, mmsg.MaxSegments, mmsg.SegmentSpace)}
	w.sendFn = w.sendmmsg
	return w
}

// written is what one write did.
type written struct {
	datagrams, octets, errors int
	gsoOff                    bool // an EIO turned GSO off for the socket
}

// write sends pkts[i] to to[i] on s, in order.
func (w *writer) write(s *sock, pkts []*pkt, to []netip.AddrPort) written {
	var out written
	gso := s.gso.Load()
	below := int(s.gsoBelow.Load())
	for i := 0; i < len(pkts); {
		m := w.build(s, pkts, to, i, gso, below)
		done := 0
		for done < m {
			n, e, err := w.send(s, done, m)
			if err != nil { // the socket is closed: nothing more goes
				out.errors += len(pkts) - w.first[done]
				return out
			}
			if e == 0 && n > 0 {
				for k := done; k < done+n; k++ {
					out.datagrams += w.count[k]
					for _, p := range pkts[w.first[k] : w.first[k]+w.count[k]] {
						out.octets += p.n
					}
					if w.count[k] > 1 {
						s.off.gsoSends.Add(1)
						s.off.gsoDatagrams.Add(uint64(w.count[k]))
					}
				}
				done += n
				continue
			}
			if c := w.count[done]; c > 1 {
				// The kernel refused the run: it goes again one datagram per message,
				// with what follows it.
				s.off.gsoFallbacks.Add(1)
				if mmsg.DisablesGSO(e) {
					if s.gso.Swap(false) {
						s.off.gsoDisabled.Store(1)
						out.gsoOff = true
					}
					gso = false
				} else if e == unix.EINVAL || e == unix.EMSGSIZE {
					// Datagrams of this size may not be cut by the kernel here (beyond
					// the path MTU): only shorter ones are sent in runs from now on.
					below = min(below, pkts[w.first[done]].n)
					s.gsoBelow.Store(int32(below))
				}
				break
			}
			out.errors++
			done++
		}
		if done < m {
			i = w.first[done]
		} else {
			i = w.first[m-1] + w.count[m-1]
		}
	}
	return out
}

// build prepares messages from pkts[i:] and returns how many.
func (w *writer) build(s *sock, pkts []*pkt, to []netip.AddrPort, i int, gso bool, below int) int {
	m := 0
	for ; m < writeMsgs && i < len(pkts); m++ {
		w.b.SetSend(m, pkts[i].data(), to[i], s.sock6)
		j := i + 1
		if size := pkts[i].n; gso && size > 0 && size < below {
			total := size
			for j < len(pkts) && j-i < mmsg.MaxSegments && to[j] == to[i] {
				l := pkts[j].n
				if l > size || l == 0 || total+l > mmsg.MaxSegmentBytes {
					break
				}
				w.b.AddBuf(m, pkts[j].data())
				total += l
				j++
				if l < size {
					break // a shorter datagram ends the run
				}
			}
			if j-i > 1 {
				w.b.SetSegment(m, uint16(size))
			}
		}
		w.first[m], w.count[m] = i, j-i
		i = j
	}
	return m
}

// send calls sendmmsg for messages [off, m), waiting while the socket's buffer is full.
func (w *writer) send(s *sock, off, m int) (int, syscall.Errno, error) {
	w.off, w.m = off, m
	if err := s.rc.Write(w.sendFn); err != nil {
		return 0, 0, err
	}
	return w.n, w.errno, nil
}

func (w *writer) sendmmsg(fd uintptr) bool {
	for {
		n, e := w.b.Send(fd, w.off, w.m, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		w.n, w.errno = n, e
		return true
	}
}
