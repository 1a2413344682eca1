package netem

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"strings"
	"time"
)

// Packet is what a link carries. netem reads only the metadata; Data is passed through untouched
// (never copied, never modified) and may be nil for synthetic packets.
type Packet struct {
	Data []byte
	// Size is the packet's length on the wire in octets, what serialization and the byte limit
	// of the queue count. 0 means len(Data).
	Size int
	// ECT says the packet is ECN-capable; CE is set by the queue when it marks it.
	ECT bool
	CE  bool
	// ID and Tag are the caller's, carried unchanged: an index or PSN in ID costs nothing,
	// and a pointer in Tag does not allocate.
	ID  uint64
	Tag any
}

// Verdict is what became of a packet handed to Send.
type Verdict uint8

const (
	// Queued: the packet is on its way and will come out of Deliver or Pop.
	Queued Verdict = iota
	// DroppedLoss: the loss model lost it.
	DroppedLoss
	// DroppedOverflow: the queue was full (tail drop).
	DroppedOverflow
)

func (v Verdict) String() string {
	switch v {
	case Queued:
		return "queued"
	case DroppedLoss:
		return "lost"
	case DroppedOverflow:
		return "overflow"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// LossPoint says where on the link the loss model acts.
type LossPoint uint8

const (
	// LossOnWire drops after the queue and serialization: the lost packet used its place in the
	// queue and its time on the bottleneck, as on a lossy segment behind it. The default.
	LossOnWire LossPoint = iota
	// LossAtInput drops before the queue: the lost packet never occupies it.
	LossAtInput
)

// JitterDist is the distribution of the jitter added to the propagation delay.
type JitterDist uint8

const (
	// JitterUniform draws uniformly from [-Jitter, +Jitter].
	JitterUniform JitterDist = iota
	// JitterNormal draws from a normal distribution with standard deviation Jitter.
	JitterNormal
)

func (d JitterDist) String() string {
	switch d {
	case JitterUniform:
		return "uniform"
	case JitterNormal:
		return "normal"
	}
	return fmt.Sprintf("JitterDist(%d)", uint8(d))
}

// ParseJitterDist reads "uniform" or "normal".
func ParseJitterDist(s string) (JitterDist, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "uniform":
		return JitterUniform, nil
	case "normal":
		return JitterNormal, nil
	}
	return 0, fmt.Errorf("jitter distribution %q: want uniform or normal", s)
}

// Config describes one direction of a path. The zero Config is a perfect link: no delay, infinite
// rate, no loss.
type Config struct {
	// Rate is the bottleneck's serialization rate in bits per second; 0 is infinite.
	Rate int64
	// Delay is the propagation delay added after serialization.
	Delay time.Duration
	// Jitter is the spread of the propagation delay (see JitterDist); it never reorders.
	Jitter     time.Duration
	JitterDist JitterDist
	// QueuePackets and QueueBytes bound the bottleneck queue, including the packet being
	// serialized; 0 is unbounded. They matter only with a finite Rate.
	QueuePackets int
	QueueBytes   int
	// ECNThreshold marks CE on an ECN-capable packet that finds this many packets or more ahead
	// of it in the queue; 0 disables marking.
	ECNThreshold int
	// Loss decides which packets are lost; nil loses nothing. The link consults it once per
	// packet that reaches LossAt, in order, and owns it from then on.
	Loss   LossModel
	LossAt LossPoint
	// ReorderProb is the probability that a packet is held back ReorderDelay beyond its delivery
	// time, letting later packets overtake it. ReorderDelay must be positive when it is set.
	ReorderProb  float64
	ReorderDelay time.Duration
	// Seed seeds the jitter and reordering draws (the loss model has its own).
	Seed uint64
	// OnDrop, if set, is called from Send with each dropped packet and why, so a caller can log
	// which packets (which PSNs) a path lost.
	OnDrop func(now time.Duration, p Packet, v Verdict)
}

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Rate < 0 {
		bad("rate %d bit/s is negative", c.Rate)
	}
	if c.Delay < 0 {
		bad("delay %v is negative", c.Delay)
	}
	if c.Jitter < 0 {
		bad("jitter %v is negative", c.Jitter)
	}
	if c.JitterDist > JitterNormal {
		bad("unknown jitter distribution %d", c.JitterDist)
	}
	if c.QueuePackets < 0 {
		bad("queue limit %d packets is negative", c.QueuePackets)
	}
	if c.QueueBytes < 0 {
		bad("queue limit %d octets is negative", c.QueueBytes)
	}
	if c.ECNThreshold < 0 {
		bad("ECN threshold %d packets is negative", c.ECNThreshold)
	}
	if c.LossAt > LossAtInput {
		bad("unknown loss point %d", c.LossAt)
	}
	if !(c.ReorderProb >= 0 && c.ReorderProb <= 1) {
		bad("reorder probability %v is not in [0, 1]", c.ReorderProb)
	}
	if c.ReorderDelay < 0 {
		bad("reorder delay %v is negative", c.ReorderDelay)
	}
	if c.ReorderProb > 0 && c.ReorderDelay == 0 {
		bad("reorder probability %v needs a positive reorder delay", c.ReorderProb)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("link: %w", err)
	}
	return nil
}

// Stats counts every outcome on a link. Sent = Delivered + DroppedLoss + DroppedOverflow +
// InFlight at all times, and likewise for the byte counts.
type Stats struct {
	Sent, SentBytes                       uint64
	Delivered, DeliveredBytes             uint64
	DroppedLoss, DroppedLossBytes         uint64
	DroppedOverflow, DroppedOverflowBytes uint64
	// Marked counts packets this link set CE on (not those that arrived with CE).
	Marked uint64
	// Reordered counts packets held back by the reordering model.
	Reordered uint64
	// InFlight is the number of accepted packets not yet delivered.
	InFlight int
	// PeakQueue is the largest number of packets the queue has held at once.
	PeakQueue int
}

// entry is a packet on its way to delivery.
type entry struct {
	at   time.Duration
	seq  uint64 // send order, to break ties between equal times
	size int
	pkt  Packet
}

// slot is a packet in the bottleneck queue: it leaves the queue at end.
type slot struct {
	end  time.Duration
	size int
}

// Link is one direction of an impaired path. It is not safe for concurrent use: one driver owns
// it, as one driver owns an engine.
type Link struct {
	cfg  Config
	loss LossModel

	jitterSrc  rand.PCG
	jitterN    normal
	reorderSrc rand.PCG
	reorder    chance

	// The bottleneck is busy until busyNs + busyRem/Rate nanoseconds: the remainder keeps
	// back-to-back serialization exact when a packet's time is not a whole number of ns.
	busyNs  time.Duration
	busyRem uint64
	queue   ring[slot]
	qBytes  int

	fifo     ring[entry] // delivery times never decrease
	lastFIFO time.Duration
	held     heldHeap // reordered packets

	now   time.Duration
	seq   uint64
	stats Stats
}

// NewLink returns a link for cfg, or an error naming every invalid field.
func NewLink(cfg Config) (*Link, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	l := &Link{cfg: cfg, loss: cfg.Loss, reorder: newChance(cfg.ReorderProb)}
	if l.loss == nil {
		l.loss = None{}
	}
	seedPCG(&l.jitterSrc, cfg.Seed, streamJitter)
	seedPCG(&l.reorderSrc, cfg.Seed, streamReorder)
	return l, nil
}

// Config returns the link's configuration.
func (l *Link) Config() Config { return l.cfg }

// Send hands p to the link at time now and says what became of it. A packet dropped on the wire
// is reported at once, though it still occupies the queue until it is serialized.
func (l *Link) Send(now time.Duration, p Packet) Verdict {
	if now < l.now {
		now = l.now // time never runs backwards for the link
	}
	l.now = now
	size := p.Size
	if size <= 0 {
		size = len(p.Data)
	}
	l.stats.Sent++
	l.stats.SentBytes += uint64(size)

	if l.cfg.LossAt == LossAtInput && l.loss.Drop() {
		return l.drop(now, p, size, DroppedLoss)
	}
	end := now
	if l.cfg.Rate > 0 {
		l.expire(now)
		if l.cfg.QueuePackets > 0 && l.queue.n >= l.cfg.QueuePackets ||
			l.cfg.QueueBytes > 0 && l.qBytes+size > l.cfg.QueueBytes {
			return l.drop(now, p, size, DroppedOverflow)
		}
		if l.cfg.ECNThreshold > 0 && p.ECT && !p.CE && l.queue.n >= l.cfg.ECNThreshold {
			p.CE = true
			l.stats.Marked++
		}
		end = l.serialize(now, size)
		l.queue.push(slot{end: end, size: size})
		l.qBytes += size
		l.stats.PeakQueue = max(l.stats.PeakQueue, l.queue.n)
	}
	if l.cfg.LossAt == LossOnWire && l.loss.Drop() {
		return l.drop(now, p, size, DroppedLoss)
	}

	prop := l.cfg.Delay
	if l.cfg.Jitter > 0 {
		prop += l.jitterOffset()
		prop = max(prop, 0)
	}
	at := end + prop
	if at < end {
		at = math.MaxInt64 // saturate rather than wrap
	}
	l.seq++
	e := entry{at: at, seq: l.seq, size: size, pkt: p}
	if l.reorder.hit(&l.reorderSrc) {
		e.at = max(at, l.lastFIFO) + l.cfg.ReorderDelay
		l.held.push(e)
		l.stats.Reordered++
	} else {
		// Never before the packet sent just before: jitter alone does not reorder.
		e.at = max(at, l.lastFIFO)
		l.lastFIFO = e.at
		l.fifo.push(e)
	}
	return Queued
}

func (l *Link) drop(now time.Duration, p Packet, size int, v Verdict) Verdict {
	if v == DroppedLoss {
		l.stats.DroppedLoss++
		l.stats.DroppedLossBytes += uint64(size)
	} else {
		l.stats.DroppedOverflow++
		l.stats.DroppedOverflowBytes += uint64(size)
	}
	if l.cfg.OnDrop != nil {
		l.cfg.OnDrop(now, p, v)
	}
	return v
}

func (l *Link) jitterOffset() time.Duration {
	j := int64(l.cfg.Jitter)
	if l.cfg.JitterDist == JitterNormal {
		x := l.jitterN.next(&l.jitterSrc) * float64(j)
		return time.Duration(max(min(x, math.MaxInt64/4), math.MinInt64/4))
	}
	if j > math.MaxInt64/2-1 {
		j = math.MaxInt64/2 - 1
	}
	return time.Duration(int64(below(&l.jitterSrc, uint64(2*j+1))) - j)
}

// BusyUntil returns when the bottleneck's last reserved bit leaves, rounded up to a nanosecond:
// right after a Send that queued a packet, the instant that packet's last bit leaves the queue
// (before propagation); at other times the end of the backlog, or a past instant when the queue
// is idle. A driver uses it to date what happens to a packet downstream of the queue.
func (l *Link) BusyUntil() time.Duration { return l.busyEnd() }

// busyEnd is when the bottleneck's last reserved bit leaves, rounded up to a nanosecond.
func (l *Link) busyEnd() time.Duration {
	if l.busyRem > 0 {
		return l.busyNs + 1
	}
	return l.busyNs
}

// serialize reserves the bottleneck for size octets from now, or from when it frees up, and
// returns when the last bit leaves.
func (l *Link) serialize(now time.Duration, size int) time.Duration {
	if l.busyEnd() <= now {
		l.busyNs, l.busyRem = now, 0
	}
	rate := uint64(l.cfg.Rate)
	// size*8 bits * 1e9 ns/s / rate bit/s, in 128 bits, plus the carried remainder.
	hi, lo := bits.Mul64(uint64(size), 8e9)
	var c uint64
	lo, c = bits.Add64(lo, l.busyRem, 0)
	hi += c
	var q, r uint64
	if hi == 0 {
		q, r = lo/rate, lo%rate
	} else if hi < rate {
		q, r = bits.Div64(hi, lo, rate)
	} else {
		q = math.MaxInt64 // longer than the life of the universe: saturate
	}
	if q > uint64(math.MaxInt64-l.busyNs) {
		l.busyNs, l.busyRem = math.MaxInt64, 0
	} else {
		l.busyNs += time.Duration(q)
		l.busyRem = r
	}
	return l.busyEnd()
}

// expire removes from the queue the packets fully serialized by now.
func (l *Link) expire(now time.Duration) {
	for l.queue.n > 0 && l.queue.front().end <= now {
		l.qBytes -= l.queue.pop().size
	}
}

// NextDeadline returns when the next packet is due for delivery, and false when none is in flight.
func (l *Link) NextDeadline() (time.Duration, bool) {
	switch {
	case l.fifo.n > 0 && len(l.held) > 0:
		return min(l.fifo.front().at, l.held[0].at), true
	case l.fifo.n > 0:
		return l.fifo.front().at, true
	case len(l.held) > 0:
		return l.held[0].at, true
	}
	return 0, false
}

// Pop returns the next packet due by now, in order of delivery time (ties in send order), or
// false when none is due.
func (l *Link) Pop(now time.Duration) (Packet, bool) {
	if now < l.now {
		now = l.now
	}
	l.now = now
	var e entry
	fifoDue := l.fifo.n > 0 && l.fifo.front().at <= now
	heldDue := len(l.held) > 0 && l.held[0].at <= now
	switch {
	case fifoDue && (!heldDue || l.fifo.front().before(l.held[0])):
		e = l.fifo.pop()
	case heldDue:
		e = l.held.pop()
	default:
		return Packet{}, false
	}
	l.stats.Delivered++
	l.stats.DeliveredBytes += uint64(e.size)
	return e.pkt, true
}

// Deliver passes every packet due by now to out, in order of delivery time, and returns how
// many it delivered.
func (l *Link) Deliver(now time.Duration, out func(Packet)) int {
	n := 0
	for {
		p, ok := l.Pop(now)
		if !ok {
			return n
		}
		out(p)
		n++
	}
}

// QueueDelay returns how long a packet sent now would wait before its serialization starts.
func (l *Link) QueueDelay(now time.Duration) time.Duration {
	if l.cfg.Rate == 0 {
		return 0
	}
	return max(l.busyEnd()-now, 0)
}

// QueueLen returns the packets and octets in the bottleneck queue at now, including the packet
// being serialized.
func (l *Link) QueueLen(now time.Duration) (packets, octets int) {
	if now > l.now {
		l.now = now
	}
	l.expire(l.now)
	return l.queue.n, l.qBytes
}

// InFlight returns the number of accepted packets not yet delivered.
func (l *Link) InFlight() int { return l.fifo.n + len(l.held) }

// Stats returns the link's counters.
func (l *Link) Stats() Stats {
	s := l.stats
	s.InFlight = l.InFlight()
	return s
}
