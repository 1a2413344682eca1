package sim

import (
	"cmp"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/crem-project/crem/units"
)

// ShardFile is what one shard of a sweep writes and Merge reads: the results with every
// trial's completion time.
type ShardFile struct {
	Scenario string `json:"scenario"`
	// Path is the scenario's path as run, overrides included, so that merge refuses slices of
	// sweeps that share a name and seed but not a path (absent in files of earlier versions).
	Path   *Path    `json:"path,omitempty"`
	Seed   uint64   `json:"seed"`
	Shard  int      `json:"shard"`
	Shards int      `json:"shards"`
	Cells  []Record `json:"cells"`
}

// Path is what a shard file records of its scenario's path and loss process.
type Path struct {
	RateBps     int64    `json:"rate_bps"`
	RTTS        float64  `json:"rtt_s"`
	MTU         int      `json:"mtu"`
	Loss        LossKind `json:"loss"`
	BurstLen    float64  `json:"burst_len,omitempty"`
	PolicyBurst float64  `json:"policy_burst,omitempty"`
}

// pathOf returns what a shard file records of sc.
func pathOf(sc Scenario) *Path {
	return &Path{RateBps: sc.Rate, RTTS: sc.RTT.Seconds(), MTU: sc.MTU, Loss: sc.Loss, BurstLen: sc.BurstLen,
		PolicyBurst: sc.PolicyBurst}
}

func (p *Path) String() string {
	if p == nil {
		return "no recorded path"
	}
	s := fmt.Sprintf("%d bit/s, RTT %gs, MTU %d, %s loss", p.RateBps, p.RTTS, p.MTU, p.Loss)
	if p.BurstLen > 0 {
		s += fmt.Sprintf(", burst %g", p.BurstLen)
	}
	if p.PolicyBurst > 0 {
		s += fmt.Sprintf(", policy burst %g", p.PolicyBurst)
	}
	return s
}

// Record is a Result with its raw data, as stored in a ShardFile.
type Record struct {
	Result
	CompletionsS []float64 `json:"completions_s"`
	KMs          []KM      `json:"km,omitempty"`
}

// ShardFileName is the name a shard's file gets in the output folder.
func ShardFileName(shard, shards int) string {
	return fmt.Sprintf("shard-%d-of-%d.json", shard, max(shards, 1))
}

// WriteShard writes results as a ShardFile at path.
func WriteShard(path string, sw *Sweep, res []Result) error {
	f := ShardFile{Scenario: sw.Scenario.Name, Path: pathOf(sw.Scenario), Seed: sw.Seed, Shard: sw.Shard, Shards: max(sw.Shards, 1)}
	for _, r := range res {
		f.Cells = append(f.Cells, Record{Result: r, CompletionsS: r.Completions, KMs: r.KM})
	}
	b, err := json.MarshalIndent(f, "", " ")
	if err != nil {
		return fmt.Errorf("sim: shard file: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("sim: shard file: %w", err)
	}
	return nil
}

// Merge reads shard files and returns their results in report order. It fails when the files
// disagree on the scenario, seed or shard count, when a shard is missing or named twice, or
// when a cell appears twice.
func Merge(paths []string) ([]Result, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("sim: merge: no shard files")
	}
	var first *ShardFile
	seen := map[int]string{}
	var out []Result
	cells := map[string]bool{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("sim: merge: %w", err)
		}
		var f ShardFile
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("sim: merge: %s: %w", p, err)
		}
		if first == nil {
			first = &f
		} else if f.Scenario != first.Scenario || f.Seed != first.Seed || f.Shards != first.Shards {
			return nil, fmt.Errorf("sim: merge: %s is shard of %s/seed %d/%d shards, not %s/seed %d/%d shards",
				p, f.Scenario, f.Seed, f.Shards, first.Scenario, first.Seed, first.Shards)
		} else if !samePath(f.Path, first.Path) {
			return nil, fmt.Errorf("sim: merge: %s ran on %v, not %v", p, f.Path, first.Path)
		}
		if q, dup := seen[f.Shard]; dup {
			return nil, fmt.Errorf("sim: merge: shard %d in both %s and %s", f.Shard, q, p)
		}
		seen[f.Shard] = p
		for _, c := range f.Cells {
			key := fmt.Sprintf("%s/%g/%d", c.Scheme, c.DropRate, c.MessageBytes)
			if cells[key] {
				return nil, fmt.Errorf("sim: merge: cell %s twice", key)
			}
			cells[key] = true
			r := c.Result
			r.Completions, r.KM = c.CompletionsS, c.KMs
			out = append(out, r)
		}
	}
	if len(seen) != first.Shards {
		var missing []int
		for i := range first.Shards {
			if _, ok := seen[i]; !ok {
				missing = append(missing, i)
			}
		}
		return nil, fmt.Errorf("sim: merge: shards %v of %d missing", missing, first.Shards)
	}
	SortResults(out)
	return out, nil
}

// SortResults orders results as a sweep reports them: by scheme (in Schemes order), drop rate
// and size.
func SortResults(rs []Result) {
	order := map[string]int{}
	for i, n := range SchemeNames() {
		order[n] = i
	}
	slices.SortStableFunc(rs, func(a, b Result) int {
		return cmp.Or(cmp.Compare(order[a.Scheme], order[b.Scheme]), cmp.Compare(a.DropRate, b.DropRate),
			cmp.Compare(a.MessageBytes, b.MessageBytes))
	})
}

// WriteJSON writes results as one JSON array.
func WriteJSON(w io.Writer, rs []Result) error {
	if rs == nil {
		rs = []Result{}
	}
	b, err := json.MarshalIndent(rs, "", "  ")
	if err != nil {
		return fmt.Errorf("sim: json: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func g(v float64) string { return strconv.FormatFloat(v, 'g', 8, 64) }

// WriteCSV writes results.csv (one row per cell), completions.csv (one row per trial) and
// km.csv (CREM's k and m over time) into dir.
func WriteCSV(dir string, rs []Result) error {
	write := func(name string, header []string, rows [][]string) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("sim: csv: %w", err)
		}
		w := csv.NewWriter(f)
		w.Write(header)
		w.WriteAll(rows)
		if err := w.Error(); err != nil {
			f.Close()
			return fmt.Errorf("sim: csv %s: %w", name, err)
		}
		return f.Close()
	}
	var rows, trials, kms [][]string
	for _, r := range rs {
		rows = append(rows, []string{r.Scenario, r.Scheme, g(r.DropRate), strconv.FormatInt(r.MessageBytes, 10),
			strconv.Itoa(r.Trials), g(r.IdealS), g(r.MeanS), g(r.P50S), g(r.P99S), g(r.P999S),
			g(r.Overhead), g(r.RepairOverhead), g(r.SecondRoundShare), g(r.RetransmittedPackets),
			g(r.ReversePackets), strconv.Itoa(r.Incomplete), g(r.RecoveryMeanS), g(r.RecoveryP99S),
			strconv.Itoa(r.RecoveryBlocks)})
		for i, c := range r.Completions {
			trials = append(trials, []string{r.Scheme, g(r.DropRate), strconv.FormatInt(r.MessageBytes, 10),
				strconv.Itoa(i), g(c), g(c / r.IdealS)})
		}
		for _, k := range r.KM {
			kms = append(kms, []string{r.Scheme, g(r.DropRate), strconv.FormatInt(r.MessageBytes, 10),
				g(k.At.Seconds()), strconv.Itoa(k.K), strconv.Itoa(k.M)})
		}
	}
	if err := write("results.csv", []string{"scenario", "scheme", "drop_rate", "message_bytes", "trials",
		"ideal_s", "mean_s", "p50_s", "p99_s", "p999_s", "overhead", "repair_overhead",
		"second_round_share", "retransmitted_packets", "reverse_packets", "incomplete",
		"recovery_mean_s", "recovery_p99_s", "recovery_blocks"}, rows); err != nil {
		return err
	}
	if err := write("completions.csv", []string{"scheme", "drop_rate", "message_bytes", "trial",
		"completion_s", "slowdown"}, trials); err != nil {
		return err
	}
	return write("km.csv", []string{"scheme", "drop_rate", "message_bytes", "at_s", "k", "m"}, kms)
}

// WriteTable prints a summary table: times as multiples of the ideal; the recovery of blocks
// that lost more than their ordinary repair (CREM schemes) in milliseconds, with the number of
// such blocks, or "-" when there was none.
func WriteTable(w io.Writer, rs []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scheme\tdrop\tsize\ttrials\tideal\tmean\tp50\tp99\tp99.9\toverhead\trepair\t2nd round\tretx\treverse\trecovery\trec p99\tblocks\t")
	for _, r := range rs {
		inc := ""
		if r.Incomplete > 0 {
			inc = fmt.Sprintf(" (%d incomplete)", r.Incomplete)
		}
		switch {
		case r.Interrupted && r.Trials == 0 && r.TrialsCancelled == 0:
			inc += fmt.Sprintf(" of %d, not run", r.TrialsPlanned)
		case r.Interrupted:
			inc += fmt.Sprintf(" of %d, interrupted (%d cancelled)", r.TrialsPlanned, r.TrialsCancelled)
		}
		if r.Trials == 0 {
			// A cell of a sweep cut short before any of its trials completed: no figures.
			fmt.Fprintf(tw, "%s\t%s\t%s\t0%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t\n",
				r.Scheme, units.FormatFraction(r.DropRate), units.FormatSize(r.MessageBytes), inc)
			continue
		}
		x := func(v float64) string { return fmt.Sprintf("%.3fx", v/r.IdealS) }
		rec, rec99, blocks := "-", "-", "-"
		if r.RecoveryBlocks > 0 {
			rec, rec99 = fmt.Sprintf("%.2f ms", r.RecoveryMeanS*1e3), fmt.Sprintf("%.2f ms", r.RecoveryP99S*1e3)
			blocks = strconv.Itoa(r.RecoveryBlocks)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d%s\t%s\t%s\t%s\t%s\t%s\t%.4f\t%.4f\t%.2f\t%.1f\t%.1f\t%s\t%s\t%s\t\n",
			r.Scheme, units.FormatFraction(r.DropRate), units.FormatSize(r.MessageBytes), r.Trials, inc,
			units.FormatDuration(time.Duration(r.IdealS*float64(time.Second))),
			x(r.MeanS), x(r.P50S), x(r.P99S), x(r.P999S), r.Overhead, r.RepairOverhead,
			r.SecondRoundShare, r.RetransmittedPackets, r.ReversePackets, rec, rec99, blocks)
	}
	return tw.Flush()
}

// samePath reports whether two shard files ran on the same path (both unrecorded counts).
func samePath(a, b *Path) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
