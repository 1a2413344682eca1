package lab

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// path is the impaired path between the two sides: one netem link per direction, carrying
// every datagram (RoCEv2 data and CREM messages cross the same bottleneck and the same loss
// model, in the order they were sent). Each side has one socket; what arrives on side A's goes
// over the A->B link and out of side B's socket, to the destination the sender's address is
// routed to (and back the same way).
type path struct {
	start time.Time
	sock  [2]*net.UDPConn // side A, side B
	addr  [2]netip.AddrPort
	// routes[i] maps a sender on side i to its destination on the other side; def[i] takes
	// the rest.
	routes [2]map[netip.AddrPort]netip.AddrPort
	def    [2]netip.AddrPort
	dirs   [2]*direction
	pcap   *pathPcap
	wg     sync.WaitGroup
	// roce[i] is the sender on side i whose datagrams are RoCEv2 (the endpoint, or its
	// gateway's relay socket), counted per destination QP and PSN (qpTally).
	roce [2]netip.AddrPort
	// window bounds the PSNs of one QP in flight at once: a PSN this far behind the furthest
	// one is never sent again, and its tally is final (a soak sends PSNs without end).
	window uint32
	// rep, if set, makes the path an on-path node with a path reporter: each direction is one
	// of its ports, every RoCEv2 datagram it drops is reported to the flow's source, and every
	// datagram sent into a direction tells the reporter that port's queueing delay.
	rep *pathReporter
}

// qpTally is what the path did to the RoCEv2 datagrams of one destination QP.
type qpTally struct {
	dropped uint64 // datagrams lost, every opcode
	// psns counts the transmissions and losses of each PSN whose packet must arrive for its
	// message to complete (SEND and WRITE packets and READ responses; not READ requests, which a
	// later re-issue may replace): one lost every time it was sent still arrived only if CREM
	// restored it.
	psns map[uint32][2]uint32
	// head is the furthest PSN tallied; onlyDone counts the PSNs lost every time they were
	// sent whose tally was final and taken out of psns.
	head     psn.PSN
	onlyDone uint64
	// dataDropped counts the drops of those PSNs' packets (every transmission lost);
	// resentDone counts, over the PSNs taken out of psns, the transmissions delivered after
	// the first delivered one: retransmissions of packets the path had already delivered.
	dataDropped uint64
	resentDone  uint64
}

// resentDelivered is how many of a PSN's transmissions the path delivered after its first
// delivered one (c: transmissions, losses).
func resentDelivered(c [2]uint32) uint64 {
	if c[0] > c[1]+1 {
		return uint64(c[0] - c[1] - 1)
	}
	return 0
}

// prune takes the PSNs more than window behind head out of the tally, counting those lost
// every time they were sent.
func (t *qpTally) prune(window uint32) {
	for k, c := range t.psns {
		if d := psn.Of(k).Forward(t.head); d > window && d < psn.Modulus/2 {
			if c[1] == c[0] {
				t.onlyDone++
			}
			t.resentDone += resentDelivered(c)
			delete(t.psns, k)
		}
	}
}

type item struct {
	from netip.AddrPort
	data []byte
}

// direction owns one link; index 0 is A->B.
type direction struct {
	idx  int
	mu   sync.Mutex
	link *netem.Link
	in   chan item
	p    *path
	stop chan struct{}
	// ended: the run's figures were taken (path.end); what crosses after is neither counted
	// nor captured, so that the capture matches the figures.
	ended bool
	// qps tallies the RoCEv2 datagrams by destination QP.
	qps map[uint32]*qpTally
}

type pathPcap struct {
	mu sync.Mutex
	bw *bufio.Writer
	w  *capture.Writer
}

// newPath builds the path on the two sockets of its ends (bound once for the whole lab): what
// earlier runs left in them is discarded first.
func newPath(ab, ba netem.Config, pc *pathPcap, socks [2]*net.UDPConn) (*path, error) {
	p := &path{start: time.Now(), pcap: pc, routes: [2]map[netip.AddrPort]netip.AddrPort{{}, {}}}
	for i, cfg := range []netem.Config{ab, ba} {
		l, err := netem.NewLink(cfg)
		if err != nil {
			return nil, fmt.Errorf("lab: path: %w", err)
		}
		p.dirs[i] = &direction{idx: i, link: l, in: make(chan item, 65536), p: p, stop: make(chan struct{}),
			qps: map[uint32]*qpTally{}}
	}
	for i, s := range socks {
		s.SetReadBuffer(8 << 20)
		s.SetWriteBuffer(8 << 20)
		if err := discardPending(s); err != nil {
			return nil, fmt.Errorf("lab: path socket %v: %w", s.LocalAddr(), err)
		}
		p.sock[i] = s
		p.addr[i] = s.LocalAddr().(*net.UDPAddr).AddrPort()
	}
	return p, nil
}

// discardPending reads and drops what is queued on s: the last run's senders are closed, and
// on loopback what they sent is queued by the time their send returned.
func discardPending(s *net.UDPConn) error {
	buf := make([]byte, 65536)
	s.SetReadDeadline(time.Unix(1, 0))
	for {
		if _, _, err := s.ReadFromUDPAddrPort(buf); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				return err
			}
			break
		}
	}
	return s.SetReadDeadline(time.Time{})
}

// route sends what from (on side) sends to to, on the other side.
func (p *path) route(side int, from, to netip.AddrPort) { p.routes[side][from] = to }

// run starts the readers and the two direction loops; routes are fixed from here on.
func (p *path) run() {
	for side := range 2 {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.read(side)
		}()
	}
	for _, d := range p.dirs {
		p.wg.Add(1)
		go func() { defer p.wg.Done(); d.loop() }()
	}
}

func (p *path) now() time.Duration { return time.Since(p.start) }

func (p *path) read(side int) {
	buf := make([]byte, 65536)
	d := p.dirs[side] // side A's socket feeds A->B
	for {
		n, from, err := p.sock[side].ReadFromUDPAddrPort(buf)
		if err != nil {
			select {
			case <-d.stop: // close stopped the reads
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		select {
		case d.in <- item{from: from, data: append([]byte(nil), buf[:n]...)}:
		case <-d.stop:
			return
		}
	}
}

// dest returns where a datagram from from on side goes.
func (p *path) dest(side int, from netip.AddrPort) netip.AddrPort {
	if to, ok := p.routes[side][from]; ok {
		return to
	}
	return p.def[side]
}

func packAddr(a netip.AddrPort) uint64 {
	b := a.Addr().As4()
	return uint64(b[0])<<40 | uint64(b[1])<<32 | uint64(b[2])<<24 | uint64(b[3])<<16 | uint64(a.Port())
}

func unpackAddr(v uint64) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{byte(v >> 40), byte(v >> 32), byte(v >> 24), byte(v >> 16)}), uint16(v))
}

func (d *direction) loop() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	p := d.p
	out := func(pk netem.Packet) {
		to := unpackAddr(pk.ID)
		p.sock[1-d.idx].WriteToUDPAddrPort(pk.Data, to)
		if !d.ended {
			p.record(p.addr[1-d.idx], to, pk.Data, false)
		}
	}
	for {
		select {
		case it := <-d.in:
			d.mu.Lock()
			now := p.now()
			to := p.dest(d.idx, it.from)
			if p.rep != nil {
				p.rep.queueDelay(now, d.idx, d.link.QueueDelay(now))
			}
			v := d.link.Send(now, netem.Packet{Data: it.data, ID: packAddr(to)})
			lost := v != netem.Queued
			if lost && !d.ended {
				p.record(it.from, to, it.data, true)
			}
			if it.from == p.roce[d.idx] && !d.ended {
				d.tally(it.from, to, it.data, v)
			}
			d.link.Deliver(now, out)
			d.mu.Unlock()
		case <-t.C:
			d.mu.Lock()
			d.link.Deliver(p.now(), out)
			d.mu.Unlock()
		case <-d.stop:
			return
		}
		d.mu.Lock()
		next, ok := d.link.NextDeadline()
		d.mu.Unlock()
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		if ok {
			t.Reset(max(next-p.now(), 0))
		} else {
			t.Reset(time.Hour)
		}
	}
}

// tally counts a RoCEv2 datagram sent into the link under its destination QP and PSN, and
// tells the path's reporter, if any, of a drop: the flow is the datagram's addresses as the
// path sees them and its destination QP, the port this direction.
func (d *direction) tally(from, to netip.AddrPort, b []byte, v netem.Verdict) {
	h, _, err := roce.ParseBTH(b)
	if err != nil {
		return
	}
	lost := v != netem.Queued
	if lost && d.p.rep != nil {
		cause := wire.CauseCorruption
		if v == netem.DroppedOverflow {
			cause = wire.CauseCongestion
		}
		d.p.rep.drop(d.p.now(), d.idx, from, to, h.DestQP, h.PSN, cause)
	}
	t := d.qps[h.DestQP]
	if t == nil {
		t = &qpTally{psns: map[uint32][2]uint32{}}
		d.qps[h.DestQP] = t
	}
	if lost {
		t.dropped++
	}
	info := h.OpCode.Info()
	if !info.Source || h.OpCode == roce.OpReadRequest || h.OpCode == roce.OpCompareSwap || h.OpCode == roce.OpFetchAdd {
		return
	}
	t.count(h.PSN, lost)
	if w := d.p.window; w > 0 && uint32(len(t.psns)) > 2*w {
		t.prune(w)
	}
}

// count tallies one transmission of PSN p.
func (t *qpTally) count(p psn.PSN, lost bool) {
	// Values, not pointers: the tally allocates nothing per PSN, and a soak's map stays at the
	// size of its window.
	c, ok := t.psns[uint32(p)]
	if !ok && (len(t.psns) == 0 || p.After(t.head)) {
		t.head = p
	}
	c[0]++
	if lost {
		c[1]++
		t.dataDropped++
	}
	t.psns[uint32(p)] = c
}

// record writes one frame of the path's capture; dropped datagrams have TTL 1.
func (p *path) record(from, to netip.AddrPort, b []byte, dropped bool) {
	if p.pcap == nil {
		return
	}
	h := capture.FrameHeader{SrcMAC: [6]byte{2, 0x63, 0x72, 0x65, 0x6d, 1}, DstMAC: [6]byte{2, 0x63, 0x72, 0x65, 0x6d, 0},
		Src: from, Dst: to}
	if dropped {
		h.TTL, h.DstMAC[5] = 1, 0xd1
	}
	p.pcap.mu.Lock()
	p.pcap.w.WriteUDP(time.Now(), h, b)
	p.pcap.mu.Unlock()
}

// end returns each direction's link counters and stops the capture with them: the QPs and
// their timers still run until the run is torn down, and a datagram dropped after the figures
// were taken must not appear in the capture as a loss of the run.
func (p *path) end() ([2]netem.Stats, map[uint32]qpFigures) {
	var s [2]netem.Stats
	figs := map[uint32]qpFigures{}
	for i, d := range p.dirs {
		d.mu.Lock()
		s[i] = d.link.Stats()
		d.ended = true
		for qp, t := range d.qps {
			f := figs[qp]
			f.lost += t.dropped
			f.restoredOnly += t.onlyDone
			f.dataLost += t.dataDropped
			f.resent += t.resentDone
			for _, c := range t.psns {
				if c[1] == c[0] {
					f.restoredOnly++
				}
				f.resent += resentDelivered(c)
			}
			figs[qp] = f
		}
		d.mu.Unlock()
	}
	return s, figs
}

// lost counts the datagrams the path dropped so far, both directions.
func (p *path) lost() uint64 {
	var n uint64
	for _, d := range p.dirs {
		d.mu.Lock()
		st := d.link.Stats()
		d.mu.Unlock()
		n += st.DroppedLoss + st.DroppedOverflow
	}
	return n
}

// qpFigures is what the path saw of the datagrams to one QP: those it lost, and the packets it
// lost every time they were sent (that still arrived: restored by CREM); dataLost counts the
// losses of the packets that must arrive (SEND and WRITE packets, READ responses), resent
// the transmissions of them it delivered after one had been delivered already.
type qpFigures struct {
	lost, restoredOnly, dataLost, resent uint64
}

// close stops the path's goroutines; its sockets stay bound for the next run.
func (p *path) close() error {
	for _, d := range p.dirs {
		close(d.stop)
	}
	for _, s := range p.sock {
		s.SetReadDeadline(time.Unix(1, 0))
	}
	p.wg.Wait()
	var errs []error
	for _, s := range p.sock {
		errs = append(errs, s.SetReadDeadline(time.Time{}))
	}
	return errors.Join(errs...)
}

// newPathPcap starts one capture for every run of the lab.
func newPathPcap(w io.Writer) (*pathPcap, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	cw, err := capture.NewWriter(bw)
	if err != nil {
		return nil, fmt.Errorf("lab: pcap: %w", err)
	}
	return &pathPcap{bw: bw, w: cw}, nil
}

func (pc *pathPcap) flush() error {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.bw.Flush()
}
