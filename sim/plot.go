package sim

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/crem-project/crem/units"
)

// WriteFigures draws, into dir as PNG and SVG: per message size, the mean and p99 completion
// time as multiples of the ideal against the drop rate, one line per scheme
// (completion-SIZE); per message size, the wire overhead against the drop rate
// (overhead-SIZE); and CREM's k and m over time where a scheme reported them (km).
func WriteFigures(dir string, rs []Result) error {
	var sizes []int64
	for _, r := range rs {
		if !slices.Contains(sizes, r.MessageBytes) {
			sizes = append(sizes, r.MessageBytes)
		}
	}
	slices.Sort(sizes)
	for _, n := range sizes {
		var cell []Result
		for _, r := range rs {
			if r.MessageBytes == n {
				cell = append(cell, r)
			}
		}
		name := units.FormatSize(n)
		if err := lineFigure(dir, "completion-"+name, "completion time, "+name+" (dashed: p99)",
			"slowdown over the ideal", cell, func(r Result) float64 { return r.MeanS / r.IdealS },
			func(r Result) float64 { return r.P99S / r.IdealS }); err != nil {
			return err
		}
		if err := lineFigure(dir, "overhead-"+name, "wire overhead, "+name,
			"bytes on the wire / message bytes", cell, func(r Result) float64 { return r.Overhead }, nil); err != nil {
			return err
		}
	}
	return kmFigure(dir, rs)
}

// lineFigure plots y (solid) and y2 (dashed, optional) against the drop rate, one line per
// scheme.
func lineFigure(dir, file, title, ylabel string, rs []Result, y, y2 func(Result) float64) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "drop rate"
	p.Y.Label.Text = ylabel
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = roundedLogTicks{}
	var names []string
	for _, r := range rs {
		if !slices.Contains(names, r.Scheme) {
			names = append(names, r.Scheme)
		}
	}
	lines := 0
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range rs {
		if r.DropRate > 0 {
			lo, hi = math.Min(lo, r.DropRate), math.Max(hi, r.DropRate)
		}
	}
	p.X.Min, p.X.Max = lo/2, hi*2
	for i, name := range names {
		var xy, xy2 plotter.XYs
		for _, r := range rs {
			if r.Scheme == name && r.DropRate > 0 {
				xy = append(xy, plotter.XY{X: r.DropRate, Y: y(r)})
				if y2 != nil {
					xy2 = append(xy2, plotter.XY{X: r.DropRate, Y: y2(r)})
				}
			}
		}
		if len(xy) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return fmt.Errorf("sim: figure %s: %w", file, err)
		}
		c := plotutil.Color(i)
		l.Color, pts.Color, pts.Shape = c, c, plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(name, l, pts)
		if y2 != nil {
			l2, err := plotter.NewLine(xy2)
			if err != nil {
				return fmt.Errorf("sim: figure %s: %w", file, err)
			}
			l2.Color, l2.Dashes = c, []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(l2)
		}
		lines++
	}
	if lines == 0 {
		return nil // nothing with a positive drop rate to draw on a log axis
	}
	// Slowdowns span orders of magnitude (go-back-N against the rest): a log axis then keeps
	// the schemes near the ideal apart.
	ylo, yhi := math.Inf(1), math.Inf(-1)
	for _, r := range rs {
		if r.DropRate > 0 {
			for _, f := range []func(Result) float64{y, y2} {
				if f != nil {
					ylo, yhi = math.Min(ylo, f(r)), math.Max(yhi, f(r))
				}
			}
		}
	}
	if ylo > 0 && yhi/ylo > 10 {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = roundedLogTicks{}
	}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return save(p, dir, file)
}

// kmFigure plots the k and m of the first trial of each CREM cell over time.
func kmFigure(dir string, rs []Result) error {
	p := plot.New()
	p.Title.Text = "CREM's k and m over time (first trial of each cell)"
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "k (solid), m (dashed)"
	n := 0
	for _, r := range rs {
		if len(r.KM) == 0 {
			continue
		}
		var k, m plotter.XYs
		for _, e := range r.KM {
			k = append(k, plotter.XY{X: e.At.Seconds(), Y: float64(e.K)})
			m = append(m, plotter.XY{X: e.At.Seconds(), Y: float64(e.M)})
		}
		lk, err := plotter.NewLine(k)
		if err != nil {
			return fmt.Errorf("sim: figure km: %w", err)
		}
		lm, err := plotter.NewLine(m)
		if err != nil {
			return fmt.Errorf("sim: figure km: %w", err)
		}
		c := plotutil.Color(n)
		lk.Color, lm.Color = c, c
		lm.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(lk, lm)
		p.Legend.Add(fmt.Sprintf("%s %s %s", r.Scheme, units.FormatFraction(r.DropRate), units.FormatSize(r.MessageBytes)), lk)
		n++
	}
	if n == 0 {
		return nil
	}
	p.Add(plotter.NewGrid())
	return save(p, dir, "km")
}

func save(p *plot.Plot, dir, file string) error {
	p.BackgroundColor = color.White
	for _, ext := range []string{".png", ".svg"} {
		if err := p.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, file+ext)); err != nil {
			return fmt.Errorf("sim: figure %s: %w", file, err)
		}
	}
	return nil
}

// roundedLogTicks are gonum's logarithmic ticks labelled with three significant digits, so that
// 10^-5 reads 1e-05 and not the float nearest to it.
type roundedLogTicks struct{}

func (roundedLogTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.LogTicks{Prec: -1}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'g', 3, 64)
		}
	}
	return ts
}
