package policy

import "time"

// Budget is the token bucket that all repair traffic of a flow passes (RULINGS C11 b, d).
// It is filled by the source traffic itself: every source octet observed adds Fraction octets
// of credit, which is the configured fraction of the measured source rate with no measurement
// lag. The bucket holds at most one block's worth of credit (its burst). CE marks on REPAIR
// messages halve the fraction; it grows back additively once per SRTT without CE.
type Budget struct {
	configured float64 // the configured fraction (default 0.5)
	fraction   float64 // the fraction in force after CE halving
	tokens     float64
	burst      float64
	lastGrow   time.Duration
	halvings   uint64
	denied     uint64
}

// DefaultRepairFraction is the share of the source rate that repair traffic may take (C11 b).
const DefaultRepairFraction = 0.5

// NewBudget returns a bucket that fills at fraction of the source octets, holds burst octets
// and starts full.
func NewBudget(fraction float64, burst int) *Budget {
	return &Budget{configured: fraction, fraction: fraction, burst: float64(burst), tokens: float64(burst)}
}

// SetBurst changes the bucket's capacity (one block of the configuration in force).
func (b *Budget) SetBurst(burst int) {
	b.burst = float64(burst)
	if b.tokens > b.burst {
		b.tokens = b.burst
	}
}

// ObserveSource credits the bucket for n source octets.
func (b *Budget) ObserveSource(n int) {
	b.tokens += float64(n) * b.fraction
	if b.tokens > b.burst {
		b.tokens = b.burst
	}
}

// Take spends n octets of credit if the bucket holds them.
func (b *Budget) Take(n int) bool {
	if b.tokens < float64(n) {
		b.denied++
		return false
	}
	b.tokens -= float64(n)
	return true
}

// Available returns the credit in octets.
func (b *Budget) Available() int { return int(b.tokens) }

// OnRepairCE reacts to a LOSS_REPORT: CE marks on REPAIR halve the fraction (never below 1/64
// of the configured one); an SRTT without them adds back 1/8 of the configured fraction.
func (b *Budget) OnRepairCE(now, srtt time.Duration, repairsCE uint32) {
	if repairsCE > 0 {
		floor := b.configured / 64
		b.fraction /= 2
		if b.fraction < floor {
			b.fraction = floor
		}
		b.halvings++
		b.lastGrow = now
		return
	}
	if now-b.lastGrow >= srtt && b.fraction < b.configured {
		b.fraction += b.configured / 8
		if b.fraction > b.configured {
			b.fraction = b.configured
		}
		b.lastGrow = now
	}
}

// Fraction returns the fill fraction in force.
func (b *Budget) Fraction() float64 { return b.fraction }

// Halvings counts the CE halvings; Denied counts refused repair sends.
func (b *Budget) Halvings() uint64 { return b.halvings }

// Denied counts the sends the bucket refused.
func (b *Budget) Denied() uint64 { return b.denied }
