package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/crem-project/crem/sim"
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
proportional set size (Linux): the synthetic memory regions map one small buffer many times
over, which the resident set size (ps, /usr/bin/time) counts once per mapping.

--loss, --burst-len and --policy-burst override the loss process: --loss bursty on any scenario
takes bursts of 4 packets unless --burst-len says otherwise, and --policy-burst sets the mean
burst the project's policy assumes (by default the path's; the sender does not measure it).

--shard I/N runs the cells whose index is I modulo N; each shard writes shard-I-of-N.json into
its --out, and ` + "`crem sim merge [--out DIR] [--json] FILES...`" + ` joins them.

Example:
  crem sim --scenario sdr-casestudy --schemes sr-rto,tcaeth --sizes 1MiB,16MiB --drop-rates 1e-4,1e-2 --trials 30`

func runSim(args []string, s stdio) int {
	if len(args) > 0 && args[0] == "merge" {
		return runSimMerge(args[1:], s)
	}
	fs := newFlagSet("sim", "crem sim --scenario NAME [flags] | crem sim merge [--out DIR] [--json] FILES...", simDescription, s)
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
	shard := fs.String("shard", "", "run the slice I/N of the cells (0-based I)")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(s.err, "crem sim: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *scenario == "" {
		fmt.Fprintln(s.err, "crem sim: --scenario is required (sdr-casestudy, metro, bursty, congested, reporter)")
		return 2
	}
	sc, err := sim.LookupScenario(*scenario)
	if err != nil {
		fmt.Fprintf(s.err, "crem sim: %v\n", err)
		return 2
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
			fmt.Fprintf(s.err, "crem sim: --rtt %q: want a positive Go duration (25ms)\n", *rtt)
			return 2
		}
		sc.RTT = d
	}
	sw := &sim.Sweep{Scenario: sc, Seed: *seed}
	if *schemes == "" {
		sw.Schemes, err = sim.SchemesOf(sc)
	} else {
		sw.Schemes, err = sim.ParseSchemes(*schemes)
	}
	if err != nil {
		fmt.Fprintf(s.err, "crem sim: %v\n", err)
		return 2
	}
	if *shard != "" {
		i, n, err := parseShard(*shard)
		if err != nil {
			fmt.Fprintf(s.err, "crem sim: --shard: %v\n", err)
			return 2
		}
		sw.Shard, sw.Shards = i, n
	}
	if err := checkScenario(sc); err != nil {
		fmt.Fprintf(s.err, "crem sim: %v\n", err)
		return 2
	}
	dir, err := outDir(*out)
	if err != nil {
		fmt.Fprintf(s.err, "crem sim: %v\n", err)
		return 1
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
	meter, start := startMemoryMeter(200*time.Millisecond), time.Now()
	res, err := sw.Run()
	if meter != nil {
		peak := meter.Stop()
		if err == nil {
			fmt.Fprintf(s.err, "crem sim: %d trials in %.1f s, peak memory %d MiB (proportional set size)\n",
				trialCount(res), time.Since(start).Seconds(), peak>>20)
		}
	}
	if err != nil {
		fmt.Fprintf(s.err, "crem sim: %v\n", err)
		return 1
	}
	if err := sim.WriteShard(filepath.Join(dir, sim.ShardFileName(sw.Shard, sw.Shards)), sw, res); err != nil {
		fmt.Fprintf(s.err, "crem sim: %v\n", err)
		return 1
	}
	return simOutput(res, dir, *asJSON, s)
}

// simOutput writes CSV and figures into dir and the table or JSON to standard output.
func simOutput(res []sim.Result, dir string, asJSON bool, s stdio) int {
	if err := sim.WriteCSV(dir, res); err != nil {
		fmt.Fprintf(s.err, "crem sim: %v\n", err)
		return 1
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
	fs := newFlagSet("sim merge", "crem sim merge [--out DIR] [--json] FILES...",
		"Joins the shard files of `crem sim --shard I/N` runs: writes CSV and figures into --out and prints the table or JSON.", s)
	out := fs.String("out", "", "folder for CSV and figures (default: a new temporary folder)")
	asJSON := fs.Bool("json", false, "print only a JSON array of the cells")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(s.err, "crem sim merge: name the shard files")
		return 2
	}
	res, err := sim.Merge(fs.Args())
	if err != nil {
		fmt.Fprintf(s.err, "crem sim merge: %v\n", err)
		return 1
	}
	dir, err := outDir(*out)
	if err != nil {
		fmt.Fprintf(s.err, "crem sim merge: %v\n", err)
		return 1
	}
	return simOutput(res, dir, *asJSON, s)
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
