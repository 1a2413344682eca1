package conform

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable writes the report for a reader: one line per scenario, then, for each failure,
// what was expected, what came and the packets in hex, and a summary line.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "STATUS\tSCENARIO\tSECTION\tTIME\tDETAIL\n")
	for _, x := range r.Results {
		detail := x.Reason
		if x.Status == Pass && len(x.Notes) > 0 {
			detail = x.Notes[len(x.Notes)-1]
		}
		st := x.Status.String()
		if x.Status == Fail && x.Optional {
			st = "FAIL(optional)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", st, x.Name, x.Section, x.Duration.Round(time.Millisecond), oneLine(detail))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, x := range r.Results {
		if x.Status != Fail {
			continue
		}
		fmt.Fprintf(w, "\n--- FAIL %s (%s)\n", x.Name, x.Section)
		writeFailure(w, x, "    ")
	}
	p, f, s := r.Counts()
	_, err := fmt.Fprintf(w, "\n%s %s: %d passed, %d failed, %d skipped in %s\n", r.Half, r.Target, p, f, s, r.Elapsed.Round(time.Millisecond))
	return err
}

func writeFailure(w io.Writer, x Result, indent string) {
	fmt.Fprintf(w, "%sreason:   %s\n", indent, x.Reason)
	if x.Expected != "" {
		fmt.Fprintf(w, "%sexpected: %s\n", indent, x.Expected)
	}
	if x.Got != "" {
		fmt.Fprintf(w, "%sgot:      %s\n", indent, x.Got)
	}
	for _, n := range x.Notes {
		fmt.Fprintf(w, "%snote:     %s\n", indent, n)
	}
	if len(x.Packets) > 0 {
		fmt.Fprintf(w, "%spackets (last %d):\n", indent, len(x.Packets))
		for _, p := range x.Packets {
			fmt.Fprintf(w, "%s  %9.3fms %s %-5s %-21s %-14s %s\n", indent, float64(p.At)/1e6, p.Dir, p.Via, p.Peer, p.What, p.Hex)
		}
	}
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

// JUnit XML, as CI systems (Jenkins, GitLab, GitHub actions' reporters) read it.
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Skipped   *junitSkipped `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Body    string `xml:",chardata"`
}

type junitSkipped struct {
	Message string `xml:"message,attr"`
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// WriteJUnit writes the report as JUnit XML: one test suite ("crem conform csf" or "crf"), one
// test case per scenario (class name: the half and the section). A failure of an OPTIONAL part
// is written as a failure too, its message saying it is optional.
func (r *Report) WriteJUnit(w io.Writer) error {
	s := junitSuite{Name: "crem conform " + string(r.Half), Time: seconds(r.Elapsed)}
	for _, x := range r.Results {
		c := junitCase{Name: x.Name, Classname: "conform." + string(x.Half) + "." + x.Section, Time: seconds(x.Duration)}
		switch x.Status {
		case Fail:
			s.Failures++
			var b strings.Builder
			writeFailure(&b, x, "")
			msg := x.Reason
			if x.Optional {
				msg = "(OPTIONAL) " + msg
			}
			c.Failure = &junitFailure{Message: msg, Type: "conformance", Body: b.String()}
		case Skip:
			s.Skipped++
			c.Skipped = &junitSkipped{Message: x.Reason}
		default:
			c.SystemOut = strings.Join(x.Notes, "\n")
		}
		s.Tests++
		s.Cases = append(s.Cases, c)
	}
	b, err := xml.MarshalIndent(junitSuites{Suites: []junitSuite{s}}, "", "  ")
	if err != nil {
		return fmt.Errorf("conform: junit: %w", err)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
