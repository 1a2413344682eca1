//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package kdrop

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Netlink constants x/sys/unix does not name (linux/pkt_sched.h, linux/gen_stats.h,
// linux/netlink.h).
const (
	tcRoot        = 0xffffffff // TC_H_ROOT: the parent of a root queue discipline
	tcaStatsBasic = 1          // TCA_STATS_BASIC
	tcaStatsQueue = 3          // TCA_STATS_QUEUE
	nlaTypeMask   = 0x3fff     // the type bits of nla_type
	tcaTBFParms   = 1          // TCA_TBF_PARMS: struct tc_tbf_qopt, the rate's octets per second at 8
	tcaTBFRate64  = 4          // TCA_TBF_RATE64: the rate beyond 2^32 - 1 octets per second
)

// QueueReader reads the root queue disciplines of a network namespace's devices over
// rtnetlink (RTM_GETQDISC). Its socket belongs to the namespace it was opened in.
type QueueReader struct {
	fd  int
	seq atomic.Uint32
	buf []byte
}

// OpenQueueReader opens the reader in the calling thread's network namespace (see InNetns).
func OpenQueueReader() (*QueueReader, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("kdrop: rtnetlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("kdrop: rtnetlink bind: %w", err)
	}
	return &QueueReader{fd: fd, buf: make([]byte, 64<<10)}, nil
}

// Close closes the socket.
func (r *QueueReader) Close() error { return unix.Close(r.fd) }

// Read returns the readings of the root queue disciplines of the devices in ifindexes (those
// without one are left out).
func (r *QueueReader) Read(ifindexes []int) (map[int]QueueStats, error) {
	const tcmsgLen = 20 // struct tcmsg: family, pads, ifindex, handle, parent, info
	req := make([]byte, unix.NLMSG_HDRLEN+tcmsgLen)
	seq := r.seq.Add(1)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.RTM_GETQDISC)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:], seq)
	if err := unix.Sendto(r.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("kdrop: RTM_GETQDISC: %w", err)
	}
	want := make(map[int]bool, len(ifindexes))
	for _, i := range ifindexes {
		want[i] = true
	}
	out := map[int]QueueStats{}
	for {
		n, _, err := unix.Recvfrom(r.fd, r.buf, 0)
		if err != nil {
			return out, fmt.Errorf("kdrop: RTM_GETQDISC: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(r.buf[:n])
		if err != nil {
			return out, fmt.Errorf("kdrop: RTM_GETQDISC: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				return out, fmt.Errorf("kdrop: RTM_GETQDISC refused")
			case unix.RTM_NEWQDISC:
				if len(m.Data) < tcmsgLen {
					continue
				}
				ifi := int(int32(binary.NativeEndian.Uint32(m.Data[4:])))
				parent := binary.NativeEndian.Uint32(m.Data[12:])
				if parent != tcRoot || !want[ifi] {
					continue
				}
				if s, ok := qdiscStats(m.Data[tcmsgLen:]); ok {
					out[ifi] = s
				}
			}
		}
	}
}

// qdiscStats finds TCA_STATS2's basic (octets sent) and queue (backlog, qlen) statistics in a
// qdisc message's attributes.
func qdiscStats(b []byte) (QueueStats, bool) {
	var s QueueStats
	var basic, queue, tbf bool
	var rate32, rate64 uint64
	eachAttr(b, func(typ uint16, v []byte) {
		switch typ {
		case unix.TCA_KIND:
			tbf = string(v) == "tbf\x00" || string(v) == "tbf"
			return
		case unix.TCA_OPTIONS:
			eachAttr(v, func(typ uint16, v []byte) {
				switch {
				case typ == tcaTBFParms && len(v) >= 12:
					rate32 = uint64(binary.NativeEndian.Uint32(v[8:]))
				case typ == tcaTBFRate64 && len(v) >= 8:
					rate64 = binary.NativeEndian.Uint64(v)
				}
			})
			return
		case unix.TCA_STATS2:
		default:
			return
		}
		eachAttr(v, func(typ uint16, v []byte) {
			switch {
			case typ == tcaStatsBasic && len(v) >= 12: // struct gnet_stats_basic: bytes u64, packets u32
				s.Sent, basic = binary.NativeEndian.Uint64(v), true
			case typ == tcaStatsQueue && len(v) >= 20: // struct gnet_stats_queue: qlen, backlog, drops, requeues, overlimits
				s.Packets, s.Backlog, queue = binary.NativeEndian.Uint32(v), binary.NativeEndian.Uint32(v[4:]), true
			}
		})
	})
	if tbf {
		s.Rate = max(rate32, rate64)
	}
	return s, basic && queue
}

// eachAttr calls fn with each netlink attribute of b (type without its flags, value).
func eachAttr(b []byte, fn func(typ uint16, v []byte)) {
	const hdr = int(unsafe.Sizeof(unix.RtAttr{}))
	for len(b) >= hdr {
		l := int(binary.NativeEndian.Uint16(b))
		if l < hdr || l > len(b) {
			return
		}
		fn(binary.NativeEndian.Uint16(b[2:])&nlaTypeMask, b[hdr:l])
		b = b[min((l+unix.NLA_ALIGNTO-1)&^(unix.NLA_ALIGNTO-1), len(b)):]
	}
}
