//go:build linux

package main

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/crem-project/crem/internal/harness/promalert"
)

// scrape reads a gateway's /metrics for the alert evaluator.
func (p *restartPair) scrape(name string) promalert.Scrape {
	p.t.Helper()
	host := map[string]int{"a": 2, "b": 5}[name]
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://%s:%d/metrics", p.addr(host), p.port(4)))
	if err != nil {
		p.t.Fatalf("scraping %s: %v", name, err)
	}
	defer resp.Body.Close()
	s, err := promalert.ParseText(resp.Body, time.Now())
	if err != nil {
		p.t.Fatalf("scraping %s: %v", name, err)
	}
	return s
}

// total sums a scrape's series of one metric.
func total(s promalert.Scrape, name string) float64 {
	var n float64
	for _, se := range s.Series {
		if se.Name == name {
			n += se.Value
		}
	}
	return n
}

// forgedCount is crem netem's count of forged REPAIRs on its stats lines.
var forgedCount = regexp.MustCompile(`\| forged (\d+)`)

// guideAlerts reads the user guide's alert table.
func guideAlerts(t *testing.T) []promalert.Alert {
	t.Helper()
	md, err := os.ReadFile("../../docs/user-guide.md")
	if err != nil {
		t.Skipf("no docs/user-guide.md beside the package: %v", err)
	}
	alerts, err := promalert.AlertTable(md, "### Alerts")
	if err != nil {
		t.Fatal(err)
	}
	return alerts
}

// TestForgedDefinitionsRelayPair: the crash tests' relay pair (real processes, 20 ms round
// trip, 3 % loss each way, crem perf write in tcaeth mode), once clean and once with crem
// netem between A and B forging every block's first REPAIR (--forge-definitions: the same
// Flow ID and Config ID from A's address, the block defined another way, random symbols). Every
// byte verifies in both runs; under forgery B restores at least 90 % of the share of lost
// packets it restores without it (E66-E68: both definitions kept, the evidence decides); and
// the user guide's alerts, evaluated over each gateway's scrapes before and after the
// transfer, say so: "forged block definitions" fires on B under forgery and not without,
// "protection falls: restored against lost" fires in neither, and nothing else fires on B
// without a forger.
func TestForgedDefinitionsRelayPair(t *testing.T) {
	if testing.Short() {
		t.Skip("two transfers through a relay pair of real processes, some 15 s")
	}
	alerts := guideAlerts(t)
	type outcome struct {
		restored, abandoned, mismatches, conflicts, condemned, contradicted, forged float64
		firing                                                                      map[string][]string
	}
	run := func(forge bool) outcome {
		var flags []string
		if forge {
			flags = []string{"--forge-definitions", "--stats-interval", "200ms"}
		}
		p := newRestartPair(t, flags...)
		before := map[string]promalert.Scrape{"a": p.scrape("a"), "b": p.scrape("b")}
		p.write(20)
		if !p.verified(90 * time.Second) {
			t.Fatalf("forge=%v: the transfer did not verify:\nA: %s\nB: %s", forge, p.logs["a"], p.logs["b"])
		}
		time.Sleep(250 * time.Millisecond) // the metrics are published every 100 ms
		o := outcome{firing: map[string][]string{}}
		after := map[string]promalert.Scrape{"a": p.scrape("a"), "b": p.scrape("b")}
		for _, g := range []string{"a", "b"} {
			f, err := promalert.Firing(alerts, before[g], after[g])
			if err != nil {
				t.Fatal(err)
			}
			o.firing[g] = f
		}
		b := after["b"]
		o.restored, o.abandoned = total(b, "crem_crf_flows_restored_total"), total(b, "crem_crf_flows_abandoned_total")
		o.mismatches = total(b, "crem_crf_flows_icrc_mismatch_total")
		o.conflicts = total(b, "crem_crf_flows_definition_conflicts_total")
		o.condemned = total(b, "crem_crf_flows_definitions_condemned_total")
		o.contradicted = total(b, "crem_crf_flows_definitions_contradicted_total")
		p.stop()
		if m := forgedCount.FindAllStringSubmatch(p.logs["netem-ab"].String(), -1); len(m) > 0 {
			o.forged, _ = strconv.ParseFloat(m[len(m)-1][1], 64) // the last stats line's
		}
		return o
	}
	clean, forged := run(false), run(true)
	share := func(o outcome) float64 { return o.restored / max(o.restored+o.abandoned, 1) }
	ratio := share(forged) / max(share(clean), 1e-9)
	t.Logf("clean: %v restored, %v abandoned (%.3f); forged (%v REPAIRs forged): %v restored, %v abandoned (%.3f): ratio %.3f; "+
		"definitions conflicting %v, condemned %v, contradicted %v, ICRC mismatches %v (clean %v)",
		clean.restored, clean.abandoned, share(clean), forged.forged, forged.restored, forged.abandoned, share(forged), ratio,
		forged.conflicts, forged.condemned, forged.contradicted, forged.mismatches, clean.mismatches)
	t.Logf("alerts firing, clean: A %q, B %q; forged: A %q, B %q", clean.firing["a"], clean.firing["b"], forged.firing["a"], forged.firing["b"])
	if clean.restored == 0 {
		t.Fatal("the clean run restored nothing: nothing to compare")
	}
	if forged.conflicts == 0 {
		t.Fatal("no conflicting definition reached B: the forger did not run")
	}
	if ratio < 0.9 {
		t.Errorf("under forgery B restored %.3f of lost packets, %.3f of the clean run's %.3f: want 0.9 or more", share(forged), ratio, share(clean))
	}
	const forgery, fall = "forged block definitions", "protection falls: restored against lost"
	if !slices.Contains(forged.firing["b"], forgery) {
		t.Errorf("%q does not fire on B under forgery (condemned %v, contradicted %v)", forgery, forged.condemned, forged.contradicted)
	}
	if slices.Contains(clean.firing["b"], forgery) {
		t.Errorf("%q fires on B without a forger", forgery)
	}
	for name, o := range map[string]outcome{"clean": clean, "forged": forged} {
		if slices.Contains(o.firing["b"], fall) {
			t.Errorf("%s run: %q fires on B", name, fall)
		}
	}
	// Without a forger nothing fires on B; on A only what a short run on this path explains:
	// the first sources cross before the HELLO_ACK (a 10-minute "for" keeps that quiet in
	// production), and k = 32, m = 4 in blocks the pacing closes early asks for more repair
	// than repair_fraction (0.5) grants.
	if len(clean.firing["b"]) > 0 {
		t.Errorf("clean run: alerts fire on B: %q", clean.firing["b"])
	}
	for _, a := range clean.firing["a"] {
		if a != "sources unprotected" && a != "repair budget" {
			t.Errorf("clean run: %q fires on A", a)
		}
	}
}
