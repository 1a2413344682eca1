package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
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
	if code == 0 {
		t.Fatal("merge of one shard of two succeeded")
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
