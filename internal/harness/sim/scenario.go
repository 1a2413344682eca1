package sim

import (
	"fmt"
	"strings"
	"time"
)

// Scenario is a named preset of a sweep: the path, the loss process, and the cells' drop rates
// and message sizes. Every field can be overridden before the sweep runs.
type Scenario struct {
	Name     string
	Rate     int64
	RTT      time.Duration
	MTU      int
	Loss     LossKind
	BurstLen float64
	// PolicyBurst is the mean burst length the project's policy assumes (0: the path's, S18).
	PolicyBurst float64
	DropRates   []float64
	Sizes       []int64
	// Extra cells beyond the grid: a size run only at one drop rate.
	Extra  []Extra
	Trials int
	// Schemes are the scheme names a sweep of the scenario runs unless told otherwise; nil
	// means every scheme.
	Schemes []string
}

// Extra is one extra (drop rate, size) cell of a scenario.
type Extra struct {
	DropRate float64
	Size     int64
}

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// Scenarios returns the presets, new each call: a caller may change what it gets.
func Scenarios() []Scenario {
	sdrDrops := func() []float64 { return []float64{1e-6, 1e-5, 1e-4, 1e-3, 1e-2} }
	sdrSizes := func() []int64 { return []int64{128 * kib, 1 * mib, 16 * mib, 128 * mib, 1 * gib} }
	return []Scenario{
		{Name: "sdr-casestudy", Rate: 400e9, RTT: 25 * time.Millisecond, MTU: 4096, Loss: LossBernoulli,
			DropRates: sdrDrops(), Sizes: sdrSizes(), Extra: []Extra{{1e-6, 8 * gib}}, Trials: 30},
		{Name: "metro", Rate: 100e9, RTT: time.Millisecond, MTU: 4096, Loss: LossBernoulli,
			DropRates: sdrDrops(), Sizes: sdrSizes(), Trials: 30},
		{Name: "bursty", Rate: 400e9, RTT: 25 * time.Millisecond, MTU: 4096, Loss: LossBursty, BurstLen: 4,
			DropRates: []float64{1e-5, 1e-4, 1e-3, 1e-2}, Sizes: sdrSizes(), Trials: 30},
		{Name: "congested", Rate: 400e9, RTT: 25 * time.Millisecond, MTU: 4096, Loss: LossQueue,
			DropRates: []float64{1e-4, 1e-3, 1e-2}, Sizes: []int64{1 * mib, 16 * mib, 128 * mib}, Trials: 30},
		// The path of sdr-casestudy with a path reporter's node in the middle of each link, and
		// loss bursts longer than the repair the policy picks for independent loss (the
		// estimator does not measure bursts, S18): blocks lose more than m, and the report of
		// the drops saves the receiver's detection and request (C16).
		{Name: "reporter", Rate: 400e9, RTT: 25 * time.Millisecond, MTU: 4096, Loss: LossBursty, BurstLen: 8,
			PolicyBurst: 1, DropRates: []float64{1e-3, 3e-3, 1e-2}, Sizes: []int64{16 * mib, 128 * mib}, Trials: 20,
			Schemes: []string{"crem+tcaeth", "crem+tcaeth+reporter"}},
	}
}

// SchemesOf returns the schemes a sweep of sc runs by default: its Schemes, or every scheme.
func SchemesOf(sc Scenario) ([]Scheme, error) {
	if sc.Schemes == nil {
		return Schemes(), nil
	}
	return ParseSchemes(strings.Join(sc.Schemes, ","))
}

// LookupScenario returns the preset called name.
func LookupScenario(name string) (Scenario, error) {
	var names []string
	for _, s := range Scenarios() {
		if s.Name == strings.ToLower(strings.TrimSpace(name)) {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return Scenario{}, fmt.Errorf("sim: unknown scenario %q (want one of %s)", name, strings.Join(names, ", "))
}
