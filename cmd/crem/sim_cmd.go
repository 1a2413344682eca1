package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/crem-project/crem/internal/harness/sim"
	"github.com/crem-project/crem/units"
)

const simDescription = `Runs the project's own engines (the rc queue pairs; the CREM engines) in a discrete-event
simulation on a virtual clock, over a sweep of schemes, drop rates and message sizes, on all
cores, deterministically for a seed.

Scenarios: sdr-casestudy (400 Gbit/s, 25 ms RTT, MTU 4096), metro (100 Gbit/s, 1 ms),
bursty (Gilbert-Elliott loss, mean burst 4), congested (loss from a shared queue with CE
marks), reporter (the sdr-casestudy path with bursts of 8 packets, longer than the repair the
policy picks, and by default the schemes crem+tcaeth and crem+tcaeth+reporter). Schemes: gbn,
sr-rto, sr-nack, tcaeth, ec, crem-draft+tcaeth, crem+tcaeth, crem, crem+tcaeth+reporter (a
path reporter in the middle of each link; the CSF sends extra repair for the drops it reports).
--schemes defaults to the scenario's list (every scheme, except for reporter).

For the CREM schemes, recovery_mean_s and recovery_p99_s (and the table's recovery columns) are
the time from a block's first lost packet (its transmission) until every lost packet of the
block has reached the responder, over the blocks that lost more source packets than their
ordinary repair; recovery_blocks counts them. They are absent when no block did.

CSV (results.csv, completions.csv, km.csv), the shard file and the figures (PNG and SVG) go
into --out, a new temporary folder when it is not given, never the working directory. The
summary table (times as multiples of the lossless ideal) goes to standard output; with
--json standard output carries only a JSON array, one object per (scheme, drop rate, message
size). Standard error gets the number of trials, the wall time and the run's peak memory as the
proportional set size (Linux), which counts a page mapped many times over once, where the
resident set size (ps, /usr/bin/time) counts it once per mapping.

--loss, --burst-len and --policy-burst override the loss process: --loss bursty on any scenario
takes bursts of 4 packets unless --burst-len says otherwise, and --policy-burst sets the mean
burst the project's policy assumes (by default the path's; the sender does not measure it).

SIGINT or SIGTERM cuts the sweep short: the table or JSON has each cell over the trials that
completed, marked interrupted (trials_planned, trials_cancelled; "not run" for a cell with
none), nothing is written to --out, and the exit status is 130 / 143.

--shard I/N runs the cells whose index is I modulo N (0 <= I < N); each shard writes
shard-I-of-N.json into its --out (written whole or not at all, so shards may share one folder)
and, when N > 1, its own CSV and figures into --out/shard-I-of-N/;
` + "`crem sim merge [--out DIR] [--json] FILES|DIRS...`" + ` joins the shard files (a folder stands for
the shard-*-of-*.json files in it).

--shard auto/N takes I from the batch system: JOB_COMPLETION_INDEX (a Kubernetes Indexed Job,
0-based), else SLURM_ARRAY_TASK_ID (a Slurm job array, --array=0-(N-1)). An array numbered from
B: --shard-base B (I = SLURM_ARRAY_TASK_ID - B; a rerun of some tasks, sbatch --array=4,9, keeps
its numbers), or --shard-base min (I = SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN, allowed only
when the array is exactly N contiguous tasks, for a rerun of some tasks would shift). N is never
guessed: a pod does not see its Job's completions, and a rerun array has a count of its own.

Exit status (for a batch system's retry policy):
  0  the sweep ran; its results are written
  1  the results could not be written (the output folder): a retry may succeed
  2  bad configuration: flags, scenario, shard (auto without the index, or out of range), a cell
     no trial can take, a trial above the memory limit; do not retry
  3  a trial failed (an engine error, a WRITE completed with an error status, the message's bytes
     differ at the responder), or with --fail-incomplete a trial stopped at its limit; the sweep
     is deterministic, so a retry of the shard fails the same way

Example:
  crem sim --scenario sdr-casestudy --schemes sr-rto,tcaeth --sizes 1MiB,16MiB --drop-rates 1e-4,1e-2 --trials 30
  crem sim --scenario sdr-casestudy --shard auto/16 --out /results    (one task of 16; deploy/cluster/)`

// Exit codes of crem sim and crem sim merge.
const (
	simExitIO     = 1 // the results could not be written
	simExitConfig = 2 // bad configuration: do not retry
	simExitTrial  = 3 // a trial failed (or was incomplete, with --fail-incomplete)
)

// simRun is a parsed crem sim command line.
type simRun struct {
	sw             *sim.Sweep
	out            string
	asJSON         bool
	failIncomplete bool
	shardFrom      string // where --shard auto took the index, for the log
	compareBest    bool
}

func runSim(args []string, s stdio) int {
	if len(args) > 0 && args[0] == "merge" {
		return runSimMerge(args[1:], s)
	}
	cfg, code, ok := simConfig(args, s, os.Getenv)
	if !ok {
		return code
	}
	return cfg.run(s)
}

// simConfig parses a crem sim command line; getenv reads the batch system's variables for
// --shard auto/N. ok is false when the caller must exit with code (0 after --help).
func simConfig(args []string, s stdio, getenv func(string) string) (cfg *simRun, code int, ok bool) {
	fs := newFlagSet("sim", "crem sim --scenario NAME [flags] | crem sim merge [--out DIR] [--json] FILES|DIRS...", simDescription, s)
	scenario := fs.String("scenario", "", "scenario preset: sdr-casestudy, metro, bursty, congested or reporter")
	schemes := fs.String("schemes", "", "comma-separated schemes, or all; default the scenario's (all, or for\nreporter crem+tcaeth,crem+tcaeth+reporter)")
	var sizes units.Sizes
	fs.Var(&sizes, "sizes", "message sizes (1MiB,16MiB,8GiB); default the scenario's")
	var drops units.Fractions
	fs.Var(&drops, "drop-rates", "drop rates (1e-4,1e-2); default the scenario's")
	var rate units.Rate
	fs.Var(&rate, "rate", "link rate (400Gbit); default the scenario's")
	rtt := fs.String("rtt", "", "round-trip time, a Go duration (25ms); default the scenario's")
	mtu := fs.Int("mtu", 0, "RDMA MTU; default the scenario's")
	loss := fs.String("loss", "", "loss process: bernoulli, bursty (Gilbert-Elliott) or queue (overflow of a\nshared queue with CE marks); default the scenario's")
	burstLen := fs.Float64("burst-len", 0, "mean loss burst in packets, for bursty loss; default the scenario's (4)")
	policyBurst := fs.Float64("policy-burst", 0, "mean burst the project's policy (crem+tcaeth, crem) assumes; default the\npath's (1 for independent loss)")
	trials := fs.Int("trials", 0, "trials per cell; default the scenario's (30)")
	seed := fs.Uint64("seed", 1, "seed of the sweep")
	out := fs.String("out", "", "folder for CSV, figures and the shard file (default: a new temporary folder)")
	asJSON := fs.Bool("json", false, "print only a JSON array of the cells")
	shard := fs.String("shard", "", "run the slice I/N of the cells (0-based I), or auto/N: I from JOB_COMPLETION_INDEX\nor SLURM_ARRAY_TASK_ID")
	shardBase := fs.String("shard-base", "", "with --shard auto/N: the first SLURM_ARRAY_TASK_ID of the array (a number, or min\nfor SLURM_ARRAY_TASK_MIN); default 0")
	failIncomplete := fs.Bool("fail-incomplete", false, "exit 3 when a trial stopped at its limit (written as incomplete, a lower bound)")
	compareBest := fs.Bool("compare-best", false, "after the table, print crem+tcaeth against the best of tcaeth, ec, sr-rto, sr-nack and\ncrem-draft+tcaeth per cell and the cells where its mean or p99 is above 1.02x of it (to standard\nerror with --json); without --schemes runs only those six schemes")
	if code, done := parseFlags(fs, args); done {
		return nil, code, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(s.err, "crem sim: unexpected argument %q\n", fs.Arg(0))
		return nil, simExitConfig, false
	}
	if *scenario == "" {
		fmt.Fprintln(s.err, "crem sim: --scenario is required (sdr-casestudy, metro, bursty, congested, reporter)")
		return nil, simExitConfig, false
	}
	sc, err := sim.LookupScenario(*scenario)
	if err != nil {
		fmt.Fprintf(s.err, "crem sim: %v\n", err)
		return nil, simExitConfig, false
	}
	burstSet := false
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "sizes":
			sc.Sizes, sc.Extra = sizes, nil
		case "drop-rates":
			sc.DropRates, sc.Extra = drops, nil
		case "rate":
			sc.Rate = int64(rate)
		case "mtu":
			sc.MTU = *mtu
		case "trials":
			sc.Trials = *trials
		case "loss":
			sc.Loss = sim.LossKind(*loss)
		case "burst-len":
			sc.BurstLen, burstSet = *burstLen, true
		case "policy-burst":
			sc.PolicyBurst = *policyBurst
		}
	})
	switch {
	case sc.Loss != sim.LossBursty && !burstSet:
		sc.BurstLen = 0 // bursty's own burst, when --loss leaves it
	case sc.Loss == sim.LossBursty && sc.BurstLen == 0:
		sc.BurstLen = 4
	}
	if *rtt != "" {
		d, err := time.ParseDuration(*rtt)
		if err != nil || d <= 0 {
			reason, example := durationReason(*rtt)
			if err == nil {
				reason, example = "want a positive round trip", "25ms"
			}
			fmt.Fprintf(s.err, "crem sim: invalid value %q for flag --rtt: %s, e.g. --rtt %s\nRun 'crem sim -h' for usage.\n", *rtt, reason, example)
			return nil, simExitConfig, false
		}
		sc.RTT = d
	}
	sw := &sim.Sweep{Scenario: sc, Seed: *seed, Overrides: simOverrides(fs)}
	if *schemes == "" && *compareBest {
		sw.Schemes, err = sim.ParseSchemes(strings.Join(append([]string{sim.CompareScheme}, sim.CompareAgainst...), ","))
	} else if *schemes == "" {
		sw.Schemes, err = sim.SchemesOf(sc)
	} else {
		sw.Schemes, err = sim.ParseSchemes(*schemes)
	}
	if err != nil {
		fmt.Fprintf(s.err, "crem sim: %v\n", err)
		return nil, simExitConfig, false
	}
	i, n, from, err := resolveShard(*shard, *shardBase, getenv)
	if err != nil {
		fmt.Fprintf(s.err, "crem sim: %v\n", err)
		return nil, simExitConfig, false
	}
	sw.Shard, sw.Shards = i, n
	if err := checkScenario(sc); err != nil {
		fmt.Fprintf(s.err, "crem sim: %v\n", err)
		return nil, simExitConfig, false
	}
	if err := sw.Check(); err != nil {
		fmt.Fprintf(s.err, "crem sim: %v\n", err)
		return nil, simExitConfig, false
	}
	if _, given := sw.Overrides["rate"]; given {
		simPlan(sc).warn(s.err)
	}
	return &simRun{sw: sw, out: *out, asJSON: *asJSON, failIncomplete: *failIncomplete, shardFrom: from, compareBest: *compareBest}, 0, true
}

// simPlan is the longest trial of a sweep in simulated time, for the warnings before it starts:
// its largest message at the path's rate and a few round trips. The simulation's wall time grows
// with the simulated time.
func simPlan(sc sim.Scenario) runPlan {
	var largest int64
	for _, n := range sc.Sizes {
		largest = max(largest, n)
	}
	for _, e := range sc.Extra {
		largest = max(largest, e.Size)
	}
	return runPlan{name: "sim", rate: sc.Rate, rateFlag: "--rate", bytes: float64(largest), rtts: 4, rtt: sc.RTT,
		what: "a message of " + units.FormatSize(largest), fix: "--sizes"}
}

// simScenarioFlags are the flags that override a value of the scenario.
var simScenarioFlags = []string{"schemes", "sizes", "drop-rates", "rate", "rtt", "mtu", "loss", "burst-len", "policy-burst", "trials"}

// simOverrides returns the scenario's values the command line overrides, flag name to value in
// the flag's canonical form (nil when none).
func simOverrides(fs *flag.FlagSet) map[string]string {
	var o map[string]string
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(simScenarioFlags, f.Name) {
			if o == nil {
				o = map[string]string{}
			}
			o[f.Name] = f.Value.String()
		}
	})
	return o
}

// run runs the sweep and writes its results.
func (cfg *simRun) run(s stdio) int {
	sw := cfg.sw
	if cfg.shardFrom != "" {
		fmt.Fprintf(s.err, "crem sim: shard %d of %d (%s)\n", sw.Shard, sw.Shards, cfg.shardFrom)
	}
	dir, err := outDir(cfg.out)
	if err != nil {
		fmt.Fprintf(s.err, "crem sim: %v\n", err)
		return simExitIO
	}
	if f, ok := s.err.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		bar := progressbar.NewOptions(-1, progressbar.OptionSetWriter(f), progressbar.OptionSetDescription("crem sim"),
			progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
		sw.Progress = func(done, total int) {
			bar.ChangeMax(total)
			bar.Set(done)
		}
		defer bar.Finish()
	}
	ctx, sig, stop := signalContext()
	defer stop()
	fmt.Fprintf(s.err, "crem sim: running %d cells (SIGINT or SIGTERM stops it and prints what completed)\n", len(sw.ShardCells()))
	meter, start := startMemoryMeter(200*time.Millisecond), time.Now()
	res, err := sw.RunContext(ctx)
	if meter != nil {
		peak := meter.Stop()
		if err == nil && sig.received() == nil {
			fmt.Fprintf(s.err, "crem sim: %d trials in %.1f s, peak memory %d MiB (proportional set size)\n",
				trialCount(res), time.Since(start).Seconds(), peak>>20)
		}
	}
	if err != nil {
		fmt.Fprintf(s.err, "crem sim: %v\n", err)
		if te := (*sim.TrialError)(nil); errors.As(err, &te) {
			fmt.Fprintln(s.err, "crem sim: a trial failed (exit 3); the sweep is deterministic: the shard fails the same way again")
			return simExitTrial
		}
		return simExitConfig // Check's, which simConfig ran already
	}
	if code := sig.exitCode(); code != 0 && slices.ContainsFunc(res, func(r sim.Result) bool { return r.Interrupted }) {
		return simInterrupted(res, cfg.asJSON, sig.name(), code, s)
	}
	name := sim.ShardFileName(sw.Shard, sw.Shards)
	if err := writeShardAtomic(dir, name, sw, res); err != nil {
		fmt.Fprintf(s.err, "crem sim: %v\n", err)
		return simExitIO
	}
	if sw.Shards > 1 {
		dir = filepath.Join(dir, strings.TrimSuffix(name, ".json"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fmt.Fprintf(s.err, "crem sim: output folder: %v\n", err)
			return simExitIO
		}
	}
	if code := simOutput(res, dir, cfg.asJSON, s); code != 0 {
		return code
	}
	if cfg.compareBest {
		w := s.out
		if cfg.asJSON {
			w = s.err
		}
		if err := sim.WriteComparison(w, sim.CompareBest(res), sim.CompareBound, false); err != nil {
			fmt.Fprintf(s.err, "crem sim: %v\n", err)
			return simExitIO
		}
	}
	return incompleteExit("crem sim", res, cfg.failIncomplete, s)
}

// simInterrupted prints the partial result of a sweep cut short by a signal, each cell marked
// with the trials it completed and planned, and returns the signal's exit status. It writes no
// shard file, CSV or figures: they would pass for a complete sweep.
func simInterrupted(res []sim.Result, asJSON bool, signal string, code int, s stdio) int {
	done, planned, cancelled, notRun := 0, 0, 0, 0
	for _, r := range res {
		done += r.Trials
		planned += max(r.TrialsPlanned, r.Trials)
		cancelled += r.TrialsCancelled
		if r.Trials == 0 && r.TrialsCancelled == 0 {
			notRun++
		}
	}
	line := fmt.Sprintf("interrupted by %s: %d of %d trials completed, %d cancelled in flight; %d of %d cells not run",
		signal, done, planned, cancelled, notRun, len(res))
	if asJSON {
		if err := sim.WriteJSON(s.out, res); err != nil {
			fmt.Fprintf(s.err, "crem sim: %v\n", err)
		}
	} else {
		if err := sim.WriteTable(s.out, res); err != nil {
			fmt.Fprintf(s.err, "crem sim: %v\n", err)
		}
		fmt.Fprintln(s.out, line)
	}
	fmt.Fprintf(s.err, "crem sim: %s; no shard file, CSV or figures written\n", line)
	return code
}

// writeShardAtomic writes the shard file into dir under a temporary name and renames it: a
// shard killed while writing leaves no partial file for merge, and shards sharing dir never
// see each other's halves.
func writeShardAtomic(dir, name string, sw *sim.Sweep, res []sim.Result) error {
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return fmt.Errorf("shard file: %w", err)
	}
	tmp := f.Name()
	f.Close()
	if err := sim.WriteShard(tmp, sw, res); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("shard file: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("shard file: %w", err)
	}
	return nil
}

// incompleteExit tells of trials stopped at their limit and returns the exit code: 3 with
// --fail-incomplete when there were any, else 0.
func incompleteExit(cmd string, res []sim.Result, fail bool, s stdio) int {
	n := 0
	for _, r := range res {
		n += r.Incomplete
	}
	if n == 0 {
		return 0
	}
	fmt.Fprintf(s.err, "%s: %d trials incomplete: stopped at their limit, their times are lower bounds\n", cmd, n)
	if fail {
		return simExitTrial
	}
	return 0
}

// simOutput writes CSV and figures into dir and the table or JSON to standard output.
func simOutput(res []sim.Result, dir string, asJSON bool, s stdio) int {
	if err := sim.WriteCSV(dir, res); err != nil {
		fmt.Fprintf(s.err, "crem sim: %v\n", err)
		return simExitIO
	}
	if err := sim.WriteFigures(dir, res); err != nil {
		fmt.Fprintf(s.err, "crem sim: %v\n", err)
		return 1
	}
	if asJSON {
		if err := sim.WriteJSON(s.out, res); err != nil {
			fmt.Fprintf(s.err, "crem sim: %v\n", err)
			return 1
		}
	} else if err := sim.WriteTable(s.out, res); err != nil {
		fmt.Fprintf(s.err, "crem sim: %v\n", err)
		return 1
	}
	fmt.Fprintf(s.err, "crem sim: CSV and figures in %s\n", dir)
	return 0
}

func runSimMerge(args []string, s stdio) int {
	fs := newFlagSet("sim merge", "crem sim merge [--out DIR] [--json] [--fail-incomplete] FILES|DIRS...",
		`Joins the shard files of `+"`crem sim --shard I/N`"+` (or auto/N) runs: writes CSV and figures into --out
and prints the table or JSON. A folder stands for the shard-*-of-*.json files in it.

Exit status:
  0  merged; the results are written
  1  the results could not be written (the output folder): a retry may succeed
  2  bad configuration or shard files (unreadable, not shard files, of different sweeps, a
     shard missing or named twice): do not retry the merge; run the missing shards
  3  with --fail-incomplete: a merged cell has a trial stopped at its limit`, s)
	out := fs.String("out", "", "folder for CSV and figures (default: a new temporary folder)")
	asJSON := fs.Bool("json", false, "print only a JSON array of the cells")
	failIncomplete := fs.Bool("fail-incomplete", false, "exit 3 when a merged cell has a trial stopped at its limit")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(s.err, "crem sim merge: name the shard files or their folder")
		return simExitConfig
	}
	files, err := shardFiles(fs.Args())
	if err != nil {
		fmt.Fprintf(s.err, "crem sim merge: %v\n", err)
		return simExitConfig
	}
	res, err := sim.Merge(files)
	if err != nil {
		fmt.Fprintf(s.err, "crem sim merge: %v\n", err)
		return simExitConfig
	}
	dir, err := outDir(*out)
	if err != nil {
		fmt.Fprintf(s.err, "crem sim merge: %v\n", err)
		return simExitIO
	}
	if code := simOutput(res, dir, *asJSON, s); code != 0 {
		return code
	}
	return incompleteExit("crem sim merge", res, *failIncomplete, s)
}

// shardFiles expands each folder among args into the shard files it holds (shard-*-of-*.json,
// in name order); files stay as named.
func shardFiles(args []string) ([]string, error) {
	var files []string
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			files = append(files, a)
			continue
		}
		m, err := filepath.Glob(filepath.Join(a, "shard-*-of-*.json"))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a, err)
		}
		if len(m) == 0 {
			return nil, fmt.Errorf("%s: no shard-*-of-*.json files", a)
		}
		files = append(files, m...)
	}
	return files, nil
}

// resolveShard reads --shard and --shard-base: "" (the whole sweep), I/N, or auto/N with I
// from JOB_COMPLETION_INDEX, else SLURM_ARRAY_TASK_ID less the base. from says where I came
// from for auto/N.
func resolveShard(spec, base string, getenv func(string) string) (i, n int, from string, err error) {
	rest, auto := strings.CutPrefix(spec, "auto")
	if !auto {
		if base != "" {
			return 0, 0, "", fmt.Errorf("--shard-base applies to --shard auto/N")
		}
		if spec == "" {
			return 0, 0, "", nil
		}
		i, n, err := parseShard(spec)
		if err != nil {
			return 0, 0, "", fmt.Errorf("--shard: %w", err)
		}
		return i, n, "", nil
	}
	if rest == "" {
		return 0, 0, "", fmt.Errorf("--shard auto needs the shard count, auto/N: a Kubernetes pod does not see its Job's completions, and a rerun of some Slurm array tasks has a task count of its own")
	}
	ns, ok := strings.CutPrefix(rest, "/")
	n, err = strconv.Atoi(strings.TrimSpace(ns))
	if !ok || err != nil || n < 1 {
		return 0, 0, "", fmt.Errorf("--shard %q: want auto/N with N >= 1", spec)
	}
	envInt := func(name string) (int, bool, error) {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			return 0, false, nil
		}
		x, err := strconv.Atoi(v)
		if err != nil {
			return 0, true, fmt.Errorf("--shard auto/%d: %s=%q is not an integer", n, name, v)
		}
		return x, true, nil
	}
	if k, set, err := envInt("JOB_COMPLETION_INDEX"); err != nil {
		return 0, 0, "", err
	} else if set {
		if base != "" {
			return 0, 0, "", fmt.Errorf("--shard-base applies to SLURM_ARRAY_TASK_ID; JOB_COMPLETION_INDEX is set and 0-based")
		}
		if k < 0 || k >= n {
			return 0, 0, "", fmt.Errorf("--shard auto/%d: JOB_COMPLETION_INDEX=%d is outside 0..%d (the Job's completions must be %d)", n, k, n-1, n)
		}
		return k, n, fmt.Sprintf("JOB_COMPLETION_INDEX=%d", k), nil
	}
	id, set, err := envInt("SLURM_ARRAY_TASK_ID")
	if err != nil {
		return 0, 0, "", err
	}
	if !set {
		return 0, 0, "", fmt.Errorf("--shard auto/%d: neither JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) nor SLURM_ARRAY_TASK_ID (a Slurm job array) is set; outside a batch system give --shard I/%d", n, n)
	}
	b := 0
	from = fmt.Sprintf("SLURM_ARRAY_TASK_ID=%d", id)
	switch base {
	case "", "0":
	case "min":
		lo, err := slurmArrayMin(n, envInt)
		if err != nil {
			return 0, 0, "", err
		}
		b = lo
		from += fmt.Sprintf(" - SLURM_ARRAY_TASK_MIN=%d", lo)
	default:
		b, err = strconv.Atoi(strings.TrimSpace(base))
		if err != nil || b < 0 {
			return 0, 0, "", fmt.Errorf("--shard-base %q: want the array's first task ID (0, 1, ...) or min", base)
		}
		if b != 0 {
			from += fmt.Sprintf(" - %d", b)
		}
	}
	if k := id - b; k < 0 || k >= n {
		return 0, 0, "", fmt.Errorf("--shard auto/%d: %s gives shard %d, outside 0..%d (an array numbered from 1: --shard-base 1; from its first task: --shard-base min)", n, from, k, n-1)
	}
	return id - b, n, from, nil
}

// slurmArrayMin is the first task ID of a Slurm array that is the n contiguous tasks of the
// sweep (--shard-base min), read with envInt.
func slurmArrayMin(n int, envInt func(string) (int, bool, error)) (int, error) {
	lo, okLo, err := envInt("SLURM_ARRAY_TASK_MIN")
	if err != nil {
		return 0, err
	}
	count, okCount, err := envInt("SLURM_ARRAY_TASK_COUNT")
	if err != nil {
		return 0, err
	}
	hi, okHi, err := envInt("SLURM_ARRAY_TASK_MAX")
	if err != nil {
		return 0, err
	}
	if !okLo || !okCount {
		return 0, fmt.Errorf("--shard-base min: SLURM_ARRAY_TASK_MIN and SLURM_ARRAY_TASK_COUNT must be set")
	}
	if count != n || (okHi && hi-lo+1 != n) {
		return 0, fmt.Errorf("--shard-base min: the array (%d tasks from %d) is not the %d contiguous tasks of the sweep; for a rerun of some tasks give the first task ID, --shard-base %d", count, lo, n, lo)
	}
	return lo, nil
}

// parseShard reads "I/N" with 0 <= I < N.
func parseShard(v string) (int, int, error) {
	a, b, ok := strings.Cut(v, "/")
	i, err1 := strconv.Atoi(strings.TrimSpace(a))
	n, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return 0, 0, fmt.Errorf("%q: want I/N with 0 <= I < N", v)
	}
	return i, n, nil
}

func checkScenario(sc sim.Scenario) error {
	switch {
	case sc.Rate <= 0:
		return fmt.Errorf("--rate must be positive")
	case sc.Trials <= 0:
		return fmt.Errorf("--trials must be positive")
	case len(sc.Sizes) == 0 || len(sc.DropRates) == 0:
		return fmt.Errorf("--sizes and --drop-rates must not be empty")
	}
	switch sc.Loss {
	case sim.LossBernoulli, sim.LossBursty, sim.LossQueue:
	default:
		return fmt.Errorf("--loss %q: want bernoulli, bursty or queue", sc.Loss)
	}
	switch {
	case sc.Loss == sim.LossBursty && sc.BurstLen < 1:
		return fmt.Errorf("--burst-len %g: want a mean burst of at least 1 packet", sc.BurstLen)
	case sc.Loss != sim.LossBursty && sc.BurstLen != 0:
		return fmt.Errorf("--burst-len applies to bursty loss, not %s (add --loss bursty)", sc.Loss)
	case sc.PolicyBurst != 0 && sc.PolicyBurst < 1:
		return fmt.Errorf("--policy-burst %g: want at least 1", sc.PolicyBurst)
	}
	for _, d := range sc.DropRates {
		if d >= 1 {
			return fmt.Errorf("drop rate %v: must be below 1", d)
		}
	}
	for _, n := range sc.Sizes {
		if n <= 0 {
			return fmt.Errorf("size %d: must be positive", n)
		}
	}
	return nil
}

// outDir returns dir, created if needed, or a new temporary folder when dir is "".
func outDir(dir string) (string, error) {
	if dir == "" {
		d, err := os.MkdirTemp("", "crem-sim-")
		if err != nil {
			return "", fmt.Errorf("output folder: %w", err)
		}
		return d, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("output folder: %w", err)
	}
	return dir, nil
}
