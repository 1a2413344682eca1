package policy

import "time"

// Circuit breaker thresholds, exactly as the draft's Congestion Considerations write them.
const (
	BreakerLoss     = 0.10             // path loss before restoration
	BreakerCE       = 0.50             // CE fraction
	BreakerWindow   = time.Second      // measured over one second
	BreakerClear    = 10 * time.Second // absent this long before redundancy resumes
	BreakerCloseAge = time.Minute      // persisting longer than this: CLOSE reason 4
)

// BreakerState is what the breaker asks of the CSF.
type BreakerState int

const (
	BreakerClosed    BreakerState = iota // normal: redundancy and coded retransmission allowed
	BreakerOpen                          // m = 0, no coded retransmission; the flow stays open
	BreakerCloseFlow                     // the condition persisted over a minute: send CLOSE reason 4
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	default:
		return "close-flow"
	}
}

// Breaker is the circuit breaker of RULINGS C11(f): LOSS_REPORT intervals are summed into
// windows of at least one second; a window with loss above 10 percent or CE above 50 percent
// opens the breaker; it closes after ten seconds without such a window; a condition present
// for more than a minute asks for CLOSE.
type Breaker struct {
	state                BreakerState
	winDur               time.Duration
	winExpected, winRecv uint64
	winCE                uint64
	conditionSince       time.Duration // start of the current run of bad windows
	inCondition          bool
	lastBad              time.Duration
	trips                uint64
}

// State returns the breaker's current state.
func (b *Breaker) State() BreakerState { return b.state }

// Trips counts how often the breaker opened.
func (b *Breaker) Trips() uint64 { return b.trips }

// Report folds one LOSS_REPORT interval in at time now and returns the state.
func (b *Breaker) Report(now, interval time.Duration, expected, received, ceMarked uint32) BreakerState {
	b.winDur += interval
	b.winExpected += uint64(expected)
	b.winRecv += uint64(received)
	b.winCE += uint64(ceMarked)
	if b.winDur >= BreakerWindow {
		bad := false
		if b.winExpected > 0 && b.winRecv < b.winExpected &&
			float64(b.winExpected-b.winRecv)/float64(b.winExpected) > BreakerLoss {
			bad = true
		}
		if b.winRecv > 0 && float64(b.winCE)/float64(b.winRecv) > BreakerCE {
			bad = true
		}
		// The window began one window length ago; a run of bad windows dates from there.
		start := now - b.winDur
		b.winDur, b.winExpected, b.winRecv, b.winCE = 0, 0, 0, 0
		if bad {
			if !b.inCondition {
				b.inCondition, b.conditionSince = true, start
			}
			b.lastBad = now
			if b.state == BreakerClosed {
				b.state = BreakerOpen
				b.trips++
			}
		} else {
			b.inCondition = false
		}
	}
	switch {
	case b.state != BreakerClosed && b.inCondition && now-b.conditionSince > BreakerCloseAge:
		b.state = BreakerCloseFlow
	case b.state == BreakerOpen && !b.inCondition && now-b.lastBad >= BreakerClear:
		b.state = BreakerClosed
	}
	return b.state
}
