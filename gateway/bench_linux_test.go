package gateway_test

import (
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/crem-project/crem/internal/mmsg"
	"golang.org/x/sys/unix"
)

// benchSender returns a function that sends a batch of datagrams of one size to one address
// with sendmmsg, in GSO runs of as many as fit in 64 KiB (the endpoint costs what a NIC that
// the gateway's GRO reads from would: little), or one datagram per message where the kernel
// has no UDP GSO.
func benchSender(tb testing.TB, c *net.UDPConn) func(ps [][]byte, to netip.AddrPort) {
	rc, err := c.SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	var gso bool
	rc.Control(func(fd uintptr) { gso = mmsg.GSOSupported(fd) })
	batch := mmsg.NewGatherBatch(benchBatch, mmsg.MaxSegments, mmsg.SegmentSpace)
	var off, n int
	var errno syscall.Errno
	write := func(fd uintptr) bool {
		for off < n {
			k, e := batch.Send(fd, off, n, 0)
			if e == unix.EAGAIN {
				return false
			}
			if e != 0 {
				errno = e
				return true
			}
			off += k
		}
		return true
	}
	return func(ps [][]byte, to netip.AddrPort) {
		n = 0
		for i := 0; i < len(ps); n++ {
			batch.SetSend(n, ps[i], to, false)
			j := i + 1
			for gso && j < len(ps) && (j-i+1)*len(ps[i]) <= mmsg.MaxSegmentBytes {
				batch.AddBuf(n, ps[j])
				j++
			}
			if j-i > 1 {
				batch.SetSegment(n, uint16(len(ps[i])))
			}
			i = j
		}
		off, errno = 0, 0
		if err := rc.Write(write); err != nil || errno != 0 {
			tb.Errorf("sendmmsg: %v %v", err, errno)
		}
	}
}

// benchReceive reads c in batches with recvmmsg until it is closed, handing each batch to k;
// where the kernel has UDP GRO it coalesces what arrives, and the batch is split here.
func benchReceive(c *net.UDPConn, k *benchSink) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	var gro bool
	rc.Control(func(fd uintptr) { gro = mmsg.EnableGRO(fd) == nil })
	const slots = 8
	batch := mmsg.NewBatch(slots, mmsg.GROSpace)
	bufs := make([][]byte, slots)
	for i := range bufs {
		bufs[i] = make([]byte, mmsg.GROBufSize)
	}
	got := make([][]byte, 0, slots*mmsg.MaxSegments)
	var n int
	read := func(fd uintptr) bool {
		k, e := batch.Recv(fd, slots, 0)
		if e == unix.EAGAIN {
			return false
		}
		n = max(k, 0)
		return true
	}
	for {
		for i, b := range bufs {
			batch.SetRecv(i, b)
		}
		if rc.Read(read) != nil {
			return
		}
		got = got[:0]
		for i := range n {
			r := batch.Received(i)
			seg := r.N
			if gro && r.HasSegment && r.Segment > 0 {
				seg = r.Segment
			}
			for off := 0; off < r.N || off == 0; off += max(seg, 1) {
				got = append(got, bufs[i][off:min(off+seg, r.N)])
			}
		}
		k.arrived(got)
	}
}
