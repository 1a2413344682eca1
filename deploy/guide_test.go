package deploy

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const userGuide = "../docs/user-guide.md"

// expandNames expands a metric name written as the user guide writes groups: {a,b} for each
// of a and b (an empty alternative included).
func expandNames(tok string) []string {
	if i := strings.IndexByte(tok, '{'); i >= 0 {
		j := strings.IndexByte(tok[i:], '}')
		if j < 0 {
			return []string{tok}
		}
		var out []string
		for _, alt := range strings.Split(tok[i+1:i+j], ",") {
			out = append(out, expandNames(tok[:i]+alt+tok[i+j+1:])...)
		}
		return out
	}
	return []string{tok}
}

var (
	codeSpan   = regexp.MustCompile("`[^`]*`")
	metricWord = regexp.MustCompile(`crem_(?:csf|crf|gateway|pairing|build)_[a-zA-Z_{},]*`)
	// A label set or list where it ends a name: {half="csf"}, {src,dst,qp}, {reason}, {table="a"\|"b"}.
	labels = regexp.MustCompile(`\{[a-z_]+(=~?"[^"]*"|=[^,}]*)?(,[a-z_]+(=~?"[^"]*")?)*\}(\s|$|\)|\[|,|\\|\||` + "`" + `)`)
	// One label of such a set: its name, and the values an = names ("a", or "a"\|"b").
	labelItem = regexp.MustCompile(`([a-z_]+)(?:(=~?)([^,}]*))?`)
	quoted    = regexp.MustCompile(`"([^"]*)"`)
)

// guideLabels parses a label set as the guide writes it: each label's name, with the values
// an = names (none for a list such as {src,dst,qp} or a regular expression =~).
func guideLabels(set string) map[string][]string {
	out := map[string][]string{}
	for _, m := range labelItem.FindAllStringSubmatch(strings.Trim(set, "{}"), -1) {
		var vals []string
		if m[2] == "=" {
			for _, q := range quoted.FindAllStringSubmatch(m[3], -1) {
				vals = append(vals, q[1])
			}
		}
		out[m[1]] = vals
	}
	return out
}

// exportedLabels returns, for every series name of a Prometheus text exposition, the values
// each of its labels takes.
func exportedLabels(text string) map[string]map[string]map[string]bool {
	out := map[string]map[string]map[string]bool{}
	pair := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		n := strings.IndexAny(line, "{ ")
		if n <= 0 {
			continue
		}
		name := line[:n]
		if out[name] == nil {
			out[name] = map[string]map[string]bool{}
		}
		if line[n] != '{' {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		for _, m := range pair.FindAllStringSubmatch(line[n+1:max(end, n+1)], -1) {
			if out[name][m[1]] == nil {
				out[name][m[1]] = map[string]bool{}
			}
			out[name][m[1]][m[2]] = true
		}
	}
	return out
}

// TestUserGuideMetricsExported: every crem_ metric the user guide names (its groups expanded)
// is one a live gateway exports, with the labels the guide gives it (and the label values it
// names, as in {socket="tun"}), and the guide names every crem_ metric the gateway exports.
// Skips where docs/user-guide.md is absent.
func TestUserGuideMetricsExported(t *testing.T) {
	b, err := os.ReadFile(userGuide)
	if err != nil {
		t.Skipf("no %s: %v", userGuide, err)
	}
	names, series := liveSeries(t)
	problems := checkGuide(string(b), names, series, true)
	for _, p := range problems {
		t.Error("the user guide " + p)
	}
	// Wrong on purpose: a name from before the socket became a label, a label the metric does
	// not have, a label value it never takes.
	for _, bad := range []string{"`crem_gateway_socket_drops_wan_total`", "`crem_gateway_packets_total{sock}`",
		"`crem_gateway_packets_total{socket=\"eth0\"}`"} {
		if p := checkGuide(bad, names, series, false); len(p) == 0 {
			t.Errorf("%s: not caught", bad)
		}
	}
}

// ref is a metric the docs name: its name (a group expanded), the word it came from and the
// labels given it.
type ref struct {
	name, from string
	labels     map[string][]string
}

// refs returns every crem_ metric the code spans of text name.
func refs(text string) []ref {
	var out []ref
	for _, span := range codeSpan.FindAllString(text, -1) {
		// The label set that ends a name is not part of it: {half="csf"}, {src,dst,qp}.
		sets := map[int]string{} // where the name ends (in the span without label sets) -> its set
		var stripped strings.Builder
		last := 0
		for _, m := range labels.FindAllStringSubmatchIndex(span, -1) {
			stripped.WriteString(span[last:m[0]])
			sets[stripped.Len()] = span[m[0]:m[8]]
			stripped.WriteString(span[m[8]:m[9]])
			last = m[1]
		}
		stripped.WriteString(span[last:])
		s := stripped.String()
		for _, loc := range metricWord.FindAllStringIndex(s, -1) {
			w := strings.TrimRight(s[loc[0]:loc[1]], ",{")
			if strings.HasSuffix(w, "_") {
				continue // a prefix: crem_csf_*
			}
			for _, n := range expandNames(w) {
				if !strings.HasSuffix(n, "_") { // a prefix such as crem_csf_
					out = append(out, ref{n, w, guideLabels(sets[loc[1]])})
				}
			}
		}
	}
	return out
}

// checkGuide returns a line for every metric text names that the gateway does not export, or
// not with the labels (and values) the text gives it; and, if complete, for every crem_ metric
// exported that the text does not name.
func checkGuide(text string, names map[string]bool, series map[string]map[string]map[string]bool, complete bool) []string {
	var problems []string
	named := map[string]bool{}
	for _, r := range refs(text) {
		n := r.name
		named[n] = true
		if !names[n] {
			problems = append(problems, fmt.Sprintf("names %s (from %s), which the gateway does not export", n, r.from))
			continue
		}
		for l, vals := range r.labels {
			got, ok := series[n][l]
			if !ok {
				problems = append(problems, fmt.Sprintf("gives %s the label %s, which it does not have", n, l))
				continue
			}
			for _, v := range vals {
				if !got[v] {
					problems = append(problems, fmt.Sprintf("names %s{%s=%q}, which the gateway does not export", n, l, v))
				}
			}
		}
	}
	if complete {
		for n := range names {
			if strings.HasPrefix(n, "crem_") && !named[n] {
				problems = append(problems, fmt.Sprintf("does not name %s", n))
			}
		}
	}
	slices.Sort(problems)
	return problems
}

// liveSeries scrapes a live relay pair: every series name exported, and the values of each
// series' labels.
func liveSeries(t *testing.T) (map[string]bool, map[string]map[string]map[string]bool) {
	a, bb := livePair(t)
	names := map[string]bool{}
	series := map[string]map[string]map[string]bool{}
	for _, text := range []string{a, bb} {
		n, err := exported(text)
		if err != nil {
			t.Fatal(err)
		}
		for k := range n {
			names[k] = true
		}
		for name, ls := range exportedLabels(text) {
			if series[name] == nil {
				series[name] = map[string]map[string]bool{}
			}
			for l, vs := range ls {
				if series[name][l] == nil {
					series[name][l] = map[string]bool{}
				}
				for v := range vs {
					series[name][l][v] = true
				}
			}
		}
	}
	return names, series
}

const gatewayDoc = "../docs/gateway.md"

// TestRenamedMetricsTable: the table of metrics renamed in docs/gateway.md holds: no name (or
// label value) on its left is exported any more, and every name on its right is, with the
// labels and values it gives. Skips where docs/gateway.md is absent.
func TestRenamedMetricsTable(t *testing.T) {
	b, err := os.ReadFile(gatewayDoc)
	if err != nil {
		t.Skipf("no %s: %v", gatewayDoc, err)
	}
	_, table, ok := strings.Cut(string(b), "### Metrics renamed")
	if !ok {
		t.Fatalf("%s has no section Metrics renamed", gatewayDoc)
	}
	if i := strings.Index(table, "\n#"); i >= 0 {
		table = table[:i]
	}
	names, series := liveSeries(t)
	rows := 0
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| `") || len(cells) != 2 {
			continue
		}
		for _, sock := range []string{"crem", "local", "wan", "tun"} {
			before, now := strings.ReplaceAll(cells[0], "SOCK", sock), strings.ReplaceAll(cells[1], "SOCK", sock)
			for _, r := range refs(before) {
				rows++
				gone := !names[r.name]
				for l, vals := range r.labels {
					gone = true
					for _, v := range vals {
						if series[r.name][l][v] {
							gone = false
						}
					}
				}
				if !gone {
					t.Errorf("%s %v: still exported", r.name, r.labels)
				}
			}
			for _, p := range checkGuide(now, names, series, false) {
				t.Errorf("the table of renamed metrics %s", p)
			}
			if !strings.Contains(line, "SOCK") {
				break
			}
		}
	}
	if rows < 30 {
		t.Errorf("%d old names in the table, want 30 and more", rows)
	}
}
