package sim

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/crem-project/crem/units"
)

// Figure is one figure WriteFigures writes: its file name (without extension), the plot, the
// legend drawn beside the plot area (never over a line), and the extent of the data drawn, which
// the plot's axis ranges contain with a margin.
type Figure struct {
	Name   string
	Plot   *plot.Plot
	Legend plot.Legend
	Data   Extent
}

// Extent is a rectangle in data coordinates.
type Extent struct {
	XMin, XMax, YMin, YMax float64
}

// add widens e to hold every point of xy.
func (e *Extent) add(xy plotter.XYs) {
	for _, p := range xy {
		e.XMin, e.XMax = math.Min(e.XMin, p.X), math.Max(e.XMax, p.X)
		e.YMin, e.YMax = math.Min(e.YMin, p.Y), math.Max(e.YMax, p.Y)
	}
}

func emptyExtent() Extent {
	return Extent{XMin: math.Inf(1), XMax: math.Inf(-1), YMin: math.Inf(1), YMax: math.Inf(-1)}
}

// Figure size on the page, and the margin kept above the title so no glyph is cut.
const (
	figureWidth     = 8 * vg.Inch
	figureHeight    = 4.5 * vg.Inch
	figureTopMargin = 6 * vg.Length(1)
)

// WriteFigures draws, into dir as PNG and SVG, the figures of Figures.
func WriteFigures(dir string, rs []Result) error {
	figs, err := Figures(rs)
	if err != nil {
		return err
	}
	for _, f := range figs {
		if err := f.save(dir); err != nil {
			return err
		}
	}
	return nil
}

// Figures returns: per message size, the mean and p99 completion time as multiples of the ideal
// against the drop rate, one line per scheme (completion-SIZE); per message size, the wire
// overhead against the drop rate (overhead-SIZE); and CREM's k and m over time where a scheme
// reported them (km). A figure with nothing to draw is left out.
func Figures(rs []Result) ([]Figure, error) {
	var sizes []int64
	for _, r := range rs {
		if !slices.Contains(sizes, r.MessageBytes) {
			sizes = append(sizes, r.MessageBytes)
		}
	}
	slices.Sort(sizes)
	var figs []Figure
	for _, n := range sizes {
		var cell []Result
		for _, r := range rs {
			if r.MessageBytes == n {
				cell = append(cell, r)
			}
		}
		name := units.FormatSize(n)
		f, ok, err := lineFigure("completion-"+name, "completion time, "+name+" (dashed: p99)",
			"slowdown over the ideal", cell, func(r Result) float64 { return r.MeanS / r.IdealS },
			func(r Result) float64 { return r.P99S / r.IdealS })
		if err != nil {
			return nil, err
		}
		if ok {
			figs = append(figs, f)
		}
		f, ok, err = lineFigure("overhead-"+name, "wire overhead, "+name,
			"bytes on the wire / message bytes", cell, func(r Result) float64 { return r.Overhead }, nil)
		if err != nil {
			return nil, err
		}
		if ok {
			figs = append(figs, f)
		}
	}
	f, ok, err := kmFigure(rs)
	if err != nil {
		return nil, err
	}
	if ok {
		figs = append(figs, f)
	}
	return figs, nil
}

// lineFigure plots y (solid) and y2 (dashed, optional) against the drop rate, one line per
// scheme; ok is false when no cell has a positive drop rate (nothing to draw on a log axis).
func lineFigure(file, title, ylabel string, rs []Result, y, y2 func(Result) float64) (fig Figure, ok bool, err error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "drop rate"
	p.Y.Label.Text = ylabel
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = roundedLogTicks{}
	legend := plot.NewLegend()
	var names []string
	for _, r := range rs {
		if !slices.Contains(names, r.Scheme) {
			names = append(names, r.Scheme)
		}
	}
	data := emptyExtent()
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
			return Figure{}, false, fmt.Errorf("sim: figure %s: %w", file, err)
		}
		c := plotutil.Color(i)
		l.Color, pts.Color, pts.Shape = c, c, plotutil.Shape(i)
		p.Add(l, pts)
		legend.Add(name, l, pts)
		data.add(xy)
		if y2 != nil {
			l2, err := plotter.NewLine(xy2)
			if err != nil {
				return Figure{}, false, fmt.Errorf("sim: figure %s: %w", file, err)
			}
			l2.Color, l2.Dashes = c, []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(l2)
			data.add(xy2)
		}
	}
	if math.IsInf(data.XMin, 0) {
		return Figure{}, false, nil
	}
	p.X.Min, p.X.Max = logRange(data.XMin, data.XMax)
	// Slowdowns span orders of magnitude (go-back-N against the rest): a log axis then keeps
	// the schemes near the ideal apart.
	if data.YMin > 0 && data.YMax/data.YMin > 10 {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = roundedLogTicks{}
		p.Y.Min, p.Y.Max = logRange(data.YMin, data.YMax)
	} else {
		p.Y.Min, p.Y.Max = linearRange(data.YMin, data.YMax)
	}
	p.Add(plotter.NewGrid())
	return Figure{Name: file, Plot: p, Legend: legend, Data: data}, true, nil
}

// logRange returns an axis range for a log scale holding lo..hi (both positive) with a margin.
func logRange(lo, hi float64) (float64, float64) {
	f := math.Max(math.Pow(hi/lo, 0.06), 1.25)
	return lo / f, hi * f
}

// linearRange returns an axis range holding lo..hi with a margin of 8% of the span (of 5% of
// the value, or 1, when every value is the same).
func linearRange(lo, hi float64) (float64, float64) {
	pad := 0.08 * (hi - lo)
	if pad == 0 {
		pad = math.Max(0.05*math.Abs(hi), 1e-9)
		if hi == 0 {
			pad = 1
		}
	}
	return lo - pad, hi + pad
}

// kmFigure plots the k and m of the first trial of each CREM cell over time, as steps: each
// value holds until the next change, the last one until the trial completed.
func kmFigure(rs []Result) (fig Figure, ok bool, err error) {
	p := plot.New()
	p.Title.Text = "CREM's k and m over time (first trial of each cell)"
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "k (solid), m (dashed)"
	legend := plot.NewLegend()
	data := emptyExtent()
	n := 0
	for _, r := range rs {
		if len(r.KM) == 0 {
			continue
		}
		end := r.KM[len(r.KM)-1].At.Seconds()
		if len(r.Completions) > 0 {
			end = math.Max(end, r.Completions[0])
		}
		var k, m plotter.XYs
		for i, e := range r.KM {
			next := end
			if i+1 < len(r.KM) {
				next = r.KM[i+1].At.Seconds()
			}
			t := e.At.Seconds()
			k = append(k, plotter.XY{X: t, Y: float64(e.K)}, plotter.XY{X: next, Y: float64(e.K)})
			m = append(m, plotter.XY{X: t, Y: float64(e.M)}, plotter.XY{X: next, Y: float64(e.M)})
		}
		lk, err := plotter.NewLine(k)
		if err != nil {
			return Figure{}, false, fmt.Errorf("sim: figure km: %w", err)
		}
		lm, err := plotter.NewLine(m)
		if err != nil {
			return Figure{}, false, fmt.Errorf("sim: figure km: %w", err)
		}
		c := plotutil.Color(n)
		lk.Color, lm.Color = c, c
		lm.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(lk, lm)
		legend.Add(fmt.Sprintf("%s %s %s", r.Scheme, units.FormatFraction(r.DropRate), units.FormatSize(r.MessageBytes)), lk)
		data.add(k)
		data.add(m)
		n++
	}
	if n == 0 {
		return Figure{}, false, nil
	}
	// Time starts at 0 and k, m are counts: both axes go a little below 0 (an m of 0 stays
	// off the axis line) and a little above the largest value.
	xmax := math.Max(data.XMax, 1e-6)
	p.X.Min, p.X.Max = -0.02*xmax, xmax*1.05
	ymax := math.Max(data.YMax, 1)
	p.Y.Min, p.Y.Max = -0.05*ymax, ymax*1.1
	p.Add(plotter.NewGrid())
	return Figure{Name: "km", Plot: p, Legend: legend, Data: data}, true, nil
}

// save writes the figure as PNG and SVG into dir.
func (f Figure) save(dir string) error {
	for _, ext := range []string{"png", "svg"} {
		c, err := draw.NewFormattedCanvas(figureWidth, figureHeight, ext)
		if err != nil {
			return fmt.Errorf("sim: figure %s: %w", f.Name, err)
		}
		f.Draw(draw.New(c))
		path := filepath.Join(dir, f.Name+"."+ext)
		w, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("sim: figure %s: %w", f.Name, err)
		}
		_, err = c.WriteTo(w)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("sim: figure %s: %w", f.Name, err)
		}
	}
	return nil
}

// Draw draws the figure on c: a white background, the plot with a margin above its title, and
// the legend in a column to the right of the plot, level with the top of the plot area.
func (f Figure) Draw(c draw.Canvas) {
	c.SetColor(color.White)
	c.Fill(c.Rectangle.Path())
	plotArea, legendArea := f.Layout(c)
	f.Plot.Draw(plotArea)
	lg := f.Legend
	lg.Top, lg.Left = true, true
	lg.Draw(legendArea)
}

// Layout splits c into the plot's area and the legend's column beside it, below the height
// of the title so the legend starts level with the plot area.
func (f Figure) Layout(c draw.Canvas) (plotArea, legendArea draw.Canvas) {
	c = draw.Crop(c, 0, 0, 0, -figureTopMargin)
	lg := f.Legend
	lg.Top, lg.Left = true, true
	width := lg.Rectangle(c).Size().X + 10
	plotArea = draw.Crop(c, 0, -width, 0, 0)
	title := f.Plot.Title.TextStyle.Rectangle(f.Plot.Title.Text).Size().Y + f.Plot.Title.Padding
	legendArea = draw.Crop(c, c.Size().X-width+6, 0, 0, -title-4)
	return plotArea, legendArea
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
