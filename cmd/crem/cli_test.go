package main

import (
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/crem-project/crem/units"
)

// flagSets are every flag set of crem: the words before the flags, the name in its messages.
var flagSets = []struct{ args []string }{
	{[]string{"demo"}},
	{[]string{"fec", "encode"}},
	{[]string{"wire", "decode"}},
	{[]string{"pcap"}},
	{[]string{"pcap", "verify"}},
	{[]string{"pcap", "stats"}},
	{[]string{"netem"}},
	{[]string{"perf", "serve"}},
	{[]string{"perf", "write"}},
	{[]string{"perf", "send"}},
	{[]string{"perf", "read"}},
	{[]string{"perf", "lat", "write"}},
	{[]string{"sim"}},
	{[]string{"sim", "merge"}},
	{[]string{"gateway"}},
	{[]string{"conform"}},
	{[]string{"lab"}},
	{[]string{"version"}},
}

// A mistyped flag prints one line naming it and the hint to the command's help, not the whole
// usage, and exits 2, for every subcommand.
func TestBadFlagPrintsOneErrorAndHint(t *testing.T) {
	for _, fs := range flagSets {
		name := strings.Join(fs.args, " ")
		if fs.args[0] == "perf" && fs.args[1] == "lat" {
			name = "perf lat write"
		}
		t.Run(name, func(t *testing.T) {
			code, out, errs := runCmd(append(fs.args, "--no-such-flag")...)
			want := "crem " + name + ": flag provided but not defined: -no-such-flag\nRun 'crem " + name + " -h' for usage.\n"
			if code != 2 || out != "" || errs != want {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2, nothing, %q", code, out, errs, want)
			}
		})
	}
	t.Run("unknown command", func(t *testing.T) {
		code, _, errs := runCmd("sims")
		if code != 2 || strings.Count(errs, "\n") != 1 {
			t.Fatalf("exit %d, stderr %q", code, errs)
		}
	})
}

// A value a flag cannot take names the flag as typed (--rtt, -s) and the value, says why in
// words and gives an example.
func TestBadFlagValueNamesFlagValueAndExample(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"lab", "--rtt", "20"}, `crem lab: invalid value "20" for flag --rtt: a duration needs a unit, e.g. --rtt 20ms`},
		{[]string{"sim", "--scenario", "metro", "--rtt", "20"}, `crem sim: invalid value "20" for flag --rtt: a duration needs a unit, e.g. --rtt 20ms`},
		{[]string{"netem", "--delay", "5"}, `crem netem: invalid value "5" for flag --delay: a duration needs a unit, e.g. --delay 5ms`},
		{[]string{"perf", "write", "--rtt", "x"}, `crem perf write: invalid value "x" for flag --rtt: want a duration with a unit`},
		{[]string{"perf", "write", "-s", "4x"}, `crem perf write: invalid value "4x" for flag -s: unknown unit "x"`},
		{[]string{"perf", "write", "--rate", "4MB"}, `crem perf write: invalid value "4MB" for flag --rate: B means bytes`},
		{[]string{"lab", "--rate", "fast"}, `e.g. --rate 500Mbit`},
		{[]string{"lab", "--size", "big"}, `e.g. --size 4MiB`},
		{[]string{"sim", "--trials", "many"}, `crem sim: invalid value "many" for flag --trials: want a whole number`},
		{[]string{"sim", "--drop-rates", "1e-4,2"}, `crem sim: invalid value "1e-4,2" for flag --drop-rates: above 1, e.g. --drop-rates 0.01`},
		{[]string{"lab", "--json=maybe"}, `crem lab: invalid value "maybe" for flag --json: want true or false, as in --json=false`},
		{[]string{"conform", "--timeout", "2"}, `crem conform: invalid value "2" for flag --timeout: a duration needs a unit, e.g. --timeout 2ms`},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, _, errs := runCmd(c.args...)
			if code != 2 || !strings.Contains(errs, c.want) || strings.Contains(errs, "parse error") ||
				!strings.HasSuffix(errs, " -h' for usage.\n") || strings.Count(errs, "\n") != 2 {
				t.Fatalf("exit %d, stderr %q; want 2 and %q, then the hint", code, errs, c.want)
			}
		})
	}
}

// crem help CMD shows what crem CMD -h shows, the command's own help, and exits 0.
func TestHelpCommandShowsCommandHelp(t *testing.T) {
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runCmd("help", c.name)
			hcode, hout, herrs := runCmd(c.name, "-h")
			if code != 0 || hcode != 0 {
				t.Fatalf("crem help %s exits %d, crem %s -h exits %d", c.name, code, c.name, hcode)
			}
			if out+errs != hout+herrs {
				t.Fatalf("crem help %s and crem %s -h differ:\n%s\n---\n%s", c.name, c.name, out+errs, hout+herrs)
			}
			if !strings.Contains(out+errs, "Usage: crem "+c.name) || strings.Contains(out+errs, "Commands:") {
				t.Fatalf("crem help %s does not show the command's help:\n%s", c.name, out+errs)
			}
		})
	}
	if code, out, errs := runCmd("help", "perf", "write"); code != 0 || !strings.Contains(out+errs, "Usage: crem perf write") {
		t.Fatalf("crem help perf write: exit %d\n%s", code, out+errs)
	}
	if code, _, errs := runCmd("help", "nosuch"); code != 2 || !strings.Contains(errs, `unknown command "nosuch"`) {
		t.Fatalf("crem help nosuch: exit %d, %q", code, errs)
	}
	if code, out, _ := runCmd("help"); code != 0 || !strings.Contains(out, "Commands:") {
		t.Fatalf("crem help: exit %d\n%s", code, out)
	}
}

// crem --version and crem version print the same line: crem, the version, the Go version.
func TestVersionFlagAndCommandAgree(t *testing.T) {
	code, out, _ := runCmd("version")
	fcode, fout, _ := runCmd("--version")
	if code != 0 || fcode != 0 || out != fout {
		t.Fatalf("crem version: %d %q; crem --version: %d %q", code, out, fcode, fout)
	}
	if !strings.HasPrefix(out, "crem ") || !strings.HasSuffix(out, " "+runtime.Version()+"\n") || strings.Count(out, "\n") != 1 {
		t.Fatalf("crem version prints %q; want one line crem VERSION %s", out, runtime.Version())
	}
}

// The version comes from the build information, "dev" without it.
func TestVersionLineFromBuildInfo(t *testing.T) {
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	if got := versionLine("dev", none); got != "crem dev "+runtime.Version() {
		t.Fatalf("no build information: %q", got)
	}
	tagged := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "v1.2.3"}}, true
	}
	if got := versionLine("dev", tagged); got != "crem v1.2.3 go1.99" {
		t.Fatalf("module version: %q", got)
	}
	if got := versionLine("v9", tagged); got != "crem v9 go1.99" {
		t.Fatalf("-ldflags version: %q", got)
	}
	checkout := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}, true
	}
	if got := versionLine("dev", checkout); got != "crem dev-0123456789ab+dirty go1.99" {
		t.Fatalf("git checkout: %q", got)
	}
}

// A rate under 1 Mbit/s (a rate typed without its unit) and a run predicted to take over an
// hour are warned of before the run, naming the cause and the fix.
func TestSlowRunWarnsFirst(t *testing.T) {
	cases := []struct {
		name string
		plan runPlan
		want []string
	}{
		{"bare rate", perfPlan("perf write", 100, true, true, false, false, 4096, 1, 1, false, 0, 0, 0, 0),
			[]string{"--rate 100bit/s is under 1Mbit/s", "e.g. --rate 100Mbit"}},
		{"bare rate, long", perfPlan("perf write", 100, true, true, false, false, 4096, 1000, 1, false, 0, 0, 0, 0),
			[]string{"under 1Mbit/s", "this run takes at least", "4KiB x 1000 messages at 100bit/s", "raise --rate or lower --size or --iters"}},
		{"long at the default rate", perfPlan("perf write", 0, false, true, false, false, 1<<30, 1000, 1, false, 0, 0, 0, 0),
			[]string{"this run takes at least 11.9 hours"}},
		{"round trips of the latency test", perfPlan("perf lat write", 1e9, true, true, false, true, 2, 400000, 1, false, 0, 0, 10e6, 0),
			[]string{"this run takes at least 1.1 hours"}},
		{"lab", labPlan(100, 4<<20, 16, 0, false, 0, 20e6),
			[]string{"crem lab: warning: --rate 100bit/s is under 1Mbit/s", "4 configurations of 16 x 4MiB", "lower --size or --messages"}},
		{"sim", simPlanFor(t, "1MiB", 100), []string{"crem sim: warning: --rate 100bit/s", "a message of 1MiB", "lower --sizes"}},
		{"perf fine", perfPlan("perf write", 0, false, true, false, false, 4<<20, 1000, 1, false, 0, 0, 0, 0), nil},
		{"perf for a duration", perfPlan("perf write", 2e6, true, true, false, false, 1<<30, 1000, 1, false, 0, 5e9, 0, 0), nil},
		{"lab fine", labPlan(500e6, 4<<20, 16, 0, true, 0, 20e6), nil},
		{"sim fine", simPlanFor(t, "1MiB", 10e9), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := strings.Join(c.plan.warnings(), "\n")
			if c.want == nil && w != "" {
				t.Fatalf("warned: %s", w)
			}
			for _, want := range c.want {
				if !strings.Contains(w, want) {
					t.Fatalf("warnings %q lack %q", w, want)
				}
			}
		})
	}
	// The commands print them first, on standard error.
	code, _, errs := runCmd("lab", "--rate", "100", "--json")
	if code != 2 || !strings.HasPrefix(errs, "crem lab: warning: --rate 100bit/s is under 1Mbit/s") {
		t.Fatalf("crem lab --rate 100: exit %d, %q", code, errs)
	}
	code, _, errs = runCmd("perf", "write", "--loopback", "--rate", "100", "--size", "8GiB")
	if code != 2 || !strings.Contains(errs, "--size 8GiB") {
		t.Fatalf("crem perf --rate 100 --size 8GiB: exit %d, %q", code, errs)
	}
}

func simPlanFor(t *testing.T, size string, rate int64) runPlan {
	t.Helper()
	cfg, code, ok := simConfig([]string{"--scenario", "metro", "--sizes", size, "--rate", units.FormatRate(rate)},
		stdio{in: strings.NewReader(""), out: io.Discard, err: io.Discard}, func(string) string { return "" })
	if !ok {
		t.Fatalf("simConfig: exit %d", code)
	}
	return simPlan(cfg.sw.Scenario)
}

// A size or range crem perf or crem lab cannot move exits 2 with one line naming the flag, and
// prints no JSON object of zeros.
func TestSizeOutOfRangeExitsTwoWithoutJSON(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"perf", "write", "--loopback", "-s", "4GiB", "--json"}, "crem perf write: --size 4GiB: want 2 octets to 1GiB"},
		{[]string{"perf", "read", "--loopback", "--size", "0", "--json"}, "positive --size"},
		{[]string{"perf", "write", "--loopback", "-a", "--max-size", "2GiB", "--json"}, "--max-size"},
		{[]string{"perf", "write", "--loopback", "--qps", "0", "--json"}, "--qps 0"},
		{[]string{"lab", "--size", "2GiB", "--json"}, "crem lab: --size 2GiB"},
		{[]string{"lab", "--messages", "-1", "--json"}, "--messages"},
		{[]string{"sim", "--scenario", "metro", "--sizes", "0", "--json"}, "crem sim:"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, out, errs := runCmd(c.args...)
			if code != 2 || out != "" || !strings.Contains(errs, c.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2, nothing, %q", code, out, errs, c.want)
			}
		})
	}
}

// Flags before crem perf's operation are a usage error that shows the command as it should be.
func TestPerfFlagsBeforeOperationShowTheOrder(t *testing.T) {
	code, out, errs := runCmd("perf", "--loopback", "-s", "4KiB")
	if code != 2 || out != "" || !strings.Contains(errs, "as in crem perf write --loopback -s 4KiB") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
