package main

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/crem-project/crem/units"
)

// Thresholds of the warnings before a run: a rate under slowRate is most likely a rate typed
// without its unit (--rate 100 is 100 bit/s), and a run predicted to last over longRun is most
// likely not what was meant.
const (
	slowRate = 1_000_000 // bit/s
	longRun  = time.Hour
)

// runPlan is what a command is about to move, for the warnings before it starts.
type runPlan struct {
	name     string  // the command, as in its messages: "perf write", "lab"
	rate     int64   // bit/s the data moves at (0: no rate)
	rateFlag string  // the flag that gave it, "--rate"
	bytes    float64 // octets moved in all, at rate
	rtts     float64 // round trips the run waits for beyond the data's own time
	rtt      time.Duration
	what     string // what the bytes are, "4MiB x 1000 messages"
	fix      string // the flags that shorten the run, "--size or --iters"
}

// predicted is the time the plan takes at least: its bytes at the rate and its round trips.
func (p runPlan) predicted() time.Duration {
	if p.rate <= 0 {
		return 0
	}
	s := p.bytes*8/float64(p.rate) + p.rtts*p.rtt.Seconds()
	if s > float64(math.MaxInt64/int64(time.Second)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(s * float64(time.Second))
}

// warnings returns the warnings about p: a rate under 1 Mbit/s, a predicted time over an hour.
// Each names its cause and the fix.
func (p runPlan) warnings() []string {
	var w []string
	if p.rate > 0 && p.rate < slowRate {
		w = append(w, fmt.Sprintf("crem %s: warning: %s %s is under 1Mbit/s: rates are in bits per second, a bare number too; give a unit, e.g. %s 100Mbit",
			p.name, p.rateFlag, units.FormatRate(p.rate), p.rateFlag))
	}
	if d := p.predicted(); d > longRun {
		w = append(w, fmt.Sprintf("crem %s: warning: this run takes at least %s (%s at %s, plus round trips); raise %s or lower %s",
			p.name, humanDuration(d), p.what, units.FormatRate(p.rate), p.rateFlag, p.fix))
	}
	return w
}

// warn writes p's warnings to w.
func (p runPlan) warn(w io.Writer) {
	for _, line := range p.warnings() {
		fmt.Fprintln(w, line)
	}
}

// humanDuration writes a long duration in hours or days, a short one as FormatDuration does.
func humanDuration(d time.Duration) string {
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%.0f days", d.Hours()/24)
	case d >= time.Hour:
		return fmt.Sprintf("%.1f hours", d.Hours())
	}
	return units.FormatDuration(d)
}
