package sim

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// figureSweep runs a small real sweep with a CREM scheme (for the k and m figure) and two
// sizes.
func figureSweep(t *testing.T) []Result {
	t.Helper()
	sc, err := LookupScenario("metro")
	if err != nil {
		t.Fatal(err)
	}
	sc.Sizes, sc.Extra, sc.DropRates, sc.Trials = []int64{256 << 10, 1 << 20}, nil, []float64{1e-3, 1e-2}, 2
	sc.Rate, sc.RTT = 10e9, 2e6
	schemes, err := ParseSchemes("gbn,tcaeth,crem+tcaeth")
	if err != nil {
		t.Fatal(err)
	}
	res, err := (&Sweep{Scenario: sc, Schemes: schemes, Seed: 1}).Run()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// wantExtent computes, from the results and not from the plots, the data a figure draws.
func wantExtent(rs []Result, name string) Extent {
	e := emptyExtent()
	widen := func(x, y float64) {
		e.XMin, e.XMax = math.Min(e.XMin, x), math.Max(e.XMax, x)
		e.YMin, e.YMax = math.Min(e.YMin, y), math.Max(e.YMax, y)
	}
	for _, r := range rs {
		switch {
		case name == "km":
			for _, km := range r.KM {
				widen(km.At.Seconds(), float64(km.K))
				widen(km.At.Seconds(), float64(km.M))
			}
			if len(r.KM) > 0 && len(r.Completions) > 0 {
				widen(r.Completions[0], float64(r.KM[len(r.KM)-1].K))
			}
		case r.DropRate <= 0 || !strings.HasSuffix(name, "-"+formatSizeForTest(r.MessageBytes)):
		case strings.HasPrefix(name, "completion-"):
			widen(r.DropRate, r.MeanS/r.IdealS)
			widen(r.DropRate, r.P99S/r.IdealS)
		case strings.HasPrefix(name, "overhead-"):
			widen(r.DropRate, r.Overhead)
		}
	}
	return e
}

func formatSizeForTest(n int64) string {
	switch n {
	case 256 << 10:
		return "256KiB"
	case 1 << 20:
		return "1MiB"
	}
	return "?"
}

// Every figure crem sim writes has its data inside the axes with a margin (no point on an
// axis line or outside), a title narrower than the figure, and its legend beside the plot area,
// not over it.
func TestFiguresAxesHoldTheirData(t *testing.T) {
	rs := figureSweep(t)
	figs, err := Figures(rs)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"completion-256KiB", "overhead-256KiB", "completion-1MiB", "overhead-1MiB", "km"}
	if len(figs) != len(want) {
		t.Fatalf("%d figures, want %v", len(figs), want)
	}
	c := draw.New(vgimg.New(figureWidth, figureHeight))
	for i, f := range figs {
		if f.Name != want[i] {
			t.Fatalf("figure %d is %s, want %s", i, f.Name, want[i])
		}
		p := f.Plot
		data := wantExtent(rs, f.Name)
		if math.IsInf(data.XMin, 0) || data.YMax <= 0 {
			t.Fatalf("%s: no data in the results", f.Name)
		}
		if f.Data != data {
			t.Errorf("%s: the figure draws %+v, the results hold %+v", f.Name, f.Data, data)
		}
		if !(p.X.Min < data.XMin && data.XMax < p.X.Max) {
			t.Errorf("%s: x axis %g..%g does not hold the data %g..%g with a margin", f.Name, p.X.Min, p.X.Max, data.XMin, data.XMax)
		}
		if !(p.Y.Min < data.YMin && data.YMax < p.Y.Max) {
			t.Errorf("%s: y axis %g..%g does not hold the data %g..%g with a margin", f.Name, p.Y.Min, p.Y.Max, data.YMin, data.YMax)
		}
		// The margin is a margin, not a figure of empty space.
		if span, dspan := p.X.Max-p.X.Min, data.XMax-data.XMin; f.Name == "km" && dspan > 0 && span > 1.5*dspan {
			t.Errorf("%s: x axis %g..%g is much wider than the data %g..%g", f.Name, p.X.Min, p.X.Max, data.XMin, data.XMax)
		}
		plotArea, legendArea := f.Layout(c)
		title := p.Title.TextStyle.Rectangle(p.Title.Text).Size().X
		if p.Title.Text == "" || title > plotArea.Size().X {
			t.Errorf("%s: title %q (%v wide) does not fit the plot's %v", f.Name, p.Title.Text, title, plotArea.Size().X)
		}
		lg := f.Legend
		lg.Top, lg.Left = true, true
		r := lg.Rectangle(legendArea)
		if r.Size().X <= 0 || r.Min.X < plotArea.Max.X || r.Max.X > c.Max.X || r.Min.Y < c.Min.Y {
			t.Errorf("%s: legend %v is not in the column beside the plot area %v", f.Name, r, plotArea.Rectangle)
		}
	}
	dir := t.TempDir()
	if err := WriteFigures(dir, rs); err != nil {
		t.Fatal(err)
	}
	for _, name := range want {
		for _, ext := range []string{".png", ".svg"} {
			if st, err := os.Stat(filepath.Join(dir, name+ext)); err != nil || st.Size() < 1000 {
				t.Errorf("%s%s: %v", name, ext, err)
			}
		}
	}
}

// A cell whose k and m never change (one event at time 0) still draws a line across the trial:
// the axis is the trial's time, not -1..1 around a single point.
func TestFigureKMHoldsAcrossTheTrial(t *testing.T) {
	r := Result{Scheme: "crem+tcaeth", DropRate: 1e-3, MessageBytes: 1 << 20, Completions: []float64{0.003},
		KM: []KM{{At: 0, K: 128, M: 2}}}
	f, ok, err := kmFigure([]Result{r})
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if f.Data.XMin != 0 || f.Data.XMax != 0.003 || f.Data.YMax != 128 {
		t.Fatalf("data %+v, want 0..0.003 s and k up to 128", f.Data)
	}
	if f.Plot.X.Min >= 0 || f.Plot.X.Max <= 0.003 || f.Plot.X.Max > 0.004 || f.Plot.Y.Max <= 128 || f.Plot.Y.Min >= 0 {
		t.Fatalf("axes x %g..%g y %g..%g", f.Plot.X.Min, f.Plot.X.Max, f.Plot.Y.Min, f.Plot.Y.Max)
	}
}
