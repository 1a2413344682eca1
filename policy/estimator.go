package policy

// Interval is what one LOSS_REPORT says, together with what the CSF learned about the same
// interval from path reports; it is the input of the loss estimator.
type Interval struct {
	Expected, Received uint32 // source packets, before restoration
	CEMarked           uint32 // CE marks on source packets
	Repairs, RepairsCE uint32 // REPAIR messages received and CE-marked ones
	// CongestionDrops counts drops that path reporters attributed to congestion (Cause 1).
	CongestionDrops uint32
	// QueueDelayRising is set when a path report showed the queue delay growing.
	QueueDelayRising bool
}

// Lost returns the packets lost in the interval (never negative: duplicates can push Received
// above Expected).
func (iv Interval) Lost() uint32 {
	if iv.Received >= iv.Expected {
		return 0
	}
	return iv.Expected - iv.Received
}

// LossRate is the interval's loss fraction before restoration.
func (iv Interval) LossRate() float64 {
	if iv.Expected == 0 {
		return 0
	}
	return float64(iv.Lost()) / float64(iv.Expected)
}

// CEFraction is the share of received source packets that carried CE.
func (iv Interval) CEFraction() float64 {
	if iv.Received == 0 {
		return 0
	}
	return float64(iv.CEMarked) / float64(iv.Received)
}

// Congested reports whether the interval's loss is classified as congestion (C6 c): CE marks on
// at least CECongestedFraction of the sources, drops attributed to congestion by a path
// reporter, or a rising queue delay together with the loss.
func (iv Interval) Congested(ceCongestedFraction float64) bool {
	if iv.CongestionDrops > 0 {
		return true
	}
	if iv.Lost() > 0 && iv.QueueDelayRising {
		return true
	}
	return iv.CEMarked > 0 && iv.CEFraction() >= ceCongestedFraction
}

// TransmissionLoss returns the interval's loss fraction with the congestion share removed:
// reported congestion drops are subtracted, and an interval classified congested for any other
// reason counts as no transmission loss at all.
func (iv Interval) TransmissionLoss(ceCongestedFraction float64) float64 {
	if iv.Expected == 0 {
		return 0
	}
	lost := iv.Lost()
	if iv.CongestionDrops >= lost {
		return 0
	}
	lost -= iv.CongestionDrops
	if iv.CongestionDrops == 0 && iv.Congested(ceCongestedFraction) {
		return 0
	}
	return float64(lost) / float64(iv.Expected)
}

// Estimator is the RECOMMENDED transmission-loss estimate: an EWMA with weight 1/8 over
// LOSS_REPORT intervals with Expected > 0 (C6).
type Estimator struct {
	// CECongestedFraction is the CE share above which an interval's loss is taken as congestion.
	CECongestedFraction float64
	p                   float64
	primed              bool
	lastSample          float64
}

// NewEstimator returns an estimator that classifies intervals with at least ceCongested CE
// marks per received source as congestion.
func NewEstimator(ceCongested float64) *Estimator {
	return &Estimator{CECongestedFraction: ceCongested}
}

// Update folds one interval in and reports whether it was used (Expected > 0).
func (e *Estimator) Update(iv Interval) bool {
	if iv.Expected == 0 {
		return false
	}
	s := iv.TransmissionLoss(e.CECongestedFraction)
	e.lastSample = s
	if !e.primed {
		e.p, e.primed = s, true
		return true
	}
	e.p += (s - e.p) / 8
	return true
}

// Seed starts the estimate at p, as a warm flow's estimator would hold it: later intervals are
// smoothed into it rather than replacing it. p outside [0, 1] is clipped.
func (e *Estimator) Seed(p float64) {
	p = min(max(p, 0), 1)
	e.p, e.lastSample, e.primed = p, p, true
}

// P returns the current transmission-loss estimate.
func (e *Estimator) P() float64 { return e.p }

// LastSample returns the transmission loss of the last interval used.
func (e *Estimator) LastSample() float64 { return e.lastSample }
