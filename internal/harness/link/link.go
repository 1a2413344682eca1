// Package link connects two rc queue pairs through a netem path in virtual time: the
// in-memory driver the rc tests, the figures and the simulator use. Nothing here reads a clock
// or opens a socket; time advances from one deadline to the next.
package link

import (
	"fmt"
	"time"

	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/rc"
	"github.com/crem-project/crem/roce"
)

// Side names an endpoint of the pair.
type Side uint8

// The two endpoints.
const (
	A Side = iota
	B
)

// Counts counts what the path did to one direction's packets.
type Counts struct {
	Sent, Dropped         uint64
	DataSent, DataDropped uint64 // requests and READ responses (packets that take a PSN)
	AckSent, AckDropped   uint64 // ACKNOWLEDGE and ATOMIC ACKNOWLEDGE, NAKs included
}

// Pair is two QPs and the path between them.
type Pair struct {
	QP   [2]*rc.QP
	Path *netem.Path
	Now  time.Duration
	// Counts per sending side.
	Counts [2]Counts
	// OnSend, if set, sees every packet as a side sends it, with what the path did to it.
	OnSend func(now time.Duration, from Side, pkt []byte, v netem.Verdict)
}

// New connects a and b: ab carries a's packets to b, ba the reverse.
func New(a, b *rc.QP, ab, ba netem.Config) (*Pair, error) {
	path, err := netem.NewPath(ab, ba)
	if err != nil {
		return nil, fmt.Errorf("link: %w", err)
	}
	return &Pair{QP: [2]*rc.QP{a, b}, Path: path}, nil
}

func (p *Pair) link(from Side) *netem.Link {
	if from == A {
		return p.Path.AB
	}
	return p.Path.BA
}

// flush hands what each QP wants sent to its link.
func (p *Pair) flush() {
	for s := range 2 {
		side := Side(s)
		p.QP[s].Drain(func(pkt []byte) {
			v := p.link(side).Send(p.Now, netem.Packet{Data: pkt})
			c := &p.Counts[s]
			c.Sent++
			data := len(pkt) > 0 && roce.Opcode(pkt[0]).Info().Source
			if data {
				c.DataSent++
			} else {
				c.AckSent++
			}
			if v != netem.Queued {
				c.Dropped++
				if data {
					c.DataDropped++
				} else {
					c.AckDropped++
				}
			}
			if p.OnSend != nil {
				p.OnSend(p.Now, side, pkt, v)
			}
		})
	}
}

// Step runs everything due at the current time, then advances to the next deadline. It
// returns false when nothing is pending anywhere.
func (p *Pair) Step() bool {
	for range 1 << 20 {
		p.QP[0].Tick(p.Now)
		p.QP[1].Tick(p.Now)
		p.flush()
		p.Path.AB.Deliver(p.Now, func(k netem.Packet) { p.QP[1].Handle(p.Now, k.Data) })
		p.Path.BA.Deliver(p.Now, func(k netem.Packet) { p.QP[0].Handle(p.Now, k.Data) })
		p.flush()
		next, ok := p.next()
		if !ok {
			return false
		}
		if next > p.Now {
			p.Now = next
			return true
		}
	}
	panic("link: no progress at one instant after a million rounds")
}

func (p *Pair) next() (time.Duration, bool) {
	d, ok := p.Path.NextDeadline()
	for _, q := range p.QP {
		if t, ok2 := q.NextDeadline(); ok2 && (!ok || t < d) {
			d, ok = t, true
		}
	}
	return d, ok
}

// RunUntil steps until done returns true, nothing is pending, or the virtual time passes
// limit. It returns an error in the last two cases.
func (p *Pair) RunUntil(done func() bool, limit time.Duration) error {
	for !done() {
		if p.Now > limit {
			return fmt.Errorf("link: not done after %v of virtual time", limit)
		}
		if !p.Step() {
			if done() {
				return nil
			}
			return fmt.Errorf("link: idle at %v and not done", p.Now)
		}
	}
	return nil
}
