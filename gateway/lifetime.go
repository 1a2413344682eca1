package gateway

import "time"

// The pauses between the retries of a read that keeps failing (a socket broken for good must
// not spin a core): from minReadPause, doubling, to maxReadPause.
const (
	minReadPause = time.Millisecond
	maxReadPause = 100 * time.Millisecond
)

// readPause spaces out the retries of a failing read; a read that succeeds resets it.
type readPause struct{ d time.Duration }

func (p *readPause) reset() { p.d = 0 }

// wait pauses before the next try; false when the gateway stops meanwhile.
func (p *readPause) wait(g *Gateway) bool {
	p.d = min(max(2*p.d, minReadPause), maxReadPause)
	t := time.NewTimer(p.d)
	defer t.Stop()
	select {
	case <-g.done:
		return false
	case <-t.C:
		return true
	}
}
