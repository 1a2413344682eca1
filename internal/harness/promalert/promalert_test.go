package promalert

import (
	"strings"
	"testing"
	"time"
)

func scrape(t *testing.T, at time.Time, text string) Scrape {
	t.Helper()
	s, err := ParseText(strings.NewReader(text), at)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestParseTextReadsLabelsAndEscapes(t *testing.T) {
	s := scrape(t, time.Unix(0, 0), `# HELP x a counter
# TYPE x counter
x 3
y{reason="a \"quoted\" one",half="crf"} 2.5e3 1700000000000

z{} -1
`)
	if len(s.Series) != 3 {
		t.Fatalf("%d series, want 3: %+v", len(s.Series), s.Series)
	}
	y := s.Series[1]
	if y.Name != "y" || y.Labels["reason"] != `a "quoted" one` || y.Labels["half"] != "crf" || y.Value != 2500 {
		t.Errorf("y read as %+v", y)
	}
	if z := s.Series[2]; z.Name != "z" || len(z.Labels) != 0 || z.Value != -1 {
		t.Errorf("z read as %+v", z)
	}
	for _, bad := range []string{"x", `x{a="b" 1`, `x{a=b} 1`, "x one"} {
		if _, err := ParseText(strings.NewReader(bad), time.Time{}); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestEvaluateFollowsPromQL(t *testing.T) {
	t0 := time.Unix(1000, 0)
	before := scrape(t, t0, `
sources 100
lost{reason="no_session"} 10
lost{reason="unheld"} 5
restored 50
abandoned 0
state{flow="1"} 0
state{flow="2"} 1
mem 1000
`)
	after := scrape(t, t0.Add(10*time.Second), `
sources 1100
lost{reason="no_session"} 110
lost{reason="unheld"} 505
lost{reason="born"} 7
restored 60
abandoned 40
state{flow="1"} 2
state{flow="2"} 1
mem 2000
`)
	cases := []struct {
		expr string
		want []float64 // the vector's values, in order; nil: empty
	}{
		{"sources > 0", []float64{1100}},
		{"mem > 512 * 4", nil},
		{"mem > 2 * 2 * 2 * 2 * 100 + 300", []float64{2000}},
		{"rate(sources[5m])", []float64{100}},
		{"increase(sources[10m]) > 999", []float64{1000}},
		{"increase(sources[10m]) > 1000", nil},
		{`increase(lost{reason="no_session"}[1m])`, []float64{100}},
		{`sum(increase(lost{reason!="unheld"}[1m]))`, []float64{107}}, // a series born in between counts from 0
		{`(sum(rate(lost[1m])) - sum(rate(lost{reason="unheld"}[1m]))) / sum(rate(sources[1m]))`, []float64{0.107}},
		{"sum(rate(restored[5m])) / clamp_min(sum(rate(restored[5m])) + sum(rate(abandoned[5m])), 1e-9) < 0.5", []float64{0.2}},
		{"sum(rate(restored[5m])) / clamp_min(sum(rate(restored[5m])) + sum(rate(abandoned[5m])), 1e-9) < 0.1", nil},
		{"sum(rate(restored[5m])) < 2 and sum(rate(abandoned[5m])) > 0", []float64{1}},
		{"sum(rate(restored[5m])) < 2 and sum(rate(abandoned[5m])) > 5", nil},
		{"increase(abandoned[5m]) > 100 or increase(restored[5m]) > 0", []float64{10}},
		{"max by (instance) (state) >= 2", []float64{2}},
		{"max by (flow) (state) >= 1", []float64{2, 1}},
		{"min(state) < 1", nil},
		{"sum by (instance) (rate(abandoned[5m])) + sum by (instance) (rate(restored[5m])) > 4", []float64{5}},
		{"-sources < 0", []float64{-1100}},
		{"up == 0", nil}, // no such series: an empty vector, not an error
		{"rate(abandoned[5m]) / rate(sources[5m]) > 1e-4", []float64{0.04}},
	}
	for _, c := range cases {
		got, err := Evaluate(c.expr, before, after)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		var vals []float64
		for _, s := range got {
			vals = append(vals, s.Value)
		}
		if len(vals) != len(c.want) {
			t.Errorf("%s = %v, want %v", c.expr, vals, c.want)
			continue
		}
		for i := range vals {
			if d := vals[i] - c.want[i]; d > 1e-9 || d < -1e-9 {
				t.Errorf("%s = %v, want %v", c.expr, vals, c.want)
				break
			}
		}
	}
}

func TestEvaluateRefusesWhatItCannotRead(t *testing.T) {
	s0 := scrape(t, time.Unix(0, 0), "x 1\n")
	s1 := scrape(t, time.Unix(1, 0), "x 2\n")
	for _, expr := range []string{
		"1 > 0", // scalars compared without bool
		"histogram_quantile(0.9, x)",
		`x{a=~"b"}`,
		"x unless x",
		"rate(x)",
		"sum(x",
		"x >",
		"x ) ",
		"2",
	} {
		if _, err := Evaluate(expr, s0, s1); err == nil {
			t.Errorf("%q evaluated", expr)
		}
	}
	if _, err := Evaluate("x", s1, s0); err == nil {
		t.Error("scrapes out of order evaluated")
	}
}

func TestAlertTableReadsTheGuidesShape(t *testing.T) {
	md := []byte("# Guide\n\n### Alerts\n\nSome words.\n\n| alert | expression | for | why |\n| --- | --- | --- | --- |\n" +
		"| one | `x > 0` | 1m | because |\n| two | `sum(y{a=\"b\"}) \\| z` | 0m | a bar \\| in a cell |\n\n### Next\n\n| alert | expression | for | why |\n| three | `w` | 0m | no |\n")
	got, err := AlertTable(md, "### Alerts")
	if err != nil {
		t.Fatal(err)
	}
	want := []Alert{{"one", "x > 0", "1m"}, {"two", `sum(y{a="b"}) | z`, "0m"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if _, err := AlertTable(md, "### Missing"); err == nil {
		t.Error("a missing heading gave no error")
	}
	if _, err := AlertTable([]byte("### Alerts\n\n| alert | expression | for | why |\n| a | x | 0m | no backquotes |\n"), "### Alerts"); err == nil {
		t.Error("an expression without backquotes gave no error")
	}
}

func TestFiringNamesTheAlertsThatFire(t *testing.T) {
	s0 := scrape(t, time.Unix(0, 0), "x 1\ny 5\n")
	s1 := scrape(t, time.Unix(60, 0), "x 4\ny 5\n")
	got, err := Firing([]Alert{{Name: "x grows", Expr: "increase(x[5m]) > 0"}, {Name: "y grows", Expr: "increase(y[5m]) > 0"}}, s0, s1)
	if err != nil || len(got) != 1 || got[0] != "x grows" {
		t.Errorf("firing %q, %v; want [x grows]", got, err)
	}
	if _, err := Firing([]Alert{{Name: "bad", Expr: "x >"}}, s0, s1); err == nil || !strings.Contains(err.Error(), `"bad"`) {
		t.Errorf("an unreadable alert: %v", err)
	}
}
