package sim

import (
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/crem-project/crem/units"
)

// CompareScheme is the scheme the comparison judges (P10).
const CompareScheme = "crem+tcaeth"

// CompareAgainst are the schemes whose best crem+tcaeth must stay within the bound of.
var CompareAgainst = []string{"tcaeth", "ec", "sr-rto", "sr-nack", "crem-draft+tcaeth"}

// CompareBound is the ratio above which a cell is reported: crem+tcaeth's mean or p99 more than 2
// percent above the best alternative's.
const CompareBound = 1.02

// Comparison is crem+tcaeth against the best alternative in one (drop rate, size) cell: for the
// mean and for the p99, the best alternative, its time and crem+tcaeth's ratio to it.
type Comparison struct {
	DropRate     float64 `json:"drop_rate"`
	MessageBytes int64   `json:"message_bytes"`
	MeanS        float64 `json:"mean_s"`
	P99S         float64 `json:"p99_s"`
	BestMean     string  `json:"best_mean_scheme"`
	BestP99      string  `json:"best_p99_scheme"`
	BestMeanS    float64 `json:"best_mean_s"`
	BestP99S     float64 `json:"best_p99_s"`
	MeanRatio    float64 `json:"mean_ratio"`
	P99Ratio     float64 `json:"p99_ratio"`
}

// Above reports whether the cell exceeds bound on the mean or the p99.
func (c Comparison) Above(bound float64) bool { return c.MeanRatio > bound || c.P99Ratio > bound }

// CompareBest holds crem+tcaeth against the best of the alternatives present in res, cell by
// cell (P10); a cell without crem+tcaeth or without any alternative is left out. Cells come in the
// order of res.
func CompareBest(res []Result) []Comparison {
	type key struct {
		drop float64
		size int64
	}
	by := map[key]map[string]Result{}
	var order []key
	for _, r := range res {
		k := key{r.DropRate, r.MessageBytes}
		if by[k] == nil {
			by[k] = map[string]Result{}
			order = append(order, k)
		}
		by[k][r.Scheme] = r
	}
	var out []Comparison
	for _, k := range order {
		cells := by[k]
		c, ok := cells[CompareScheme]
		if !ok {
			continue
		}
		cmp := Comparison{DropRate: k.drop, MessageBytes: k.size, MeanS: c.MeanS, P99S: c.P99S,
			BestMeanS: math.Inf(1), BestP99S: math.Inf(1)}
		for _, name := range CompareAgainst {
			a, ok := cells[name]
			if !ok {
				continue
			}
			if a.MeanS < cmp.BestMeanS {
				cmp.BestMeanS, cmp.BestMean = a.MeanS, name
			}
			if a.P99S < cmp.BestP99S {
				cmp.BestP99S, cmp.BestP99 = a.P99S, name
			}
		}
		if cmp.BestMean == "" {
			continue
		}
		cmp.MeanRatio, cmp.P99Ratio = c.MeanS/cmp.BestMeanS, c.P99S/cmp.BestP99S
		out = append(out, cmp)
	}
	return out
}

// WorstComparison returns the cell with the largest ratio (mean or p99), if any.
func WorstComparison(cs []Comparison) (Comparison, bool) {
	if len(cs) == 0 {
		return Comparison{}, false
	}
	return slices.MaxFunc(cs, func(a, b Comparison) int {
		return cmpFloat(max(a.MeanRatio, a.P99Ratio), max(b.MeanRatio, b.P99Ratio))
	}), true
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// WriteComparison prints, for each cell, crem+tcaeth against the best alternative; with onlyAbove
// only the cells above bound. The last line names the worst cell and how many are above bound.
func WriteComparison(w io.Writer, cs []Comparison, bound float64, onlyAbove bool) error {
	if _, err := fmt.Fprintf(w, "%8s %8s  %9s %9s %18s %6s  %9s %9s %18s %6s\n", "drop", "size",
		"mean", "best", "best-mean-scheme", "ratio", "p99", "best", "best-p99-scheme", "ratio"); err != nil {
		return err
	}
	above := 0
	for _, c := range cs {
		if c.Above(bound) {
			above++
		} else if onlyAbove {
			continue
		}
		if _, err := fmt.Fprintf(w, "%8g %8s  %9s %9s %18s %6.3f  %9s %9s %18s %6.3f\n", c.DropRate, units.HumanSize(float64(c.MessageBytes)),
			secs(c.MeanS), secs(c.BestMeanS), c.BestMean, c.MeanRatio, secs(c.P99S), secs(c.BestP99S), c.BestP99, c.P99Ratio); err != nil {
			return err
		}
	}
	if worst, ok := WorstComparison(cs); ok {
		_, err := fmt.Fprintf(w, "compare-best: %d of %d cells above %.2fx; worst %.3fx (drop %g, size %s)\n", above, len(cs), bound,
			max(worst.MeanRatio, worst.P99Ratio), worst.DropRate, units.HumanSize(float64(worst.MessageBytes)))
		return err
	}
	_, err := fmt.Fprintln(w, "compare-best: no cell holds crem+tcaeth and an alternative")
	return err
}

func secs(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%.3fs", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.2fms", s*1e3)
	}
	return fmt.Sprintf("%.1fus", s*1e6)
}
