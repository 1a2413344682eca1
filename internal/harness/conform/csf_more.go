package conform

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// csfMoreScenarios: configuration changes, path reports, the circuit breaker, malformed and
// spoofed input.
func csfMoreScenarios() []Scenario {
	s := func(name, section, req, sends, expects string, run func(*Harness)) Scenario {
		return Scenario{Name: "csf/" + name, Half: HalfCSF, Section: section, Requirement: req, Sends: sends, Expects: expects, Run: run}
	}
	long := func(sc Scenario) Scenario { sc.Long = true; return sc }
	return []Scenario{
		s("param-before-ack", "Configuration, C6 (b)", "a configuration is used only after PARAM_ACK and for blocks from its Effective PSN",
			"first PARAM_UPDATE answered 3 SRTT late, sources meanwhile; then loss reports that move m, the second PARAM_UPDATE answered late",
			"no REPAIR before PARAM_ACK; none of a new Config ID before its PARAM_ACK or for a block before its Effective PSN", csfParamBeforeAck),
		s("congestion-no-raise", "Redundancy, C6 (c)", "loss classified as congestion (CE marks on 40 % of the sources) never raises m",
			"LOSS_REPORTs with 6 % loss and CE on 40 % of the received sources; then (the control) the same loss without CE",
			"no PARAM_UPDATE raising m during the CE reports; (the control) m raised without CE, else SKIP", csfCongestionNoRaise),
		s("param-eight-attempts", "Configuration, C2", "PARAM_UPDATE is retransmitted with a doubling timeout, eight attempts, then CLOSE (reason 2)",
			"HELLO_ACK at once; PARAM_UPDATE never answered", "at most 8 PARAM_UPDATEs of one Config ID, spaced by a doubling timeout, then CLOSE reason 2", csfParamEightAttempts),
		s("param-refused", "Message Formats (PARAM_ACK)", "a CSF that receives a non-zero Status keeps its configuration: the refused one is never used",
			"PARAM_ACK Status 2 (limits exceeded) to the first PARAM_UPDATE; sources", "no REPAIR of the refused Config ID; a later proposal, if any, accepted and used", csfParamRefused),
		s("path-report-reporters", "Path Reports, C14", "PATH_REPORT is accepted only from the configured reporters",
			"PATH_REPORT (method 3) naming dropped PSNs of a block from --stranger, then from --reporter",
			"no proactive REPAIR after the stranger's; (the control) proactive REPAIR after the reporter's, else SKIP", csfPathReportReporters),
		s("breaker-trip", "Congestion Considerations, C11 (f)", "loss above 10 % over one second sets m to zero and stops coded retransmission; the flow stays open",
			"LOSS_REPORTs with 20 % loss every SRTT for 1.5 s with sources; then a block and a REPAIR_REQUEST",
			"no ordinary REPAIR for the new block, no RETX, no CLOSE", csfBreakerTrip),
		long(s("breaker-resume", "Congestion Considerations, C11 (f)", "redundancy resumes only after the condition has been absent for ten seconds",
			"the trip, then clean LOSS_REPORTs every SRTT and a block every 500 ms for 13 s",
			"no ordinary REPAIR in the first 9 s of clean reports; REPAIR again by 13 s", csfBreakerResume)),
		long(s("breaker-close", "Congestion Considerations, C2", "a condition that persists for more than one minute ends the flow with CLOSE reason 4",
			"LOSS_REPORTs with 20 % loss every SRTT for up to 66 s", "CLOSE reason 4 between 58 and 66 s after the first", csfBreakerClose)),
		s("malformed-discarded", "Message Formats, Coded Retransmission", "messages with an unknown Version or Type, or that do not parse, are discarded without effect",
			"REPAIR_REQUESTs and a CLOSE for the flow, each broken one way (version, type, Length either way, bitmap beyond k, truncated), empty and garbage datagrams",
			"no answer and no effect; the same request well formed answered; the flow still protected", csfMalformed),
		s("spoofed-close", "Security Considerations, C14", "a CLOSE from an address other than the bound CRF's does not tear the flow down",
			"CLOSE with the flow's Flow ID from another port of the runner's address", "ordinary REPAIRs for later blocks, no new HELLO", csfSpoofedClose),
	}
}

// lossReport sends a LOSS_REPORT of an interval of iv with expected and received sources.
func (f *csfFlow) lossReport(iv time.Duration, expected, received uint32) {
	f.h.sendMsg("crem", f.csf, &wire.LossReport{FlowID: f.id, IntervalUS: uint32(iv / time.Microsecond), Expected: expected, Received: received,
		RepairsReceived: 1})
}

func csfParamBeforeAck(h *Harness) {
	f := h.newCSFFlow()
	f.open(csfOpen{noParamAck: true})
	// Sources while the first PARAM_UPDATE is unanswered: nothing may be protected yet.
	for range 3 {
		f.burst(8, 200)
	}
	for _, g := range f.repairs(h.cfg.SRTT) {
		h.fail("no REPAIR before the PARAM_ACK of its configuration (Configuration)", hexOf(g.b), "REPAIR sent before PARAM_ACK")
	}
	// Answer the latest copy of the update (its Effective PSN may have moved).
	var last wire.ParamUpdate
	for _, r := range h.collect("crem", time.Millisecond, f.fromCSF(wire.TypeParamUpdate)) {
		if m, err := wire.ParseParamUpdate(r.b); err == nil {
			last = m
		}
	}
	if last.ConfigID == 0 {
		last = f.waitParam()
	}
	f.ack(last, wire.StatusAccepted)
	checkEffective(f, f.protectedBlock(16, 2))
	h.note("configuration %d (k %d, m %d) used only after PARAM_ACK, from PSN %d", f.cur.ID, f.cur.K, f.cur.M, uint32(f.eff))
	// A second configuration: loss reports move m (the RECOMMENDED policy); its PARAM_UPDATE
	// goes unanswered for 3 SRTT while sources flow.
	var pu wire.ParamUpdate
	got := false
	for i := 0; i < 12 && !got; i++ {
		f.lossReport(h.cfg.SRTT, 100, 94)
		f.burst(8, 200)
		for _, g := range f.repairs(h.cfg.SRTT / 2) {
			f.check(g)
		}
		if r, ok := h.recv("crem", time.Now(), f.fromCSF(wire.TypeParamUpdate)); ok {
			pu, _ = wire.ParseParamUpdate(r.b)
			got = true
		}
	}
	if !got {
		h.note("no second PARAM_UPDATE after 6 %% loss reports (the target's policy keeps m): only the first configuration checked")
		f.close()
		return
	}
	for range 3 {
		f.burst(8, 200)
		for _, g := range f.repairs(h.cfg.SRTT) {
			f.check(g) // Config ID pu.ConfigID is not acknowledged yet: using it fails here
		}
	}
	for _, r := range h.collect("crem", time.Millisecond, f.fromCSF(wire.TypeParamUpdate)) {
		if m, err := wire.ParseParamUpdate(r.b); err == nil && m.ConfigID == pu.ConfigID {
			pu = m
		}
	}
	f.ack(pu, wire.StatusAccepted)
	for range 3 {
		f.burst(16, 200)
		checkEffective(f, f.repairs(4*h.cfg.SRTT))
	}
	h.note("configuration %d (m %d) acknowledged 3 SRTT late; not used before, nor before PSN %d", pu.ConfigID, pu.M, uint32(pu.EffectivePSN))
	f.close()
}

// checkEffective checks REPAIRs and that none of the current configuration belongs to a block
// that starts before its Effective PSN.
func checkEffective(f *csfFlow, rs []gotRepair) []gotRepair {
	for _, g := range rs {
		f.check(g)
		if g.m.ConfigID == f.cur.ID && g.m.BlockStartPSN.Before(f.eff) {
			f.h.fail(fmt.Sprintf("configuration %d only for blocks from its Effective PSN %d (Configuration)", f.cur.ID, uint32(f.eff)),
				fmt.Sprintf("a REPAIR of the block at PSN %d: %s", uint32(g.m.BlockStartPSN), hexOf(g.b)), "configuration used before its Effective PSN")
		}
	}
	return rs
}

func csfParamEightAttempts(h *Harness) {
	f := h.newCSFFlow()
	f.open(csfOpen{answerAttempt: 1, noParamAck: true})
	var at []time.Time
	var ids []uint8
	var closeMsg *wire.Close
	// The first PARAM_UPDATE was taken by open; collect the rest and the CLOSE.
	at = append(at, time.Now())
	// Each wait allows twice the last gap (the doubling timeout) plus the run's timeout, so that
	// a target whose SRTT stayed at its initial value (RTO 2 x 20 ms: 10 s for all eight) is
	// waited for as well as one with a sub-millisecond SRTT.
	lastGap := time.Duration(0)
	for closeMsg == nil && len(at) <= 9 {
		until := time.Now().Add(2*lastGap + h.cfg.Timeout)
		r, ok := h.recv("crem", until, func(r rx) bool {
			return f.fromCSF(wire.TypeParamUpdate)(r) || f.fromCSF(wire.TypeClose)(r)
		})
		if !ok {
			break
		}
		if wire.Type(r.b[0]&0x0f) == wire.TypeClose {
			m, err := wire.ParseClose(r.b)
			if err != nil {
				h.fail("a well-formed CLOSE", hexOf(r.b), "CLOSE does not parse: %v", err)
			}
			closeMsg = &m
			break
		}
		m, _ := wire.ParseParamUpdate(r.b)
		if len(at) > 1 {
			lastGap = r.at.Sub(at[len(at)-1])
		}
		at = append(at, r.at)
		ids = append(ids, m.ConfigID)
	}
	var gaps []string
	for i := 1; i < len(at); i++ {
		gaps = append(gaps, at[i].Sub(at[i-1]).Round(100*time.Microsecond).String())
	}
	h.note("%d PARAM_UPDATE attempts (retransmissions' gaps %s), CLOSE %v", len(at), list(gaps), closeMsg != nil)
	if len(at) > 8 {
		h.fail("at most eight PARAM_UPDATE attempts, then CLOSE (Configuration)", fmt.Sprintf("%d attempts, gaps %s", len(at), list(gaps)), "PARAM_UPDATE retried beyond eight attempts")
	}
	if closeMsg == nil {
		h.fail("CLOSE (reason 2) after eight unanswered PARAM_UPDATEs (Configuration, C2)", fmt.Sprintf("%d attempts and no CLOSE", len(at)), "no CLOSE")
	}
	if closeMsg.Reason != wire.ReasonParamUnanswered {
		h.fail("CLOSE reason 2 (PARAM_UPDATE unanswered, C2)", fmt.Sprintf("reason %d", closeMsg.Reason), "wrong CLOSE reason")
	}
	for _, id := range ids {
		if id != ids[0] {
			h.note("the retransmissions carry Config IDs %v", ids)
		}
	}
	// A doubling timeout of at least 1 ms: attempt j+1 at least (2^j - 1) ms after the first,
	// which went out after HELLO_ACK: measured from HELLO_ACK's send, a late receive timestamp
	// of the runner's own can only lengthen what is measured. Allowance 10 % or 1 ms.
	for j := 1; j < len(at); j++ {
		want := time.Millisecond<<j - time.Millisecond
		if got := at[j].Sub(f.ackSent); got < want-max(want/10, time.Millisecond) {
			h.fail(fmt.Sprintf("a timeout doubling from at least 1 ms: attempt %d at least %v after the first (Configuration)", j+1, want), "gaps "+list(gaps),
				"PARAM_UPDATE retransmitted without backoff")
		}
	}
}

func csfParamRefused(h *Harness) {
	f := h.newCSFFlow()
	f.open(csfOpen{paramStatus: wire.StatusLimitsExceeded})
	refused := f.lastParam.ConfigID
	deadline := time.Now().Add(max(h.cfg.Timeout, 500*time.Millisecond))
	offered := false
	for time.Now().Before(deadline) && !offered {
		f.burst(8, 200)
		for _, g := range f.repairs(h.cfg.SRTT) {
			f.check(g) // the refused Config ID is not acknowledged: using it fails here
		}
		// Copies of the refused update (sent before the refusal arrived) are not offers.
		if r, ok := h.recv("crem", time.Now(), func(r rx) bool {
			m, err := wire.ParseParamUpdate(r.b)
			return f.fromCSF(wire.TypeParamUpdate)(r) && err == nil && m.ConfigID != refused
		}); ok {
			m, _ := wire.ParseParamUpdate(r.b)
			h.note("offered again after the refusal of Config ID %d: Config ID %d", refused, m.ConfigID)
			f.ack(m, wire.StatusAccepted)
			offered = true
		}
	}
	if !offered {
		h.note("no new PARAM_UPDATE within %v of the refusal; the refused configuration was not used", max(h.cfg.Timeout, 500*time.Millisecond))
		f.close()
		return
	}
	checkEffective(f, f.protectedBlock(16, 2))
	f.close()
}

func csfPathReportReporters(h *Harness) {
	if !h.cfg.Reporter.IsValid() {
		h.skip("no --reporter and --stranger given")
	}
	f := h.newCSFFlow()
	f.open(csfOpen{})
	stranger := h.open("stranger", netipAddrPort(h.cfg.Stranger, 0))
	reporter := h.open("reporter", netipAddrPort(h.cfg.Reporter, 0))
	report := func(via string, b wire.Repair) {
		var drops []psn.PSN
		for _, j := range bitsOf(b.Present) {
			if len(drops) < 6 {
				drops = append(drops, b.BlockStartPSN.Add(j))
			}
		}
		h.sendMsg(via, h.cfg.Target, &wire.PathReport{Method: wire.MethodNodeDrops, Source: f.hello.Source, Destination: f.hello.Destination,
			FlowLabel: f.qp, Hops: []wire.HopEntry{{NodeID: 7, MarkingPeriodNumber: 1, LostCount: uint32(len(drops)), Cause: wire.CauseCorruption, DroppedPSNs: drops}}})
	}
	extra := func(b wire.Repair, seen map[int]bool) []gotRepair {
		var out []gotRepair
		for _, g := range f.repairs(4 * h.cfg.SRTT) {
			f.check(g)
			if g.m.BlockStartPSN == b.BlockStartPSN && !g.m.Retx && g.m.Scheme == b.Scheme && !seen[int(g.m.RepairIndex)] {
				out = append(out, g)
				seen[int(g.m.RepairIndex)] = true
			}
		}
		return out
	}
	bl := f.protectedBlock(16, 8)
	b := bl[0].m
	seen := map[int]bool{}
	for _, g := range bl {
		seen[int(g.m.RepairIndex)] = true
	}
	report(stranger.name, b)
	if x := extra(b, seen); len(x) > 0 {
		h.fail(fmt.Sprintf("PATH_REPORT from %v (not a configured reporter) refused: no proactive REPAIR (Path Reports, C14)", h.cfg.Stranger),
			fmt.Sprintf("%d more ordinary REPAIRs for the block: %s", len(x), hexOf(x[0].b)), "PATH_REPORT accepted from an unlisted address")
	}
	report(reporter.name, b)
	x := extra(b, seen)
	if len(x) == 0 {
		h.skip("the target sent no proactive repair after the configured reporter's PATH_REPORT either (a MAY, Path Reports): acceptance cannot be observed")
	}
	h.note("stranger's report: nothing; reporter's: %d proactive symbols, recomputed equal", len(x))
	f.close()
}

// trip sends LOSS_REPORTs with 20 % loss every SRTT, and sources, for d.
func (f *csfFlow) lossy(d time.Duration) {
	h := f.h
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		f.lossReport(time.Duration(float64(h.cfg.SRTT)*h.cfg.ClockScale), 100, 80)
		f.burst(2, 200)
		f.serve()
		h.sleep(h.cfg.SRTT - h.cfg.BurstGap)
		f.serve()
	}
}

func scaled(h *Harness, d time.Duration) time.Duration {
	return time.Duration(float64(d) / h.cfg.ClockScale)
}

// openTripped opens a flow, gets a block protected, and trips the breaker.
func openTripped(h *Harness) (*csfFlow, wire.Repair) {
	f := h.newCSFFlow()
	f.open(csfOpen{})
	f.autoAck = true
	bl := f.protectedBlock(8, 3)
	f.lossy(scaled(h, 1500*time.Millisecond))
	return f, bl[0].m
}

// burstRepaired sends a block of 16 and returns an ordinary REPAIR that came for it (or for a
// later block), if any; the REPAIRs of earlier blocks, still arriving, do not count.
func (f *csfFlow) burstRepaired() (gotRepair, bool) {
	first := f.next
	f.burst(16, 200)
	for _, g := range f.repairs(4 * f.h.cfg.SRTT) {
		f.check(g)
		if !g.m.Retx && !g.m.Info && g.m.Scheme != wire.SchemeSourceCopy && first.AtOrBefore(g.m.BlockStartPSN) {
			return g, true
		}
	}
	return gotRepair{}, false
}

// noRepairFor sends a block and fails if ordinary repair comes for it.
func (f *csfFlow) noRepairFor(what string) {
	if g, ok := f.burstRepaired(); ok {
		f.h.fail(what, "ordinary REPAIR "+hexOf(g.b), "repair while the circuit breaker should be open")
	}
}

func csfBreakerTrip(h *Harness) {
	f, b := openTripped(h)
	f.noRepairFor("m = 0 once the loss rate exceeded 10 % over one second (Congestion Considerations)")
	f.lossReport(h.cfg.SRTT, 100, 80)
	f.request("crem", b, 71, lostOf(b, 2), 0, 2, false)
	for _, g := range f.answers(71, 4*h.cfg.SRTT) {
		if g.m.Retx {
			h.fail("no coded retransmission while the breaker is open (Congestion Considerations)", hexOf(g.b), "coded retransmission despite the breaker")
		}
	}
	if r, ok := h.recv("crem", time.Now(), f.fromCSF(wire.TypeClose)); ok {
		h.fail("the flow stays open (Congestion Considerations)", hexOf(r.b), "CLOSE after the trip")
	}
	h.note("after 1.5 s of 20 %% loss: no repair for a new block, no coded retransmission, the flow open")
	f.close()
}

func csfBreakerResume(h *Harness) {
	f, _ := openTripped(h)
	clean := time.Now()
	resumed := time.Duration(0)
	for time.Since(clean) < scaled(h, 13*time.Second) && resumed == 0 {
		for range 5 {
			f.lossReport(time.Duration(float64(h.cfg.SRTT)*h.cfg.ClockScale), 100, 100)
			h.sleep(h.cfg.SRTT)
			f.serve()
		}
		if _, ok := f.burstRepaired(); ok {
			resumed = time.Since(clean)
		}
	}
	h.note("clean reports from t = 0; ordinary repair again at %v", resumed.Round(time.Millisecond))
	if resumed == 0 {
		h.fail("redundancy resumed once the condition was absent for ten seconds (Congestion Considerations)", "no repair 13 s after the loss ended", "the breaker never resumed")
	}
	if resumed < scaled(h, 9*time.Second) {
		h.fail("redundancy resumes only after ten seconds without the condition (Congestion Considerations)", fmt.Sprintf("repair again after %v", resumed.Round(time.Millisecond)),
			"resumed too early")
	}
	f.close()
}

func csfBreakerClose(h *Harness) {
	f := h.newCSFFlow()
	f.open(csfOpen{})
	f.autoAck = true
	start := time.Now()
	var got *rx
	for time.Since(start) < scaled(h, 66*time.Second) && got == nil {
		f.lossReport(time.Duration(float64(h.cfg.SRTT)*h.cfg.ClockScale), 100, 80)
		f.burst(2, 200)
		if r, ok := h.recv("crem", time.Now().Add(h.cfg.SRTT), f.fromCSF(wire.TypeClose)); ok {
			got = &r
		}
		f.serve()
		f.repairs(0) // drop what repair still comes
	}
	if got == nil {
		h.fail("CLOSE reason 4 after the condition persisted for more than one minute (Congestion Considerations)", "no CLOSE within 66 s", "no CLOSE")
	}
	at := got.at.Sub(start)
	m, _ := wire.ParseClose(got.b)
	h.note("CLOSE reason %d after %v", m.Reason, at.Round(time.Millisecond))
	if m.Reason != wire.ReasonCircuitBreaker || at < scaled(h, 58*time.Second) {
		h.fail("CLOSE reason 4 once the condition persisted more than a minute (Congestion Considerations, C2)", fmt.Sprintf("reason %d after %v", m.Reason, at.Round(time.Millisecond)),
			"wrong CLOSE")
	}
}

// mangled returns broken copies of a well-formed message, each broken one way.
func mangled(b []byte, k int) map[string][]byte {
	cp := func() []byte { return append([]byte(nil), b...) }
	out := map[string][]byte{}
	v := cp()
	v[0] = 2<<4 | v[0]&0x0f
	out["Version 2"] = v
	v = cp()
	v[0] = v[0]&0xf0 | 0x0e
	out["Type 14"] = v
	v = cp()
	binary.BigEndian.PutUint16(v[2:], uint16(len(v)+4))
	out["Length beyond the datagram"] = v
	out["4 octets after Length"] = append(cp(), 0, 0, 0, 0)
	out["truncated"] = cp()[:len(b)-3]
	if k > 0 && k < 32 {
		v = cp()
		v[len(v)-1] |= 1 // bit 31 of the last bitmap word: beyond k
		out["bitmap bit beyond k"] = v
	}
	return out
}

func csfMalformed(h *Harness) {
	f := h.newCSFFlow()
	f.open(csfOpen{})
	bl := f.protectedBlock(8, 3)
	b := bl[0].m
	L := lostOf(b, 2)
	good, _ := (&wire.RepairRequest{FlowID: f.id, RequestID: 81, ConfigID: b.ConfigID, Scheme: b.Scheme, K: b.K, BlockStartPSN: b.BlockStartPSN,
		SuggestedM: 2, Lost: L}).Append(nil)
	closeMsg, _ := (&wire.Close{FlowID: f.id, Reason: wire.ReasonNormal}).Append(nil)
	sent := 0
	for name, v := range mangled(good, int(b.K)) {
		h.send("crem", f.csf, v)
		h.note("sent REPAIR_REQUEST with %s", name)
		sent++
	}
	for name, v := range mangled(closeMsg, 0) {
		if name == "bitmap bit beyond k" {
			continue
		}
		h.send("crem", f.csf, v)
		sent++
	}
	h.send("crem", f.csf, nil)
	h.send("crem", f.csf, []byte{0x16, 0, 0})
	garbage := make([]byte, 64)
	for i := range garbage {
		garbage[i] = byte(h.rng.Uint32())
	}
	h.send("crem", f.csf, garbage)
	for _, g := range f.repairs(4 * h.cfg.SRTT) {
		if g.m.Retx || g.m.RepairSessionID != 0 {
			h.fail("malformed REPAIR_REQUESTs discarded (Message Formats: unknown Version or Type discarded; a Length that disagrees, a bitmap beyond k)",
				"an answer: "+hexOf(g.b), "a malformed request was answered")
		}
	}
	if r, ok := h.recv("crem", time.Now(), f.fromCSF(wire.TypeClose)); ok {
		h.fail("no effect of malformed input", "CLOSE "+hexOf(r.b), "the target closed the flow")
	}
	h.send("crem", f.csf, good)
	if len(f.answers(81, 4*h.cfg.SRTT)) == 0 {
		h.fail("the well-formed request answered after the malformed ones (no effect on the flow)", "no answer", "the flow did not survive malformed input")
	}
	f.protectedBlock(16, 2) // still protected: a malformed CLOSE closed nothing
	h.note("%d malformed messages and 3 garbage datagrams discarded; the flow still answers and protects", sent)
	f.close()
}

func csfSpoofedClose(h *Harness) {
	f := h.newCSFFlow()
	f.open(csfOpen{})
	f.protectedBlock(8, 2)
	sp := h.open("spoof", netipAddrPort(h.cfg.Listen.Addr(), 0))
	h.sendMsg(sp.name, f.csf, &wire.Close{FlowID: f.id, Reason: wire.ReasonNormal})
	h.sleep(2 * h.cfg.SRTT)
	if r, ok := h.recv("crem", time.Now(), f.isHello); ok {
		h.fail("no new session: the spoofed CLOSE is not the bound CRF's", "HELLO "+hexOf(r.b), "the flow restarted its handshake after a spoofed CLOSE")
	}
	for try := 0; try < 3; try++ {
		f.burst(16, 200)
		for _, g := range f.repairs(4 * h.cfg.SRTT) {
			f.check(g)
			if !g.m.Retx && !g.m.Info {
				h.note("ordinary REPAIR after the spoofed CLOSE: the flow lives")
				f.close()
				return
			}
		}
		if r, ok := h.recv("crem", time.Now(), f.isHello); ok {
			h.fail("no new session after a spoofed CLOSE (Security Considerations)", "HELLO "+hexOf(r.b), "the flow was torn down")
		}
	}
	h.fail("ordinary REPAIRs for later blocks after a CLOSE from another address (Security Considerations)", "no REPAIR", "the flow was torn down")
}

func csfCongestionNoRaise(h *Harness) {
	f := h.newCSFFlow()
	f.open(csfOpen{})
	m0 := f.cur.M
	start := m0
	// raised reports intervals with 6 % loss (and CE on ce of the received) and returns the
	// first PARAM_UPDATE that raises m, if any.
	raised := func(ce uint32) (wire.ParamUpdate, bool) {
		for range 12 {
			h.sendMsg("crem", f.csf, &wire.LossReport{FlowID: f.id, IntervalUS: uint32(h.cfg.SRTT / time.Microsecond), Expected: 100, Received: 94,
				CEMarked: ce, RepairsReceived: 1})
			f.burst(8, 200)
			for _, g := range f.repairs(h.cfg.SRTT / 2) {
				f.check(g)
			}
			if r, ok := h.recv("crem", time.Now(), f.fromCSF(wire.TypeParamUpdate)); ok {
				m, _ := wire.ParseParamUpdate(r.b)
				if int(m.M) > m0 {
					return m, true
				}
				f.ack(m, wire.StatusAccepted) // a change that does not raise m is no verdict
				m0 = f.cur.M
			}
		}
		return wire.ParamUpdate{}, false
	}
	if m, ok := raised(38); ok {
		h.fail(fmt.Sprintf("m not raised above %d for loss with CE on 40 %% of the sources (C6 c: congestion never raises m)", m0),
			fmt.Sprintf("PARAM_UPDATE with m %d", m.M), "m raised for congestion loss")
	}
	m, ok := raised(0)
	if !ok {
		h.skip("the target did not raise m for 6 %% loss without CE either (its policy keeps m): nothing to judge")
	}
	f.ack(m, wire.StatusAccepted)
	h.note("m %d at the start, %d after the CE reports (never raised); raised to %d by the same loss without CE", start, m0, m.M)
	f.close()
}
