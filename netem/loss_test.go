package netem

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

const draws = 1_000_000

func mustModel(t fataler, spec string, seed uint64) LossModel {
	t.Helper()
	m, err := ParseLossModel(spec, seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// sigmaPerDraw is the asymptotic standard deviation of one draw's share of the loss count: for a
// Gilbert-Elliott chain the losses are correlated through the state, which inflates the variance
// of their sum by 2(h-k)^2 piG piB lambda/(1-lambda), lambda = 1-p-r.
func sigmaPerDraw(m LossModel) float64 {
	mean := m.MeanLoss()
	v := mean * (1 - mean)
	if g, ok := m.(*Gilbert); ok {
		p, r, h, k := g.Params()
		piB := p / (p + r)
		lambda := 1 - p - r
		if lambda < 1 {
			v += 2 * (h - k) * (h - k) * piB * (1 - piB) * lambda / (1 - lambda)
		}
	}
	return math.Sqrt(v)
}

// TestLossModelRates draws 1e6 packets from each model and checks the loss count lies within five
// standard deviations of the model's mean (exactly on it for every:).
func TestLossModelRates(t *testing.T) {
	specs := []string{
		"bernoulli:0.01",
		"bernoulli:1e-4",
		"0.05",
		"3%",
		"gilbert:p=0.001,r=0.25",
		"gilbert:p=0.01,r=0.5,h=0.5,k=0.001",
		"gilbert-burst:rate=0.01,burst=4",
		"gilbert-burst:rate=0.001,burst=1",
		"every:n=1,of=1000",
		"every:n=3,of=7",
		"none",
	}
	for _, spec := range specs {
		m := mustModel(t, spec, 42)
		lost := 0
		for range draws {
			if m.Drop() {
				lost++
			}
		}
		want := m.MeanLoss() * draws
		tol := 5 * sigmaPerDraw(m) * math.Sqrt(draws)
		if _, ok := m.(*Every); ok {
			tol = 1 // an exact count per window
		}
		if math.Abs(float64(lost)-want) > tol {
			t.Errorf("%s: %d losses in %d draws, want %.0f +- %.0f", spec, lost, draws, want, tol)
		}
	}
}

// runs returns the mean lengths of loss bursts and of gaps between them.
func runs(m LossModel, n int) (burst, gap float64) {
	var bursts, gaps, inBurst, inGap int
	prev := false
	for i := range n {
		lost := m.Drop()
		if i > 0 && lost != prev {
			if prev {
				bursts++
			} else {
				gaps++
			}
		}
		if lost {
			inBurst++
		} else {
			inGap++
		}
		prev = lost
	}
	return float64(inBurst) / float64(bursts), float64(inGap) / float64(gaps)
}

// TestGilbertBurstLengths checks that with h=1, k=0 loss bursts are stays in the bad state, of
// mean 1/r, and gaps stays in the good state, of mean 1/p; gilbert-burst sets r = 1/burst.
func TestGilbertBurstLengths(t *testing.T) {
	for _, c := range []struct {
		spec       string
		burst, gap float64
	}{
		{"gilbert-burst:rate=0.01,burst=4", 4, 4 * 0.99 / 0.01},
		{"gilbert:p=0.002,r=0.1", 10, 500},
	} {
		const n = 4 * draws
		m := mustModel(t, c.spec, 7)
		burst, gap := runs(m, n)
		nb := c.burst / (c.burst + c.gap) * n / c.burst // expected number of bursts
		// Geometric run lengths: sd sqrt(1-q)/q for mean 1/q; five standard errors.
		tolB := 5 * math.Sqrt(c.burst*c.burst-c.burst) / math.Sqrt(nb)
		tolG := 5 * math.Sqrt(c.gap*c.gap-c.gap) / math.Sqrt(nb)
		if math.Abs(burst-c.burst) > tolB {
			t.Errorf("%s: mean burst %.3f, want %v +- %.3f", c.spec, burst, c.burst, tolB)
		}
		if math.Abs(gap-c.gap) > tolG {
			t.Errorf("%s: mean gap %.1f, want %v +- %.1f", c.spec, gap, c.gap, tolG)
		}
	}
}

func TestGilbertBurstConversion(t *testing.T) {
	g, err := NewGilbertBurst(0.01, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	p, r, h, k := g.Params()
	if r != 0.25 || math.Abs(p-0.01/(4*0.99)) > 1e-18 || h != 1 || k != 0 {
		t.Errorf("params p=%v r=%v h=%v k=%v", p, r, h, k)
	}
	if math.Abs(g.MeanLoss()-0.01) > 1e-15 {
		t.Errorf("mean %v, want 0.01", g.MeanLoss())
	}
	if _, err := NewGilbertBurst(0.9, 4, 1); err == nil || !strings.Contains(err.Error(), "too high") {
		t.Errorf("rate 0.9 with burst 4 accepted: %v", err)
	}
	if _, err := NewGilbertBurst(0.8, 4, 1); err != nil {
		t.Errorf("rate 0.8 = 4/5 with burst 4 refused: %v", err)
	}
	if _, err := NewGilbertBurst(0.01, 0.5, 1); err == nil {
		t.Error("burst 0.5 accepted")
	}
}

// TestEveryExactlyNPerWindow checks every window of N packets loses exactly n, at positions that
// change from window to window.
func TestEveryExactlyNPerWindow(t *testing.T) {
	for _, c := range []struct{ n, of int }{{1, 1000}, {3, 7}, {0, 10}, {10, 10}, {5, 64}, {40, 129}} {
		m, err := NewEvery(c.n, c.of, 99)
		if err != nil {
			t.Fatal(err)
		}
		positions := map[int]bool{}
		for w := range 1000 {
			lost := 0
			for i := range c.of {
				if m.Drop() {
					lost++
					if c.n == 1 {
						positions[i] = true
					}
				}
			}
			if lost != c.n {
				t.Fatalf("every:n=%d,of=%d: window %d lost %d", c.n, c.of, w, lost)
			}
		}
		if c.n == 1 && len(positions) < 500 {
			t.Errorf("every:n=1,of=%d: only %d distinct positions in 1000 windows", c.of, len(positions))
		}
	}
}

func TestScriptDropsExactly(t *testing.T) {
	m := mustModel(t, "script:3,17,18", 0)
	var got []int
	for i := range 1000 {
		if m.Drop() {
			got = append(got, i)
		}
	}
	if !slices.Equal(got, []int{3, 17, 18}) {
		t.Errorf("dropped %v, want [3 17 18]", got)
	}
	s, err := NewScript([]int{18, 3, 17, 3})
	if err != nil || s.String() != "script:3,17,18" || s.MeanLoss() != 3.0/19 {
		t.Errorf("unsorted script: %v %v %v", s, err, s.MeanLoss())
	}
	if e := mustModel(t, "script:", 0); e.Drop() || e.MeanLoss() != 0 {
		t.Error("empty script drops")
	}
}

// TestLossDeterminism: the same seed gives the same losses, another seed other losses.
func TestLossDeterminism(t *testing.T) {
	for _, spec := range []string{"0.01", "gilbert:p=0.01,r=0.3", "gilbert:p=0.01,r=0.3,h=0.7,k=0.01",
		"gilbert-burst:rate=0.02,burst=3", "every:n=2,of=100"} {
		seq := func(seed uint64) []int {
			m := mustModel(t, spec, seed)
			var out []int
			for i := range 100_000 {
				if m.Drop() {
					out = append(out, i)
				}
			}
			return out
		}
		a, b, c := seq(1), seq(1), seq(2)
		if !slices.Equal(a, b) {
			t.Errorf("%s: seed 1 gave two different loss sequences", spec)
		}
		if slices.Equal(a, c) {
			t.Errorf("%s: seeds 1 and 2 gave the same loss sequence", spec)
		}
	}
}

// TestSpecRoundTrip: a model's String parses back to a model with the same losses.
func TestSpecRoundTrip(t *testing.T) {
	cases := map[string]string{
		"none":                               "none",
		"0.01":                               "bernoulli:0.01",
		"1%":                                 "bernoulli:0.01",
		"bernoulli:1e-4":                     "bernoulli:0.0001",
		"Bernoulli:p=1e-6":                   "bernoulli:1e-6",
		"gilbert:p=0.001,r=0.25":             "gilbert:p=0.001,r=0.25",
		"gilbert:r=0.25,p=0.001,h=1,k=0":     "gilbert:p=0.001,r=0.25",
		"gilbert:p=0.01, r=0.5, h=0.5, k=1%": "gilbert:p=0.01,r=0.5,h=0.5,k=0.01",
		"gilbert-elliott:p=0.1,r=0.5":        "gilbert:p=0.1,r=0.5",
		"gilbert-burst:rate=0.01,burst=4":    "gilbert-burst:rate=0.01,burst=4",
		"gilbert-burst:burst=2.5,rate=1e-3":  "gilbert-burst:rate=0.001,burst=2.5",
		"every:n=1,of=1000":                  "every:n=1,of=1000",
		"every:of=10,n=0":                    "every:n=0,of=10",
		"script:18,3,17":                     "script:3,17,18",
		" script: 1, 2 ":                     "script:1,2",
	}
	for in, want := range cases {
		s, err := ParseLossSpec(in)
		if err != nil {
			t.Errorf("ParseLossSpec(%q): %v", in, err)
			continue
		}
		if s.String() != want {
			t.Errorf("ParseLossSpec(%q).String() = %q, want %q", in, s.String(), want)
		}
		back, err := ParseLossSpec(s.String())
		if err != nil {
			t.Errorf("re-parse %q: %v", s.String(), err)
			continue
		}
		if back.MeanLoss() != s.MeanLoss() {
			t.Errorf("%q: mean %v after round trip, was %v", in, back.MeanLoss(), s.MeanLoss())
		}
		m1, m2 := s.New(5), back.New(5)
		for i := range 10_000 {
			if m1.Drop() != m2.Drop() {
				t.Errorf("%q: packet %d decided differently after round trip", in, i)
				break
			}
		}
	}
	var zero LossSpec
	if zero.String() != "none" || zero.MeanLoss() != 0 || zero.New(1).Drop() {
		t.Error("zero LossSpec is not none")
	}
}

func TestParseLossSpecErrors(t *testing.T) {
	for _, c := range []struct{ in, why string }{
		{"", "empty"},
		{"lots", "neither"},
		{"-0.01", "negative"},
		{"1.5", "above 1"},
		{"bernoulli:", "empty"},
		{"bernoulli:2", "above 1"},
		{"gilbert:p=0.1", "missing r="},
		{"gilbert:p=0.1,r=0.2,x=1", "unknown parameter"},
		{"gilbert:p=0.1,p=0.2,r=0.2", "twice"},
		{"gilbert:p=0,r=0", "never moves"},
		{"gilbert:p=0.1,r", "not name=value"},
		{"gilbert-burst:rate=0.01", "missing burst"},
		{"gilbert-burst:rate=0.9,burst=2", "too high"},
		{"gilbert-burst:rate=0.01,burst=x", "not a number"},
		{"every:n=2,of=1", "between 0 and of"},
		{"every:n=1,of=0", "between 1"},
		{"every:n=-1,of=10", "not a count"},
		{"every:n=1", "missing of="},
		{"script:1,x", "not a packet index"},
		{"script:1,,2", "not a packet index"},
		{"script:-1", "not a packet index"},
		{"none:1", "no parameters"},
		{"pareto:1", "unknown kind"},
	} {
		_, err := ParseLossSpec(c.in)
		if err == nil {
			t.Errorf("ParseLossSpec(%q) accepted", c.in)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, `loss model "`+c.in+`"`) || !strings.Contains(msg, c.why) {
			t.Errorf("ParseLossSpec(%q) error %q; want it to name the input and say %q", c.in, msg, c.why)
		}
	}
}

func TestLossSpecFlag(t *testing.T) {
	var s LossSpec
	if err := s.Set("gilbert-burst:rate=0.01,burst=4"); err != nil || s.String() != "gilbert-burst:rate=0.01,burst=4" {
		t.Errorf("Set: %v, %v", s, err)
	}
	if err := s.Set("nope:1"); err == nil {
		t.Error("Set accepted junk")
	}
}

// TestEveryAndScriptProperty: for any window and count, every window loses exactly n; for any
// list of indices, a script loses exactly those.
func TestEveryAndScriptProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		of := rapid.IntRange(1, 300).Draw(rt, "of")
		n := rapid.IntRange(0, of).Draw(rt, "n")
		m, err := ParseLossModel(fmt.Sprintf("every:n=%d,of=%d", n, of), rapid.Uint64().Draw(rt, "seed"))
		if err != nil {
			rt.Fatal(err)
		}
		for w := range 5 {
			lost := 0
			for range of {
				if m.Drop() {
					lost++
				}
			}
			if lost != n {
				rt.Fatalf("window %d lost %d, want %d", w, lost, n)
			}
		}

		idx := rapid.SliceOfN(rapid.IntRange(0, 500), 1, 30).Draw(rt, "indices")
		parts := make([]string, len(idx))
		for i, v := range idx {
			parts[i] = strconv.Itoa(v)
		}
		s := mustModel(rt, "script:"+strings.Join(parts, ","), 0)
		want := slices.Compact(slices.Sorted(slices.Values(idx)))
		var got []int
		for i := range 600 {
			if s.Drop() {
				got = append(got, i)
			}
		}
		if !slices.Equal(got, want) {
			rt.Fatalf("script %v dropped %v", idx, got)
		}
	})
}
