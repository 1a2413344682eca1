package gateway

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/crem-project/crem/internal/vnethdr"
	"github.com/crem-project/crem/wire"
	"golang.org/x/sys/unix"
)

// tunPath is the transparent data path: IP packets routed into a TUN device are read whole;
// packets are sent on (unchanged, or restored under the flow's header template) through a raw
// IPv4 socket whose firewall mark lets policy routing keep them out of the device, in batches
// (sendmmsg, one per shard's round).
//
// With offloads (tun.offload, the default) the device is opened with IFF_VNET_HDR and told
// (TUNSETOFFLOAD) that the reader finishes checksums and cuts TCP and UDP segmentation
// super-packets itself, the way a virtio NIC would: the kernel then hands over what a local
// sender's GSO or the ingress GRO built as one read instead of one per packet. When the
// kernel refuses the offloads the device is opened again without them.
type tunPath struct {
	dev  *os.File
	rc   syscall.RawConn
	name string
	raw  int

	vnet     bool   // a virtio_net_hdr precedes every packet read and written
	devWrite bool   // packets sent on are written into the device (tun.write = device)
	offloads int    // the TUN_F_* flags in force
	fallback string // why offloads were asked for and are off ("" when on or not asked)

	// The reader's state (the tun reader goroutine only).
	hdr    [vnethdr.Len]byte
	over   []byte // a read longer than one packet buffer: the super-packet, contiguous
	iov    [3]unix.Iovec
	readFn func(fd uintptr) bool
	rn     int
	rerr   error
	segBuf [][]byte
	segLen []int
	segPkt []*pkt

	// The shards' send queues, each touched by its shard only (under its mu).
	out [256]*tunQueue

	gsoPackets, gsoSegments atomic.Uint64 // super-packets read, the packets they made
	csumCompleted           atomic.Uint64 // NEEDS_CSUM packets whose checksum the reader finished
	vnetErrors              atomic.Uint64 // super-packets refused (malformed, or beyond buffers)
	sendBatches             atomic.Uint64 // sendmmsg calls, or writes into the device
	coalesced               atomic.Uint64 // packets written as part of a super-packet
}

// tunBatch is the most packets one sendmmsg takes.
const tunBatch = 64

// maxSuper is the longest super-packet the kernel hands a TUN reader (GSO maximum, 64 KiB).
const maxSuper = 65536

// tunQueue is one shard's packets waiting for the raw socket, with the sendmmsg vectors
// made once.
type tunQueue struct {
	pkts  []*pkt
	msgs  [tunBatch]unix.Mmsghdr
	iovs  [tunBatch]unix.Iovec
	addrs [tunBatch]unix.RawSockaddrInet4

	// Writes into the device: the virtio header and the iovecs of one write, made once.
	t       *tunPath
	hdr     [vnethdr.Len]byte
	wiov    [tunBatch + 1]unix.Iovec
	wn      int
	wret    int
	werr    error
	writeFn func(fd uintptr) bool
	saved   [udp4Hdr]byte // a run's first headers, before they describe the super-packet
}

// udp4Hdr is the headers' length of the IPv4 UDP packets the device writes coalesce (no IP
// options).
const udp4Hdr = 28

type ifreqFlags struct {
	name  [unix.IFNAMSIZ]byte
	flags uint16
	_     [22]byte
}

// tunOffloads are asked for in this order until the kernel takes one (USO needs Linux 6.2).
var tunOffloads = [...]int{
	unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6 | unix.TUN_F_USO4 | unix.TUN_F_USO6,
	unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6,
}

func openTun(r *resolved) (*tunPath, error) {
	t := &tunPath{name: r.tunName, raw: -1, devWrite: r.tunDevWrite}
	fd, err := openTunDev(r.tunName, r.tunOffload)
	if err != nil {
		return nil, err
	}
	if r.tunOffload {
		for _, o := range tunOffloads {
			if err = unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, o); err == nil {
				t.vnet, t.offloads = true, o
				break
			}
		}
		if !t.vnet {
			t.fallback = fmt.Sprintf("TUNSETOFFLOAD: %v", err)
			unix.Close(fd)
			if fd, err = openTunDev(r.tunName, false); err != nil {
				return nil, err
			}
		}
	}
	if !t.vnet {
		// A device left with offloads by an earlier reader would hand this one super-packets.
		unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, 0)
	}
	if err := linkUp(r.tunName); err != nil {
		unix.Close(fd)
		return nil, err
	}
	raw, err := openRaw(r.tunMark)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	t.raw = raw
	t.dev = os.NewFile(uintptr(fd), "/dev/net/tun")
	if t.rc, err = t.dev.SyscallConn(); err != nil {
		t.close()
		return nil, fmt.Errorf("gateway: tun: %w", err)
	}
	t.readFn = t.readv
	if t.vnet {
		t.over = make([]byte, maxSuper+bufSize)
		t.iov[0].Base = &t.hdr[0]
		t.iov[0].SetLen(vnethdr.Len)
	}
	return t, nil
}

// openRaw opens the raw socket that sends packets on, with the firewall mark policy routing
// keeps out of the device.
func openRaw(mark int) (int, error) {
	raw, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return -1, fmt.Errorf("gateway: tun: raw socket: %w", err)
	}
	if err := unix.SetsockoptInt(raw, unix.SOL_SOCKET, unix.SO_MARK, mark); err != nil {
		unix.Close(raw)
		return -1, fmt.Errorf("gateway: tun: SO_MARK: %w", err)
	}
	unix.SetsockoptInt(raw, unix.SOL_SOCKET, unix.SO_SNDBUF, 8<<20)
	return raw, nil
}

// openRawTun is the TUN path without a device: its raw socket and send queues only, for the
// xdp data path's packets that the kernel sends (no next hop known).
func openRawTun(r *resolved) (*tunPath, error) {
	raw, err := openRaw(r.tunMark)
	if err != nil {
		return nil, err
	}
	return &tunPath{name: r.tunName, raw: raw}, nil
}

// openTunDev attaches to (or creates) the device, with a virtio_net_hdr on each packet when
// vnet.
func openTunDev(name string, vnet bool) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("gateway: tun: /dev/net/tun: %w", err)
	}
	var req ifreqFlags
	copy(req.name[:], name)
	req.flags = unix.IFF_TUN | unix.IFF_NO_PI
	if vnet {
		req.flags |= unix.IFF_VNET_HDR
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req))); e != 0 {
		unix.Close(fd)
		return -1, fmt.Errorf("gateway: tun: TUNSETIFF %s: %w", name, e)
	}
	return fd, nil
}

func linkUp(name string) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("gateway: tun: %w", err)
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return fmt.Errorf("gateway: tun: %w", err)
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("gateway: tun: flags of %s: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("gateway: tun: bringing %s up: %w", name, err)
	}
	return nil
}

func (t *tunPath) close() {
	if t.dev != nil {
		t.dev.Close()
	}
	unix.Close(t.raw)
}

// offloadState says what the device does, for the log.
func (t *tunPath) offloadState() string {
	switch {
	case t.vnet && t.offloads&unix.TUN_F_USO4 != 0 && t.devWrite:
		return "checksum, TSO, USO; writes coalesced"
	case t.vnet && t.offloads&unix.TUN_F_USO4 != 0:
		return "checksum, TSO, USO"
	case t.vnet:
		return "checksum, TSO"
	case t.fallback != "":
		return "off (" + t.fallback + ")"
	}
	return "off"
}

// addCounters adds the device's counters to m (zero without a device: relay mode).
func (t *tunPath) addCounters(m map[string]uint64) {
	if t == nil {
		t = &tunPath{}
	}
	m["tun_gso_packets"] = t.gsoPackets.Load()
	m["tun_gso_segments"] = t.gsoSegments.Load()
	m["tun_checksums_completed"] = t.csumCompleted.Load()
	m["tun_gso_refused"] = t.vnetErrors.Load()
	m["tun_send_batches"] = t.sendBatches.Load()
	m["tun_coalesced"] = t.coalesced.Load()
}

// readv reads the device once into t.iov; false when it holds nothing.
func (t *tunPath) readv(fd uintptr) bool {
	iov, n := &t.iov[0], 2
	if t.vnet {
		n = 3
	} else {
		iov = &t.iov[1]
		n = 1
	}
	r, _, e := unix.Syscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(iov)), uintptr(n))
	if e == unix.EAGAIN || e == unix.EINTR {
		return false
	}
	t.rn, t.rerr = int(r), nil
	if e != 0 {
		t.rn, t.rerr = 0, e
	}
	return true
}

// readNow reads one packet (or super-packet) from descriptor fd into buf, and past it into
// t.over, without waiting: ok false when the device holds nothing. It returns the packet's
// length, the header before it zero without offloads.
func (t *tunPath) readNow(fd int, buf []byte) (n int, h vnethdr.Header, ok bool, err error) {
	t.iov[1].Base = &buf[0]
	t.iov[1].SetLen(len(buf))
	if t.vnet {
		t.iov[2].Base = &t.over[len(buf)]
		t.iov[2].SetLen(len(t.over) - len(buf))
	}
	if !t.readFn(uintptr(fd)) {
		return 0, vnethdr.Header{}, false, nil
	}
	if t.rerr != nil {
		return 0, vnethdr.Header{}, true, t.rerr
	}
	if !t.vnet {
		return t.rn, vnethdr.Header{}, true, nil
	}
	if t.rn < vnethdr.Len {
		return 0, vnethdr.Header{}, true, errors.New("gateway: tun: read shorter than the virtio header")
	}
	h, _ = vnethdr.Decode(t.hdr[:])
	return t.rn - vnethdr.Len, h, true, nil
}

// tunDrainReads bounds the reads of one drain of the device: a round of cremFirstLoop reads
// what the device held when the CREM socket was read, a packet (or super-packet) a read.
const tunDrainReads = 1024

// tunPairLoop reads the CREM socket and the TUN device in one goroutine (cremFirstLoop), so
// that a REPAIR is never handed on ahead of the sources the device had received before it.
// Two goroutines reading them apart let the REPAIR of a burst overtake the burst's tail at
// gateway B: the CRF restored packets whose originals were on their way, and the receiver got
// those twice. It reads the device's descriptor directly, so Run stops it before it closes
// the device.
func (g *Gateway) tunPairLoop(run func(*sync.WaitGroup, func() error), waiters *sync.WaitGroup) error {
	t := g.tun
	fd := -1
	if err := t.rc.Control(func(d uintptr) { fd = int(d) }); err != nil {
		return fmt.Errorf("gateway: tun: reader: %w", err)
	}
	g.log.Info("tun device", "name", t.name, "offloads", t.offloadState())
	p := g.large.get(true)
	drain := func() (int, bool) {
		for reads := 0; reads < tunDrainReads; reads++ {
			n, h, ok, err := t.readNow(fd, p.buf)
			switch {
			case err != nil:
				return reads, true
			case !ok:
				return reads, false
			}
			p = g.tunTake(p, n, h)
		}
		return tunDrainReads, false
	}
	return g.cremFirstLoop(g.crem, t.rc, "tun: the device was closed", drain, run, waiters)
}

// tunTake hands on what one read of the device put into p (n octets after the virtio header
// h) and returns the buffer for the next read.
func (g *Gateway) tunTake(p *pkt, n int, h vnethdr.Header) *pkt {
	t := g.tun
	if h.GSO() {
		var super []byte
		if n <= len(p.buf) {
			super = p.buf[:n]
		} else {
			copy(t.over, p.buf) // the read went on into t.over just past this
			super = t.over[:n]
		}
		g.tunSplit(h, super)
		return p
	}
	g.c.rx[kindTun].Add(1)
	g.c.rxBytes[kindTun].Add(uint64(n))
	if n > len(p.buf) {
		g.c.truncated.Add(1)
		g.c.dropped[kindTun].Add(1)
		return p
	}
	if h.Flags&vnethdr.FlagNeedsCsum != 0 {
		if vnethdr.Complete(h, p.buf[:n]) != nil {
			t.vnetErrors.Add(1)
			g.c.dropped[kindTun].Add(1)
			return p
		}
		t.csumCompleted.Add(1)
	}
	return g.tunHandOn(p, n)
}

// tunSplit cuts a super-packet into packet buffers and hands each on.
func (g *Gateway) tunSplit(h vnethdr.Header, super []byte) {
	t := g.tun
	segs, segLen, err := vnethdr.Segments(h, super)
	if err != nil || segLen > bufSize {
		t.vnetErrors.Add(1)
		g.c.rx[kindTun].Add(1)
		g.c.dropped[kindTun].Add(1)
		return
	}
	t.segPkt, t.segBuf, t.segLen = t.segPkt[:0], t.segBuf[:0], t.segLen[:0]
	for range segs {
		q := g.getPkt(segLen)
		t.segPkt, t.segBuf, t.segLen = append(t.segPkt, q), append(t.segBuf, q.buf), append(t.segLen, 0)
	}
	if _, err := vnethdr.Split(h, super, t.segBuf, t.segLen); err != nil {
		t.vnetErrors.Add(1)
		g.c.rx[kindTun].Add(1)
		g.c.dropped[kindTun].Add(1)
		for _, q := range t.segPkt {
			g.putPkt(q)
		}
		clear(t.segPkt)
		return
	}
	t.gsoPackets.Add(1)
	t.gsoSegments.Add(uint64(segs))
	for i, q := range t.segPkt {
		g.c.rx[kindTun].Add(1)
		g.c.rxBytes[kindTun].Add(uint64(t.segLen[i]))
		q.n = t.segLen[i]
		g.tunDispatch(q)
	}
	clear(t.segPkt)
}

// tunHandOn hands on the packet read into p (a large buffer) and returns the buffer for the
// next read: p itself when the packet was copied into a small buffer or dropped.
func (g *Gateway) tunHandOn(p *pkt, n int) *pkt {
	b := p.buf[:n]
	if n < 20 || b[0]>>4 != 4 {
		g.c.notRoCE.Add(1)
		g.c.dropped[kindTun].Add(1)
		return p
	}
	q, next := p, p
	if n <= smallSize {
		q = g.small.get(true)
		copy(q.buf, b)
	} else if r := g.large.get(false); r != nil {
		next = r
	} else {
		g.c.buffersExhausted.Add(1)
		g.c.dropped[kindTun].Add(1)
		return p
	}
	q.n = n
	g.tunDispatch(q)
	return next
}

// tunDispatch gives q (owned from now on) to the shard of its address pair.
func (g *Gateway) tunDispatch(q *pkt) {
	b := q.data()
	if len(b) < 20 || b[0]>>4 != 4 {
		g.c.notRoCE.Add(1)
		g.c.dropped[kindTun].Add(1)
		g.putPkt(q)
		return
	}
	if g.pcap != nil {
		g.pcap.recordIP(b)
	}
	src, dst := netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20]))
	q.kind, q.ce = kindTun, b[1]&3 == 3
	idx := g.pairHash(src, dst)
	if i, ok := g.tunReportShard(b); ok {
		idx = i
	}
	sh := g.shards[idx]
	select {
	case sh.in <- q:
		g.c.handed[kindTun].Add(1)
	default:
		g.c.shardFull.Add(1)
		g.c.dropped[kindTun].Add(1)
		g.putPkt(q)
	}
}

// tunReportShard is the shard of the flow a PATH_REPORT read from the device names: a report
// travels from the reporter to the flow's source, not between the flow's own addresses, and it
// is that flow's CSF's (C10), as on the CREM socket (shardFor). ok is false for any other
// packet, and for a report too short to name its flow (its shard counts it).
func (g *Gateway) tunReportShard(b []byte) (int, bool) {
	ihl := int(b[0]&0x0f) * 4
	if len(g.shards) == 1 || b[9] != 17 || ihl < 20 || len(b) < ihl+8+wire.HeaderLen ||
		binary.BigEndian.Uint16(b[ihl+2:ihl+4]) != g.cfg.crem.Port() {
		return 0, false
	}
	payload := b[ihl+8:]
	if ul := int(binary.BigEndian.Uint16(b[ihl+4 : ihl+6])); ul >= 8 && ul-8 <= len(payload) {
		payload = payload[:ul-8]
	}
	pr, ok := wire.PeekPathReportFlow(payload)
	if !ok {
		return 0, false
	}
	return g.pairHash(pr.Source.Unmap(), pr.Destination.Unmap()), true
}

// queue of shard idx, made on its first use (by the shard's goroutine).
func (t *tunPath) queue(idx int) *tunQueue {
	q := t.out[idx]
	if q == nil {
		q = t.newQueue()
		t.out[idx] = q
	}
	return q
}

// newQueue makes a send queue with its vectors.
func (t *tunPath) newQueue() *tunQueue {
	q := &tunQueue{pkts: make([]*pkt, 0, tunBatch), t: t}
	q.writeFn = q.writev
	q.wiov[0].Base = &q.hdr[0]
	q.wiov[0].SetLen(vnethdr.Len)
	for i := range q.msgs {
		q.msgs[i].Hdr.Name = (*byte)(unsafe.Pointer(&q.addrs[i]))
		q.msgs[i].Hdr.Namelen = unix.SizeofSockaddrInet4
		q.msgs[i].Hdr.Iov = &q.iovs[i]
		q.msgs[i].Hdr.SetIovlen(1)
		q.addrs[i].Family = unix.AF_INET
	}
	return q
}

// sendBatch sends q's packets, each to the destination of its IPv4 header, and reports how
// many went (and their octets) and how many failed.
func (t *tunPath) sendBatch(q *tunQueue) (sent int, octets uint64, failed int) {
	if t.devWrite {
		return t.writeBatch(q)
	}
	for i, p := range q.pkts {
		b := p.data()
		q.iovs[i].Base = &b[0]
		q.iovs[i].SetLen(len(b))
		q.addrs[i].Addr = [4]byte(b[16:20])
		octets += uint64(len(b))
	}
	msgs := q.msgs[:len(q.pkts)]
	for len(msgs) > 0 {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(t.raw), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), 0, 0, 0)
		t.sendBatches.Add(1)
		switch {
		case e == unix.EINTR:
			continue
		case e != 0 || r == 0:
			failed++ // the first message failed: skip it
			octets -= msgs[0].Hdr.Iov.Len
			msgs = msgs[1:]
		default:
			sent += int(r)
			msgs = msgs[r:]
		}
	}
	for i := range q.iovs[:len(q.pkts)] {
		q.iovs[i].Base = nil
	}
	return sent, octets, failed
}

// writeBatch writes q's packets into the device: with offloads, each run of a flow's
// consecutive packets that UDP segmentation would cut back into the very same packets as one
// super-packet, any other packet alone.
func (t *tunPath) writeBatch(q *tunQueue) (sent int, octets uint64, failed int) {
	ps := q.pkts
	for i := 0; i < len(ps); {
		j := i + 1
		if t.vnet && t.offloads&unix.TUN_F_USO4 != 0 {
			j = i + coalescible(ps[i:])
		}
		if j-i > 1 {
			if t.writeRun(q, ps[i:j]) {
				sent += j - i
				for _, p := range ps[i:j] {
					octets += uint64(p.n)
				}
				t.coalesced.Add(uint64(j - i))
				i = j
				continue
			}
			// Refused as a super-packet: each alone (writeRun put the headers back).
		}
		for _, p := range ps[i:j] {
			if t.writeRun(q, ps[i:i+1]) {
				sent++
				octets += uint64(p.n)
			} else {
				failed++
			}
			i++
		}
	}
	return sent, octets, failed
}

// coalescible is how many packets from ps[0] on make one UDP segmentation super-packet that
// the kernel cuts into exactly them: IPv4 without options or fragments, UDP with a checksum
// (segmentation computes one: a packet without would change), the same addresses, ports,
// TOS, TTL and flags, consecutive Identifications, one payload length (the last may be
// shorter), 64 KiB at most.
func coalescible(ps []*pkt) int {
	a := ps[0].data()
	if !plainUDP4(a) {
		return 1
	}
	size := len(a) - udp4Hdr
	total := len(a)
	id := uint16(a[4])<<8 | uint16(a[5])
	n := 1
	for ; n < len(ps) && n < tunBatch; n++ {
		b := ps[n].data()
		if !plainUDP4(b) || len(b)-udp4Hdr > size || total+len(b)-udp4Hdr > 65535 ||
			a[1] != b[1] || a[6] != b[6] || a[8] != b[8] || [12]byte(a[12:24]) != [12]byte(b[12:24]) ||
			uint16(b[4])<<8|uint16(b[5]) != id+uint16(n) {
			break
		}
		total += len(b) - udp4Hdr
		if len(b)-udp4Hdr < size {
			n++ // a shorter one ends the run
			break
		}
	}
	return n
}

// plainUDP4 reports whether b is an IPv4 UDP packet without options or fragments, with a
// UDP checksum, its lengths consistent.
func plainUDP4(b []byte) bool {
	return len(b) > udp4Hdr && b[0] == 0x45 && b[9] == 17 && (uint16(b[6])<<8|uint16(b[7]))&0x3fff == 0 &&
		int(uint16(b[2])<<8|uint16(b[3])) == len(b) && int(uint16(b[24])<<8|uint16(b[25])) == len(b)-20 &&
		b[26]|b[27] != 0
}

// writeRun writes one packet, or a run of coalescible ones as one super-packet: the first's
// headers then describe the whole (lengths, IPv4 checksum, the UDP pseudo-header sum as
// NEEDS_CSUM wants it) and every further packet adds its payload, with no copy. A refused
// super-packet gets its first packet's headers back.
func (t *tunPath) writeRun(q *tunQueue, run []*pkt) bool {
	first := run[0].data()
	h := vnethdr.Header{}
	iov := q.wiov[1:]
	iov[0].Base = &first[0]
	iov[0].SetLen(len(first))
	if len(run) > 1 {
		copy(q.saved[:], first)
		total := len(first)
		for i, p := range run[1:] {
			b := p.data()[udp4Hdr:]
			iov[i+1].Base = &b[0]
			iov[i+1].SetLen(len(b))
			total += len(b)
		}
		first[2], first[3] = byte(total>>8), byte(total)
		first[10], first[11] = 0, 0
		c := vnethdr.Checksum(first[:20])
		first[10], first[11] = byte(c>>8), byte(c)
		first[24], first[25] = byte((total-20)>>8), byte(total-20)
		ps := vnethdr.PseudoSum(first[12:20], 17, total-20)
		first[26], first[27] = byte(ps>>8), byte(ps)
		h = vnethdr.Header{Flags: vnethdr.FlagNeedsCsum, GSOType: vnethdr.GSOUDPL4, HdrLen: udp4Hdr,
			GSOSize: uint16(len(first) - udp4Hdr), CsumStart: 20, CsumOffset: 6}
	}
	q.wn = len(run)
	if t.vnet {
		h.Encode(q.hdr[:])
		q.wn++
	}
	err := t.rc.Write(q.writeFn)
	for i := range run {
		q.wiov[1+i].Base = nil // the packets go back to the pool
	}
	t.sendBatches.Add(1)
	if err == nil {
		err = q.werr
	}
	if err != nil && len(run) > 1 {
		copy(first, q.saved[:])
	}
	return err == nil
}

// writev runs in the poller's callback: one write of q's iovecs into the device.
func (q *tunQueue) writev(fd uintptr) bool {
	iov := &q.wiov[0]
	if !q.t.vnet {
		iov = &q.wiov[1]
	}
	r, _, e := unix.Syscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(iov)), uintptr(q.wn))
	if e == unix.EAGAIN {
		return false
	}
	q.wret, q.werr = int(r), nil
	if e != 0 {
		q.werr = e
	}
	return true
}
