package csf

import (
	"sync"
	"time"
)

// Peer is what the CSFs toward one CRF share about it: whether it answers, and when it may be
// probed next (RULINGS C3, E71). After eight unanswered HELLOs of any flow the peer is taken for
// down: no CSF sends its own eight HELLOs toward it any more, and one round of HELLOs at most (a
// HELLO and its retransmissions, one nonce) goes to it per hold-off, from whichever of its flows
// asks first (one that has not probed yet in its wait
// before one that has). A HELLO_ACK takes it for up again, and every CSF that waits for it starts
// its session at its next Tick. The messages of established sessions do not: a CRF that serves
// some flows and refuses another's HELLOs would otherwise set the refused flow's eight HELLOs
// going again at every LOSS_REPORT of the others.
//
// A Peer takes the time as an argument, like the engines; it is safe for use by several
// goroutines (a gateway's shards share one).
type Peer struct {
	mu        sync.Mutex
	down      bool
	nextProbe time.Duration // while down: the earliest time of the next probe
	epoch     uint64        // counts the times the peer came back up
	probes    uint64
	fresh     int // CSFs that wait without having sent a HELLO: they probe first
	downs     uint64
}

// PeerStats are a Peer's counters.
type PeerStats struct {
	Down   bool   // taken for down now
	Downs  uint64 // times the peer was taken for down (eight HELLOs unanswered)
	Probes uint64 // rounds of HELLOs sent while it was down, one at most per hold-off
}

// NewPeer returns a Peer taken for up.
func NewPeer() *Peer { return &Peer{} }

// Stats returns the Peer's counters.
func (p *Peer) Stats() PeerStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PeerStats{Down: p.down, Downs: p.downs, Probes: p.probes}
}

// markDown takes the peer for down after eight unanswered HELLOs at now; the first probe may go
// a hold-off later. A peer already down keeps its schedule.
func (p *Peer) markDown(now, holdOff time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return
	}
	p.down, p.nextProbe = true, now+holdOff
	p.downs++
}

// markUp takes the peer for up: it answered a HELLO.
func (p *Peer) markUp() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		p.down = false
		p.epoch++
	}
}

// addFresh counts a CSF that starts (d = 1) or stops (-1) waiting without having sent a HELLO.
func (p *Peer) addFresh(d int) {
	p.mu.Lock()
	p.fresh = max(p.fresh+d, 0)
	p.mu.Unlock()
}

// freshWaiting reports whether a CSF waits without having sent a HELLO.
func (p *Peer) freshWaiting() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fresh > 0
}

// state returns whether the peer is down, when it may be probed next, and its epoch.
func (p *Peer) state() (down bool, next time.Duration, epoch uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down, p.nextProbe, p.epoch
}

// takeProbe grants the caller the probe due at now, if the peer is down and no other CSF has
// taken it within the hold-off: the next probe is then a hold-off later.
func (p *Peer) takeProbe(now, holdOff time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.down || now < p.nextProbe {
		return false
	}
	p.nextProbe = now + holdOff
	p.probes++
	return true
}
