package deploy

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

const userGuide = "../docs/user-guide.md"

// expandNames expands a metric name written as the user guide writes groups: {a,b} for each
// of a and b (an empty alternative included), SOCK for each socket kind.
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
	if strings.Contains(tok, "SOCK") {
		var out []string
		for _, k := range []string{"crem", "local", "wan", "tun"} {
			out = append(out, strings.ReplaceAll(tok, "SOCK", k))
		}
		return out
	}
	return []string{tok}
}

var (
	codeSpan   = regexp.MustCompile("`[^`]*`")
	metricWord = regexp.MustCompile(`crem_(?:csf|crf|gateway|pairing)_[a-zA-Z_{},]*`)
	// A label set or list where it ends a name: {half="csf"}, {src,dst,qp}, {reason}.
	labels = regexp.MustCompile(`\{[a-z_]+(=~?"[^"]*"|=[^,}]*)?(,[a-z_]+(=~?"[^"]*")?)*\}(\s|$|\)|\[|,|\\|\||` + "`" + `)`)
)

// TestUserGuideMetricsExported: every crem_ metric the user guide names (its groups expanded)
// is one a live gateway exports, and the guide names every crem_ metric the gateway exports.
// Skips where docs/user-guide.md is absent.
func TestUserGuideMetricsExported(t *testing.T) {
	b, err := os.ReadFile(userGuide)
	if err != nil {
		t.Skipf("no %s: %v", userGuide, err)
	}
	a, bb := livePair(t)
	names := map[string]bool{}
	for _, text := range []string{a, bb} {
		n, err := exported(text)
		if err != nil {
			t.Fatal(err)
		}
		for k := range n {
			names[k] = true
		}
	}
	named := map[string]bool{}
	for _, span := range codeSpan.FindAllString(string(b), -1) {
		// Label matchers and label lists are not part of names: {half="csf"}, {src,dst,qp}.
		span = labels.ReplaceAllString(span, "$4")
		for _, w := range metricWord.FindAllString(span, -1) {
			w = strings.TrimRight(w, ",{")
			if strings.HasSuffix(w, "_") {
				continue // a prefix: crem_csf_*
			}
			for _, n := range expandNames(w) {
				if strings.HasSuffix(n, "_") {
					continue // a prefix such as crem_csf_
				}
				named[n] = true
				if !names[n] {
					t.Errorf("the user guide names %s (from %s), which the gateway does not export", n, w)
				}
			}
		}
	}
	for n := range names {
		if strings.HasPrefix(n, "crem_") && !named[n] {
			t.Errorf("the user guide does not name %s", n)
		}
	}
}
