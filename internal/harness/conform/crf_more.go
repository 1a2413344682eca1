package conform

import (
	"fmt"
	"sort"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// crfMoreScenarios: loss reports, configurations, fallback, the PSN-range form, malformed and
// spoofed input.
func crfMoreScenarios() []Scenario {
	s := func(name, section, req, sends, expects string, run func(*Harness)) Scenario {
		return Scenario{Name: "crf/" + name, Half: HalfCRF, Section: section, Requirement: req, Sends: sends, Expects: expects, Run: run}
	}
	return []Scenario{
		s("loss-report-interval", "Loss Reports", "LOSS_REPORT at least once per SRTT while the flow is active, to the HELLO's address",
			"source packets every SRTT/4 for 20 SRTT (the CRF's SRTT is the runner's: HELLO_ACK to PARAM_UPDATE)",
			"at least 12 LOSS_REPORTs (20 SRTT / 1.5, less one), median Interval at most 1.25 SRTT", crfLossReportInterval),
		s("loss-report-counts", "Loss Reports", "LOSS_REPORT counts the interval's expected and received sources (before restoration), the restored packets and the REPAIRs received",
			"two blocks of 8 (2 lost in the first) with R0, R1 each, then clean sources", "summed over the reports: Expected - Received = 2, Restored = 2, Repairs Received = 4", crfLossReportCounts),
		s("param-refused-not-used", "Message Formats (PARAM_ACK), C7 (c)", "a refused configuration, or one never proposed, is not used to decode; acknowledged ones are",
			"PARAM_UPDATE k 200 (beyond the limits); REPAIRs of a block under that Config ID and under an unknown one; then under configuration 1",
			"non-zero Status; the lost packet delivered only after the REPAIR of configuration 1", crfParamRefusedNotUsed),
		s("two-configurations", "Configuration", "REPAIRs are accepted for every configuration acknowledged and not yet released",
			"a block under configuration 1 left open, configuration 2 acknowledged and used, then the first block's REPAIR",
			"both blocks restored", crfTwoConfigurations),
		s("fallback-request", "Fallback, C9 (a)", "after two unanswered coded rounds the CRF asks once with FALLBACK, and Source Copy restores the block",
			"8 sources with 2 lost and R0; no answer to the requests; Source Copy answer to FALLBACK",
			"at most two requests without FALLBACK, then one with it; the block delivered", crfFallbackRequest),
		s("range-request", "Coded Retransmission, PSN-range form", "without a REPAIR for the affected positions, the CRF asks by PSN range; a coded answer restores",
			"configuration with m = 0; 8 sources with PSN 4 lost", "REPAIR_REQUEST with RANGES naming PSN 4; delivered after the runner's RETX", crfRangeRequest),
		s("malformed-repair-discarded", "Message Formats", "a REPAIR that does not parse (unknown Version or Type, a Length that disagrees with the datagram, a bitmap beyond k, truncated) is discarded without effect",
			"8 sources with 1 lost; R0 broken each way; then R0 well formed", "nothing restored from the broken ones; restored by the well-formed one", crfMalformedRepair),
		s("spoofed-hello", "Security Considerations, C3", "a HELLO with a live flow's descriptor from another address does not tear the flow down",
			"HELLO with the flow's descriptor and a new nonce from another port", "the flow still restores from the bound address's REPAIRs", crfSpoofedHello),
		s("spoofed-close", "Security Considerations, C14", "a CLOSE from an address other than the flow's bound CSF does not tear the flow down",
			"CLOSE with the flow's Flow ID from another port", "the flow still restores from the bound address's REPAIRs", crfSpoofedClose),
	}
}

func (f *crfFlow) reports(d time.Duration) []wire.LossReport {
	var out []wire.LossReport
	for _, r := range f.h.collect("crem", d, f.fromCRF(wire.TypeLossReport)) {
		m, err := wire.ParseLossReport(r.b)
		if err != nil {
			f.h.fail("a well-formed LOSS_REPORT", hexOf(r.b), "LOSS_REPORT does not parse: %v", err)
		}
		out = append(out, m)
	}
	return out
}

func crfLossReportInterval(h *Harness) {
	f := h.newCRFFlow()
	f.open(8, 2, 256)
	const span = 20
	var got []rx
	end := time.Now().Add(span * h.cfg.SRTT)
	for time.Now().Before(end) {
		f.block(2, psn.Bitmap{}, 200)
		got = append(got, h.collect("crem", h.cfg.SRTT/4, f.fromCRF(wire.TypeLossReport))...)
	}
	need := span*2/3 - 1
	var ivs []time.Duration
	for _, r := range got {
		m, _ := wire.ParseLossReport(r.b)
		ivs = append(ivs, time.Duration(m.IntervalUS)*time.Microsecond)
	}
	sort.Slice(ivs, func(i, j int) bool { return ivs[i] < ivs[j] })
	var median time.Duration
	if len(ivs) > 0 {
		median = ivs[len(ivs)/2]
	}
	h.note("%d LOSS_REPORTs in %d SRTT (%v), median Interval %v, intervals %v", len(got), span, h.cfg.SRTT, median, ivs)
	if len(got) < need {
		h.fail(fmt.Sprintf("LOSS_REPORT at least once per SRTT (%v): at least %d in %v (Loss Reports)", h.cfg.SRTT, need, span*h.cfg.SRTT),
			fmt.Sprintf("%d", len(got)), "too few loss reports")
	}
	// The median, not the longest: one report delayed by the target's scheduler is not a rule.
	if median > h.cfg.SRTT*5/4+time.Millisecond {
		h.fail(fmt.Sprintf("report intervals of one SRTT (%v): the median at most 1.25 SRTT (Loss Reports)", h.cfg.SRTT), fmt.Sprintf("median Interval %v", median),
			"loss report intervals too long")
	}
	f.close()
}

func crfLossReportCounts(h *Harness) {
	f := h.newCRFFlow()
	f.open(8, 2, 256)
	h.sleep(2 * h.cfg.SRTT)
	f.reports(0)
	a := f.block(8, bitmapOf(2, 5), 200)
	f.ordinary(a, 8, 0, 1)
	b := f.block(8, psn.Bitmap{}, 200)
	f.ordinary(b, 8, 0, 1)
	f.mustDeliver("both blocks delivered", append(psns(a, 8, nil), psns(b, 8, nil)...))
	var sum wire.LossReport
	for _, m := range f.reports(6 * h.cfg.SRTT) {
		sum.Expected += m.Expected
		sum.Received += m.Received
		sum.Restored += m.Restored
		sum.RepairsReceived += m.RepairsReceived
		sum.IncompleteBlocks += m.IncompleteBlocks
	}
	got := fmt.Sprintf("Expected %d, Received %d, Restored %d, Repairs Received %d, Incomplete Blocks %d", sum.Expected, sum.Received, sum.Restored,
		sum.RepairsReceived, sum.IncompleteBlocks)
	h.note("summed over the reports: %s", got)
	if sum.Expected != 16 || sum.Received != 14 || sum.Restored != 2 || sum.RepairsReceived != 4 {
		h.fail("Expected 16, Received 14 (before restoration), Restored 2, Repairs Received 4 summed over the interval reports (Loss Reports)", got,
			"loss report counts disagree with what was sent")
	}
	f.close()
}

// oneLost sends a block of 8 with one lost source and returns its start.
func (f *crfFlow) oneLost(j int) psn.PSN { return f.block(8, bitmapOf(j), 200) }

// notDelivered fails if the PSN is delivered within d.
func (f *crfFlow) notDelivered(p psn.PSN, d time.Duration, what string) {
	if got := f.delivered([]psn.PSN{p}, d); got[p] {
		f.h.fail(what, fmt.Sprintf("PSN %d delivered", uint32(p)), "a packet was restored from what must be discarded")
	}
}

func crfParamRefusedNotUsed(h *Harness) {
	f := h.newCRFFlow()
	f.open(8, 2, 256)
	st, ok := f.propose(flow.Config{ID: 2, Scheme: wire.SchemeCauchy, K: 200, M: 2, T: 256}, f.next)
	if !ok {
		h.fail("a PARAM_ACK for the PARAM_UPDATE", "none", "PARAM_UPDATE unanswered")
	}
	if st == wire.StatusAccepted {
		h.skip("the target accepted k 200 (its Max k allows it): no refusal to test")
	}
	start := f.oneLost(3)
	for _, id := range []uint8{2, 9} {
		m := f.repair(start, 8, 0, bitmapOf(0, 1, 2, 3, 4, 5, 6, 7), false, 0, false)
		m.ConfigID = id
		f.sendRepair(m)
	}
	f.notDelivered(start.Add(3), 2*h.cfg.SRTT, "no decoding with a refused (2) or unknown (9) configuration (C7 c)")
	f.ordinary(start, 8, 0)
	f.mustDeliver("the block restored by the REPAIR of configuration 1", psns(start, 8, nil))
	h.note("k 200 refused (Status %d); REPAIRs of Config IDs 2 and 9 not used; configuration 1's restored", st)
	f.close()
}

func crfTwoConfigurations(h *Harness) {
	f := h.newCRFFlow()
	f.open(8, 2, 256)
	a := f.oneLost(6)
	c2 := flow.Config{ID: 2, Scheme: wire.SchemeCauchy, K: 4, M: 1, T: 256}
	if st, ok := f.propose(c2, f.next); !ok || st != wire.StatusAccepted {
		h.fail("configuration 2 (k 4, m 1) acknowledged", fmt.Sprintf("answered %v, Status %v", ok, st), "second configuration refused")
	}
	c1 := f.cfg
	f.cfg = c2
	b := f.block(4, bitmapOf(1), 200)
	f.ordinary(b, 4, 0)
	f.mustDeliver("the block of configuration 2 restored", psns(b, 4, nil))
	f.cfg = c1
	f.ordinary(a, 8, 0)
	f.mustDeliver("the block of configuration 1, still open, restored after configuration 2 was acknowledged (Configuration: MUST accept REPAIRs of any acknowledged configuration not released)", psns(a, 8, nil))
	f.close()
}

func crfFallbackRequest(h *Harness) {
	f := h.newCRFFlow()
	f.open(8, 2, 256)
	L := bitmapOf(2, 5)
	start := f.block(8, L, 200)
	f.ordinary(start, 8, 0)
	plain := 0
	var fb wire.RepairRequest
	found := false
	deadline := time.Now().Add(h.cfg.Timeout + 20*h.cfg.SRTT)
	for !found {
		m, _, ok := f.waitRequest(start, time.Until(deadline))
		if !ok {
			break
		}
		if m.RangeForm {
			continue
		}
		if m.Fallback {
			fb, found = m, true
			break
		}
		plain++
	}
	h.note("%d requests without FALLBACK before the FALLBACK request", plain)
	if !found {
		h.fail("one REPAIR_REQUEST with FALLBACK after two failed coded rounds (C9 a)", fmt.Sprintf("%d requests, none with FALLBACK", plain), "no FALLBACK request")
	}
	if plain > 2 {
		h.fail("at most two coded rounds before FALLBACK (Fallback)", fmt.Sprintf("%d requests without FALLBACK", plain), "more than two coded rounds")
	}
	if fb.Lost != L {
		h.fail(fmt.Sprintf("FALLBACK for L = %v", bitsOf(L)), fmt.Sprint(bitsOf(fb.Lost)), "FALLBACK names other positions")
	}
	src, present, _ := sourceSymbols(f.pkts, start, 8, f.cfg.T)
	n := 0
	for _, j := range bitsOf(L) {
		n++
		f.sendRepair(wire.Repair{FlowID: f.id, Last: n == L.Count(), ConfigID: 1, Scheme: wire.SchemeSourceCopy, K: 8, RepairIndex: uint8(j),
			BlockStartPSN: start, RepairSessionID: fb.RequestID, Present: present, Symbol: src[j]})
	}
	f.mustDeliver("the block restored by Source Copy (C9 a)", psns(start, 8, nil))
	f.close()
}

func crfRangeRequest(h *Harness) {
	f := h.newCRFFlow()
	f.open(8, 0, 256)
	start := f.oneLost(4)
	f.block(4, psn.Bitmap{}, 200) // later sources: PSN 4 is a gap
	lostPSN := start.Add(4)
	r, ok := h.recv("crem", time.Now().Add(h.cfg.Timeout), func(r rx) bool {
		if !f.fromCRF(wire.TypeRepairRequest)(r) {
			return false
		}
		_, err := wire.ParseRepairRequest(r.b)
		return err == nil
	})
	if !ok {
		h.fail(fmt.Sprintf("a REPAIR_REQUEST for the lost PSN %d (Coded Retransmission)", uint32(lostPSN)), "none", "no request")
	}
	m, _ := wire.ParseRepairRequest(r.b)
	if !m.RangeForm {
		h.fail("the PSN-range form: the CRF has no REPAIR for the positions (Coded Retransmission, PSN-range form)", hexOf(r.b), "block form without a known block")
	}
	named := false
	for _, rg := range m.Ranges {
		if rg.Start.Forward(lostPSN) < rg.Count {
			named = true
		}
	}
	if !named {
		h.fail(fmt.Sprintf("the range names PSN %d", uint32(lostPSN)), fmt.Sprint(m.Ranges), "the lost PSN not named")
	}
	f.sendRepair(f.repair(start, 8, 0, bitmapOf(4), true, m.RequestID, false))
	f.mustDeliver("the lost PSN restored by the runner's coded answer over it", []psn.PSN{lostPSN})
	h.note("REPAIR_REQUEST (RANGES) %s", hexOf(r.b))
	f.close()
}

func crfMalformedRepair(h *Harness) {
	f := h.newCRFFlow()
	f.open(8, 2, 256)
	start := f.oneLost(3)
	good, _ := (&[]wire.Repair{f.repair(start, 8, 0, bitmapOf(0, 1, 2, 3, 4, 5, 6, 7), false, 0, false)}[0]).Append(nil)
	n := 0
	for name, v := range mangled(good, 0) {
		h.send("crem", h.cfg.Target, v)
		h.note("sent R0 with %s", name)
		n++
	}
	// The Present Bitmap word's last bit (position 31): beyond k = 8.
	v := append([]byte(nil), good...)
	v[23] |= 1
	h.send("crem", h.cfg.Target, v)
	f.notDelivered(start.Add(3), 2*h.cfg.SRTT, "malformed REPAIRs discarded: nothing restored from them (Message Formats)")
	h.send("crem", h.cfg.Target, good)
	f.mustDeliver("the block restored by the well-formed R0", psns(start, 8, nil))
	h.note("%d broken copies of R0 discarded, the well-formed one restored", n+1)
	f.close()
}

func crfSpoofedHello(h *Harness) {
	f := h.newCRFFlow()
	f.open(8, 2, 256)
	sp := h.open("spoof", netipAddrPort(h.cfg.Listen.Addr(), 0))
	spoof := f.hello
	spoof.SenderNonce ^= 0x5a5a5a5a
	h.sendMsg(sp.name, h.cfg.Target, &spoof)
	h.sleep(2 * h.cfg.SRTT)
	start := f.oneLost(2)
	f.ordinary(start, 8, 0)
	f.mustDeliver("the flow still restores after a spoofed HELLO with its descriptor (Security Considerations)", psns(start, 8, nil))
	f.close()
}

func crfSpoofedClose(h *Harness) {
	f := h.newCRFFlow()
	f.open(8, 2, 256)
	sp := h.open("spoof", netipAddrPort(h.cfg.Listen.Addr(), 0))
	h.sendMsg(sp.name, h.cfg.Target, &wire.Close{FlowID: f.id, Reason: wire.ReasonNormal})
	h.sleep(2 * h.cfg.SRTT)
	start := f.oneLost(2)
	f.ordinary(start, 8, 0)
	f.mustDeliver("the flow still restores after a CLOSE from another address (Security Considerations)", psns(start, 8, nil))
	f.close()
}
