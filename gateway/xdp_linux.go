//go:build linux

package gateway

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/crem-project/crem/internal/vnethdr"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/xdp"
)

// xdpPath is TUN-style mode's AF_XDP data path (tun.datapath = xdp): an XDP program on the
// LAN and on the WAN interface hands the frames of UDP ports 4791 and the CREM port to an
// AF_XDP socket on each interface's queue 0; the gateway takes the IP packet out of each
// frame (a copy into a packet buffer, as a read of the TUN device makes) and hands it to the
// same shards and Node.Tun as the TUN path. What goes on leaves as a router sends it: the TTL
// decremented, on the TX ring of the interface the kernel's route names, to the next hop's
// MAC from the kernel's neighbour table. A packet whose next hop is not known (or whose route
// leaves by another interface) goes to the kernel through the raw socket of the TUN path
// (counted). CREM datagrams addressed to the gateway itself go to its CREM handling as if
// read from the CREM socket; the gateway's own CREM messages leave by the CREM socket.
type xdpPath struct {
	ifs    [2]*xdpIf // xdpLAN, xdpWAN
	local  map[netip.Addr]bool
	cremPt uint16
	out    [256]*xdpOut // per shard, made on first use by the shard

	toKernel, ttlExpired, notIPv4, tooLong atomic.Uint64
	foreignCREM, joined                    atomic.Uint64
}

const (
	xdpLAN = iota
	xdpWAN
)

var xdpIfNames = [2]string{"lan", "wan"}

// xdpIf is one interface with its program and socket.
type xdpIf struct {
	name  string
	index int
	mtu   int
	mac   [6]byte
	prog  *xdp.Program
	mu    sync.Mutex // the socket's: the reader's receive and release, the shards' transmits
	s     *xdp.Socket
	queue int

	rxFrames, txFrames, ringFull atomic.Uint64

	// frames are the packet headers of the received frames handed on in place, one per UMEM
	// frame (by its address), so that handing one on allocates nothing.
	frames []xdpFrame
}

// xdpFrame is a packet handed on in the AF_XDP frame it arrived in: its pkt's buf is the frame's
// IP packet, in place in the UMEM, and giving the pkt back (putPkt) gives the frame back to the
// kernel's fill ring. The frame stays the shard's until then: a packet the shard sends on leaves
// from it (copied onto the TX ring) without a copy of its own.
type xdpFrame struct {
	pkt
	f    *xdpIf
	addr uint64
}

// release gives the frame back to the kernel (nothing after the socket closed: the shards have
// stopped by then and the UMEM is gone).
func (xf *xdpFrame) release() {
	f := xf.f
	xf.pkt = pkt{xf: xf}
	f.mu.Lock()
	if f.s != nil {
		f.s.ReleaseAddr(xf.addr)
	}
	f.mu.Unlock()
}

// xdpFrameSize is the UMEM frame: the longest frame copy mode receives is this less the
// kernel's headroom (256 octets).
const (
	xdpFrameSize = 4096
	xdpMaxFrame  = xdpFrameSize - 256
	// xdpFrames is the UMEM of one socket (32 MiB): 4,096 frames on the fill ring absorb a
	// burst while the reader waits for a core, 4,096 for transmitting.
	xdpFrames = 8192
)

// openXDP loads and attaches the program on the LAN and WAN interfaces and binds a socket to
// queue 0 of each. Its errors say what failed and what fixes it.
func openXDP(r *resolved, cremPort uint16) (_ *xdpPath, err error) {
	x := &xdpPath{cremPt: cremPort, local: map[netip.Addr]bool{}}
	defer func() {
		if err != nil {
			x.close()
		}
	}()
	_ = rlimit.RemoveMemlock() // kernels before 5.11 charge maps to RLIMIT_MEMLOCK
	mode := map[XDPAttach]xdp.AttachMode{XDPAttachAuto: xdp.AttachAuto, XDPAttachDriver: xdp.AttachDriver,
		XDPAttachGeneric: xdp.AttachGeneric}[r.xdpAttach]
	for i, name := range [2]string{r.lanIf, r.wanIf} {
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			return nil, fmt.Errorf("gateway: xdp: tun.%s %q: %w", xdpIfNames[i], name, err)
		}
		if ifc.MTU > bufSize {
			return nil, fmt.Errorf("gateway: xdp: %s has MTU %d: a packet buffer holds at most %d octets; lower the MTU or set tun.datapath = \"tun\"",
				name, ifc.MTU, bufSize)
		}
		f := &xdpIf{name: name, index: ifc.Index, mtu: ifc.MTU, frames: make([]xdpFrame, xdpFrames)}
		for j := range f.frames {
			f.frames[j] = xdpFrame{f: f, pkt: pkt{xf: &f.frames[j]}}
		}
		copy(f.mac[:], ifc.HardwareAddr)
		x.ifs[i] = f
		if f.prog, err = xdp.LoadProgram(roce.UDPPort, cremPort); err != nil {
			return nil, fmt.Errorf("gateway: xdp: loading the program: %w (needs Linux 5.9 or later and root, or CAP_BPF, CAP_NET_ADMIN and CAP_NET_RAW; or set tun.datapath = \"tun\")", err)
		}
		if err = f.prog.Attach(ifc.Index, mode); err != nil {
			return nil, fmt.Errorf("gateway: xdp: attaching the program to %s (%s): %w (try tun.xdp_attach = \"generic\", or tun.datapath = \"tun\")", name, r.xdpAttach, err)
		}
		if f.s, err = openXDPSocket(ifc.Index, ifc.MTU); err != nil {
			return nil, fmt.Errorf("gateway: xdp: an AF_XDP socket on %s queue 0: %w (needs CAP_NET_RAW; another AF_XDP user may hold the queue; or set tun.datapath = \"tun\")", name, err)
		}
		if !f.s.MultiBuffer() && ifc.MTU+14 > xdpMaxFrame {
			return nil, fmt.Errorf("gateway: xdp: %s has MTU %d: without multi-buffer AF_XDP (Linux 6.6) a frame holds at most %d octets of IP packet; lower the MTU or set tun.datapath = \"tun\"",
				name, ifc.MTU, xdpMaxFrame-14)
		}
		if err = f.prog.Register(0, f.s); err != nil {
			return nil, fmt.Errorf("gateway: xdp: registering the socket of %s: %w", name, err)
		}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("gateway: xdp: this host's addresses: %w", err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			x.local[p.Addr().Unmap()] = true
		}
	}
	return x, nil
}

// openXDPSocket binds an AF_XDP socket to queue 0 of interface index: multi-buffer
// (XDP_USE_SG) where the MTU exceeds what one frame holds and the kernel has it, so that
// packets of up to 9 KiB cross in several frames; else one frame a packet.
func openXDPSocket(index, mtu int) (*xdp.Socket, error) {
	cfg := xdp.SocketConfig{Ifindex: index, Queue: 0, Frames: xdpFrames, FrameSize: xdpFrameSize}
	if mtu+14 > xdpMaxFrame {
		cfg.MultiBuffer = true
		s, err := xdp.NewSocket(cfg)
		if err == nil || !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EOPNOTSUPP) {
			return s, err
		}
		cfg.MultiBuffer = false // a kernel before 6.6: the caller says what the MTU must be
	}
	return xdp.NewSocket(cfg)
}

// rxQueues is the number of receive queues of interface name (1 where sysfs does not say).
func rxQueues(name string) int {
	m, _ := filepath.Glob("/sys/class/net/" + name + "/queues/rx-*")
	return max(len(m), 1)
}

func (x *xdpPath) close() {
	if x == nil {
		return
	}
	for _, f := range x.ifs {
		if f == nil {
			continue
		}
		if f.prog != nil {
			f.prog.Close() // detaches: every frame takes the kernel's path again
		}
		if f.s != nil {
			f.mu.Lock()
			f.s.Close()
			f.s = nil
			f.mu.Unlock()
		}
	}
	for _, o := range x.out {
		if o != nil && o.nl >= 0 {
			unix.Close(o.nl)
		}
	}
}

// describe is the data path for the log.
func (x *xdpPath) describe() []any {
	var out []any
	for i, f := range x.ifs {
		out = append(out, xdpIfNames[i], fmt.Sprintf("%s (%s XDP, %s, queue 0 of %d)", f.name, f.prog.AttachMode(), f.s.BindMode(), rxQueues(f.name)))
	}
	return out
}

// xdpSay logs the data path, and a warning for an interface with several receive queues.
func (g *Gateway) xdpSay() {
	x := g.xdp
	g.log.Info("xdp data path", x.describe()...)
	for i, f := range x.ifs {
		if n := rxQueues(f.name); n > 1 {
			g.log.Warn("xdp: the interface has several receive queues and the gateway binds queue 0 only: steer UDP 4791 and the CREM port to queue 0 (ethtool -N) or set one queue (ethtool -L)",
				xdpIfNames[i], f.name, "queues", n)
		}
	}
}

// xdpLoop reads both interfaces' sockets in one goroutine, batch by batch, until the gateway
// stops. When both rings are empty it waits in Go's poller (an epoll instance holding both
// sockets, itself registered with the poller), not in a blocking poll: a thread blocked in a
// system call has its P handed to another thread by the scheduler, a wakeup and a context
// switch each time the rings run dry.
func (g *Gateway) xdpLoop() error {
	x := g.xdp
	wait, err := newXDPWaiter(x)
	if err != nil {
		return err
	}
	defer wait.close()
	frames := make([]xdp.Frame, 64)
	for {
		select {
		case <-g.done:
			return nil
		default:
		}
		got := 0
		for _, f := range x.ifs {
			got += g.xdpReceive(f, frames)
		}
		if got == 0 {
			if err := wait.wait(20 * time.Millisecond); err != nil {
				return err
			}
		}
	}
}

// xdpWaiter waits for frames on the RX rings of both sockets in Go's poller.
type xdpWaiter struct {
	x    *xdpPath
	ep   *os.File
	rc   syscall.RawConn
	evs  [2]unix.EpollEvent
	stop func(fd uintptr) bool
}

func newXDPWaiter(x *xdpPath) (*xdpWaiter, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("gateway: xdp: epoll: %w", err)
	}
	for _, f := range x.ifs {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(f.s.FD())}
		if err := unix.EpollCtl(fd, unix.EPOLL_CTL_ADD, f.s.FD(), &ev); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("gateway: xdp: epoll: %w", err)
		}
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("gateway: xdp: epoll: %w", err)
	}
	w := &xdpWaiter{x: x, ep: os.NewFile(uintptr(fd), "xdp-epoll")} // non-blocking: in the poller
	if w.rc, err = w.ep.SyscallConn(); err != nil {
		w.ep.Close()
		return nil, fmt.Errorf("gateway: xdp: epoll: %w", err)
	}
	// Done waiting when a socket is ready. The epoll instance's own ready list is emptied
	// here (a socket with nothing to read leaves it), so that the poller hears of the next
	// frame: the sockets' wakeups reach it through the instance.
	w.stop = func(fd uintptr) bool {
		n, _ := unix.EpollWait(int(fd), w.evs[:], 0)
		return n > 0
	}
	return w, nil
}

// wait returns when a ring may hold frames or after timeout.
func (w *xdpWaiter) wait(timeout time.Duration) error {
	w.ep.SetReadDeadline(time.Now().Add(timeout))
	if err := w.rc.Read(w.stop); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("gateway: xdp: waiting for frames: %w", err)
	}
	return nil
}

func (w *xdpWaiter) close() { w.ep.Close() }

// xdpReceive takes one batch off f's RX ring and hands each frame's packet on.
func (g *Gateway) xdpReceive(f *xdpIf, frames []xdp.Frame) int {
	f.mu.Lock()
	if f.s == nil {
		f.mu.Unlock()
		return 0
	}
	n := f.s.Receive(frames)
	f.mu.Unlock()
	if n == 0 {
		return 0
	}
	f.rxFrames.Add(uint64(n))
	done := 0 // the frames given back here, the others handed on in place
	for i := 0; i < n; i++ {
		fr := frames[i]
		if !fr.More {
			if !g.xdpTake(f, fr) {
				frames[done] = fr
				done++
			}
			continue
		}
		// A packet in several frames (multi-buffer): copied into a packet buffer of its own
		// and handed on from there; its frames go back at once.
		j := i
		for j < n-1 && frames[j].More {
			j++
		}
		if !frames[j].More {
			g.xdpTakeJoined(f, frames[i:j+1])
		} else {
			g.xdp.tooLong.Add(1) // cut off by the batch: the packet outgrew it (not below bufSize)
		}
		for k := i; k <= j; k++ {
			frames[done] = frames[k]
			done++
		}
		i = j
	}
	f.mu.Lock()
	if f.s != nil {
		f.s.Release(frames[:done])
	}
	f.mu.Unlock()
	return n
}

// xdpTake hands on the IP packet of one received frame of f: to the CREM handling (a copy) when
// it is a CREM datagram addressed to this host, else, in place in its frame, to the shard of
// its address pair as a packet read from the TUN device would be. It reports whether the frame
// went on with the packet (the shard gives it back); false: the caller gives it back.
func (g *Gateway) xdpTake(f *xdpIf, fr xdp.Frame) bool {
	frame := fr.Data
	if !xdpIPv4(frame) {
		g.xdp.notIPv4.Add(1) // the program takes IPv6 too; TUN mode carries IPv4 only
		return false
	}
	return g.xdpIP(f, frame[14:], fr.Addr, nil)
}

// xdpTakeJoined hands on the IP packet of a frame received in several (multi-buffer), copied
// into a packet buffer of its own; the caller gives the frames back.
func (g *Gateway) xdpTakeJoined(f *xdpIf, frs []xdp.Frame) {
	x := g.xdp
	if !xdpIPv4(frs[0].Data) {
		x.notIPv4.Add(1)
		return
	}
	x.joined.Add(1)
	p := g.getPkt(bufSize)
	n := copy(p.buf, frs[0].Data[14:])
	for _, fr := range frs[1:] {
		if n+len(fr.Data) > len(p.buf) {
			x.tooLong.Add(1)
			g.putPkt(p)
			return
		}
		n += copy(p.buf[n:], fr.Data)
	}
	g.xdpIP(f, p.buf[:n], 0, p)
}

// xdpIPv4 reports whether an Ethernet frame carries an IPv4 packet.
func xdpIPv4(frame []byte) bool {
	return len(frame) >= 14+20 && binary.BigEndian.Uint16(frame[12:14]) == 0x0800 && frame[14]>>4 == 4
}

// xdpIP hands on IP packet b received on f, in place in the UMEM frame at addr, or, own not
// nil, at the start of own's buffer (then own goes on with it, or back to its pool). It reports
// whether the frame went on with the packet.
func (g *Gateway) xdpIP(f *xdpIf, b []byte, addr uint64, own *pkt) bool {
	x := g.xdp
	if tl := int(binary.BigEndian.Uint16(b[2:4])); tl >= 20 && tl < len(b) {
		b = b[:tl] // Ethernet padding
	}
	ihl := int(b[0]&0x0f) * 4
	cremDst := ihl >= 20 && len(b) >= ihl+8 && b[9] == 17 && binary.BigEndian.Uint16(b[ihl+2:ihl+4]) == x.cremPt &&
		x.local[netip.AddrFrom4([4]byte(b[16:20]))]
	if len(b) > bufSize || cremDst {
		if len(b) > bufSize {
			x.tooLong.Add(1)
		} else {
			g.xdpCREM(b, ihl)
		}
		if own != nil {
			g.putPkt(own)
		}
		return false
	}
	g.c.rx[kindTun].Add(1)
	g.c.rxBytes[kindTun].Add(uint64(len(b)))
	if own != nil {
		own.n = len(b)
		g.tunDispatch(own)
		return false
	}
	i := addr / xdpFrameSize
	if i >= uint64(len(f.frames)) {
		q := g.getPkt(len(b)) // not a frame of the UMEM: cannot happen, but copy rather than fail
		q.n = copy(q.buf, b)
		g.tunDispatch(q)
		return false
	}
	xf := &f.frames[i]
	xf.addr = addr
	xf.buf, xf.n = b, len(b)
	g.tunDispatch(&xf.pkt)
	return true
}

// xdpCREM hands on a CREM datagram addressed to this host, taken at XDP before netfilter: only
// the peer and the configured reporters may send to the CREM port (the user guide's firewall
// rule, kept here), others are counted and dropped.
func (g *Gateway) xdpCREM(b []byte, ihl int) {
	x := g.xdp
	src := netip.AddrFrom4([4]byte(b[12:16]))
	sport := binary.BigEndian.Uint16(b[ihl : ihl+2])
	payload := b[ihl+8:]
	if ul := int(binary.BigEndian.Uint16(b[ihl+4 : ihl+6])); ul >= 8 && ul-8 <= len(payload) {
		payload = payload[:ul-8]
	}
	if !g.cremSourceAllowed(src) {
		x.foreignCREM.Add(1)
		return
	}
	p := g.getPkt(len(payload))
	p.n = copy(p.buf, payload)
	p.from = netip.AddrPortFrom(src, sport)
	p.kind, p.ce = kindCREM, b[1]&3 == 3
	if !g.accept(g.crem, p) {
		g.putPkt(p)
	}
}

// cremSourceAllowed: the peer, or a configured reporter.
func (g *Gateway) cremSourceAllowed(a netip.Addr) bool {
	if a == g.cfg.peer.Addr().Unmap() {
		return true
	}
	for _, r := range g.cfg.reporters {
		if r == a {
			return true
		}
	}
	return false
}

// xdpOut is one shard's sending state: its route cache, netlink socket and batches.
type xdpOut struct {
	nl      int // netlink (NETLINK_ROUTE) socket, -1 until needed
	seq     uint32
	nlBuf   []byte
	hops    map[[4]byte]nextHop
	frames  [2][][]byte // per interface: the frames (or IP packets, after heads) of this flush
	heads   [2][][]byte // per interface: the Ethernet headers of the IP packets in frames
	scratch [2][][]byte // per interface: frame buffers, reused
	kernel  *tunQueue   // packets for the raw socket
	sent    [2][]*pkt   // per interface: the CREM messages framed in frames
	sentTo  [2][]netip.AddrPort
}

// nextHop is where packets to one destination go: iface -1 to the kernel.
type nextHop struct {
	iface int
	mac   [6]byte
	src   [4]byte // the route's preferred source address
	until time.Duration
}

const (
	hopTTL      = 5 * time.Second        // a resolved next hop is looked up again after this
	hopMissTTL  = 200 * time.Millisecond // an unknown one: the kernel resolves it meanwhile
	maxHopCache = 4096
)

func (x *xdpPath) shardOut(idx int, t *tunPath) *xdpOut {
	o := x.out[idx]
	if o == nil {
		o = &xdpOut{nl: -1, hops: map[[4]byte]nextHop{}, nlBuf: make([]byte, 1<<16),
			kernel: t.newQueue()}
		for i := range o.scratch {
			o.scratch[i] = make([][]byte, tunBatch)
			for j := range o.scratch[i] {
				o.scratch[i][j] = make([]byte, bufSize+64) // a CREM message framed, up to the MTU
			}
		}
		x.out[idx] = o
	}
	return o
}

// sendXDP sends a shard's queued packets on (the xdp data path's flushTun): each with its TTL
// decremented, framed for its next hop and posted on the TX ring of its interface, or handed
// to the kernel through the raw socket.
func (g *Gateway) sendXDP(idx int, q *tunQueue) (sent int, octets uint64, failed int) {
	x := g.xdp
	o := x.shardOut(idx, g.tun)
	now := g.now()
	for _, p := range q.pkts {
		b := p.data()
		if b[8] <= 1 {
			x.ttlExpired.Add(1)
			continue
		}
		b[8]--
		b[10], b[11] = 0, 0
		binary.BigEndian.PutUint16(b[10:], vnethdr.Checksum(b[:int(b[0]&0x0f)*4]))
		h := o.lookup(x, [4]byte(b[16:20]), now)
		if h.iface < 0 || len(b) > x.ifs[h.iface].mtu {
			// No next hop known, or longer than the interface's MTU: the kernel fragments it
			// or answers as a router would.
			x.toKernel.Add(1)
			o.kernel.pkts = append(o.kernel.pkts, p)
			continue
		}
		f := x.ifs[h.iface]
		eth := o.scratch[h.iface][len(o.frames[h.iface])][:14] // the Ethernet header, joined to b on the ring
		copy(eth[0:6], h.mac[:])
		copy(eth[6:12], f.mac[:])
		eth[12], eth[13] = 0x08, 0x00
		o.heads[h.iface] = append(o.heads[h.iface], eth)
		o.frames[h.iface] = append(o.frames[h.iface], b)
		octets += uint64(len(b))
	}
	for i, f := range x.ifs {
		fs := o.frames[i]
		if len(fs) == 0 {
			continue
		}
		n := f.transmit(o.heads[i], fs)
		f.txFrames.Add(uint64(n))
		if n < len(fs) {
			f.ringFull.Add(uint64(len(fs) - n))
			failed += len(fs) - n
			for _, fr := range fs[n:] {
				octets -= uint64(len(fr))
			}
		}
		sent += n
		clear(fs)
		clear(o.heads[i])
		o.frames[i], o.heads[i] = fs[:0], o.heads[i][:0]
	}
	if len(o.kernel.pkts) > 0 {
		s, oc, fl := g.tun.sendBatch(o.kernel)
		sent, octets, failed = sent+s, octets+oc, failed+fl
		clear(o.kernel.pkts)
		o.kernel.pkts = o.kernel.pkts[:0]
	}
	return sent, octets, failed
}

// sendCREMXDP sends the CREM messages of a shard's queue that have a next hop on the LAN or
// WAN interface on its TX ring (Ethernet, IPv4 and UDP from the CREM address and port), behind
// the packets the shard sent on before them: on the same ring a REPAIR cannot overtake the
// sources of its block, which it could on the CREM socket while they wait in the ring. It
// returns the messages left for the socket (no next hop known, IPv6, a full ring), in ps[:n].
func (g *Gateway) sendCREMXDP(idx int, ps []*pkt, to []netip.AddrPort) (n int) {
	x := g.xdp
	o := x.shardOut(idx, g.tun)
	now := g.now()
	self := g.crem.addr
	for i, p := range ps {
		d := to[i].Addr().Unmap()
		h := nextHop{iface: -1}
		if d.Is4() {
			h = o.lookup(x, d.As4(), now)
		}
		src := self.Addr().Unmap()
		if !src.Is4() || src.IsUnspecified() {
			src = netip.AddrFrom4(h.src)
		}
		var fr []byte
		err := errNoHop
		if h.iface >= 0 && src.Is4() && !src.IsUnspecified() && p.n+28 <= x.ifs[h.iface].mtu {
			if len(o.frames[h.iface]) == tunBatch {
				n = g.flushCREMXDP(o, ps, to, n)
			}
			fr, err = xdp.AppendUDP(o.scratch[h.iface][len(o.frames[h.iface])][:0], xdp.Header{SrcMAC: x.ifs[h.iface].mac,
				DstMAC: h.mac, Src: src, Dst: d, SrcPort: self.Port(), DstPort: to[i].Port()}, p.data())
		}
		if err != nil {
			ps[n], to[n] = p, to[i]
			n++
			continue
		}
		o.frames[h.iface] = append(o.frames[h.iface], fr)
		o.sent[h.iface] = append(o.sent[h.iface], p)
		o.sentTo[h.iface] = append(o.sentTo[h.iface], to[i])
	}
	return g.flushCREMXDP(o, ps, to, n)
}

var errNoHop = errors.New("no next hop on the LAN or WAN interface")

// flushCREMXDP posts the CREM messages framed so far; those the rings do not take go back to
// ps[n:] for the socket. It returns the new n.
func (g *Gateway) flushCREMXDP(o *xdpOut, ps []*pkt, to []netip.AddrPort, n int) int {
	for i, f := range g.xdp.ifs {
		fs := o.frames[i]
		if len(fs) == 0 {
			continue
		}
		k := f.transmit(nil, fs)
		f.txFrames.Add(uint64(k))
		g.c.tx[kindCREM].Add(uint64(k))
		for j, p := range o.sent[i] {
			if j < k {
				if g.pcap != nil {
					g.pcap.record(g.crem.addr, o.sentTo[i][j], p.data())
				}
				g.c.txBytes[kindCREM].Add(uint64(p.n))
				g.putPkt(p)
				continue
			}
			f.ringFull.Add(1)
			ps[n], to[n] = p, o.sentTo[i][j] // the socket sends what the ring did not take
			n++
		}
		clear(fs)
		clear(o.sent[i])
		o.frames[i], o.sent[i], o.sentTo[i] = fs[:0], o.sent[i][:0], o.sentTo[i][:0]
	}
	return n
}

// transmit posts frames (heads[i] then fs[i], or fs[i] alone for heads nil) on f's TX ring, retrying a while as completions free frames; it
// returns how many it posted.
func (f *xdpIf) transmit(heads, fs [][]byte) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.s == nil {
		return 0
	}
	n := 0
	for try := 0; n < len(fs) && try < 64; try++ {
		var hs [][]byte
		if heads != nil {
			hs = heads[n:]
		}
		k, err := f.s.TransmitJoined(hs, fs[n:])
		n += k
		if err != nil && !errors.Is(err, xdp.ErrFrameTooLong) {
			break
		}
		if k == 0 {
			time.Sleep(20 * time.Microsecond) // the kernel sends the ring's frames meanwhile
		}
	}
	return n
}

// lookup is the next hop toward dst: from the cache, or from the kernel's route and neighbour
// tables.
func (o *xdpOut) lookup(x *xdpPath, dst [4]byte, now time.Duration) nextHop {
	if h, ok := o.hops[dst]; ok && now < h.until {
		return h
	}
	h := nextHop{iface: -1, until: now + hopMissTTL}
	if oif, via, src, err := o.route(dst); err == nil {
		for i, f := range x.ifs {
			if f.index != oif {
				continue
			}
			if mac, ok, err := o.neighbour(oif, via); err == nil && ok {
				h = nextHop{iface: i, mac: mac, src: src, until: now + hopTTL}
			}
		}
	}
	if len(o.hops) >= maxHopCache {
		clear(o.hops)
	}
	o.hops[dst] = h
	return h
}

// netlink sends one request and calls each for every message of the answer (a dump's too).
func (o *xdpOut) netlink(typ, flags uint16, body []byte, each func(typ uint16, b []byte)) error {
	if o.nl < 0 {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
		if err != nil {
			return fmt.Errorf("gateway: xdp: netlink: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("gateway: xdp: netlink: %w", err)
		}
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1})
		o.nl = fd
	}
	o.seq++
	req := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(body))
	req = append(req, body...)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], typ)
	binary.NativeEndian.PutUint16(req[6:], flags|unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(req[8:], o.seq)
	if err := unix.Sendto(o.nl, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("gateway: xdp: netlink: %w", err)
	}
	for {
		n, _, err := unix.Recvfrom(o.nl, o.nlBuf, 0)
		if err != nil {
			return fmt.Errorf("gateway: xdp: netlink: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(o.nlBuf[:n])
		if err != nil {
			return fmt.Errorf("gateway: xdp: netlink: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != o.seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
						return fmt.Errorf("gateway: xdp: netlink: %w", unix.Errno(-e))
					}
				}
				return nil
			}
			each(m.Header.Type, m.Data)
			if m.Header.Flags&unix.NLM_F_MULTI == 0 {
				return nil
			}
		}
	}
}

// route asks the kernel which interface and next hop (the gateway, else dst itself) a packet
// to dst takes; oif 0 for a route that is not unicast (local, unreachable, ...).
func (o *xdpOut) route(dst [4]byte) (oif int, via, src [4]byte, err error) {
	body := make([]byte, unix.SizeofRtMsg, unix.SizeofRtMsg+8)
	body[0], body[2] = unix.AF_INET, 32 // family, dst_len
	body = appendAttr(body, unix.RTA_DST, dst[:])
	via = dst
	err = o.netlink(unix.RTM_GETROUTE, 0, body, func(typ uint16, b []byte) {
		if typ != unix.RTM_NEWROUTE || len(b) < unix.SizeofRtMsg || b[7] != unix.RTN_UNICAST {
			return
		}
		eachAttr(b[unix.SizeofRtMsg:], func(t uint16, v []byte) {
			switch {
			case t == unix.RTA_OIF && len(v) == 4:
				oif = int(binary.NativeEndian.Uint32(v))
			case t == unix.RTA_GATEWAY && len(v) == 4:
				via = [4]byte(v)
			case t == unix.RTA_PREFSRC && len(v) == 4:
				src = [4]byte(v)
			}
		})
	})
	return oif, via, src, err
}

// neighbour looks for addr's link-layer address on interface oif in the kernel's table
// (an entry in a usable state: reachable, stale, delay, probe, permanent).
func (o *xdpOut) neighbour(oif int, addr [4]byte) (mac [6]byte, ok bool, err error) {
	body := make([]byte, unix.SizeofNdMsg)
	body[0] = unix.AF_INET
	binary.NativeEndian.PutUint32(body[4:], uint32(oif))
	const usable = unix.NUD_REACHABLE | unix.NUD_STALE | unix.NUD_DELAY | unix.NUD_PROBE | unix.NUD_PERMANENT
	err = o.netlink(unix.RTM_GETNEIGH, unix.NLM_F_DUMP, body, func(typ uint16, b []byte) {
		if ok || typ != unix.RTM_NEWNEIGH || len(b) < unix.SizeofNdMsg ||
			int(binary.NativeEndian.Uint32(b[4:8])) != oif || binary.NativeEndian.Uint16(b[8:10])&usable == 0 {
			return
		}
		var dst []byte
		var ll []byte
		eachAttr(b[unix.SizeofNdMsg:], func(t uint16, v []byte) {
			switch t {
			case unix.NDA_DST:
				dst = v
			case unix.NDA_LLADDR:
				ll = v
			}
		})
		if len(dst) == 4 && [4]byte(dst) == addr && len(ll) == 6 {
			mac, ok = [6]byte(ll), true
		}
	})
	return mac, ok, err
}

func appendAttr(b []byte, typ uint16, v []byte) []byte {
	l := unix.SizeofRtAttr + len(v)
	var h [4]byte
	binary.NativeEndian.PutUint16(h[0:], uint16(l))
	binary.NativeEndian.PutUint16(h[2:], typ)
	b = append(append(b, h[:]...), v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func eachAttr(b []byte, f func(typ uint16, v []byte)) {
	for len(b) >= unix.SizeofRtAttr {
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		if l < unix.SizeofRtAttr || l > len(b) {
			return
		}
		f(binary.NativeEndian.Uint16(b[2:4])&^unix.NLA_F_NESTED, b[unix.SizeofRtAttr:l])
		l = (l + 3) &^ 3
		if l > len(b) {
			return
		}
		b = b[l:]
	}
}

// addCounters adds the data path's counters to m (zero without it).
func (x *xdpPath) addCounters(m map[string]uint64) {
	if x == nil {
		x = &xdpPath{}
	}
	m["xdp_to_kernel"] = x.toKernel.Load()
	m["xdp_ttl_expired"] = x.ttlExpired.Load()
	m["xdp_other_frames"] = x.notIPv4.Load()
	m["xdp_too_long"] = x.tooLong.Load()
	m["xdp_crem_refused"] = x.foreignCREM.Load()
	m["xdp_joined"] = x.joined.Load()
	for i, n := range xdpIfNames {
		var st xdp.Stats
		var rx, tx, full uint64
		if f := x.ifs[i]; f != nil {
			rx, tx, full = f.rxFrames.Load(), f.txFrames.Load(), f.ringFull.Load()
			f.mu.Lock()
			if f.s != nil {
				st, _ = f.s.Stats()
			}
			f.mu.Unlock()
		}
		m["xdp_rx_frames_"+n], m["xdp_tx_frames_"+n], m["xdp_tx_ring_full_"+n] = rx, tx, full
		m["xdp_fill_empty_"+n], m["xdp_wakeups_"+n], m["xdp_completions_"+n] = st.FillEmpty, st.Wakeups, st.Completions
		m["xdp_kernel_rx_dropped_"+n] = st.RxDropped
		m["xdp_kernel_rx_ring_full_"+n] = st.RxRingFull
		m["xdp_kernel_fill_ring_empty_"+n] = st.RxFillRingEmptyDescs
		m["xdp_kernel_invalid_descs_"+n] = st.RxInvalidDescs + st.TxInvalidDescs
	}
}
