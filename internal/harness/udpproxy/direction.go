package udpproxy

import (
	"errors"
	"math"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/crem-project/crem/netem"
)

// ECN codepoints in the two low bits of the TOS or traffic class.
const (
	ecnMask = 0x3
	ecnCE   = 0x3
)

// direction is one way through the proxy: a netem link and the one loop that owns it and its
// timer. Readers hand it datagrams on in; the loop stamps them with the proxy clock, passes
// them to the link, and when the link's next deadline comes, sends what it delivers.
type direction struct {
	p    *Proxy
	name string
	link *netem.Link
	in   chan *pkt
	done chan struct{}

	count   uint64 // datagrams received so far: the next one's index
	out     []*pkt // delivered, waiting to be written
	wbuf    []dgram
	deliver func(netem.Packet)
	line    []byte // the drop log line being built

	// The reporter's part, owned by the loop: the marking engine (nil without marking), the
	// time datagrams being delivered leave the link, and when the queueing delay was last told.
	mark      *marking
	outNow    time.Duration
	lastDelay time.Duration
	delayTold bool

	received, receivedBytes   atomic.Uint64
	forwarded, forwardedBytes atomic.Uint64
	lost, lostBytes           atomic.Uint64
	overflow, overflowBytes   atomic.Uint64
	ect, marked               atomic.Uint64
	writeErrors, unsent       atomic.Uint64
	merged, mergedBytes       atomic.Uint64
	forged                    atomic.Uint64
	inFlight, peakQueue       atomic.Int64

	forger  *forger // nil unless Config.ForgeDefinitions (forward direction only)
	forging bool    // the datagram being sent is the forger's own
}

func newDirection(p *Proxy, name string, cfg netem.Config) (*direction, error) {
	link, err := netem.NewLink(cfg)
	if err != nil {
		return nil, err
	}
	d := &direction{
		p:    p,
		name: name,
		link: link,
		in:   make(chan *pkt, 1024),
		done: make(chan struct{}),
		wbuf: make([]dgram, 0, max(p.cfg.Batch, 1)),
		line: make([]byte, 0, 512),
	}
	d.deliver = d.collect
	return d, nil
}

func (d *direction) start() { go d.run() }

// run is the direction's loop: the only code that touches its link and its timer.
func (d *direction) run() {
	defer close(d.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	in := d.in
	var drainEnd time.Duration
	for {
		select {
		case pk, ok := <-in:
			if ok {
				now := d.p.now()
				d.send(now, pk)
				ok = d.sendWaiting(now, in)
			}
			if !ok {
				in = nil
				drainEnd = d.p.now() + d.p.cfg.Drain
			}
		case <-timer.C:
		}
		now := d.p.now()
		d.outNow = now
		d.link.Deliver(now, d.deliver)
		d.flush(now)
		if in == nil {
			if d.link.InFlight() == 0 {
				d.inFlight.Store(0) // the final Stats say so
				d.markTick(now, true)
				return
			}
			if now >= drainEnd {
				d.abandon()
				d.markTick(now, true)
				return
			}
		}
		d.markTick(now, false)
		next, ok := d.link.NextDeadline()
		if d.mark != nil {
			if mn, mok := d.mark.eng.NextDeadline(); mok && (!ok || mn < next) {
				next, ok = mn, true
			}
		}
		if ok {
			if in == nil {
				next = min(next, drainEnd)
			}
			timer.Reset(max(next-d.p.now(), 0))
		} else {
			timer.Stop()
		}
		d.inFlight.Store(int64(d.link.InFlight()))
	}
}

// sendWaiting passes to the link, at the same instant, up to a batch of datagrams already
// waiting; it returns false when in has been closed.
func (d *direction) sendWaiting(now time.Duration, in chan *pkt) bool {
	for range cap(d.wbuf) {
		select {
		case pk, ok := <-in:
			if !ok {
				return false
			}
			d.send(now, pk)
		default:
			return true
		}
	}
	return true
}

// send hands one received datagram to the link.
func (d *direction) send(now time.Duration, pk *pkt) {
	pk.idx = d.count
	d.count++
	d.received.Add(1)
	d.receivedBytes.Add(uint64(len(pk.data)))
	ecn := pk.tos & ecnMask
	ect := pk.hasTOS && ecn != 0
	if ect {
		d.ect.Add(1)
	}
	if d.mergeReport(now, pk) {
		return
	}
	if d.forger != nil && !d.forging {
		if b := d.forger.forge(pk.data); b != nil {
			fk := d.p.pools.newPkt(&dgram{buf: b, tos: pk.tos, hasTOS: pk.hasTOS}, pk.cl)
			d.forged.Add(1)
			d.forging = true
			d.send(now, fk) // ahead of the genuine one, through the same link
			d.forging = false
		}
	}
	d.reportIn(now, pk)
	v := d.link.Send(now, netem.Packet{Data: pk.data, ECT: ect, CE: ect && ecn == ecnCE, ID: pk.idx, Tag: pk})
	d.reportVerdict(now, pk, v)
	if v == netem.Queued {
		st := d.link.Stats()
		d.inFlight.Store(int64(st.InFlight))
		d.peakQueue.Store(int64(st.PeakQueue))
		return
	}
	n := uint64(len(pk.data))
	if v == netem.DroppedLoss {
		d.lost.Add(1)
		d.lostBytes.Add(n)
	} else {
		d.overflow.Add(1)
		d.overflowBytes.Add(n)
	}
	if d.p.drops != nil {
		d.line = d.p.drops.write(d.line, d.p.start, now, d.name, pk, v)
	}
	if d.p.pcap != nil {
		d.p.pcap.write(d.p.start.Add(now), d.frameEnds(pk), pk, fateOf(v))
	}
	pk.free()
}

// mergeReport offers a carried datagram that looks like a PATH_REPORT to the path reporter
// (ReportConfig.Merge), before the link; it reports whether the reporter merged it, in which
// case the datagram is counted, recorded in the capture and freed. Any other datagram, and a
// PATH_REPORT not merged, goes on into the link untouched.
func (d *direction) mergeReport(now time.Duration, pk *pkt) bool {
	r := d.p.rep
	if r == nil || !r.cfg.Merge || !looksLikePathReport(pk.data) {
		return false
	}
	ends := d.frameEnds(pk)
	if !r.offer(now, pk.data, ends[0], ends[1]) {
		return false
	}
	d.merged.Add(1)
	d.mergedBytes.Add(uint64(len(pk.data)))
	if d.p.pcap != nil {
		d.p.pcap.write(d.p.start.Add(now), ends, pk, fateMerged)
	}
	pk.free()
	return true
}

// collect takes one datagram the link delivers.
func (d *direction) collect(np netem.Packet) {
	pk := np.Tag.(*pkt)
	d.reportOut(d.outNow, pk)
	if np.CE && pk.tos&ecnMask != ecnCE {
		pk.tos |= ecnCE
		d.marked.Add(1)
	}
	d.out = append(d.out, pk)
}

// flush writes the delivered datagrams: in the forward direction on each client's upstream
// socket (a batch per run of one client's datagrams), in the reverse direction on the
// listening socket to each client's address.
func (d *direction) flush(now time.Duration) {
	if len(d.out) == 0 {
		return
	}
	if d.p.pcap != nil {
		t := d.p.start.Add(now)
		for _, pk := range d.out {
			d.p.pcap.write(t, d.frameEnds(pk), pk, fateSent)
		}
	}
	out := d.out
	for len(out) > 0 {
		var bio *batchIO
		run := len(out)
		if d == d.p.fwd {
			c := out[0].cl
			bio = c.wio
			run = 1
			for run < len(out) && out[run].cl == c {
				run++
			}
		} else {
			bio = d.p.lw
		}
		d.write(bio, out[:run])
		out = out[run:]
	}
	for i, pk := range d.out {
		pk.free()
		d.out[i] = nil
	}
	d.out = d.out[:0]
}

// write sends pks with one system call per batch; a datagram the kernel refuses is counted
// and skipped.
func (d *direction) write(bio *batchIO, pks []*pkt) {
	for len(pks) > 0 {
		n := min(len(pks), cap(d.wbuf))
		ms := d.wbuf[:n]
		for i, pk := range pks[:n] {
			ms[i] = dgram{buf: pk.data, tos: pk.tos, hasTOS: pk.hasTOS}
			if d == d.p.rev {
				ms[i].addr = pk.cl.addr
			}
		}
		sent, err := bio.write(ms)
		for _, pk := range pks[:sent] {
			d.forwarded.Add(1)
			d.forwardedBytes.Add(uint64(len(pk.data)))
		}
		pks = pks[sent:]
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				d.writeErrors.Add(uint64(len(pks)))
				return
			}
			if len(pks) > 0 {
				d.writeErrors.Add(1)
				pks = pks[1:]
			}
		}
	}
	clear(d.wbuf[:cap(d.wbuf)])
}

// abandon discards what is still in flight when the drain time has run out.
func (d *direction) abandon() {
	for {
		np, ok := d.link.Pop(math.MaxInt64)
		if !ok {
			break
		}
		d.unsent.Add(1)
		np.Tag.(*pkt).free()
	}
	d.inFlight.Store(0)
}

// rejected counts a datagram that could not be given an upstream socket.
func (d *direction) rejected(n int) {
	d.received.Add(1)
	d.receivedBytes.Add(uint64(n))
	d.writeErrors.Add(1)
}

// frameEnds returns the datagram's source and destination as the proxy stands for them:
// client and its forward address.
func (d *direction) frameEnds(pk *pkt) (ends [2]netip.AddrPort) {
	if d == d.p.fwd {
		return [2]netip.AddrPort{pk.cl.addr, pk.cl.fwd}
	}
	return [2]netip.AddrPort{pk.cl.fwd, pk.cl.addr}
}

func (d *direction) stats() DirStats {
	return DirStats{
		Received:             d.received.Load(),
		ReceivedBytes:        d.receivedBytes.Load(),
		Forwarded:            d.forwarded.Load(),
		ForwardedBytes:       d.forwardedBytes.Load(),
		DroppedLoss:          d.lost.Load(),
		DroppedLossBytes:     d.lostBytes.Load(),
		DroppedOverflow:      d.overflow.Load(),
		DroppedOverflowBytes: d.overflowBytes.Load(),
		ECT:                  d.ect.Load(),
		CEMarked:             d.marked.Load(),
		WriteErrors:          d.writeErrors.Load(),
		Unsent:               d.unsent.Load(),
		Merged:               d.merged.Load(),
		MergedBytes:          d.mergedBytes.Load(),
		Forged:               d.forged.Load(),
		InFlight:             int(d.inFlight.Load()),
		PeakQueue:            int(d.peakQueue.Load()),
	}
}
