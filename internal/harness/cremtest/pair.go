package cremtest

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// Config sets up a Pair. Zero values take the defaults noted.
type Config struct {
	Flow     flow.Descriptor // default: 10.0.0.1 -> 10.0.0.2, QP 0x11, UDP source port 49152
	CSFAddr  netip.AddrPort  // default 10.0.0.1:50000
	CRFAddr  netip.AddrPort  // default 10.0.0.2:50000 (the CREM port is always explicit, C14)
	Delay    time.Duration   // one-way delay, default 1 ms
	Seed     uint64          // seeds the engines' random sources
	Sender   []csf.Option    // appended to the Pair's own
	Receiver []crf.Option
	Settings crf.Settings // the CRF's settings for the flow
}

// Outcome is what became of one PSN at the RDMA receiver.
type Outcome struct {
	Received, Restored, Abandoned int // how often
	Wrong                         int // deliveries whose bytes differ from what was sent
}

// Pair is a CSF and a CRF joined by a Link, with the RDMA sender's packets recorded so that
// every delivery can be checked byte for byte.
type Pair struct {
	Clock    Clock
	Link     *Link
	Sender   *csf.Sender
	Receiver *crf.Receiver
	Synth    Synth
	CSFAddr  netip.AddrPort
	CRFAddr  netip.AddrPort

	// Sent holds every source packet the RDMA sender emitted, by PSN.
	Sent map[psn.PSN][]byte
	// Outcomes says, per PSN, what the RDMA receiver got.
	Outcomes map[psn.PSN]*Outcome
	// Trace, when set, sees every packet as it arrives.
	Trace func(now time.Duration, p Packet)
	// Misdirected counts CSF datagrams addressed elsewhere than the CRF (C14).
	Misdirected int
}

// NewPair builds the engines and the link.
func NewPair(c Config) (*Pair, error) {
	if !c.Flow.Src.IsValid() {
		c.Flow = flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: netip.MustParseAddr("10.0.0.1"),
			Dst: netip.MustParseAddr("10.0.0.2"), DestQP: 0x11, SrcPort: 49152}
	}
	if !c.CSFAddr.IsValid() {
		c.CSFAddr = netip.AddrPortFrom(c.Flow.Src, 50000)
	}
	if !c.CRFAddr.IsValid() {
		c.CRFAddr = netip.AddrPortFrom(c.Flow.Dst, 50000)
	}
	if c.Delay == 0 {
		c.Delay = time.Millisecond
	}
	r1 := rand.New(rand.NewPCG(c.Seed, 1))
	r2 := rand.New(rand.NewPCG(c.Seed, 2))
	s, err := csf.New(append([]csf.Option{csf.WithFlow(c.Flow), csf.WithCRF(c.CRFAddr), csf.WithRandom(r1.Uint64)}, c.Sender...)...)
	if err != nil {
		return nil, fmt.Errorf("cremtest: %w", err)
	}
	set := c.Settings
	if set.SrcPort == 0 {
		set.SrcPort = c.Flow.SrcPort
	}
	r, err := crf.New(append([]crf.Option{crf.WithRandom(r2.Uint64),
		crf.WithSettings(func(flow.Descriptor) (crf.Settings, bool) { return set, true })}, c.Receiver...)...)
	if err != nil {
		return nil, fmt.Errorf("cremtest: %w", err)
	}
	return &Pair{Link: &Link{Delay: c.Delay}, Sender: s, Receiver: r, Synth: Synth{Desc: c.Flow},
		CSFAddr: c.CSFAddr, CRFAddr: c.CRFAddr, Sent: map[psn.PSN][]byte{}, Outcomes: map[psn.PSN]*Outcome{}}, nil
}

// Start starts the CSF's session (HELLO).
func (p *Pair) Start() {
	p.Sender.Start(p.Clock.Now())
	p.flush()
}

// FlowID returns the Flow ID the CRF assigned, 0 before it did.
func (p *Pair) FlowID() uint32 { return p.Sender.FlowID() }

// Send has the RDMA sender emit a source packet now: the CSF observes it and it goes on the link.
func (p *Pair) Send(pkt []byte) {
	if len(pkt) >= 12 {
		q := psn.PSN(uint32(pkt[9])<<16 | uint32(pkt[10])<<8 | uint32(pkt[11]))
		if _, ok := p.Sent[q]; !ok {
			p.Sent[q] = append([]byte(nil), pkt...)
		}
	}
	p.Sender.Observe(p.Clock.Now(), pkt)
	p.Link.Send(p.Clock.Now(), Packet{Dir: Forward, Kind: RDMA, From: p.CSFAddr, To: p.CRFAddr, Data: pkt})
	p.flush()
}

// SendOpaque has the RDMA sender emit a source whose payload is not a RoCEv2 packet (the
// draft's Appendix uses ASCII strings): the engines take its PSN from the driver. The CRF needs
// Settings.Verify = crf.VerifyFunc for such a flow.
func (p *Pair) SendOpaque(q psn.PSN, payload []byte) {
	p.Sent[q] = append([]byte(nil), payload...)
	p.Sender.ObserveSource(p.Clock.Now(), q, 1, payload)
	p.Link.Send(p.Clock.Now(), Packet{Dir: Forward, Kind: RDMA, From: p.CSFAddr, To: p.CRFAddr, Data: payload, Opaque: true, PSN: q})
	p.flush()
}

// Ack has the RDMA receiver acknowledge every PSN through q (it passes the CSF on the way back).
func (p *Pair) Ack(q psn.PSN) {
	p.Link.Send(p.Clock.Now(), Packet{Dir: Backward, Kind: RDMA, From: p.CRFAddr, To: p.CSFAddr, Data: Ack(0x22, q)})
}

// Inject puts a datagram on the link as if from anyone (forged or corrupted traffic).
func (p *Pair) Inject(d Dir, from netip.AddrPort, data []byte) {
	to := p.CRFAddr
	if d == Backward {
		to = p.CSFAddr
	}
	p.Link.Send(p.Clock.Now(), Packet{Dir: d, Kind: CREM, From: from, To: to, Data: data})
}

// next returns the earliest pending event: a link arrival or an engine deadline.
func (p *Pair) next() (time.Duration, bool) {
	t, ok := p.Link.Next()
	for _, d := range [...]func() (time.Duration, bool){p.Sender.NextDeadline, p.Receiver.NextDeadline} {
		if u, ok2 := d(); ok2 && (!ok || u < t) {
			t, ok = u, true
		}
	}
	return t, ok
}

// RunFor runs every event up to now + d and leaves the clock there.
func (p *Pair) RunFor(d time.Duration) { p.RunUntil(p.Clock.Now() + d) }

// RunUntil runs every event up to t and leaves the clock at t.
func (p *Pair) RunUntil(t time.Duration) {
	for {
		at, ok := p.next()
		if !ok || at > t {
			break
		}
		p.Clock.Set(at)
		p.step()
	}
	p.Clock.Set(t)
}

// step delivers what has arrived and runs the timers that are due.
func (p *Pair) step() {
	now := p.Clock.Now()
	for {
		pk, ok := p.Link.Pop(now)
		if !ok {
			break
		}
		if p.Trace != nil {
			p.Trace(now, pk)
		}
		p.arrive(now, pk)
	}
	if d, ok := p.Sender.NextDeadline(); ok && d <= now {
		p.Sender.Tick(now)
	}
	if d, ok := p.Receiver.NextDeadline(); ok && d <= now {
		p.Receiver.Tick(now)
	}
	p.flush()
}

func (p *Pair) arrive(now time.Duration, pk Packet) {
	switch {
	case pk.Dir == Forward && pk.Kind == RDMA:
		id := p.FlowID()
		if pk.Opaque {
			if p.Receiver.ObserveSource(now, id, pk.PSN, 1, pk.Data, pk.CE) == crf.Forward {
				p.recordAt(pk.PSN, pk.Data, crf.Received)
			}
		} else if p.Receiver.Observe(now, id, pk.Data, pk.CE) == crf.Forward {
			p.record(pk.Data, crf.Received)
		}
	case pk.Dir == Forward:
		p.Receiver.Handle(now, pk.From, pk.Data, pk.CE)
	case pk.Kind == RDMA:
		p.Sender.ObserveReverse(now, pk.Data)
	default:
		p.Sender.Handle(now, pk.From, pk.Data)
	}
}

// flush moves what the engines want sent onto the link and records deliveries.
func (p *Pair) flush() {
	now := p.Clock.Now()
	p.Sender.Drain(func(d flow.Datagram) {
		if d.To != p.CRFAddr {
			p.Misdirected++
		}
		p.Link.Send(now, Packet{Dir: Forward, Kind: CREM, From: p.CSFAddr, To: d.To, Data: d.Payload})
	})
	p.Receiver.Drain(func(d flow.Datagram) {
		p.Link.Send(now, Packet{Dir: Backward, Kind: CREM, From: p.CRFAddr, To: d.To, Data: d.Payload})
	})
	p.Receiver.DrainDeliveries(func(d crf.Delivery) {
		if d.Kind == crf.Abandoned {
			p.outcome(d.PSN).Abandoned++
			return
		}
		p.recordAt(d.PSN, d.Packet, d.Kind)
	})
}

func (p *Pair) outcome(q psn.PSN) *Outcome {
	o := p.Outcomes[q]
	if o == nil {
		o = &Outcome{}
		p.Outcomes[q] = o
	}
	return o
}

// record checks a delivered packet against what the RDMA sender sent.
func (p *Pair) record(pkt []byte, k crf.Kind) {
	if len(pkt) < 12 {
		return
	}
	p.recordAt(psn.PSN(uint32(pkt[9])<<16|uint32(pkt[10])<<8|uint32(pkt[11])), pkt, k)
}

// recordAt checks a delivered packet for PSN q.
func (p *Pair) recordAt(q psn.PSN, pkt []byte, k crf.Kind) {
	o := p.outcome(q)
	if sent, ok := p.Sent[q]; !ok || string(sent) != string(pkt) {
		o.Wrong++
	}
	if k == crf.Restored {
		o.Restored++
	} else {
		o.Received++
	}
}
