package csf

import (
	"time"

	"github.com/crem-project/crem/internal/fault"
	"github.com/crem-project/crem/wire"
)

// The planted faults' constants (WithFaults; package internal/fault). Each fault's effect sits
// where the rule it breaks is implemented; these are the values it uses there.
const (
	// faultNonce is the HELLO nonce of every session under fault.FixedFlowNonce.
	faultNonce uint64 = 0x0123456789abcdef
	// faultParamRTO bounds the PARAM_UPDATE retransmission timeout under
	// fault.ParamRetryForever, so that the retries go on at a pace a peer sees.
	faultParamRTO = time.Second
	// faultExtraSymbols is how many symbols beyond X answer a request under fault.RepairAboveX.
	faultExtraSymbols = 2
)

// faultAnySource reports whether a planted fault takes a message of type t from an address
// other than the bound one: REPAIR_REQUEST under fault.AnswerRequestSource, CLOSE under
// fault.SpoofedCloseHonoured.
func (s *Sender) faultAnySource(t wire.Type) bool {
	switch t {
	case wire.TypeRepairRequest:
		return s.o.faults.Has(fault.AnswerRequestSource)
	case wire.TypeClose:
		return s.o.faults.Has(fault.SpoofedCloseHonoured)
	}
	return false
}

// faultCoefficient plants fault.WrongCoefficient in freshly encoded ordinary symbols of b: the
// source symbol of b's first present position is added once more to each, so that its
// coefficient is C(i, j) + 1 in GF(2^8) (for scheme 2, 0: the position left out) instead of
// C(i, j). One XOR of T octets per symbol, and only with the fault planted.
func (s *Sender) faultCoefficient(b *block, syms [][]byte) {
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
