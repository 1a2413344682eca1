package policy

// MSelector applies the hysteresis of RULINGS C6(e) and the congestion rule of C6(c) to the
// repair count: m moves only after the same new value has been chosen in two consecutive
// LOSS_REPORT intervals, a raise is immediate when one interval's loss exceeds twice the
// estimate, and an interval classified as congestion never raises m.
type MSelector struct {
	current   int
	candidate int
	streak    int
}

// NewMSelector starts at m.
func NewMSelector(m int) *MSelector { return &MSelector{current: m, candidate: m} }

// Current returns the m in force.
func (s *MSelector) Current() int { return s.current }

// Offer takes the value the policy chose for one interval and returns the m to use and whether
// it changed. sample and estimate are the interval's loss and the smoothed loss; congested says
// the interval's loss was classified as congestion.
func (s *MSelector) Offer(chosen int, sample, estimate float64, congested bool) (int, bool) {
	if congested && chosen > s.current {
		chosen = s.current
	}
	if chosen == s.current {
		s.candidate, s.streak = chosen, 0
		return s.current, false
	}
	if chosen > s.current && !congested && sample > 2*estimate && estimate > 0 {
		s.current, s.candidate, s.streak = chosen, chosen, 0
		return s.current, true
	}
	if chosen == s.candidate {
		s.streak++
	} else {
		s.candidate, s.streak = chosen, 1
	}
	if s.streak >= 2 {
		s.current, s.streak = chosen, 0
		return s.current, true
	}
	return s.current, false
}

// Force sets m without hysteresis (the circuit breaker's m = 0, a configured value).
func (s *MSelector) Force(m int) { s.current, s.candidate, s.streak = m, m, 0 }
