package soak

import (
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/crem-project/crem/rc"
)

// Result is what one run found and did.
type Result struct {
	Seed     uint64
	Scenario *Scenario
	Failures []Failure // violated invariants, in the order first found
	Err      error     // the run could not go on (a harness or setup error, or no progress)

	Virtual time.Duration // virtual time at the end
	Steps   uint64        // steps of the loop (the invariants ran after each)
	Events  uint64        // packets put on the path or delivered, datagrams included
	Wall    time.Duration

	Requests         uint64
	Octets, Largest  int64
	ByOp             map[string]uint64
	LossReports      uint64 // LOSS_REPORTs the CRFs sent
	Judged           uint64 // of which lay in a lossless interval (K5)
	Trips, Closes4   uint64 // breaker trips, CLOSE reason 4
	Restarts, Probes uint64
	Refusals         uint64 // PARAM_ACKs with a non-zero status
	Forced           uint64 // configuration changes forced through Reconfigure
	Restored         uint64 // packets the CRFs restored
	CodedRetx        uint64 // coded retransmission symbols the CSFs sent
	OwnAckChecks     uint64
	PeakHeap         uint64
	PhaseLog         []string
}

// Failed reports whether the run found anything.
func (r *Result) Failed() bool { return len(r.Failures) > 0 || r.Err != nil }

// Summary is the run in one line: the seed, its scenario, what it did, and an error that stopped
// it (the failures are in Failures).
func (r *Result) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d QPs, MTU %d, RTT %v, k %d m %d, routing %s; %d requests (%d MiB, largest %d MiB); virtual %v, %d steps, wall %v",
		r.Seed, len(r.Scenario.QPs), r.Scenario.MTU, r.Scenario.RTT, r.Scenario.K, r.Scenario.M, r.Scenario.Routing,
		r.Requests, r.Octets>>20, r.Largest>>20, r.Virtual.Round(time.Millisecond), r.Steps, r.Wall.Round(time.Millisecond))
	if r.Err != nil {
		fmt.Fprintf(&b, "\n  error: %v", r.Err)
	}
	return b.String()
}

// Options are how a run is watched, not what it does.
type Options struct {
	// CheckHeap applies the memory bound (K4) to the process's heap: only meaningful when no
	// other run shares the process.
	CheckHeap bool

	faults *faults // the package's own tests: faults injected to see the invariants catch them
}

// faults are injected by the package's tests to see the invariants catch them: a CRF whose
// LOSS_REPORTs say one more expected packet than it counted (K5), ACKs of the first QP's
// responder that the checker does not see, so that to it the CSF counts what the responder never
// sent (contract 1), a destination overwritten after placement (the data check), repair
// symbols counted twenty times over (the budget, K8).
type faults struct {
	skewReport  bool
	hideOwnAck  bool
	corrupt     bool
	heavyRepair bool
}

// Run runs scenario sc to its end and checks every invariant after every step (protocol notes
// K1-K9).
func Run(sc *Scenario, opt Options) *Result {
	start := time.Now()
	res := &Result{Seed: sc.Seed, Scenario: sc}
	w, err := newWorld(sc, opt.faults)
	if err != nil {
		res.Err = err
		return res
	}
	limit := virtualLimit(sc)
	var ms runtime.MemStats
	lastPhase := -1
	for w.step() {
		if w.phase != lastPhase {
			lastPhase = w.phase
			res.PhaseLog = append(res.PhaseLog, fmt.Sprintf("%v %s (from event %d)", w.now.Round(time.Millisecond),
				sc.Phases[w.phase].String(), w.events))
			runtime.ReadMemStats(&ms)
			res.PeakHeap = max(res.PeakHeap, ms.HeapInuse)
		}
		if w.now > limit {
			w.fail(fmt.Errorf("soak: not done after %v of virtual time", limit))
			break
		}
	}
	if w.err == nil {
		if s := w.work.outstanding(); s != "" {
			w.chk.failf(InvData, nil, "%s after the drain", s)
		}
		w.chk.finish()
	}
	runtime.ReadMemStats(&ms)
	res.PeakHeap = max(res.PeakHeap, ms.HeapInuse)
	if opt.CheckHeap && res.PeakHeap > heapBound {
		w.chk.failf(InvMemory, nil, "the heap reached %d MiB (bound %d MiB)", res.PeakHeap>>20, heapBound>>20)
	}
	res.Err = w.err
	res.Failures = w.chk.Failures()
	res.Virtual, res.Steps, res.Events = w.now, w.steps, w.events
	res.Requests, res.Octets, res.Largest = w.work.posted, w.work.octets, w.work.largest
	res.ByOp = map[string]uint64{}
	for k, n := range w.work.byOp {
		if n > 0 {
			res.ByOp[rc.Op(k).String()] = n
		}
	}
	c := w.chk
	res.LossReports, res.Judged, res.Trips, res.Closes4 = c.lossReports, c.judged, c.trips, c.closes4
	res.Restarts, res.Probes, res.Refusals, res.OwnAckChecks = c.restarts, c.probes, c.refusals, c.ownAckChecks
	res.Forced = w.forced
	for s := range 2 {
		res.Restored += w.gw[s].node.Receiver().Stats().Flows.Restored
	}
	for _, f := range w.flist {
		if f.cs != nil {
			res.CodedRetx += f.cs.Stats().RetxSent
		}
	}
	w.work.freeAll()
	res.Wall = time.Since(start)
	return res
}

// heapBound is K4's bound on the memory of a run: the engines' tables for some forty flows, the
// queue pairs' send buffers and the packets on a 20 ms path.
const heapBound = 1536 << 20

// virtualLimit bounds a run's virtual time: every phase, the longest quiesce and drain, and a
// margin.
func virtualLimit(sc *Scenario) time.Duration {
	var d time.Duration
	for _, p := range sc.Phases {
		d += p.Dur
	}
	return d + maxQuiesce + maxDrain + time.Minute
}
