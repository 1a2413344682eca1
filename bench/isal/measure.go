package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// variant is one side of a case: run performs n operations.
type variant struct {
	name string
	run  func(n int) error
	n    int       // operations per measurement, from calibrate
	wall []float64 // GB/s per round, wall clock
	cpu  []float64 // GB/s per round, the thread's CPU time
}

// benchCase is one operation on one shape with its variants; bytes is k x T, the source
// octets of the block, per operation, as fec's benchmarks count them.
type benchCase struct {
	name     string
	bytes    int
	variants []*variant
}

// calibrate warms v up and sets its n so that a measurement lasts about d.
func (v *variant) calibrate(d time.Duration) error {
	n := 1
	for {
		start := time.Now()
		if err := v.run(n); err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		el := time.Since(start)
		if el >= d/10 || n >= 1<<30 {
			v.n = max(1, int(float64(n)*float64(d)/float64(max(el, time.Microsecond))))
			return v.run(v.n)
		}
		n *= 2
	}
}

// measure runs one measurement of v and records its throughput.
func (v *variant) measure(bytes int) error {
	c0, w0 := threadCPU(), time.Now()
	if err := v.run(v.n); err != nil {
		return fmt.Errorf("%s: %w", v.name, err)
	}
	wall, cpu := time.Since(w0), threadCPU()-c0
	total := float64(v.n) * float64(bytes)
	v.wall = append(v.wall, total/wall.Seconds()/1e9)
	v.cpu = append(v.cpu, total/cpu.Seconds()/1e9)
	return nil
}

// runRounds measures every variant of every case once per round, the order of the variants
// rotating from round to round so that drift in the machine's load hits them alike.
func runRounds(cases []*benchCase, rounds int, progress io.Writer) error {
	for r := range rounds {
		for _, c := range cases {
			nv := len(c.variants)
			for i := range nv {
				if err := c.variants[(i+r)%nv].measure(c.bytes); err != nil {
					return fmt.Errorf("%s: %w", c.name, err)
				}
			}
		}
		if progress != nil {
			fmt.Fprintf(progress, "round %d of %d done\n", r+1, rounds)
		}
	}
	return nil
}

// spread is the median, least and greatest of xs.
type spread struct{ med, lo, hi float64 }

func spreadOf(xs []float64) spread {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n == 0 {
		return spread{}
	}
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return spread{med, s[0], s[n-1]}
}

func (s spread) format(unit string) string {
	return fmt.Sprintf("%.2f%s (%.2f-%.2f)", s.med, unit, s.lo, s.hi)
}

// ratios are a's throughputs over b's, round by round (both measured in the same round).
func ratios(a, b []float64) []float64 {
	out := make([]float64, min(len(a), len(b)))
	for i := range out {
		out[i] = a[i] / b[i]
	}
	return out
}

func (c *benchCase) variant(name string) *variant {
	for _, v := range c.variants {
		if v.name == name {
			return v
		}
	}
	return nil
}

// writeTables writes the throughput table (wall clock, median and range over the rounds, and
// the CPU-time median) and the ratio table: each crem path over each ISA-L variant of the case.
func writeTables(w io.Writer, cases []*benchCase, names []string, refs []string) {
	fmt.Fprintf(w, "| case | %s |\n", strings.Join(names, " | "))
	fmt.Fprintf(w, "| --- |%s\n", strings.Repeat(" ---: |", len(names)))
	for _, c := range cases {
		row := []string{c.name}
		for _, n := range names {
			v := c.variant(n)
			if v == nil {
				row = append(row, "")
				continue
			}
			row = append(row, fmt.Sprintf("%s, cpu %.2f", spreadOf(v.wall).format(""), spreadOf(v.cpu).med))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "| case | crem path | %s |\n", strings.Join(prefixed("/ ", refs), " | "))
	fmt.Fprintf(w, "| --- | --- |%s\n", strings.Repeat(" ---: |", len(refs)))
	for _, c := range cases {
		for _, v := range c.variants {
			if !strings.HasPrefix(v.name, "crem-") {
				continue
			}
			row := []string{c.name, v.name}
			for _, rn := range refs {
				ref := c.variant(rn)
				if ref == nil {
					row = append(row, "")
					continue
				}
				row = append(row, fmt.Sprintf("%s, cpu %.2fx", spreadOf(ratios(v.wall, ref.wall)).format("x"),
					spreadOf(ratios(v.cpu, ref.cpu)).med))
			}
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		}
	}
}

func prefixed(p string, xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = p + x
	}
	return out
}
