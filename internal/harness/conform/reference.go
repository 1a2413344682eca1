package conform

import (
	"encoding/hex"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// The Appendix example of the draft: scheme 1, k = 4, T = 16, payloads "RDMA-PKT-0" to "-3".
var (
	appendixR0  = "001ef6ccd7c377f0ddfc774c00000000"
	appendixR1  = "001ef6ccd7c377f0ddfc774f00000000"
	appendixR2L = "00354fdf6d4b40b57e5c400000000000"
	// The REPAIR of R2[L] up to its symbol (Flow ID 0x0000BEEF, Config ID 1, Block Start PSN
	// 0x001000, Repair Session ID 7).
	appendixHead = "1180002c0000beef010104020010000000070010f0000000e0000000"
)

// referenceScenarios checks the runner's own arithmetic and codec against the Appendix's
// numbers before any verdict on a target rests on them.
func referenceScenarios(half Half) []Scenario {
	return []Scenario{{
		Name: string(half) + "/appendix-vectors", Half: half, Section: "Appendix",
		Requirement: "the runner's reference (package fec and wire) reproduces the Appendix's R0, R1, R2[L] and the REPAIR header byte for byte",
		Sends:       "nothing (runs inside the runner)", Expects: "the draft's hex",
		Run: runAppendixVectors,
	}}
}

func runAppendixVectors(h *Harness) {
	sent := map[psn.PSN][]byte{}
	for j := range 4 {
		sent[psn.PSN(0x1000+j)] = []byte("RDMA-PKT-" + string(rune('0'+j)))
	}
	src, present, err := sourceSymbols(sent, 0x1000, 4, 16)
	if err != nil {
		h.fail("source symbols of the Appendix", err.Error(), "cannot build the Appendix's sources")
	}
	L := bitmapOf(0, 1, 2)
	for _, c := range []struct {
		name string
		i    int
		over psn.Bitmap
		want string
	}{{"R0", 0, present, appendixR0}, {"R1", 1, present, appendixR1}, {"R2[L]", 2, L, appendixR2L}} {
		got, err := repairSymbol(wire.SchemeCauchy, c.i, c.over, src, 16)
		if err != nil || hex.EncodeToString(got) != c.want {
			h.fail(c.name+" = "+c.want, hex.EncodeToString(got), "the runner's reference encoder disagrees with the Appendix (%v)", err)
		}
	}
	sym, _ := repairSymbol(wire.SchemeCauchy, 2, L, src, 16)
	m := wire.Repair{FlowID: 0xbeef, Retx: true, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 4, RepairIndex: 2,
		BlockStartPSN: 0x1000, RepairSessionID: 7, Present: present, Lost: L, Symbol: sym}
	b, err := m.Append(nil)
	if err != nil || hex.EncodeToString(b) != appendixHead+appendixR2L {
		h.fail(appendixHead+appendixR2L, hex.EncodeToString(b), "the runner's REPAIR codec disagrees with the Appendix (%v)", err)
	}
	h.note("R0, R1, R2[L] and the 44-octet REPAIR match the Appendix")
}
