package conform

import (
	"regexp"
	"sort"
)

// Half says which function of the target a scenario tests.
type Half string

// The halves: crem conform csf tests a CSF (the runner plays the CRF), crf a CRF.
const (
	HalfCSF Half = "csf"
	HalfCRF Half = "crf"
)

// Scenario is one check of one requirement.
type Scenario struct {
	Name    string // "csf/hello-backoff": the half, then what it checks
	Half    Half
	Section string // the draft's section or the ruling it checks ("Session", "C8")
	// Requirement is the rule in a sentence; Sends and Expects are what the scenario sends and
	// what must come (docs/conform.md's table).
	Requirement, Sends, Expects string
	// Optional: the requirement is OPTIONAL (or a MAY): a target that does not do it SKIPs,
	// and a failure does not set the exit status.
	Optional bool
	// Long: the scenario takes more than a few seconds (the circuit breaker's ten seconds and
	// minute); it runs only with Config.Long.
	Long bool
	Run  func(h *Harness)
}

// Scenarios returns the registry: every scenario of both halves, in the order they run.
func Scenarios() []Scenario {
	var all []Scenario
	all = append(all, referenceScenarios(HalfCSF)...)
	all = append(all, csfScenarios()...)
	all = append(all, referenceScenarios(HalfCRF)...)
	all = append(all, crfScenarios()...)
	return all
}

// Select returns the scenarios of half whose names match run (nil: all), in registry order.
func Select(all []Scenario, half Half, run *regexp.Regexp) []Scenario {
	var out []Scenario
	for _, s := range all {
		if s.Half == half && (run == nil || run.MatchString(s.Name)) {
			out = append(out, s)
		}
	}
	return out
}

// Names returns the scenario names, sorted.
func Names(all []Scenario) []string {
	var n []string
	for _, s := range all {
		n = append(n, s.Name)
	}
	sort.Strings(n)
	return n
}
