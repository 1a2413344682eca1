package cremtest

import (
	"container/heap"
	"net/netip"
	"time"

	"github.com/crem-project/crem/psn"
)

// Dir is a direction of the link.
type Dir int

const (
	// Forward carries the RDMA sender's packets and the CSF's messages toward the CRF.
	Forward Dir = iota
	// Backward carries the CRF's messages and the RDMA receiver's ACKs toward the CSF.
	Backward
)

func (d Dir) String() string { return [...]string{"forward", "backward"}[d] }

// Kind tells RDMA packets from CREM messages.
type Kind int

const (
	RDMA Kind = iota // a RoCEv2 packet of the protected flow (or its ACKs)
	CREM             // a CREM message
)

// Packet is one datagram on the link.
type Packet struct {
	Dir      Dir
	Kind     Kind
	From, To netip.AddrPort
	Data     []byte
	CE       bool
	N        int // its number among the packets of its direction and kind, from 0
	// Opaque marks a source whose payload is not RoCEv2 (the draft's Appendix); PSN is then
	// carried beside it.
	Opaque bool
	PSN    psn.PSN
}

// Fate is what the link does to a packet.
type Fate struct {
	Drop      bool
	Delay     time.Duration // added to the base delay (reordering)
	Duplicate int           // extra copies, each Delay later again
	CE        bool          // mark it CE
}

// Filter decides each packet's fate; nil delivers everything after the base delay.
type Filter func(p *Packet) Fate

// Link is a two-way link in virtual time.
type Link struct {
	Delay  time.Duration // one-way base delay
	Filter Filter
	q      events
	seq    uint64
	count  [2][2]int
	// Dropped and Duplicated count what the filter did, by direction.
	Dropped, Duplicated [2]int
}

// Send puts p on the link at now; the filter decides its fate.
func (l *Link) Send(now time.Duration, p Packet) {
	p.N = l.count[p.Dir][p.Kind]
	l.count[p.Dir][p.Kind]++
	p.Data = append([]byte(nil), p.Data...)
	var f Fate
	if l.Filter != nil {
		f = l.Filter(&p)
	}
	if f.Drop {
		l.Dropped[p.Dir]++
		return
	}
	p.CE = p.CE || f.CE
	at := now + l.Delay + f.Delay
	for i := 0; i <= f.Duplicate; i++ {
		if i > 0 {
			l.Duplicated[p.Dir]++
			at += max(f.Delay, time.Microsecond)
		}
		l.seq++
		heap.Push(&l.q, event{at: at, seq: l.seq, p: p})
	}
}

// Next returns when the next packet arrives.
func (l *Link) Next() (time.Duration, bool) {
	if len(l.q) == 0 {
		return 0, false
	}
	return l.q[0].at, true
}

// Pop removes and returns the next packet if it has arrived by now.
func (l *Link) Pop(now time.Duration) (Packet, bool) {
	if len(l.q) == 0 || l.q[0].at > now {
		return Packet{}, false
	}
	return heap.Pop(&l.q).(event).p, true
}

type event struct {
	at  time.Duration
	seq uint64
	p   Packet
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	return e[i].at < e[j].at || e[i].at == e[j].at && e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// Clock is a manual clock: virtual time that moves only when told.
type Clock struct{ now time.Duration }

// Now returns the current virtual time.
func (c *Clock) Now() time.Duration { return c.now }

// Set moves the clock to t (never backwards).
func (c *Clock) Set(t time.Duration) {
	if t > c.now {
		c.now = t
	}
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.now += max(d, 0) }
