// Package fault names deliberate departures from the CREM draft that the engines and the gateway
// can be built to make, one rule each, so that `crem conform` can be shown to catch every one of
// them (the mutation check of docs/conformance.md). Nothing in a deployment sets them: the zero
// Set plants none, and only tests construct another.
package fault

import (
	"fmt"
	"math/bits"
	"strings"
)

// Set is a set of planted faults.
type Set uint64

// The faults. Each names the side that makes it (CSF or CRF) and the rule it breaks.
const (
	// WrongCoefficient (CSF): repair symbols are computed with a coefficient other than
	// C(i, j) of Section 5 for one source position.
	WrongCoefficient Set = 1 << iota
	// RepairAboveX (CSF): a REPAIR_REQUEST is answered with more than X symbols (Section 7).
	RepairAboveX
	// AnswerRequestSource (CSF): a REPAIR_REQUEST's answer goes to the request's source address
	// instead of the address bound at HELLO, and requests from anywhere are honoured (Section 7,
	// Security Considerations).
	AnswerRequestSource
	// RequestEverySRTT (CSF): every REPAIR_REQUEST is answered, not at most one per block per
	// SRTT (Section 7).
	RequestEverySRTT
	// CodedRetxWholeBlock (CSF): a coded retransmission is computed over every present position
	// instead of exactly the set L of the request (Section 5, Section 7).
	CodedRetxWholeBlock
	// NoHelloBackoff (CSF): HELLO is retransmitted at a fixed interval without backoff and
	// without a limit on attempts (Section 6).
	NoHelloBackoff
	// FixedFlowNonce (CSF): the HELLO's identifying value is not chosen at random (Section 6).
	FixedFlowNonce
	// EarlyParams (CSF): a PARAM_UPDATE's new parameters are used before its Effective PSN and
	// PARAM_ACK (Section 6).
	EarlyParams
	// ParamRetryForever (CSF): an unanswered PARAM_UPDATE is retried past eight attempts and no
	// CLOSE follows (Section 6).
	ParamRetryForever
	// BreakerNeverResumes (CSF): the circuit breaker, once tripped, never resumes (Section 10).
	BreakerNeverResumes
	// PathReportAnySource (CSF): PATH_REPORT is accepted from any address, not only from
	// configured reporters (Section 9, C14).
	PathReportAnySource
	// SpoofedCloseHonoured (CSF and CRF): a CLOSE from an address other than the flow's bound
	// peer tears the flow down (Security Considerations).
	SpoofedCloseHonoured
	// HelloAckLarger (CRF): HELLO_ACK is larger than the HELLO it answers (Security
	// Considerations: no reflection amplification).
	HelloAckLarger
	// LimitsNotMinimum (CRF): HELLO_ACK's limits are the CRF's own instead of the minimum of
	// both sides' (Section 6).
	LimitsNotMinimum
	// LossReportRare (CRF): LOSS_REPORT is sent less often than once per SRTT (Section 8).
	LossReportRare
	// LossReportMiscount (CRF): LOSS_REPORT's counts leave out losses the CRF saw (Section 8).
	LossReportMiscount
	// AcceptMalformed (CRF): a REPAIR whose Length disagrees with the datagram is used instead
	// of discarded (Section 4).
	AcceptMalformed

	// last is one past the highest fault.
	last
)

var names = map[Set]string{
	WrongCoefficient:     "wrong-coefficient",
	RepairAboveX:         "repair-above-x",
	AnswerRequestSource:  "answer-request-source",
	RequestEverySRTT:     "request-every-srtt",
	CodedRetxWholeBlock:  "coded-retx-whole-block",
	NoHelloBackoff:       "no-hello-backoff",
	FixedFlowNonce:       "fixed-flow-nonce",
	EarlyParams:          "early-params",
	ParamRetryForever:    "param-retry-forever",
	BreakerNeverResumes:  "breaker-never-resumes",
	PathReportAnySource:  "path-report-any-source",
	SpoofedCloseHonoured: "spoofed-close-honoured",
	HelloAckLarger:       "hello-ack-larger",
	LimitsNotMinimum:     "limits-not-minimum",
	LossReportRare:       "loss-report-rare",
	LossReportMiscount:   "loss-report-miscount",
	AcceptMalformed:      "accept-malformed",
}

// All lists every fault, one per element, in order.
func All() []Set {
	var all []Set
	for f := Set(1); f < last; f <<= 1 {
		all = append(all, f)
	}
	return all
}

// Has says whether s plants f.
func (s Set) Has(f Set) bool { return s&f != 0 }

// String is the comma-separated names of the faults in s ("none" for the zero Set).
func (s Set) String() string {
	if s == 0 {
		return "none"
	}
	var out []string
	for _, f := range All() {
		if s.Has(f) {
			out = append(out, names[f])
		}
	}
	if rest := s &^ (last - 1); rest != 0 {
		out = append(out, fmt.Sprintf("unknown(%#x)", uint64(rest)))
	}
	return strings.Join(out, ",")
}

// Parse reads a comma-separated list of fault names, as String writes them.
func Parse(list string) (Set, error) {
	var s Set
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" || name == "none" {
			continue
		}
		found := false
		for f, n := range names {
			if n == name {
				s |= f
				found = true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("fault: unknown fault %q", name)
		}
	}
	return s, nil
}

// Count is the number of faults in s.
func (s Set) Count() int { return bits.OnesCount64(uint64(s)) }
