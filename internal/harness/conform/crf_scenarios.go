package conform

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/wire"
)

// crfScenarios are the scenarios run against a CRF: the runner plays the CSF.
func crfScenarios() []Scenario {
	s := func(name, section, req, sends, expects string, run func(*Harness)) Scenario {
		return Scenario{Name: "crf/" + name, Half: HalfCRF, Section: section, Requirement: req, Sends: sends, Expects: expects, Run: run}
	}
	all := []Scenario{
		s("hello-ack", "Session, Security Considerations", "HELLO_ACK goes to the HELLO's source, echoes nonce, AF and RDMA MTU, supports scheme 1, and is no larger than HELLO",
			"HELLO from a port the target was not configured with", "one HELLO_ACK there, <= the HELLO's length, the fields echoed", crfHelloAck),
		s("hello-retransmitted", "Session, C3", "a retransmitted HELLO gets the same HELLO_ACK with the same Flow ID",
			"the same HELLO twice", "two HELLO_ACKs with one Flow ID", crfHelloRetransmitted),
		s("flow-id-random", "Session", "the CRF chooses the Flow ID at random among unused values",
			"HELLOs of six flows", "six distinct, non-zero Flow IDs, not in a progression, far apart", crfFlowIDRandom),
		s("limits-minimum", "Session", "the effective limits are the minimum of both sides: a configuration beyond the CSF's own limits is refused",
			"HELLO with Max k 8, Max m 2; PARAM_UPDATE k 16 then k 8 m 2", "PARAM_ACK with non-zero Status for k 16, Status 0 for k 8", crfLimitsMinimum),
		s("repair-decode", "Scheme 1, C7 (e), C12", "a block is decoded from ordinary repair symbols and the restored packets delivered unchanged",
			"8 sources with 2 lost, R0 and R1", "all 8 packets delivered, byte for byte", crfRepairDecode),
		s("request-format", "Coded Retransmission", "an incomplete block gets a block-form REPAIR_REQUEST: L, r, M_s <= X, to the HELLO's address; a coded retransmission over L restores it",
			"8 sources with 3 lost, R0 (LAST); then M_s RETX symbols over L", "REPAIR_REQUEST with L = the lost, r = 1, 2 <= M_s <= 3; all 8 delivered", crfRequestFormat),
		s("appendix-exchange", "Appendix, Coded Retransmission", "the Appendix's exchange from the CRF's side: it asks for M = 1 over L = {0, 1, 2} and restores three packets from one symbol",
			"RDMA-PKT-3 and R0, R1 of the four-packet block; then R2[L]",
			"REPAIR_REQUEST byte for byte (r 2, M_s 1, Lost 0xE0000000); RDMA-PKT-0..2 delivered", crfAppendixExchange),
	}
	return append(all, crfMoreScenarios()...)
}

func crfHelloAck(h *Harness) {
	f := h.newCRFFlow()
	hs := h.open("hello", netipAddrPort(h.cfg.Listen.Addr(), 0))
	m, r, hb, ok := f.sayHello(hs.name)
	if !ok {
		h.fail("HELLO_ACK to the address and port HELLO came from (Session)", "nothing at "+hs.addr.String(),
			"no HELLO_ACK (a protect rule must cover the flow)")
	}
	f.id = m.FlowID
	switch {
	case len(r.b) > len(hb):
		h.fail(fmt.Sprintf("HELLO_ACK no larger than the HELLO's %d octets (Security Considerations: no amplification)", len(hb)),
			fmt.Sprintf("%d octets: %s", len(r.b), hexOf(r.b)), "HELLO_ACK larger than HELLO")
	case m.AF != f.hello.AF() || m.RDMAMTU != f.hello.RDMAMTU || m.FlowKind != wire.FlowKindRoCEv2:
		h.fail(fmt.Sprintf("AF %v, RDMA MTU %d echoed, flow kind 1", f.hello.AF(), f.hello.RDMAMTU),
			fmt.Sprintf("AF %v, RDMA MTU %d, flow kind %v", m.AF, m.RDMAMTU, m.FlowKind), "HELLO_ACK does not echo the HELLO")
	case !m.Schemes.Has(wire.SchemeCauchy):
		h.fail("scheme 1 supported (REQUIRED, Scheme 1)", fmt.Sprintf("schemes %#x", uint16(m.Schemes)), "scheme 1 not supported")
	case m.MaxOpenBlocks == 0 || m.MaxK == 0:
		h.fail("Max Open Blocks and Max k at least 1", fmt.Sprintf("Max Open Blocks %d, Max k %d", m.MaxOpenBlocks, m.MaxK), "limits allow nothing")
	}
	h.note("HELLO %d octets, HELLO_ACK %d octets: Flow ID %08x, Max k %d, Max m %d, Max T %d, Max Open Blocks %d",
		len(hb), len(r.b), m.FlowID, m.MaxK, m.MaxM, m.MaxT, m.MaxOpenBlocks)
	h.sendMsg(hs.name, h.cfg.Target, &wire.Close{FlowID: f.id})
}

func crfHelloRetransmitted(h *Harness) {
	f := h.newCRFFlow()
	a, _, _, ok1 := f.sayHello("crem")
	b, _, _, ok2 := f.sayHello("crem")
	if !ok1 || !ok2 {
		h.fail("a HELLO_ACK to each copy of the HELLO (C3)", fmt.Sprintf("answers: %v, %v", ok1, ok2), "a copy of HELLO unanswered")
	}
	f.id = a.FlowID
	if a.FlowID != b.FlowID {
		h.fail(fmt.Sprintf("the same Flow ID %08x for the retransmitted HELLO (C3)", a.FlowID), fmt.Sprintf("%08x", b.FlowID), "a new Flow ID for the same HELLO")
	}
	f.close()
}

func crfFlowIDRandom(h *Harness) {
	var ids []uint32
	for range 6 {
		f := h.newCRFFlow()
		f.handshake()
		ids = append(ids, f.id)
		defer f.close()
	}
	h.note("Flow IDs %08x", ids)
	prog := true
	for i, a := range ids {
		if a == 0 {
			h.fail("a non-zero Flow ID (0 marks HELLO)", "0", "Flow ID 0 assigned")
		}
		if i >= 2 && a-ids[i-1] != ids[i-1]-ids[i-2] {
			prog = false
		}
		for _, b := range ids[:i] {
			d := a - b
			if b > a {
				d = b - a
			}
			if bits.OnesCount32(a^b) < 4 || d < 1<<12 {
				h.fail("Flow IDs chosen at random among unused values (Session)", fmt.Sprintf("%08x and %08x", a, b), "Flow IDs equal or close")
			}
		}
	}
	if prog {
		h.fail("Flow IDs chosen at random (Session)", fmt.Sprintf("%08x: an arithmetic progression", ids), "Flow IDs in sequence")
	}
}

func crfLimitsMinimum(h *Harness) {
	f := h.newCRFFlow()
	f.hello.MaxK, f.hello.MaxM = 8, 2
	f.handshake()
	h.note("HELLO_ACK states Max k %d, Max m %d, Max T %d", f.ack.MaxK, f.ack.MaxM, f.ack.MaxT)
	h.sleep(h.cfg.SRTT)
	st, ok := f.propose(flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: 16, M: 2, T: 256}, f.next)
	if !ok {
		h.fail("PARAM_ACK for every PARAM_UPDATE (Configuration)", "none", "PARAM_UPDATE unanswered")
	}
	refused := st
	if st == wire.StatusAccepted {
		h.fail("k 16 refused: above the minimum of both sides' Max k (8) (Session: the effective limits are the minimum)",
			"Status 0 (accepted)", "a configuration beyond the CSF's own limits accepted")
	}
	st, ok = f.propose(flow.Config{ID: 2, Scheme: wire.SchemeCauchy, K: 8, M: 2, T: 256}, f.next)
	if !ok || st != wire.StatusAccepted {
		h.fail("k 8, m 2 accepted: within both sides' limits", fmt.Sprintf("answered %v, Status %v", ok, st), "configuration within the limits refused")
	}
	h.note("k 16 refused with Status %d (%v), k 8 accepted", refused, refused)
	f.close()
}

func crfRepairDecode(h *Harness) {
	f := h.newCRFFlow()
	f.open(8, 2, 256)
	lost := bitmapOf(2, 5)
	start := f.block(8, lost, 200)
	f.ordinary(start, 8, 0, 1)
	f.mustDeliver("the 8 packets of the block, 2 of them restored from R0 and R1 (Scheme 1)", psns(start, 8, nil))
	h.note("block at PSN %d: 6 sources + R0, R1 -> 8 delivered byte for byte", uint32(start))
	f.close()
}

func crfRequestFormat(h *Harness) {
	f := h.newCRFFlow()
	f.open(8, 2, 256)
	L := bitmapOf(1, 3, 4)
	start := f.block(8, L, 200)
	f.ordinary(start, 8, 0)
	m, r, ok := f.waitRequest(start, h.cfg.Timeout)
	if !ok {
		h.fail("REPAIR_REQUEST for the incomplete block (Coded Retransmission)", "none within "+h.cfg.Timeout.String(), "no request")
	}
	if r.from != h.cfg.Target {
		h.note("REPAIR_REQUEST came from %v, not the target's CREM address %v", r.from, h.cfg.Target)
	}
	if m.RangeForm {
		h.fail("the block form: the CRF has a REPAIR of the block (Coded Retransmission)", hexOf(r.b), "PSN-range form for a known block")
	}
	x := L.Count()
	switch {
	case m.ConfigID != 1 || m.Scheme != wire.SchemeCauchy || m.K != 8 || m.Lost != L || m.RepairsHeld != 1:
		h.fail(fmt.Sprintf("Config ID 1, scheme 1, k 8, Lost %v, r 1", bitsOf(L)),
			fmt.Sprintf("Config ID %d, scheme %v, k %d, Lost %v, r %d", m.ConfigID, m.Scheme, m.K, bitsOf(m.Lost), m.RepairsHeld), "REPAIR_REQUEST misdescribes the block")
	case int(m.SuggestedM) > x:
		h.fail(fmt.Sprintf("M_s <= X = %d (Coded Retransmission: MUST NOT exceed X)", x), fmt.Sprint(m.SuggestedM), "M_s above X")
	case m.RequestID == 0:
		h.fail("a non-zero Request ID (C4)", "0", "Request ID 0")
	}
	if int(m.SuggestedM) < x-1 {
		h.note("M_s %d is below X - r = %d", m.SuggestedM, x-1)
	}
	n := max(int(m.SuggestedM), x-1)
	for i := range n {
		f.sendRepair(f.repair(start, 8, 2+i, L, true, m.RequestID, false))
	}
	f.mustDeliver(fmt.Sprintf("the block restored by %d RETX symbols over L (Coded Retransmission)", n), psns(start, 8, nil))
	h.note("REPAIR_REQUEST %s; %d coded symbols restored %d packets", hexOf(r.b), n, x)
	f.close()
}

func crfAppendixExchange(h *Harness) {
	f := h.newCRFFlow()
	f.open(4, 2, 32)
	start := f.next
	for j := range 4 {
		f.packet(start.Add(j), []byte(fmt.Sprintf("RDMA-PKT-%d", j)))
	}
	f.next = start.Add(4)
	h.send("rdma", h.cfg.Inject, f.pkts[start.Add(3)])
	f.ordinary(start, 4, 0, 1)
	m, r, ok := f.waitRequest(start, h.cfg.Timeout)
	if !ok {
		h.fail("REPAIR_REQUEST for L = {0, 1, 2} (Appendix)", "none within "+h.cfg.Timeout.String(), "no request")
	}
	L := bitmapOf(0, 1, 2)
	want, _ := (&wire.RepairRequest{FlowID: f.id, RequestID: m.RequestID, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 4, RepairsHeld: 2,
		BlockStartPSN: start, SuggestedM: 1, Lost: L}).Append(nil)
	if !equalBytes(want, r.b) {
		h.fail("the REPAIR_REQUEST byte for byte (r 2, M_s = X - r = 1 on a clean path, Lost 0xE0000000): "+hexOf(want), hexOf(r.b),
			"the request differs from the Appendix's exchange: %s", firstDiff(want, r.b))
	}
	f.sendRepair(f.repair(start, 4, 2, L, true, m.RequestID, false))
	f.mustDeliver("RDMA-PKT-0, -1, -2 restored from S3, R0, R1 and R2[L] (Appendix)", psns(start, 4, nil))
	h.note("REPAIR_REQUEST %s byte for byte; one symbol restored three packets", hexOf(r.b))
	_ = time.Second
	f.close()
}
