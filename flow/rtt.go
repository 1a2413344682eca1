package flow

import "time"

// DefaultInitialRTT is RULINGS C4's starting RTT.
const DefaultInitialRTT = 10 * time.Millisecond

// RTT smooths round-trip samples as RFC 6298 does (alpha 1/8, beta 1/4), starting from a
// configured initial value (RULINGS C4). Karn's rule is the caller's: it offers no sample from a
// retransmitted request.
type RTT struct {
	srtt, rttvar time.Duration
	sampled      bool
	samples      uint64
}

// NewRTT starts from initial.
func NewRTT(initial time.Duration) RTT {
	if initial <= 0 {
		initial = DefaultInitialRTT
	}
	return RTT{srtt: initial, rttvar: initial / 2}
}

// Sample folds in one measurement.
func (r *RTT) Sample(d time.Duration) {
	if d <= 0 {
		d = time.Microsecond
	}
	r.samples++
	if !r.sampled {
		r.srtt, r.rttvar, r.sampled = d, d/2, true
		return
	}
	diff := r.srtt - d
	if diff < 0 {
		diff = -diff
	}
	r.rttvar += (diff - r.rttvar) / 4
	r.srtt += (d - r.srtt) / 8
}

// SRTT returns the smoothed RTT.
func (r *RTT) SRTT() time.Duration { return r.srtt }

// Samples counts the samples taken.
func (r *RTT) Samples() uint64 { return r.samples }
