package conform

import (
	"encoding/json"
	"fmt"
	"time"
)

// Status is a scenario's verdict.
type Status int

// The verdicts.
const (
	Pass Status = iota
	Fail
	Skip
)

func (s Status) String() string {
	switch s {
	case Pass:
		return "PASS"
	case Fail:
		return "FAIL"
	default:
		return "SKIP"
	}
}

// MarshalText writes the verdict's name, for JSON.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a verdict's name.
func (s *Status) UnmarshalText(b []byte) error {
	switch string(b) {
	case "PASS":
		*s = Pass
	case "FAIL":
		*s = Fail
	case "SKIP":
		*s = Skip
	default:
		return fmt.Errorf("conform: unknown status %q", b)
	}
	return nil
}

// Packet is one datagram a scenario sent or received, kept for the report of a failure.
type Packet struct {
	At   time.Duration `json:"at_ns"` // since the scenario began
	Dir  string        `json:"dir"`   // "sent" or "recv"
	Peer string        `json:"peer"`  // the address it went to or came from
	Via  string        `json:"via"`   // the runner's socket (crem, data, spare, ...)
	Hex  string        `json:"hex"`
	What string        `json:"what"` // the message type, or RoCEv2
}

// Result is the outcome of one scenario.
type Result struct {
	Name     string        `json:"name"`
	Half     Half          `json:"half"`
	Section  string        `json:"section"`
	Status   Status        `json:"status"`
	Optional bool          `json:"optional,omitempty"`
	Reason   string        `json:"reason,omitempty"`   // why it failed or was skipped
	Expected string        `json:"expected,omitempty"` // a failure: what the requirement asks for
	Got      string        `json:"got,omitempty"`      // a failure: what came instead
	Notes    []string      `json:"notes,omitempty"`    // what the scenario saw, PASS or not
	Packets  []Packet      `json:"packets,omitempty"`  // a failure: the datagrams of the scenario
	Duration time.Duration `json:"duration_ns"`
}

// Report is a run's results, in the order run.
type Report struct {
	Half    Half          `json:"half"`
	Target  string        `json:"target"`
	Results []Result      `json:"results"`
	Elapsed time.Duration `json:"elapsed_ns"`
}

// Counts returns how many scenarios passed, failed and were skipped.
func (r *Report) Counts() (pass, fail, skip int) {
	for _, x := range r.Results {
		switch x.Status {
		case Pass:
			pass++
		case Fail:
			fail++
		default:
			skip++
		}
	}
	return
}

// RequiredFailed says whether a scenario of a REQUIRED part failed (what sets the exit status).
// A failure of an OPTIONAL part is reported but does not count.
func (r *Report) RequiredFailed() bool {
	for _, x := range r.Results {
		if x.Status == Fail && !x.Optional {
			return true
		}
	}
	return false
}

// WriteJSON writes the report as one JSON object.
func (r *Report) JSON() ([]byte, error) { return json.MarshalIndent(r, "", "  ") }
