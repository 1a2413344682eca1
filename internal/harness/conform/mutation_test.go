package conform_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/crem-project/crem/internal/fault"
	"github.com/crem-project/crem/internal/harness/conform"
)

// catcher names, for one half of the target, the scenarios of which at least one must fail when
// the fault is planted.
type catcher struct {
	half      conform.Half
	scenarios []string
	long      bool // the scenario is long (runs with Config.Long)
}

// faultCatchers is the mutation check's table (docs/conformance.md): each planted fault and the
// scenarios that must catch it. A fault of both engines is caught in each half.
var faultCatchers = map[fault.Set][]catcher{
	fault.WrongCoefficient:     {{half: conform.HalfCSF, scenarios: []string{"csf/repair-symbols", "csf/request-m-within-x", "csf/appendix-exchange"}}},
	fault.RepairAboveX:         {{half: conform.HalfCSF, scenarios: []string{"csf/request-m-within-x"}}},
	fault.AnswerRequestSource:  {{half: conform.HalfCSF, scenarios: []string{"csf/request-bound-address"}}},
	fault.RequestEverySRTT:     {{half: conform.HalfCSF, scenarios: []string{"csf/request-once-per-srtt"}}},
	fault.CodedRetxWholeBlock:  {{half: conform.HalfCSF, scenarios: []string{"csf/request-m-within-x", "csf/appendix-exchange"}}},
	fault.NoHelloBackoff:       {{half: conform.HalfCSF, scenarios: []string{"csf/hello-backoff"}}},
	fault.FixedFlowNonce:       {{half: conform.HalfCSF, scenarios: []string{"csf/hello-nonce-random"}}},
	fault.EarlyParams:          {{half: conform.HalfCSF, scenarios: []string{"csf/param-before-ack"}}},
	fault.ParamRetryForever:    {{half: conform.HalfCSF, scenarios: []string{"csf/param-eight-attempts"}}},
	fault.BreakerNeverResumes:  {{half: conform.HalfCSF, scenarios: []string{"csf/breaker-resume"}, long: true}},
	fault.PathReportAnySource:  {{half: conform.HalfCSF, scenarios: []string{"csf/path-report-reporters"}}},
	fault.SpoofedCloseHonoured: {{half: conform.HalfCSF, scenarios: []string{"csf/spoofed-close"}}, {half: conform.HalfCRF, scenarios: []string{"crf/spoofed-close"}}},
	fault.HelloAckLarger:       {{half: conform.HalfCRF, scenarios: []string{"crf/hello-ack"}}},
	fault.LimitsNotMinimum:     {{half: conform.HalfCRF, scenarios: []string{"crf/limits-minimum"}}},
	fault.LossReportRare:       {{half: conform.HalfCRF, scenarios: []string{"crf/loss-report-interval"}}},
	fault.LossReportMiscount:   {{half: conform.HalfCRF, scenarios: []string{"crf/loss-report-counts"}}},
	fault.AcceptMalformed:      {{half: conform.HalfCRF, scenarios: []string{"crf/malformed-repair-discarded"}}},
}

// TestConformFaultTable: every fault has catchers, every catcher is a scenario of its half.
func TestConformFaultTable(t *testing.T) {
	names := map[string]conform.Half{}
	for _, s := range conform.Scenarios() {
		names[s.Name] = s.Half
	}
	for _, f := range fault.All() {
		cs := faultCatchers[f]
		if len(cs) == 0 {
			t.Errorf("fault %v: no scenario is named to catch it", f)
		}
		for _, c := range cs {
			for _, n := range c.scenarios {
				if names[n] != c.half {
					t.Errorf("fault %v: %s is not a scenario of %s", f, n, c.half)
				}
			}
		}
	}
	if len(faultCatchers) != len(fault.All()) {
		t.Errorf("%d faults in the table, %d defined", len(faultCatchers), len(fault.All()))
	}
}

// TestConformCatchesFaults is the mutation check: a gateway with one fault planted fails at
// least one of the scenarios named for it (the faults' effects: csf/fault.go, crf/fault.go).
func TestConformCatchesFaults(t *testing.T) {
	for _, f := range fault.All() {
		t.Run(f.String(), func(t *testing.T) {
			for _, c := range faultCatchers[f] {
				if c.long && testing.Short() {
					t.Skipf("%v is caught by a long scenario", f)
				}
				quoted := make([]string, len(c.scenarios))
				for i, n := range c.scenarios {
					quoted[i] = regexp.QuoteMeta(n)
				}
				rep := runHalf(t, c.half, f, "^("+strings.Join(quoted, "|")+")$", c.long)
				caught := false
				for _, r := range rep.Results {
					if r.Status == conform.Fail {
						caught = true
						t.Logf("%v caught by %s: %s", f, r.Name, r.Reason)
					}
				}
				if !caught {
					t.Errorf("fault %v planted in the %s: none of %v failed", f, c.half, c.scenarios)
				}
			}
		})
	}
}
