package soak

import (
	"reflect"
	"testing"
	"time"

	"github.com/crem-project/crem/rc"
)

// cleanWrites is a small scenario of no particular difficulty: two QPs, WRITEs and SENDs only, a
// clean path, the second QP's PSNs 4 Mi ahead of the first's.
func cleanWrites() *Scenario {
	s := Minimal(3, 600*time.Millisecond, rc.ModeSR, rc.ModeTCAETH)
	s.QPs[1].SendPSN = 0x523456
	s.Script = script(every(0, rc.OpWrite, 40<<10, 20*time.Millisecond, 7*time.Millisecond, 550*time.Millisecond),
		every(1, rc.OpWrite, 24<<10, 21*time.Millisecond, 5*time.Millisecond, 550*time.Millisecond),
		every(1, rc.OpSend, 3000, 22*time.Millisecond, 11*time.Millisecond, 550*time.Millisecond))
	return s
}

// TestInvariantsSeeInjectedFaultsK4 (K4, K5; contract 1): a clean run of WRITEs and SENDs breaks
// no invariant, judges LOSS_REPORTs and checks acknowledgements; the same run with one fault
// injected breaks the invariant that must see it: a CRF reporting one expected packet too many
// (Expected = Received over lossless intervals), ACKs of a responder hidden from the checker, so
// that the CSF counts acknowledgements the responder (to the checker) never sent (no CSF counts
// an ACK its own responder did not send), a destination overwritten after placement (every
// request completes with the right data), repair counted twenty times over (all repair within
// the budget of C11 b).
func TestInvariantsSeeInjectedFaultsK4(t *testing.T) {
	base := Run(cleanWrites(), Options{})
	if base.Err != nil || len(base.Failures) > 0 {
		t.Fatalf("the clean run fails: %v %v", base.Err, base.Failures)
	}
	if base.Judged == 0 || base.OwnAckChecks == 0 || base.Requests < 150 {
		t.Fatalf("the clean run checked too little: %d reports judged, %d ACK checks, %d requests", base.Judged, base.OwnAckChecks, base.Requests)
	}
	for _, c := range []struct {
		name string
		ft   faults
		want string
	}{
		{"skewed LOSS_REPORT", faults{skewReport: true}, InvLossless},
		{"hidden ACKs", faults{hideOwnAck: true}, InvOwnAck},
		{"overwritten destination", faults{corrupt: true}, InvData},
		{"heavy repair", faults{heavyRepair: true}, InvBudget},
	} {
		r := Run(cleanWrites(), Options{faults: &c.ft})
		found := false
		for _, f := range r.Failures {
			found = found || f.Invariant == c.want
		}
		if !found {
			t.Errorf("%s: no %s failure (failures %v, error %v)", c.name, c.want, r.Failures, r.Err)
		}
	}
}

// shortened is the scenario of seed with every phase a tenth as long and a bad minute of 3 s:
// the same kinds of work and path in a second of CPU.
func shortened(seed uint64) *Scenario {
	s := NewScenario(seed)
	for i := range s.Phases {
		p := &s.Phases[i]
		p.Dur /= 10
		if p.Bad {
			p.Dur = 3 * time.Second
		}
		if p.Probe > 0 {
			p.Probe = p.Dur / 2
		}
	}
	s.Budget, s.Big = 32<<20, min(s.Big, 32<<20)
	return s
}

// TestWorkloadReproducibleK9 (K9): a seed is a run. The same scenario run twice takes the same
// steps, moves the same requests and finds the same failures at the same instants.
func TestWorkloadReproducibleK9(t *testing.T) {
	a, b := Run(shortened(11), Options{}), Run(shortened(11), Options{})
	if a.Err != nil || b.Err != nil {
		t.Fatalf("errors: %v, %v", a.Err, b.Err)
	}
	if a.Steps != b.Steps || a.Events != b.Events || a.Requests != b.Requests || a.Octets != b.Octets ||
		a.Virtual != b.Virtual || !reflect.DeepEqual(a.Failures, b.Failures) || !reflect.DeepEqual(a.PhaseLog, b.PhaseLog) {
		t.Fatalf("two runs differ:\n%s\n%v\n%s\n%v", a.Summary(), a.Failures, b.Summary(), b.Failures)
	}
	if a.Steps < 10000 || a.Requests < 100 {
		t.Fatalf("the run did little: %s", a.Summary())
	}
}
