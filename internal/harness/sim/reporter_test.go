package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/reporter"
	"github.com/crem-project/crem/wire"
)

// reporterCell runs trials of one cell of the reporter scenario for scheme name, on the seeds a
// sweep gives every scheme.
func reporterCell(t *testing.T, name string, drop float64, size int64, trials int) ([]Outcome, Result) {
	t.Helper()
	sc, err := LookupScenario("reporter")
	if err != nil {
		t.Fatal(err)
	}
	sw := Sweep{Scenario: sc, Seed: 1}
	c := Cell{Scheme: scheme(t, name), DropRate: drop, Size: size}
	var outs []Outcome
	for i := range trials {
		o, err := Run(sw.params(c, i))
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, o)
	}
	return outs, Summarize(sc.Name, c, outs)
}

// TestReporterRecoversSoonerC16: on the case study's path with a path reporter's node in the
// middle of each link, loss bursts longer than the repair the policy picks make blocks lose more
// than m. The node reports the dropped PSNs, the CSF sends extra ordinary repair for their blocks
// at once (C16), and those blocks recover at least a quarter RTT sooner than without the reports
// (the receiver's detection and request cost half an RTT more), on the same seeds and loss
// draws; every trial completes and every byte is checked (Run).
func TestReporterRecoversSoonerC16(t *testing.T) {
	const drop, size, trials = 1e-3, 128 << 20, 4
	without, rw := reporterCell(t, "crem+tcaeth", drop, size, trials)
	with, rr := reporterCell(t, "crem+tcaeth+reporter", drop, size, trials)
	t.Logf("without reports: recovery mean %.2f ms p99 %.2f ms over %d blocks, completion %.3fx; with: %.2f ms p99 %.2f ms over %d blocks, %.3fx",
		rw.RecoveryMeanS*1e3, rw.RecoveryP99S*1e3, rw.RecoveryBlocks, rw.MeanS/rw.IdealS,
		rr.RecoveryMeanS*1e3, rr.RecoveryP99S*1e3, rr.RecoveryBlocks, rr.MeanS/rr.IdealS)
	if rw.RecoveryBlocks == 0 || rr.RecoveryBlocks == 0 {
		t.Fatalf("no block lost more than m: %d and %d blocks", rw.RecoveryBlocks, rr.RecoveryBlocks)
	}
	rtt := 25 * time.Millisecond
	if gain := time.Duration((rw.RecoveryMeanS - rr.RecoveryMeanS) * float64(time.Second)); gain < rtt/4 {
		t.Fatalf("reports saved %v of recovery, want at least a quarter RTT (%v)", gain, rtt/4)
	}
	if rr.Incomplete != 0 || rw.Incomplete != 0 {
		t.Fatalf("incomplete trials: %d without reports, %d with", rw.Incomplete, rr.Incomplete)
	}
	for i, o := range with {
		n := o.Nodes[0]
		if o.PathReports == 0 || o.ExtraRepair == 0 || o.PathReportsRejected != 0 || n.Drops == 0 || n.Corruption != n.Drops ||
			n.ReportsDelivered+n.ReportsLost != n.Reports || o.Nodes[1].Drops != 0 {
			t.Fatalf("trial %d: reports %d, rejected %d, extra %d, nodes %+v", i, o.PathReports, o.PathReportsRejected, o.ExtraRepair, o.Nodes)
		}
		for _, x := range []Outcome{o, without[i]} {
			if x.Recovery.Unattributed != 0 || x.Recovery.Unrecovered != 0 || x.Recovery.LossBlocks == 0 {
				t.Fatalf("trial %d: recovery %+v", i, x.Recovery)
			}
		}
		if without[i].PathReports != 0 || without[i].ExtraRepair != 0 {
			t.Fatalf("trial %d without reporters took %d reports", i, without[i].PathReports)
		}
		// The node reports every data packet its link lost.
		if n.Drops != o.ForwardDataLost {
			t.Fatalf("trial %d: node reported %d drops of %d", i, n.Drops, o.ForwardDataLost)
		}
	}
	// A run with reporters is a function of its seed.
	again, _ := reporterCell(t, "crem+tcaeth+reporter", drop, size, 1)
	if !reflect.DeepEqual(again[0], with[0]) {
		t.Fatal("two runs with reporters differ")
	}
}

// TestReporterCongestionKeepsMC6: drops at a congested bottleneck that marks no CE (C6 c, C10).
// Without reporters the CSF can only take them for transmission loss and proposes a larger m;
// with a reporter at the bottleneck's node the reports say Cause congestion with the queue
// delay rising, the estimator subtracts the reported drops from each LOSS_REPORT's loss, and m
// is never proposed above its start.
//
// The path is the congested scenario's at 10 Gbit/s, so that the 128 MiB message spans several
// LOSS_REPORT intervals. At the scenario's 400 Gbit/s the whole message passes within one
// interval: the CRF enters the lost PSNs into Expected only when they are settled, in the
// LOSS_REPORT after the one that counted the CE marks around them (E42), and the CSF spends the
// reports' congestion drops on the next LOSS_REPORT only, so the interval that carries the loss
// has neither, and m is proposed higher with or without reporters (see the protocol notes, S21).
//
// Both run the draft's rule (crem-draft's policy with and without a reporter): under the cost
// rule a flow of known messages holds m at 0 and gives each message's critical blocks their
// repair as extra symbols (P9), so m has nothing to rise from (TestCostRuleCongestionKeepsM).
func TestReporterCongestionKeepsMC6(t *testing.T) {
	run := func(name string) Outcome {
		s := scheme(t, name)
		s.CREM = PolicyDraft
		p := casestudy(s, 128<<20, 1e-2, 3)
		p.Rate, p.Loss, p.NoECN, p.InitialLoss = 10e9, LossQueue, true, 1e-3
		o, err := Run(p)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	without, with := run("crem+tcaeth"), run("crem+tcaeth+reporter")
	start := with.KM[0].M
	t.Logf("start m %d; without reports proposed %v; with: proposed %v, %d reports, node %+v",
		start, without.Proposed, with.Proposed, with.PathReports, with.Nodes[0])
	if start == 0 || without.KM[0].M != start {
		t.Fatalf("start m %d and %d", start, without.KM[0].M)
	}
	if without.ForwardDataLost == 0 || with.ForwardDataLost == 0 {
		t.Fatalf("lost %d and %d packets", without.ForwardDataLost, with.ForwardDataLost)
	}
	if !slices.ContainsFunc(without.Proposed, func(k KM) bool { return k.M > start }) {
		t.Fatalf("without reports the loss never raised m: %v (the comparison shows nothing)", without.Proposed)
	}
	n := with.Nodes[0]
	if n.Drops == 0 || n.Congestion != n.Drops || n.DelayRising == 0 || with.PathReports == 0 || with.LossReports < 3 {
		t.Fatalf("reports %d, loss reports %d, node %+v", with.PathReports, with.LossReports, n)
	}
	for _, k := range append(slices.Clone(with.Proposed), with.KM...) {
		if k.M > start {
			t.Fatalf("m rose from %d to %d under reported congestion: proposed %v, used %v", start, k.M, with.Proposed, with.KM)
		}
	}
}

// The JSON of every scheme that existed before path reporters is what it was, field for field
// and byte for byte, on the same scenarios and seeds (testdata/golden-*.json were written by
// `crem sim --json` of that version); only the recovery fields are new. The crem+tcaeth and crem
// cells were written again when their policy became the cost rule (P9).
func TestExistingSchemesJSONUnchanged(t *testing.T) {
	old, err := ParseSchemes("gbn,sr-rto,sr-nack,tcaeth,ec,crem-draft+tcaeth,crem+tcaeth,crem")
	if err != nil {
		t.Fatal(err)
	}
	newField := regexp.MustCompile(`(?m)^\s*"recovery_(mean_s|p99_s|blocks)": [^\n]*\n`)
	comma := regexp.MustCompile(`("incomplete": \d+),\n(\s*\})`)
	for _, c := range []struct {
		file, scenario string
		sizes          []int64
		drops          []float64
		trials         int
	}{
		{"testdata/golden-bursty.json", "bursty", []int64{1 << 20, 16 << 20}, []float64{1e-3, 1e-2}, 3},
		{"testdata/golden-congested.json", "congested", []int64{1 << 20, 16 << 20}, []float64{1e-2}, 2},
	} {
		sc, _ := LookupScenario(c.scenario)
		sc.Sizes, sc.DropRates, sc.Extra, sc.Trials = c.sizes, c.drops, nil, c.trials
		sw := Sweep{Scenario: sc, Schemes: old, Seed: 7}
		res, err := sw.Run()
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := WriteJSON(&b, res); err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		got := comma.ReplaceAll(newField.ReplaceAll(b.Bytes(), nil), []byte("$1\n$2"))
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: the existing fields changed:\n%s", c.file, firstDiff(got, want))
		}
		n := 0
		for _, r := range res {
			if r.RecoveryBlocks > 0 {
				n++
				if Lookup(t, r.Scheme).CREM == "" || r.RecoveryP99S < r.RecoveryMeanS || r.RecoveryMeanS <= 0 {
					t.Fatalf("%s: recovery %+v", c.file, r)
				}
			}
		}
		if c.scenario == "bursty" && n == 0 {
			t.Fatalf("%s: no cell has a block beyond m", c.file)
		}
	}
}

// Lookup is LookupScheme for tests.
func Lookup(t *testing.T, name string) Scheme { return scheme(t, name) }

func firstDiff(a, b []byte) string {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return fmt.Sprintf("line %d: got %s, want %s", i+1, la[i], lb[i])
		}
	}
	return "lengths differ"
}

// repairMsg builds a REPAIR message of block start with k positions.
func repairMsg(t *testing.T, start psn.PSN, k int, index int, retx bool) []byte {
	t.Helper()
	var present psn.Bitmap
	for i := range k {
		present.Set(i)
	}
	m := wire.Repair{FlowID: 1, Retx: retx, ConfigID: 1, Scheme: wire.SchemeCauchy, K: uint8(k), RepairIndex: uint8(index),
		BlockStartPSN: start, Present: present, Symbol: make([]byte, 8)}
	if retx {
		m.Lost, m.RepairSessionID = present, 1
	}
	b, err := m.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writePkt(p psn.PSN) []byte {
	b := make([]byte, 64)
	b[0] = 0x06 // RDMA WRITE MIDDLE
	b[9], b[10], b[11] = byte(p>>16), byte(p>>8), byte(p)
	return b
}

// TestRecoveryMetricS20 checks the recovery measurement on a hand-made trial across the PSN
// wrap, with k = 4: named blocks at 0 (1 ordinary symbol), 4 (2, and one more sent for a
// PATH_REPORT, which does not count), 8 (closed early with k = 2, named only by a coded
// retransmission) and 20 (1 ordinary symbol); the PSNs 10 to 19 were in blocks no message
// named, cut as the CSF opens them: 10-13, 14-17, 18-19, none with ordinary repair.
func TestRecoveryMetricS20(t *testing.T) {
	ms := time.Millisecond
	first := psn.PSN(0xfffffe)
	r := newRecoveryLog(first)
	r.k = 4
	b1, b2, b3, b4 := first, first.Add(4), first.Add(8), first.Add(20) // b2 = 0x000002, across the wrap
	r.repair(repairMsg(t, b1, 4, 0, false), false)
	r.repair(repairMsg(t, b2, 4, 0, false), false)
	r.repair(repairMsg(t, b2, 4, 1, false), false)
	r.repair(repairMsg(t, b2, 4, 2, false), true) // the answer to a PATH_REPORT
	r.repair(repairMsg(t, b3, 2, 0, true), false) // a coded retransmission: names the block, m 0
	r.repair(repairMsg(t, b4, 4, 0, false), false)
	// Block 1 loses two (> 1): sent at 1 and 2 ms, back at 30 and 40 ms: 39 ms.
	r.drop(b1, 1*ms)
	r.drop(b1.Add(2), 2*ms)
	r.drop(b1.Add(2), 5*ms) // lost again: still dated by the first loss
	// Block 2 loses two (not more than its 2 ordinary symbols): not measured.
	r.drop(b2, 3*ms)
	r.drop(b2.Add(3), 3*ms)
	// Block 3 loses one (> 0): 4 ms to 20 ms.
	r.drop(b3.Add(1), 4*ms)
	// Unnamed blocks 10-13 and 18-19 lose one each: 4 to 25 ms and 5 to 26 ms.
	r.drop(first.Add(13), 4*ms)
	r.drop(first.Add(19), 5*ms)
	// Block 4 loses one (not more than 1); a PSN before the message; a copy of what had arrived.
	r.drop(b4.Add(3), 5*ms)
	r.drop(first.Add(-1), 5*ms)
	r.arrive(writePkt(b1.Add(1)), 6*ms)
	r.drop(b1.Add(1), 7*ms)
	r.arrive(writePkt(b3.Add(1)), 20*ms)
	r.arrive(writePkt(first.Add(13)), 25*ms)
	r.arrive(writePkt(first.Add(19)), 26*ms)
	r.arrive(writePkt(b1), 30*ms)
	r.arrive(writePkt(b1), 31*ms) // a duplicate
	r.arrive(writePkt(b2), 32*ms)
	r.arrive(writePkt(b2.Add(3)), 33*ms)
	r.arrive(writePkt(b1.Add(2)), 40*ms)
	r.arrive(writePkt(b4.Add(3)), 41*ms)
	got := r.result()
	want := Recovery{Times: []time.Duration{39 * ms, 16 * ms, 21 * ms, 21 * ms}, LossBlocks: 6, Unattributed: 1}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	// A block beyond its repair whose loss never came back is counted, not measured.
	r.drop(b2.Add(1), 50*ms)
	if got := r.result(); got.Unrecovered != 1 || len(got.Times) != 4 {
		t.Fatalf("unrecovered: %+v", got)
	}

	// Summarize pools every trial's blocks: mean and nearest-rank p99; none, and the fields
	// are absent from the JSON.
	c := Cell{Scheme: scheme(t, "crem+tcaeth"), DropRate: 1e-3, Size: 1 << 20}
	outs := []Outcome{{Completion: ms, Recovery: Recovery{Times: []time.Duration{10 * ms, 30 * ms}}},
		{Completion: ms, Recovery: Recovery{Times: []time.Duration{20 * ms}}}}
	res := Summarize("x", c, outs)
	if d := res.RecoveryMeanS - 0.020; d > 1e-12 || d < -1e-12 || res.RecoveryP99S != 0.030 || res.RecoveryBlocks != 3 {
		t.Fatalf("summary %+v", res)
	}
	none := Summarize("x", c, []Outcome{{Completion: ms}})
	var b bytes.Buffer
	if err := WriteJSON(&b, []Result{none, res}); err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(b.Bytes(), &rows); err != nil {
		t.Fatal(err)
	}
	if _, ok := rows[0]["recovery_mean_s"]; ok {
		t.Fatalf("recovery fields without a block: %v", rows[0])
	}
	if rows[1]["recovery_p99_s"] != 0.03 || rows[1]["recovery_blocks"] != 3.0 {
		t.Fatalf("row %v", rows[1])
	}
}

// TestReporterPositionS19: the node's place along the link dates its drops and its reports. A
// drop at x of the one-way delay D is reported to the sender at 2xD after the transmission and
// its extra repair reaches the receiver D later; without the report the receiver's request and
// the answer take 3D. Recovery is therefore 2D(1 - x) sooner (less the reporter's aggregation
// of 50 us): three quarters of an RTT with the node a quarter of the way, a quarter RTT at three
// quarters.
func TestReporterPositionS19(t *testing.T) {
	sc, err := LookupScenario("reporter")
	if err != nil {
		t.Fatal(err)
	}
	sw := Sweep{Scenario: sc, Seed: 1}
	recovery := func(s Scheme) float64 {
		c := Cell{Scheme: s, DropRate: 1e-3, Size: 128 << 20}
		var outs []Outcome
		for i := range 2 {
			o, err := Run(sw.params(c, i))
			if err != nil {
				t.Fatal(err)
			}
			outs = append(outs, o)
		}
		r := Summarize(sc.Name, c, outs)
		if r.RecoveryBlocks == 0 {
			t.Fatalf("%s at %v: no block beyond m", s.Name, s.ReporterAt)
		}
		return r.RecoveryMeanS
	}
	base := recovery(scheme(t, "crem+tcaeth"))
	d := sc.RTT.Seconds() / 2
	for _, x := range []float64{0.25, 0.75} {
		s := scheme(t, "crem+tcaeth+reporter")
		s.ReporterAt = x
		gain, want := base-recovery(s), 2*d*(1-x)
		t.Logf("reporter at %v: %.2f ms sooner, 2D(1-x) = %.2f ms", x, gain*1e3, want*1e3)
		if gain < want-1e-3 || gain > want {
			t.Fatalf("reporter at %v: recovery %.3f ms sooner, want %.3f ms less at most 1 ms", x, gain*1e3, want*1e3)
		}
	}
	for _, x := range []float64{0, -1, 1.5} {
		if _, err := newPathNode(0, x, reporterAddr(0), 1, reporter.FlowKey{}, netem.Config{}, netem.Config{}, nil); err == nil {
			t.Fatalf("a reporter at %v of the link was accepted", x)
		}
	}
}

// TestReporterCongestedScenarioKeepsMC6: on the congested scenario's own path (400 Gbit/s,
// 25 ms, a bottleneck queue with ECN), a message that passes within one or two LOSS_REPORT
// intervals loses to queue overflow; without reports the CSF takes the interval that shows the
// loss (its CE marks were counted an interval before, E42) for transmission loss and proposes a
// higher m, while with reporters their Cause congestion and rising queue delay wait for that
// interval (protocol notes E65) and no higher m is proposed. Like TestReporterCongestionKeepsMC6
// it runs the draft's rule, where m follows the estimate.
func TestReporterCongestedScenarioKeepsMC6(t *testing.T) {
	for _, size := range []int64{64 << 20, 128 << 20} {
		var start int
		for _, name := range []string{"crem+tcaeth", "crem+tcaeth+reporter"} {
			s := scheme(t, name)
			s.CREM = PolicyDraft
			p := casestudy(s, size, 1e-2, 3)
			p.Loss = LossQueue
			o, err := Run(p)
			if err != nil {
				t.Fatal(err)
			}
			start = o.KM[0].M
			rose := slices.ContainsFunc(append(slices.Clone(o.Proposed), o.KM...), func(k KM) bool { return k.M > start })
			t.Logf("%d MiB %s: m %d at the start, proposed %v, %d path reports, %d loss reports, %d data packets lost",
				size>>20, name, start, o.Proposed, o.PathReports, o.LossReports, o.ForwardDataLost)
			if o.ForwardDataLost == 0 {
				t.Fatalf("%s: the queue lost nothing: the comparison shows nothing", name)
			}
			switch withReports := o.PathReports > 0; {
			case name == "crem+tcaeth" && !rose:
				t.Fatalf("%d MiB: without reports the congestion loss raised no m: the comparison shows nothing", size>>20)
			case name != "crem+tcaeth" && (!withReports || rose):
				t.Fatalf("%d MiB: with %d reports m rose from %d: proposed %v", size>>20, o.PathReports, start, o.Proposed)
			}
		}
	}
}
