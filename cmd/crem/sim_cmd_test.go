package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func runSimCLI(t *testing.T, args ...string) (code int, out, errOut string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(append([]string{"sim"}, args...), stdio{in: strings.NewReader(""), out: &o, err: &e})
	return code, o.String(), e.String()
}

var simKeys = []string{"scenario", "scheme", "drop_rate", "message_bytes", "trials", "ideal_s", "mean_s",
	"p50_s", "p99_s", "p999_s", "overhead", "repair_overhead", "second_round_share",
	"retransmitted_packets", "reverse_packets"}

// crem sim --json prints only a JSON array with one object per (scheme, drop rate, size)
// carrying the contract's fields; CSV and figures (PNG and SVG) land in --out.
func TestSimJSON(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runSimCLI(t, "--scenario", "sdr-casestudy", "--schemes", "sr-rto,crem+tcaeth",
		"--sizes", "256KiB,1MiB", "--drop-rates", "1e-3,1e-2", "--trials", "4", "--seed", "2", "--json", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rows []map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&rows); err != nil {
		t.Fatalf("stdout is not a JSON array: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatal("more than one JSON value on stdout")
	}
	if len(rows) != 2*2*2 {
		t.Fatalf("%d objects, want 8", len(rows))
	}
	for _, r := range rows {
		for _, k := range simKeys {
			if _, ok := r[k]; !ok {
				t.Fatalf("object lacks %q: %v", k, r)
			}
		}
		if r["scenario"] != "sdr-casestudy" || r["trials"].(float64) != 4 || r["mean_s"].(float64) < r["ideal_s"].(float64) {
			t.Fatalf("bad object %v", r)
		}
	}
	for _, f := range []string{"results.csv", "completions.csv", "km.csv", "shard-0-of-1.json",
		"completion-1MiB.png", "completion-1MiB.svg", "overhead-256KiB.png", "overhead-256KiB.svg",
		"km.png", "km.svg"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// Without --out, nothing is written to the working directory; the table names the schemes.
func TestSimTableNoWorkingDirWrites(t *testing.T) {
	wd := t.TempDir()
	t.Chdir(wd)
	t.Setenv("TMPDIR", t.TempDir())
	code, out, errOut := runSimCLI(t, "--scenario", "metro", "--schemes", "sr-nack", "--sizes", "1MiB",
		"--drop-rates", "1e-2", "--trials", "2", "--rate", "10Gbit", "--rtt", "2ms", "--mtu", "1024")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "sr-nack") || !strings.Contains(out, "1MiB") {
		t.Fatalf("table:\n%s", out)
	}
	ents, _ := os.ReadDir(wd)
	if len(ents) != 0 {
		t.Fatalf("wrote into the working directory: %v", ents)
	}
	if !strings.Contains(errOut, os.Getenv("TMPDIR")) {
		t.Fatalf("output folder not under TMPDIR: %s", errOut)
	}
}

// Shards run disjoint cells and `crem sim merge` joins their files into the whole sweep.
func TestSimShardsAndMerge(t *testing.T) {
	args := []string{"--scenario", "sdr-casestudy", "--schemes", "sr-nack,tcaeth", "--sizes", "256KiB",
		"--drop-rates", "1e-3,1e-2", "--trials", "3", "--json"}
	code, whole, errOut := runSimCLI(t, append(args, "--out", t.TempDir())...)
	if code != 0 {
		t.Fatal(errOut)
	}
	var files []string
	for i, sh := range []string{"0/2", "1/2"} {
		dir := t.TempDir()
		code, _, errOut := runSimCLI(t, append(args, "--shard", sh, "--out", dir)...)
		if code != 0 {
			t.Fatalf("shard %s: %s", sh, errOut)
		}
		files = append(files, filepath.Join(dir, []string{"shard-0-of-2.json", "shard-1-of-2.json"}[i]))
	}
	var o, e bytes.Buffer
	code = run(append([]string{"sim", "merge", "--json", "--out", t.TempDir()}, files...), stdio{out: &o, err: &e})
	if code != 0 {
		t.Fatalf("merge: %s", e.String())
	}
	if o.String() != whole {
		t.Fatalf("merged:\n%s\nwhole:\n%s", o.String(), whole)
	}
	code = run([]string{"sim", "merge", "--out", t.TempDir(), files[0]}, stdio{out: &o, err: &e})
	if code != 2 {
		t.Fatalf("merge of one shard of two: exit %d, want 2", code)
	}
}

func TestSimUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--scenario", "nowhere"},
		{"--scenario", "metro", "--schemes", "bogus"},
		{"--scenario", "metro", "--sizes", "-1"},
		{"--scenario", "metro", "--drop-rates", "2"},
		{"--scenario", "metro", "--rtt", "soon"},
		{"--scenario", "metro", "--shard", "2/2"},
		{"--scenario", "metro", "--trials", "0"},
		{"--scenario", "metro", "--loss", "sometimes"},
		{"--scenario", "metro", "--burst-len", "4"},
		{"--scenario", "bursty", "--burst-len", "0.5"},
		{"--scenario", "bursty", "--policy-burst", "0.5"},
	} {
		if code, _, _ := runSimCLI(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code, _, _ := runSimCLI(t, "--help"); code != 0 {
		t.Error("--help failed")
	}
	if !slices.ContainsFunc(commands(), func(c command) bool { return c.name == "sim" }) {
		t.Error("sim is not a command")
	}
}

// The loss process is a scenario parameter like the others: --loss bursty on sdr-casestudy
// takes bursts of 4 unless --burst-len says otherwise, --policy-burst changes what the project's
// policy assumes, and the shard file records the path as run.
func TestSimLossOverrides(t *testing.T) {
	run := func(extra ...string) (map[string]any, map[string]any) {
		dir := t.TempDir()
		args := append([]string{"--scenario", "sdr-casestudy", "--schemes", "crem+tcaeth", "--sizes", "16MiB",
			"--drop-rates", "1e-2", "--trials", "3", "--json", "--out", dir}, extra...)
		code, out, errOut := runSimCLI(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", extra, code, errOut)
		}
		var rows []map[string]any
		if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 {
			t.Fatalf("%v: %v %s", extra, err, out)
		}
		b, err := os.ReadFile(filepath.Join(dir, "shard-0-of-1.json"))
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			Path map[string]any `json:"path"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		return rows[0], f.Path
	}
	bern, pb := run()
	burst, pu := run("--loss", "bursty")
	eight, p8 := run("--loss", "bursty", "--burst-len", "8", "--policy-burst", "1")
	if pb["loss"] != "bernoulli" || pu["loss"] != "bursty" || pu["burst_len"] != 4.0 || p8["burst_len"] != 8.0 || p8["policy_burst"] != 1.0 {
		t.Fatalf("recorded paths: %v, %v, %v", pb, pu, p8)
	}
	// The policy told of bursts spends more repair than under independent loss; told bursts
	// are absent (longer ones at that), it adds only coded retransmissions to what it spends on
	// independent loss, and more messages wait for them.
	if burst["repair_overhead"].(float64) <= bern["repair_overhead"].(float64) ||
		eight["repair_overhead"].(float64) >= burst["repair_overhead"].(float64) ||
		eight["second_round_share"].(float64) <= burst["second_round_share"].(float64) {
		t.Fatalf("repair overhead: bernoulli %v, bursty %v, bursts of 8 assumed 1 %v; second rounds %v and %v",
			bern["repair_overhead"], burst["repair_overhead"], eight["repair_overhead"],
			burst["second_round_share"], eight["second_round_share"])
	}
}

// The reporter scenario runs crem+tcaeth and crem+tcaeth+reporter unless --schemes says
// otherwise; its JSON rows and table carry the recovery of blocks that lost more than m, shorter
// with the reports (C16), and the shard file and merge keep them.
func TestSimReporterScenario(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runSimCLI(t, "--scenario", "reporter", "--sizes", "128MiB", "--drop-rates", "1e-3",
		"--trials", "2", "--json", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rows) != 2 || rows[0]["scheme"] != "crem+tcaeth" || rows[1]["scheme"] != "crem+tcaeth+reporter" {
		t.Fatalf("rows %v", rows)
	}
	for _, r := range rows {
		for _, k := range append(slices.Clone(simKeys), "recovery_mean_s", "recovery_p99_s", "recovery_blocks") {
			if _, ok := r[k]; !ok {
				t.Fatalf("row lacks %q: %v", k, r)
			}
		}
	}
	if a, b := rows[0]["recovery_mean_s"].(float64), rows[1]["recovery_mean_s"].(float64); a-b < 0.025/4 {
		t.Fatalf("recovery %v without reports, %v with", a, b)
	}
	var o, e bytes.Buffer
	if code := run([]string{"sim", "merge", "--json", "--out", t.TempDir(), filepath.Join(dir, "shard-0-of-1.json")},
		stdio{out: &o, err: &e}); code != 0 || o.String() != out {
		t.Fatalf("merge: exit %d %s\n%s", code, e.String(), o.String())
	}
	code, table, errOut := runSimCLI(t, "--scenario", "reporter", "--schemes", "crem+tcaeth+reporter,tcaeth",
		"--sizes", "16MiB", "--drop-rates", "1e-2", "--trials", "2", "--out", t.TempDir())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(table), "\n")
	last := func(l string) string { f := strings.Fields(l); return strings.Join(f[max(0, len(f)-3):], " ") }
	if len(lines) != 3 || !strings.Contains(lines[0], "recovery") || !strings.Contains(lines[0], "rec p99") ||
		!strings.Contains(lines[1], " ms") || last(lines[2]) != "- - -" {
		t.Fatalf("table:\n%s", table)
	}
}

// --shard auto/N takes the index from JOB_COMPLETION_INDEX before SLURM_ARRAY_TASK_ID, less
// --shard-base (a number, or min: SLURM_ARRAY_TASK_MIN, only for an array of exactly N
// contiguous tasks), and refuses what it cannot read with an error naming the variable.
func TestSimShardAuto(t *testing.T) {
	for _, c := range []struct {
		spec, base string
		env        map[string]string
		i, n       int
		err        string
	}{
		{spec: "", i: 0, n: 0},
		{spec: "2/5", i: 2, n: 5},
		{spec: "auto/4", env: map[string]string{"JOB_COMPLETION_INDEX": "3"}, i: 3, n: 4},
		{spec: "auto/4", env: map[string]string{"JOB_COMPLETION_INDEX": "1", "SLURM_ARRAY_TASK_ID": "2"}, i: 1, n: 4},
		{spec: "auto/4", env: map[string]string{"SLURM_ARRAY_TASK_ID": "0"}, i: 0, n: 4},
		{spec: "auto/4", base: "1", env: map[string]string{"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_MIN": "4", "SLURM_ARRAY_TASK_COUNT": "1"}, i: 3, n: 4},
		{spec: "auto/4", base: "min", env: map[string]string{"SLURM_ARRAY_TASK_ID": "12", "SLURM_ARRAY_TASK_MIN": "10",
			"SLURM_ARRAY_TASK_MAX": "13", "SLURM_ARRAY_TASK_COUNT": "4"}, i: 2, n: 4},
		{spec: "auto", env: map[string]string{"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "4"}, err: "needs the shard count"},
		{spec: "auto/0", env: map[string]string{"JOB_COMPLETION_INDEX": "0"}, err: "N >= 1"},
		{spec: "auto/x", err: "N >= 1"},
		{spec: "auto/4", err: "neither JOB_COMPLETION_INDEX"},
		{spec: "auto/4", env: map[string]string{"JOB_COMPLETION_INDEX": "4"}, err: "JOB_COMPLETION_INDEX=4 is outside 0..3"},
		{spec: "auto/4", env: map[string]string{"JOB_COMPLETION_INDEX": "-1"}, err: "outside 0..3"},
		{spec: "auto/4", env: map[string]string{"JOB_COMPLETION_INDEX": "two"}, err: "not an integer"},
		{spec: "auto/4", base: "1", env: map[string]string{"JOB_COMPLETION_INDEX": "0"}, err: "--shard-base applies to SLURM_ARRAY_TASK_ID"},
		{spec: "auto/4", env: map[string]string{"SLURM_ARRAY_TASK_ID": "4"}, err: "--shard-base 1"},
		{spec: "auto/4", base: "1", env: map[string]string{"SLURM_ARRAY_TASK_ID": "0"}, err: "gives shard -1"},
		{spec: "auto/4", base: "-1", env: map[string]string{"SLURM_ARRAY_TASK_ID": "0"}, err: "first task ID"},
		{spec: "auto/4", base: "min", env: map[string]string{"SLURM_ARRAY_TASK_ID": "3"}, err: "must be set"},
		// A rerun of tasks 4 and 8 of an array 1-8 with --shard-base min would shift: refused.
		{spec: "auto/8", base: "min", env: map[string]string{"SLURM_ARRAY_TASK_ID": "8", "SLURM_ARRAY_TASK_MIN": "4",
			"SLURM_ARRAY_TASK_MAX": "8", "SLURM_ARRAY_TASK_COUNT": "2"}, err: "--shard-base 4"},
		// So is a stepped array of the right count (0-6:2).
		{spec: "auto/4", base: "min", env: map[string]string{"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_MIN": "0",
			"SLURM_ARRAY_TASK_MAX": "6", "SLURM_ARRAY_TASK_COUNT": "4"}, err: "not the 4 contiguous tasks"},
		{spec: "2/2", err: "want I/N"},
		{spec: "1/2", base: "1", err: "applies to --shard auto/N"},
	} {
		i, n, from, err := resolveShard(c.spec, c.base, func(k string) string { return c.env[k] })
		name := fmt.Sprintf("--shard %q --shard-base %q %v", c.spec, c.base, c.env)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", name, err, c.err)
			}
		case err != nil:
			t.Errorf("%s: %v", name, err)
		case i != c.i || n != c.n:
			t.Errorf("%s: shard %d/%d, want %d/%d", name, i, n, c.i, c.n)
		case strings.HasPrefix(c.spec, "auto") && !strings.Contains(from, "=") || !strings.HasPrefix(c.spec, "auto") && from != "":
			t.Errorf("%s: from %q", name, from)
		}
	}
}

// The exit status tells a batch system what to do: 2 for a configuration no retry can mend
// (flags, scenario, shard, a cell no trial takes; merge's shard files), 3 for a failed trial
// (gbn at half the packets lost exhausts its retries) and with --fail-incomplete for a trial
// stopped at its limit, 1 when the results cannot be written, 0 otherwise; --help says so.
func TestSimExitCodes(t *testing.T) {
	small := []string{"--scenario", "metro", "--schemes", "sr-nack", "--sizes", "256KiB", "--drop-rates", "1e-3", "--trials", "1"}
	for _, c := range []struct {
		env  map[string]string
		args []string
		code int
		msg  string
	}{
		{args: []string{"--scenario", "metro", "--shard", "auto/4"}, code: 2, msg: "neither JOB_COMPLETION_INDEX"},
		{args: []string{"--scenario", "metro", "--shard", "auto"}, code: 2, msg: "needs the shard count"},
		{env: map[string]string{"JOB_COMPLETION_INDEX": "7"}, args: []string{"--scenario", "metro", "--shard", "auto/4"}, code: 2, msg: "outside 0..3"},
		{args: []string{"--scenario", "metro", "--shard-base", "1"}, code: 2, msg: "--shard-base"},
		{args: append(slices.Clone(small), "--mtu", "1000"), code: 2, msg: "MTU 1000"},
		{args: []string{"--scenario", "metro", "--schemes", "sr-rto", "--sizes", "64GiB", "--trials", "1"}, code: 2, msg: "PSN space"},
		// At 500 Mbit/s the trial's limit outlasts the backed-off timeouts (protocol notes R34).
		{args: []string{"--scenario", "metro", "--schemes", "gbn", "--sizes", "256KiB", "--drop-rates", "0.5", "--trials", "1",
			"--rate", "500Mbit"}, code: 3, msg: "retry exceeded"},
		{args: []string{"--scenario", "sdr-casestudy", "--schemes", "gbn", "--sizes", "16MiB", "--drop-rates", "0.05", "--trials", "1"},
			code: 0, msg: "1 trials incomplete"},
		{args: []string{"--scenario", "sdr-casestudy", "--schemes", "gbn", "--sizes", "16MiB", "--drop-rates", "0.05", "--trials", "1",
			"--fail-incomplete"}, code: 3, msg: "1 trials incomplete"},
		{args: append(slices.Clone(small), "--out", "/dev/null/results"), code: 1, msg: "output folder"},
		{args: slices.Clone(small), code: 0, msg: "CSV and figures"},
	} {
		args := c.args
		if !slices.Contains(args, "--out") {
			args = append(args, "--out", t.TempDir())
		}
		var o, e bytes.Buffer
		code := 0
		if cfg, cc, ok := simConfig(args, stdio{out: &o, err: &e}, func(k string) string { return c.env[k] }); !ok {
			code = cc
		} else {
			code = cfg.run(stdio{out: &o, err: &e})
		}
		if code != c.code || !strings.Contains(e.String(), c.msg) {
			t.Errorf("%v %v: exit %d, want %d with %q: %s", c.env, c.args, code, c.code, c.msg, e.String())
		}
	}

	// merge: no files, an unreadable file, a file that is no shard file, an empty folder, a
	// shard missing: 2; a folder of the whole sweep: 0.
	dir := t.TempDir()
	if code, _, e := runSimCLI(t, append(slices.Clone(small), "--out", dir)...); code != 0 {
		t.Fatal(e)
	}
	notShard := filepath.Join(t.TempDir(), "shard-0-of-1.json")
	os.WriteFile(notShard, []byte("not json"), 0o644)
	half := t.TempDir()
	if code, _, e := runSimCLI(t, "--scenario", "metro", "--schemes", "sr-nack,tcaeth", "--sizes", "256KiB", "--drop-rates", "1e-3",
		"--trials", "1", "--shard", "0/2", "--out", half); code != 0 {
		t.Fatal(e)
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "name the shard files"},
		{[]string{filepath.Join(dir, "shard-9-of-9.json")}, 2, "no such file"},
		{[]string{notShard}, 2, "invalid character"},
		{[]string{t.TempDir()}, 2, "no shard-*-of-*.json"},
		{[]string{half}, 2, "shards [1] of 2 missing"},
		{[]string{dir}, 0, "CSV and figures"},
		{[]string{"--bogus", dir}, 2, "bogus"},
	} {
		var o, e bytes.Buffer
		code := run(append([]string{"sim", "merge", "--out", t.TempDir()}, c.args...), stdio{out: &o, err: &e})
		if code != c.code || !strings.Contains(e.String(), c.msg) {
			t.Errorf("merge %v: exit %d, want %d with %q: %s", c.args, code, c.code, c.msg, e.String())
		}
	}

	for _, args := range [][]string{{"sim", "--help"}, {"sim", "merge", "--help"}} {
		var o, e bytes.Buffer
		if code := run(args, stdio{out: &o, err: &e}); code != 0 {
			t.Fatalf("%v: exit %d", args, code)
		}
		for _, want := range []string{"Exit status", "2 ", "3 ", "do not retry"} {
			if !strings.Contains(e.String(), want) {
				t.Errorf("%v lacks %q:\n%s", args, want, e.String())
			}
		}
	}
}

// cremProcess runs the test binary as crem (TestMain) with env added to an environment free
// of batch-system variables, and returns its exit code, standard output and error.
func cremProcess(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "JOB_COMPLETION_INDEX=") && !strings.HasPrefix(kv, "SLURM_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, "CREM_TEST_AS_CREM=1"), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, o.String(), e.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), o.String(), e.String()
	default: // no process (the caller may be another goroutine: no t.Fatal here)
		return -1, o.String(), fmt.Sprintf("%v: %v", args, err)
	}
}

// n shards run as separate processes, as a batch system starts them (all at once, one results
// folder shared like a volume), each taking its index from the batch system's variable;
// `crem sim merge` over the folder prints the JSON of one unsharded run of the sweep byte for
// byte, and writes the same CSV. Kubernetes (JOB_COMPLETION_INDEX 0..n-1), a Slurm array
// 0..n-1, and a Slurm array 1..n with --shard-base min; a rerun of one task of the 1-based array
// (--shard-base 1) writes the same shard file again.
func TestSimShardProcessesMergeS14(t *testing.T) {
	const n = 3
	sweep := []string{"sim", "--scenario", "sdr-casestudy", "--schemes", "sr-nack,tcaeth", "--sizes", "256KiB",
		"--drop-rates", "1e-3,1e-2", "--trials", "3", "--seed", "5", "--json"}
	wholeDir := t.TempDir()
	code, whole, errOut := cremProcess(t, nil, append(slices.Clone(sweep), "--out", wholeDir)...)
	if code != 0 || !strings.HasPrefix(whole, "[") {
		t.Fatalf("unsharded: exit %d: %s", code, errOut)
	}
	csvs := []string{"results.csv", "completions.csv", "km.csv"}
	wholeCSV := map[string][]byte{}
	for _, f := range csvs {
		b, err := os.ReadFile(filepath.Join(wholeDir, f))
		if err != nil {
			t.Fatal(err)
		}
		wholeCSV[f] = b
	}
	for _, c := range []struct {
		name  string
		extra []string
		env   func(i int) []string
	}{
		{"kubernetes", nil, func(i int) []string { return []string{fmt.Sprintf("JOB_COMPLETION_INDEX=%d", i)} }},
		{"slurm", nil, func(i int) []string {
			return []string{fmt.Sprintf("SLURM_ARRAY_TASK_ID=%d", i), "SLURM_ARRAY_TASK_MIN=0",
				fmt.Sprintf("SLURM_ARRAY_TASK_MAX=%d", n-1), fmt.Sprintf("SLURM_ARRAY_TASK_COUNT=%d", n)}
		}},
		{"slurm-from-1", []string{"--shard-base", "min"}, func(i int) []string {
			return []string{fmt.Sprintf("SLURM_ARRAY_TASK_ID=%d", i+1), "SLURM_ARRAY_TASK_MIN=1",
				fmt.Sprintf("SLURM_ARRAY_TASK_MAX=%d", n), fmt.Sprintf("SLURM_ARRAY_TASK_COUNT=%d", n)}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			results := t.TempDir()
			args := append(append(slices.Clone(sweep), "--shard", fmt.Sprintf("auto/%d", n), "--out", results), c.extra...)
			type done struct {
				code      int
				out, errs string
			}
			ch := make([]chan done, n)
			for i := range n {
				ch[i] = make(chan done, 1)
				go func() {
					code, out, errs := cremProcess(t, c.env(i), args...)
					ch[i] <- done{code, out, errs}
				}()
			}
			for i := range n {
				d := <-ch[i]
				if d.code != 0 || !strings.Contains(d.errs, fmt.Sprintf("shard %d of %d", i, n)) {
					t.Fatalf("shard %d: exit %d: %s", i, d.code, d.errs)
				}
			}
			ents, _ := os.ReadDir(results)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			want := []string{"shard-0-of-3", "shard-0-of-3.json", "shard-1-of-3", "shard-1-of-3.json", "shard-2-of-3", "shard-2-of-3.json"}
			if !slices.Equal(names, want) {
				t.Fatalf("results folder holds %q, want %q", names, want)
			}
			mergedDir := t.TempDir()
			code, merged, errOut := cremProcess(t, nil, "sim", "merge", "--json", "--out", mergedDir, results)
			if code != 0 {
				t.Fatalf("merge: exit %d: %s", code, errOut)
			}
			if merged != whole {
				t.Fatalf("merged:\n%s\nunsharded:\n%s", merged, whole)
			}
			for _, f := range csvs {
				csv, err := os.ReadFile(filepath.Join(mergedDir, f))
				if err != nil || !bytes.Equal(csv, wholeCSV[f]) {
					t.Fatalf("merged %s (%v):\n%s\nunsharded:\n%s", f, err, csv, wholeCSV[f])
				}
			}
			if c.name != "slurm-from-1" {
				return
			}
			// sbatch --array=2 of the same script, told its array starts at 1.
			before, _ := os.ReadFile(filepath.Join(results, "shard-1-of-3.json"))
			rerun := append(append(slices.Clone(sweep), "--shard", "auto/3", "--out", results), "--shard-base", "1")
			code, _, errOut = cremProcess(t, []string{"SLURM_ARRAY_TASK_ID=2", "SLURM_ARRAY_TASK_MIN=2",
				"SLURM_ARRAY_TASK_MAX=2", "SLURM_ARRAY_TASK_COUNT=1"}, rerun...)
			after, _ := os.ReadFile(filepath.Join(results, "shard-1-of-3.json"))
			if code != 0 || len(before) == 0 || !bytes.Equal(before, after) {
				t.Fatalf("rerun of task 2: exit %d, shard file changed %v: %s", code, !bytes.Equal(before, after), errOut)
			}
		})
	}
}

// The examples of deploy/cluster run a command line this crem takes: as shard 0 of their N
// under the batch system's variable, and the merge over the folder the shards write.
func TestSimClusterExamplesParse(t *testing.T) {
	yaml, err := os.ReadFile("../../deploy/cluster/crem-sim-indexed-job.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sbatch, err := os.ReadFile("../../deploy/cluster/crem-sim-array.sbatch")
	if err != nil {
		t.Fatal(err)
	}
	var k8s []string
	if m := regexp.MustCompile(`(?m)^\s+args: (\[.*\])$`).FindSubmatch(yaml); m == nil {
		t.Fatal("no args: [...] in the Job")
	} else if err := json.Unmarshal(m[1], &k8s); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^exec crem (sim .*)$`).FindSubmatch(sbatch)
	if m == nil {
		t.Fatal("no crem sim line in the sbatch script")
	}
	slurm := strings.Fields(strings.ReplaceAll(string(m[1]), `"$results"`, t.TempDir()))
	for _, c := range []struct {
		args []string
		env  map[string]string
	}{
		{k8s, map[string]string{"JOB_COMPLETION_INDEX": "0"}},
		{slurm, map[string]string{"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_MIN": "0"}},
	} {
		if c.args[0] != "sim" {
			t.Fatalf("%q does not run crem sim", c.args)
		}
		var e bytes.Buffer
		cfg, code, ok := simConfig(c.args[1:], stdio{out: &e, err: &e}, func(k string) string { return c.env[k] })
		if !ok {
			t.Fatalf("%q: exit %d: %s", c.args, code, e.String())
		}
		if n := strings.TrimPrefix(c.args[slices.Index(c.args, "--shard")+1], "auto/"); cfg.sw.Shard != 0 ||
			strconv.Itoa(cfg.sw.Shards) != n || cfg.sw.Shards < 2 || len(cfg.sw.ShardCells()) == 0 {
			t.Fatalf("%q: shard %d of %d, %d cells", c.args, cfg.sw.Shard, cfg.sw.Shards, len(cfg.sw.ShardCells()))
		}
	}
}

// --compare-best runs crem+tcaeth and the alternatives unless --schemes says otherwise, and prints
// after the table each cell against the best alternative and the count above 1.02x (P10); with
// --json the comparison goes to standard error and standard output stays one JSON array.
func TestSimCompareBest(t *testing.T) {
	args := []string{"--scenario", "sdr-casestudy", "--rate", "500Mbit", "--rtt", "20ms", "--sizes", "256KiB",
		"--drop-rates", "1e-2", "--trials", "2", "--compare-best"}
	code, out, errs := runSimCLI(t, append(args, "--out", t.TempDir())...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, s := range []string{"crem-draft+tcaeth", "sr-rto", "sr-nack", " ec ", "best-mean-scheme", "compare-best: 0 of 1 cells above 1.02x"} {
		if !strings.Contains(out, s) {
			t.Fatalf("output lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, " gbn ") {
		t.Fatalf("gbn ran without being asked:\n%s", out)
	}
	code, out, errs = runSimCLI(t, append(args, "--json", "--out", t.TempDir())...)
	if code != 0 || !strings.HasPrefix(strings.TrimSpace(out), "[") || !strings.Contains(errs, "compare-best: ") {
		t.Fatalf("--json: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// The JSON of crem sim records every value of the scenario the command line overrode, flag name
// to value, in each cell's overrides object; a run with none has no overrides.
func TestSimJSONRecordsOverrides(t *testing.T) {
	code, out, errOut := runSimCLI(t, "--scenario", "metro", "--schemes", "sr-nack", "--sizes", "256KiB",
		"--drop-rates", "1e-2", "--trials", "2", "--rate", "10Gbit", "--rtt", "2ms", "--mtu", "1024",
		"--loss", "bursty", "--burst-len", "3", "--policy-burst", "2", "--seed", "7", "--json", "--out", t.TempDir())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var cells []map[string]any
	if err := json.Unmarshal([]byte(out), &cells); err != nil || len(cells) != 1 {
		t.Fatalf("%v: %s", err, out)
	}
	want := map[string]any{"schemes": "sr-nack", "sizes": "256KiB", "drop-rates": "0.01", "trials": "2",
		"rate": "10Gbit/s", "rtt": "2ms", "mtu": "1024", "loss": "bursty", "burst-len": "3", "policy-burst": "2"}
	if got, _ := cells[0]["overrides"].(map[string]any); !reflect.DeepEqual(got, want) {
		t.Fatalf("overrides %v, want %v", cells[0]["overrides"], want)
	}
	code, out, errOut = runSimCLI(t, "--scenario", "metro", "--json", "--out", t.TempDir(), "--shard", "0/400")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "overrides") {
		t.Fatalf("a run without overrides has them: %s", out)
	}
}
