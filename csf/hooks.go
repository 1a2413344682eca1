package csf

import (
	"time"

	"github.com/crem-project/crem/wire"
)

// Hooks bend the Sender's decisions away from the draft, one rule each, so that the mutation
// check of `crem conform` (docs/conformance.md) can show the conformance tests catch every
// departure. Each method names the decision it bends and reports whether to bend it; package
// internal/fault maps its planted faults onto them. Production sets none (WithHooks is for
// tests and the conformance runner), and then no decision is bent.
type Hooks interface {
	// SkewCoefficients: every ordinary repair symbol has the source symbol of its block's
	// first present position added once more (Section 5).
	SkewCoefficients() bool
	// AnswerBeyondX: a block request naming X lost positions is answered with up to
	// faultExtraSymbols more than X symbols (Section 7).
	AnswerBeyondX() bool
	// AnswerAnySource: a REPAIR_REQUEST from an address other than the bound one is taken and
	// answered to where it came from (Security Considerations).
	AnswerAnySource() bool
	// AnswerWithinSRTT: a new request for a block answered less than an SRTT ago is answered
	// at once, not deferred (Section 7).
	AnswerWithinSRTT() bool
	// RetransmitOverBlock: a coded retransmission is computed over every present position,
	// not over the request's set L (Sections 5 and 7).
	RetransmitOverBlock() bool
	// HelloWithoutBackoff: an unanswered HELLO goes again every millisecond, for ever
	// (Section 6).
	HelloWithoutBackoff() bool
	// FixedNonce: every session's HELLO has the nonce faultNonce (Section 6).
	FixedNonce() bool
	// ApplyParamsEarly: a proposed configuration applies from the next block, waiting for
	// neither PARAM_ACK nor its Effective PSN (Section 6).
	ApplyParamsEarly() bool
	// RetryParamsForever: an unanswered PARAM_UPDATE goes again for ever instead of CLOSE
	// after eight attempts (Section 6).
	RetryParamsForever() bool
	// KeepBreakerTripped: once the circuit breaker has tripped it never resumes (Section 10).
	KeepBreakerTripped() bool
	// PathReportAnySource: PATH_REPORT is taken from any address, not only from configured
	// reporters (Section 9, C14).
	PathReportAnySource() bool
	// HonourSpoofedClose: a CLOSE from an address other than the bound one ends the session
	// (Security Considerations).
	HonourSpoofedClose() bool
}

// hook reports whether the hooks bend decision d; without hooks (production) none is bent.
func (s *Sender) hook(d func(Hooks) bool) bool { return s.o.hooks != nil && d(s.o.hooks) }

// The constants the bent decisions use.
const (
	// faultNonce is the HELLO nonce of every session under Hooks.FixedNonce.
	faultNonce uint64 = 0x0123456789abcdef
	// faultParamRTO bounds the PARAM_UPDATE retransmission timeout under
	// Hooks.RetryParamsForever, so that the retries go on at a pace a peer sees.
	faultParamRTO = time.Second
	// faultExtraSymbols is how many symbols beyond X answer a request under Hooks.AnswerBeyondX.
	faultExtraSymbols = 2
)

// anySource reports whether the hooks take a message of type t from an address other than
// the bound one: REPAIR_REQUEST under Hooks.AnswerAnySource, CLOSE under
// Hooks.HonourSpoofedClose.
func (s *Sender) anySource(t wire.Type) bool {
	switch t {
	case wire.TypeRepairRequest:
		return s.hook(Hooks.AnswerAnySource)
	case wire.TypeClose:
		return s.hook(Hooks.HonourSpoofedClose)
	}
	return false
}

// skewCoefficients bends the ordinary symbols of b just encoded (Hooks.SkewCoefficients): the
// source symbol of b's first present position is added once more to each, so that its
// coefficient is C(i, j) + 1 in GF(2^8) (for scheme 2, 0: the position left out) instead of
// C(i, j). One XOR of T octets per symbol, and only with the hook set.
func (s *Sender) skewCoefficients(b *block, syms [][]byte) {
	j := 0
	for j < b.k && !b.present.Has(j) {
		j++
	}
	if j == b.k {
		return
	}
	src := b.syms[j]
	for _, sym := range syms {
		for n := range min(len(sym), len(src)) {
			sym[n] ^= src[n]
		}
	}
}
