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

// The faults. Each names the side that makes it (CSF or CRF), the rule it breaks, and what a
// peer of the faulty engine sees. A Set is the hooks of both engines (csf.WithHooks,
// crf.WithHooks; hooks.go), and a gateway passes Config.Faults to both of its engines.
const (
	// WrongCoefficient (CSF): every ordinary repair symbol has the source symbol of its
	// block's first present position added once more, so that position's coefficient is
	// C(i, j) + 1 in GF(2^8) instead of C(i, j) of Section 5 (for scheme 2, 0). A peer sees
	// ordinary REPAIR symbols that are not the sum of C(i, j) s_j over the present positions,
	// and a source restored from one fails its ICRC. Coded retransmissions are not affected.
	WrongCoefficient Set = 1 << iota
	// RepairAboveX (CSF): a REPAIR_REQUEST in the block form naming X lost positions is
	// answered with min(X + 2, Repair Indices left) coded retransmissions instead of at most
	// X (Section 7). A peer counts more REPAIR with the request's Repair Session ID than the
	// positions its Lost bitmap names.
	RepairAboveX
	// AnswerRequestSource (CSF): a REPAIR_REQUEST from an address other than the one bound at
	// HELLO_ACK is taken, and its answer goes to the request's source address (Section 7,
	// Security Considerations: REPAIR only to the bound address). A peer that sends a request
	// from another port or address with the flow's Flow ID gets REPAIR there; the correct CSF
	// sends nothing.
	AnswerRequestSource
	// RequestEverySRTT (CSF): a REPAIR_REQUEST with a new Request ID for a block answered
	// less than an SRTT ago is answered at once instead of deferred until an SRTT has passed
	// since that answer (Section 7: at most one answer per block per SRTT). A repeated Request
	// ID is still ignored. A peer sees two answers for one block closer than the CSF's SRTT
	// (which a peer that delays its HELLO_ACK and PARAM_ACK sets).
	RequestEverySRTT
	// CodedRetxWholeBlock (CSF): a coded retransmission's symbol is computed over every present
	// position of the block instead of exactly the set L of the request, though its Lost
	// bitmap still names L (Section 5, Section 7). A peer sees retransmitted symbols that are not
	// the sum over L; decoding with them restores packets whose ICRC fails.
	CodedRetxWholeBlock
	// NoHelloBackoff (CSF): an unanswered HELLO is sent again every millisecond, for ever,
	// instead of with exponential backoff from 1 ms for at most eight attempts (Section 6). A
	// peer that never answers sees HELLOs 1 ms apart, more than eight of them.
	NoHelloBackoff
	// FixedFlowNonce (CSF): the HELLO's Sender Nonce is the constant 0x0123456789abcdef in every
	// session of every flow instead of drawn at random (Section 6). A peer sees the same nonce
	// in the HELLOs of two flows, or of two sessions of one flow (after a CLOSE).
	FixedFlowNonce
	// EarlyParams (CSF): a proposed configuration applies from the next block the CSF opens,
	// without waiting for PARAM_ACK nor for its Effective PSN (Section 6). A peer sees REPAIR
	// with the new Config ID before it sent PARAM_ACK, or for a block starting before the
	// Effective PSN.
	EarlyParams
	// ParamRetryForever (CSF): an unanswered PARAM_UPDATE is sent again for ever (its timeout
	// doubling up to 1 s) instead of CLOSE with reason 2 after eight attempts (Section 6). A
	// peer that answers HELLO but never PARAM_UPDATE sees more than eight PARAM_UPDATEs of one
	// Config ID and no CLOSE.
	ParamRetryForever
	// BreakerNeverResumes (CSF): once the circuit breaker has tripped, m stays zero and coded
	// retransmission stopped for the rest of the session, instead of resuming after ten
	// seconds without the condition (Section 10). A peer that reports more than ten percent
	// loss for a second, then none, sees no ordinary REPAIR and no answer to its requests
	// after more than ten clean seconds. CLOSE reason 4 after a minute is unchanged.
	BreakerNeverResumes
	// PathReportAnySource (CSF): PATH_REPORT is accepted from any address, not only from
	// configured reporters (Section 9, C14). A peer that sends a method 3 PATH_REPORT naming
	// dropped PSNs of a held block from an unlisted address sees extra ordinary REPAIR (fresh
	// Repair Indices) for that block.
	PathReportAnySource
	// SpoofedCloseHonoured (CSF and CRF): a CLOSE with a flow's Flow ID from an address other
	// than the flow's bound peer ends the flow (Security Considerations): the CSF's session (a
	// gateway starts a new one, a new HELLO, on the flow's next packet) and the CRF's flow or
	// pending session (its later REPAIR find no flow, its LOSS_REPORTs stop).
	SpoofedCloseHonoured
	// HelloAckLarger (CRF): HELLO_ACK is padded with zero octets, its Length counting them, to
	// 16 octets more than the HELLO it answers (Security Considerations: HELLO is never
	// smaller than HELLO_ACK, no reflection amplification). A peer sees a HELLO_ACK datagram
	// larger than its HELLO, with octets after the message's fields.
	HelloAckLarger
	// LimitsNotMinimum (CRF): the CRF takes its own limits as the flow's effective limits
	// instead of the minimum of both sides' (Section 6). HELLO_ACK is unchanged (it states the
	// CRF's limits either way); a peer whose HELLO states a Max k (Max m, Max T) below the
	// CRF's sees a PARAM_UPDATE beyond its own limit but within the CRF's accepted (Status 0)
	// instead of refused with Status 2.
	LimitsNotMinimum
	// LossReportRare (CRF): LOSS_REPORT is sent every 16 SRTT, at least a second apart,
	// instead of at least once per SRTT while the flow is active (Section 8). A peer sees
	// LOSS_REPORTs a second or more apart (Interval of 1,000,000 us or more) while sources flow.
	LossReportRare
	// LossReportMiscount (CRF): a LOSS_REPORT whose Expected exceeds its Received reports
	// Expected equal to Received: the interval's losses are left out (Section 8). A peer that
	// withholds sources sees no loss in the reports (Restored still counts the restored ones).
	LossReportMiscount
	// AcceptMalformed (CRF): a REPAIR whose Length disagrees with its datagram is read anyway,
	// as if Length were the datagram's size or else as if the datagram ended at Length,
	// instead of discarded (Section 4). A peer that sends such a REPAIR (an octet after its
	// Length, or a Length an octet beyond the datagram) for a block with a lost source sees that
	// source restored and delivered.
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
