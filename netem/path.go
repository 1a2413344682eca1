package netem

import (
	"fmt"
	"time"
)

// Path is a pair of independent links between two endpoints A and B: AB carries A's packets to
// B, BA carries B's packets to A. Each direction has its own queue, loss model and generators;
// give each its own LossModel value and, usually, its own Seed.
type Path struct {
	AB, BA *Link
}

// NewPath builds both directions of a path.
func NewPath(ab, ba Config) (*Path, error) {
	l1, err := NewLink(ab)
	if err != nil {
		return nil, fmt.Errorf("path A to B: %w", err)
	}
	l2, err := NewLink(ba)
	if err != nil {
		return nil, fmt.Errorf("path B to A: %w", err)
	}
	return &Path{AB: l1, BA: l2}, nil
}

// NextDeadline returns the earlier of the two directions' deadlines, and false when neither has
// a packet in flight.
func (p *Path) NextDeadline() (time.Duration, bool) {
	t1, ok1 := p.AB.NextDeadline()
	t2, ok2 := p.BA.NextDeadline()
	switch {
	case ok1 && ok2:
		return min(t1, t2), true
	case ok1:
		return t1, true
	}
	return t2, ok2
}

// Deliver passes the packets due by now to toB (those from A) and toA (those from B), and returns
// how many it delivered.
func (p *Path) Deliver(now time.Duration, toB, toA func(Packet)) int {
	return p.AB.Deliver(now, toB) + p.BA.Deliver(now, toA)
}
