package kdrop

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestUserGuideNamesEveryMetric: every metric crem reporter exports is named in the user
// guide, and the guide names no crem_reporter_ metric that does not exist.
func TestUserGuideNamesEveryMetric(t *testing.T) {
	b, err := os.ReadFile("../../docs/user-guide.md")
	if err != nil {
		t.Skipf("no user guide: %v", err)
	}
	guide := string(b)
	ch := make(chan *prometheus.Desc, 64)
	NewCollector(&Driver{}, nil, nil, "").Describe(ch)
	close(ch)
	have := map[string]bool{}
	for d := range ch {
		name := regexp.MustCompile(`fqName: "([a-z_]+)"`).FindStringSubmatch(d.String())[1]
		have[name] = true
		if !strings.Contains(guide, "`"+name) && !strings.Contains(guide, name+"`") && !strings.Contains(guide, name+"{") {
			t.Errorf("the user guide does not name %s", name)
		}
	}
	for _, n := range regexp.MustCompile(`crem_reporter_[a-z_]+`).FindAllString(guide, -1) {
		if !have[n] {
			t.Errorf("the user guide names %s, which crem reporter does not export", n)
		}
	}
}
