package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

func TestLabJSON(t *testing.T) {
	code, out, errs := runCmd("lab", "--json", "--rtt", "4ms", "--loss", "0.01", "--rate", "200Mbit", "--messages", "2", "--size", "256KiB", "--seed", "5",
		"--retry-count", "100")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var res struct {
		CREMPort int `json:"crem_port"`
		Runs     []map[string]any
	}
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if dec.More() {
		t.Fatalf("more than one JSON object on stdout: %q", out)
	}
	if res.CREMPort < 49152 || len(res.Runs) != 4 {
		t.Fatalf("%+v", res)
	}
	for _, r := range res.Runs {
		for _, k := range []string{"name", "verified", "messages", "bytes", "mean_s", "max_s", "goodput_bps", "lost", "restored", "coded_retx", "rdma_retx", "overhead", "qps", "per_qp", "rdma_timeouts"} {
			if _, ok := r[k]; !ok {
				t.Errorf("run lacks %s: %v", k, r)
			}
		}
		if r["verified"] != true || r["qps"] != 2.0 {
			t.Errorf("%v", r)
		}
		// The default runs several QPs (here as many as the two messages allow).
		per, _ := r["per_qp"].([]any)
		if len(per) != 2 {
			t.Fatalf("per_qp %v", r["per_qp"])
		}
		for i, x := range per {
			q := x.(map[string]any)
			for _, k := range []string{"qp", "requester_qpn", "responder_qpn", "initial_psn", "messages", "verified", "mean_s", "max_s", "lost", "restored_only", "rdma_retx"} {
				if _, ok := q[k]; !ok {
					t.Errorf("QP %d lacks %s: %v", i, k, q)
				}
			}
			if q["qp"] != float64(i) || q["verified"] != true || q["messages"] != 1.0 {
				t.Errorf("QP %d: %v", i, q)
			}
		}
	}
}

// crem lab --qps: the table says over how many QPs; more QPs than messages, or none, is a
// usage error.
func TestLabQPsFlag(t *testing.T) {
	code, out, errs := runCmd("lab", "--rtt", "2ms", "--loss", "0", "--messages", "3", "--size", "64KiB", "--qps", "3", "--runs", "tcaeth")
	if code != 0 || !strings.Contains(out, "3 x 64KiB write over 3 QPs") {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	for _, args := range [][]string{{"--qps", "0"}, {"--qps", "65"}, {"--messages", "2", "--qps", "3"}} {
		if code, _, _ := runCmd(append([]string{"lab"}, args...)...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

func TestLabTableAndUsage(t *testing.T) {
	code, out, errs := runCmd("lab", "--rtt", "2ms", "--loss", "0", "--messages", "1", "--size", "64KiB", "--runs", "tcaeth,crem+tcaeth",
		"--retry-count", "100")
	if code != 0 || !strings.Contains(out, "CREM port") || !strings.Contains(out, "crem+tcaeth") {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	// Standard error is no terminal here: a line as each configuration completes, in order,
	// and no terminal control sequence.
	want := []string{"crem lab: tcaeth: 1 of 1 messages done", "crem lab: crem+tcaeth: 1 of 1 messages done"}
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	if len(lines) != len(want) || strings.ContainsAny(errs, "\r\033") {
		t.Fatalf("standard error %q, want one line per configuration", errs)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Fatalf("line %d: %q, want %q...", i, lines[i], w)
		}
	}
	if code, _, _ := runCmd("lab", "--op", "cas"); code == 0 {
		t.Fatal("bad --op accepted")
	}
	if code, _, _ := runCmd("lab", "--loss", "lots"); code != 2 {
		t.Fatal("bad --loss not a usage error")
	}
	if code, _, _ := runCmd("lab", "--retry-count", "0"); code != 2 {
		t.Fatal("--retry-count 0 not a usage error")
	}
}

// soakArgs keep a short soak's first interval after the gateways' block stores have filled
// (they fill once, some 4,096 packets per flow, and are then reused): packets of 1 KiB at
// 100 Mbit/s per QP fill them in some 0.4 s, and the first interval comes at 1 s or later.
var soakArgs = []string{"--loss", "0.02", "--loss-model", "gilbert-burst:burst=4", "--mtu", "1024", "--size", "64KiB",
	"--retry-count", "100"}

// heapOnly reports whether a soak's failures are all of its heap bounds, which the soak command
// judges over a minute or ten: in a few seconds on a busy machine (or under the race detector) a
// stall can make the gateways' buffer pool grow, which they keep.
func heapOnly(failures []string) bool {
	for _, f := range failures {
		if !strings.HasPrefix(f, "heap") {
			return false
		}
	}
	return true
}

// crem lab --duration soaks: a line per --stats-interval while it runs (on standard error with
// --json, whose standard output stays one JSON object), the run's JSON keeps every field and
// adds duration_s, intervals and soak; every byte is verified, no CLOSE came, and the exit
// status is 0 when the verdict passes, 1 when not (here only its heap bounds may fail:
// heapOnly). The soak defaults to crem+tcaeth alone.
func TestLabSoakJSON(t *testing.T) {
	code, out, errs := runCmd(append([]string{"lab", "--json", "--duration", "4s", "--stats-interval", "2s", "--qps", "2",
		"--rate", "200Mbit", "--seed", "11"}, soakArgs...)...)
	if code != 0 && code != 1 {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	var res struct {
		Runs []map[string]any
	}
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&res); err != nil || dec.More() {
		t.Fatalf("not one JSON object (%v): %q", err, out)
	}
	if len(res.Runs) != 1 || res.Runs[0]["name"] != "crem+tcaeth" || res.Runs[0]["qps"] != 2.0 {
		t.Fatalf("runs %v", res.Runs)
	}
	r := res.Runs[0]
	for _, k := range []string{"name", "verified", "messages", "bytes", "mean_s", "max_s", "goodput_bps", "lost", "restored",
		"coded_retx", "rdma_retx", "overhead", "qps", "per_qp", "duration_s", "intervals", "soak"} {
		if _, ok := r[k]; !ok {
			t.Errorf("run lacks %s", k)
		}
	}
	ivs, _ := r["intervals"].([]any)
	var soak struct {
		Pass     bool
		Failures []string
		Closes   *float64
	}
	b, _ := json.Marshal(r["soak"])
	json.Unmarshal(b, &soak)
	if len(ivs) != 2 || r["verified"] != true || soak.Closes == nil || *soak.Closes != 0 || soak.Pass != (code == 0) ||
		soak.Pass != (len(soak.Failures) == 0) || !heapOnly(soak.Failures) {
		t.Fatalf("exit %d: %d intervals, verified %v, soak %s", code, len(ivs), r["verified"], b)
	}
	if !soak.Pass {
		t.Logf("not judged here: %v", soak.Failures)
	}
	for i, x := range ivs {
		iv := x.(map[string]any)
		for _, k := range []string{"elapsed_s", "messages", "bytes", "bad", "posted", "heap_bytes", "heap_objects", "goroutines",
			"flows", "flows_opened", "closes", "lost", "restored", "rdma_retx", "max_stall_ms"} {
			if _, ok := iv[k]; !ok {
				t.Errorf("interval %d lacks %s", i, k)
			}
		}
	}
	if n := strings.Count(errs, "crem+tcaeth "); n != 2 || !strings.Contains(errs, "goroutines") {
		t.Errorf("%d interval lines on standard error, want 2: %s", n, errs)
	}
}

// The table form: the interval lines as they come, the table, and the verdict with its bounds.
// A soak over a path that loses everything fails its verdict: exit 1. --stats-interval without
// --duration, or longer than half of it, is a usage error.
func TestLabSoakTableAndFailure(t *testing.T) {
	code, out, errs := runCmd(append([]string{"lab", "--duration", "2s", "--stats-interval", "1s", "--qps", "1",
		"--rate", "100Mbit"}, soakArgs...)...)
	// A line per interval, named by the time it was taken (later than due on a busy machine).
	verdict := regexp.MustCompile(`(?m)^soak crem\+tcaeth: (pass|FAIL: (.*)): \d+ messages .*\(bound 1\.5x\).*, 0 CLOSE before the end$`).FindStringSubmatch(out)
	if len(regexp.MustCompile(`(?m)^crem\+tcaeth \d+s: \d+ messages verified`).FindAllString(out, -1)) != 2 ||
		verdict == nil || !strings.Contains(out, "over 1 QPs") || (verdict[1] == "pass") != (code == 0) ||
		code != 0 && (code != 1 || !heapOnly(strings.Split(verdict[2], "; "))) {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	code, out, errs = runCmd("lab", "--duration", "2s", "--stats-interval", "1s", "--rtt", "2ms", "--loss", "1",
		"--size", "64KiB", "--qps", "1", "--runs", "tcaeth", "--timeout", "5s")
	if code != 1 || !strings.Contains(errs, "tcaeth soak: FAIL") || !strings.Contains(out, "soak tcaeth: FAIL") {
		t.Fatalf("dead path: exit %d: %s %s", code, out, errs)
	}
	for _, args := range [][]string{{"--stats-interval", "1s"}, {"--duration", "1s", "--stats-interval", "600ms"}, {"--duration", "-1s"}} {
		if code, _, _ := runCmd(append([]string{"lab"}, args...)...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

// crem lab --reporter --json: the run crem+tcaeth+reporter follows the four default runs; every
// run has path_reports and report_repair (0 without a reporter) next to every earlier field, and
// the reporter's run has its reporter object, whose reports went out from the reporter's address.
func TestLabReporterJSONC16(t *testing.T) {
	code, out, errs := runCmd("lab", "--json", "--reporter", "--rtt", "4ms", "--loss", "0.05", "--rate", "200Mbit", "--messages", "2",
		"--size", "256KiB", "--seed", "5", "--retry-count", "100")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var res struct {
		Runs []map[string]any
	}
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&res); err != nil || dec.More() {
		t.Fatalf("not one JSON object (%v): %q", err, out)
	}
	var names []string
	for _, r := range res.Runs {
		names = append(names, r["name"].(string))
	}
	if strings.Join(names, ",") != "gbn,tcaeth,crem+gbn,crem+tcaeth,crem+tcaeth+reporter" {
		t.Fatalf("runs %v", names)
	}
	for _, r := range res.Runs {
		for _, k := range []string{"name", "verified", "messages", "bytes", "mean_s", "max_s", "goodput_bps", "lost", "restored", "coded_retx",
			"rdma_retx", "overhead", "repair_requests", "requests_unknown_block", "rdma_timeouts", "path_reports", "report_repair", "qps", "per_qp"} {
			if _, ok := r[k]; !ok {
				t.Errorf("%s lacks %s", r["name"], k)
			}
		}
		if r["verified"] != true {
			t.Errorf("%s did not verify: %v", r["name"], r["error"])
		}
		_, has := r["reporter"]
		if r["name"] != "crem+tcaeth+reporter" && (r["path_reports"] != 0.0 || r["report_repair"] != 0.0 || has) {
			t.Errorf("%s has no reporter: %v", r["name"], r)
		}
	}
	rep, _ := res.Runs[4]["reporter"].(map[string]any)
	for _, k := range []string{"address", "drops", "corruption", "congestion", "reports", "sent", "send_errors", "truncated",
		"deferred_flow", "deferred_port", "flows_overflow", "hold_s", "held_overflow", "rejected", "psns", "unclaimed"} {
		if _, ok := rep[k]; !ok {
			t.Errorf("reporter lacks %s: %v", k, rep)
		}
	}
	if a, _ := rep["address"].(string); !strings.HasPrefix(a, "127.0.0.5:") || rep["drops"] == 0.0 || rep["sent"] != rep["reports"] ||
		rep["send_errors"] != 0.0 || rep["rejected"] != 0.0 {
		t.Errorf("reporter %v", rep)
	}
}

// The table gains the report repair column; the reporter's flags are checked before anything
// runs.
func TestLabReporterTableAndUsage(t *testing.T) {
	code, out, errs := runCmd("lab", "--rtt", "4ms", "--loss", "0.05", "--messages", "2", "--size", "256KiB", "--runs",
		"crem+tcaeth,crem+tcaeth+reporter", "--k", "8", "--m", "2", "--report-hold", "0", "--retry-count", "100")
	if code != 0 || !regexp.MustCompile(`(?m)overhead +report repair$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^ +crem\+tcaeth +true .* 0$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^ +crem\+tcaeth\+reporter +true .* \d+$`).MatchString(out) {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	for _, args := range [][]string{{"--report-hold", "soon"}, {"--report-hold", "-1ms"}, {"--k", "65"}, {"--m", "17"}, {"--m", "-1"},
		{"--runs", "tcaeth+reporter"}} {
		if code, _, _ := runCmd(append([]string{"lab"}, args...)...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	if code, out, errs := runCmd("lab", "--help"); code != 0 || !strings.Contains(out+errs, "crem+tcaeth+reporter") ||
		!strings.Contains(out+errs, "report_repair") || !strings.Contains(out+errs, "--report-hold") {
		t.Errorf("--help: exit %d: %s %s", code, out, errs)
	}
}

// crem lab ends with its verdict line (the JSON's verdict.line too): every byte verified,
// crem+tcaeth against gbn and the best other run in mean and max, and each run's losses
// balanced against restored + RDMA retransmitted, the difference named.
func TestLabEndsWithVerdictLine(t *testing.T) {
	args := []string{"lab", "--rtt", "2ms", "--loss", "0.02", "--messages", "4", "--size", "256KiB", "--runs", "gbn,tcaeth,crem+tcaeth",
		"--retry-count", "100"}
	code, out, errs := runCmd(args...)
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	re := regexp.MustCompile(`^verdict: every byte verified \(3 runs\)\. crem\+tcaeth [0-9.]+x (faster|slower) than gbn in mean, [0-9.]+x (faster|slower) in max; ` +
		`(against the best other, tcaeth: [0-9.]+x (faster|slower) in mean, [0-9.]+x (faster|slower) in max|gbn is the best other)\. ` +
		`lost = restored \+ RDMA retx: gbn \d+ = 0 \+ \d+.*; tcaeth \d+ = 0 \+ \d+.*; crem\+tcaeth \d+ = \d+ \+ \d+`)
	if !re.MatchString(last) {
		t.Fatalf("last line %q, want the verdict", last)
	}
	code, out, errs = runCmd(append(args, "--json")...)
	var res struct {
		Verdict struct {
			Verified bool   `json:"verified"`
			Line     string `json:"line"`
			Accounts []struct {
				Run      string `json:"run"`
				DataLost uint64 `json:"data_lost"`
			} `json:"accounts"`
		} `json:"verdict"`
	}
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil {
		t.Fatalf("exit %d, %v: %s %s", code, err, out, errs)
	}
	if !res.Verdict.Verified || !strings.HasPrefix(res.Verdict.Line, "verdict: every byte verified (3 runs)") || len(res.Verdict.Accounts) != 3 {
		t.Errorf("JSON verdict %+v", res.Verdict)
	}
}
