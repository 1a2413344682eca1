package deploy

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/internal/harness/promalert"
)

// TestGuideAlertsEvaluate: every alert of the user guide's table reads as PromQL the
// evaluator understands, over two scrapes of each gateway of a live relay pair, and none
// fires on a pair that carried a clean flow. The crash and forgery tests of cmd/crem evaluate
// the same table over their runs; an alert written in PromQL the evaluator cannot read would
// otherwise be checked nowhere. Skips where docs/user-guide.md is absent.
func TestGuideAlertsEvaluate(t *testing.T) {
	md, err := os.ReadFile(userGuide)
	if err != nil {
		t.Skipf("no %s: %v", userGuide, err)
	}
	alerts, err := promalert.AlertTable(md, "### Alerts")
	if err != nil {
		t.Fatal(err)
	}
	if len(alerts) < 20 {
		t.Errorf("%d alerts read from the guide, want its 20 and more", len(alerts))
	}
	a, b := livePair(t)
	for name, text := range map[string]string{"A": a, "B": b} {
		t0 := time.Now()
		before, err := promalert.ParseText(strings.NewReader(text), t0)
		if err != nil {
			t.Fatal(err)
		}
		after, err := promalert.ParseText(strings.NewReader(text), t0.Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		firing, err := promalert.Firing(alerts, before, after)
		if err != nil {
			t.Errorf("gateway %s: %v", name, err)
		}
		if len(firing) > 0 {
			t.Errorf("gateway %s, nothing changing between the scrapes: %q fire", name, firing)
		}
	}
}
