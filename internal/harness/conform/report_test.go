package conform

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func sampleReport() *Report {
	return &Report{Half: HalfCSF, Target: "127.0.0.1:50000", Elapsed: 1500 * time.Millisecond, Results: []Result{
		{Name: "csf/hello-backoff", Half: HalfCSF, Section: "Session", Status: Pass, Notes: []string{"8 HELLO attempts"}, Duration: 700 * time.Millisecond},
		{Name: "csf/request-m-within-x", Half: HalfCSF, Section: "Coded Retransmission", Status: Fail, Reason: "more symbols than lost packets",
			Expected: "M <= X = 3 symbols", Got: "4 symbols", Duration: 200 * time.Millisecond,
			Packets: []Packet{{At: 3 * time.Millisecond, Dir: "recv", Via: "crem", Peer: "127.0.0.1:50000", What: "REPAIR/0000beef", Hex: "1180002c0000beef"}}},
		{Name: "csf/path-report", Half: HalfCSF, Section: "Path Reports", Status: Skip, Optional: true, Reason: "no proactive repair", Duration: time.Millisecond},
		{Name: "csf/opt", Half: HalfCSF, Section: "Path Reports", Status: Fail, Optional: true, Reason: "optional thing", Duration: time.Millisecond},
	}}
}

func TestReportCounts(t *testing.T) {
	r := sampleReport()
	if p, f, s := r.Counts(); p != 1 || f != 2 || s != 1 {
		t.Fatalf("counts %d %d %d, want 1 2 1", p, f, s)
	}
	if !r.RequiredFailed() {
		t.Fatal("a required failure not seen")
	}
	r.Results = append(r.Results[:1], r.Results[2:]...) // only the optional failure is left
	if r.RequiredFailed() {
		t.Fatal("an optional failure counted as required")
	}
}

// The table names each scenario with its verdict and section, then the failure's expected, got
// and packets in hex, and the summary.
func TestReportTable(t *testing.T) {
	var b bytes.Buffer
	if err := sampleReport().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"PASS            csf/hello-backoff", "FAIL            csf/request-m-within-x", "SKIP            csf/path-report", "FAIL(optional)",
		"--- FAIL csf/request-m-within-x (Coded Retransmission)", "expected: M <= X = 3 symbols", "got:      4 symbols", "1180002c0000beef", "REPAIR/0000beef",
		"1 passed, 2 failed, 1 skipped"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// JSON reads back to the same report, verdicts by name.
func TestReportJSON(t *testing.T) {
	r := sampleReport()
	b, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"status": "FAIL"`)) {
		t.Fatalf("JSON verdicts not by name: %s", b)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Results) != 4 || back.Results[1].Status != Fail || back.Results[1].Packets[0].Hex != "1180002c0000beef" || back.Results[2].Status != Skip {
		t.Fatalf("JSON did not read back: %+v", back)
	}
}

// JUnit XML: one suite, a test case per scenario, failures with their body, skips marked.
func TestReportJUnit(t *testing.T) {
	var b bytes.Buffer
	if err := sampleReport().WriteJUnit(&b); err != nil {
		t.Fatal(err)
	}
	var s junitSuites
	if err := xml.Unmarshal(b.Bytes(), &s); err != nil {
		t.Fatalf("not XML: %v\n%s", err, b.String())
	}
	if len(s.Suites) != 1 {
		t.Fatalf("%d suites", len(s.Suites))
	}
	su := s.Suites[0]
	if su.Name != "crem conform csf" || su.Tests != 4 || su.Failures != 2 || su.Skipped != 1 || len(su.Cases) != 4 {
		t.Fatalf("suite %+v", su)
	}
	c := su.Cases[1]
	if c.Name != "csf/request-m-within-x" || c.Failure == nil || !strings.Contains(c.Failure.Body, "1180002c0000beef") ||
		!strings.Contains(c.Failure.Body, "expected: M <= X = 3 symbols") {
		t.Fatalf("failure case %+v", c)
	}
	if su.Cases[2].Skipped == nil || su.Cases[0].Failure != nil || su.Cases[0].Skipped != nil {
		t.Fatalf("pass and skip cases %+v %+v", su.Cases[0], su.Cases[2])
	}
	if !strings.HasPrefix(su.Cases[3].Failure.Message, "(OPTIONAL)") {
		t.Fatalf("optional failure not marked: %+v", su.Cases[3].Failure)
	}
	if !strings.HasPrefix(b.String(), "<?xml") {
		t.Fatal("no XML header")
	}
}

// The registry: names unique, each tied to a section, each with a requirement and a run.
func TestRegistry(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Scenarios() {
		if seen[s.Name] {
			t.Errorf("%s twice", s.Name)
		}
		seen[s.Name] = true
		if !strings.HasPrefix(s.Name, string(s.Half)+"/") || s.Section == "" || s.Requirement == "" || s.Sends == "" || s.Expects == "" || s.Run == nil {
			t.Errorf("%s incomplete: %+v", s.Name, s)
		}
	}
	if len(Select(Scenarios(), HalfCRF, nil)) == 0 || len(Select(Scenarios(), HalfCSF, nil)) == 0 {
		t.Fatal("a half without scenarios")
	}
}

// A configuration the runner cannot use is an ErrConfig, sockets untouched.
func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{{Half: "x"}, {Half: HalfCSF}, {Half: HalfCRF}} {
		if _, err := Run(c, Scenarios()); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// docs/conform.md's tables name every scenario of the registry, and no other.
func TestDocsNameEveryScenario(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "conform.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, s := range Scenarios() {
		if !strings.Contains(doc, "| `"+s.Name+"`") {
			t.Errorf("docs/conform.md has no row for %s", s.Name)
		}
	}
	rows := regexp.MustCompile("\\| `((?:csf|crf)/[a-z0-9-]+)`").FindAllStringSubmatch(doc, -1)
	known := map[string]bool{}
	for _, s := range Scenarios() {
		known[s.Name] = true
	}
	for _, r := range rows {
		if !known[r[1]] {
			t.Errorf("docs/conform.md has a row for %s, which is no scenario", r[1])
		}
	}
}
