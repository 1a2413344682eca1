package conform

import (
	"fmt"
	"math/bits"
	"sort"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// csfScenarios are the scenarios run against a CSF: the runner plays the CRF.
func csfScenarios() []Scenario {
	s := func(name, section, req, sends, expects string, run func(*Harness)) Scenario {
		return Scenario{Name: "csf/" + name, Half: HalfCSF, Section: section, Requirement: req, Sends: sends, Expects: expects, Run: run}
	}
	all := []Scenario{
		s("hello-backoff", "Session", "HELLO is retransmitted with exponential backoff from 1 ms, at most eight attempts",
			"one source packet of a new flow; HELLO left unanswered",
			"at most 8 HELLOs with one nonce, attempt n at least 2^(n-1) - 1 ms after the first (10 % or 1 ms slack), at most twice that plus 50 ms", csfHelloBackoff),
		s("hello-nonce-random", "Security Considerations", "the Sender Nonce is random (blind injection unlikely)",
			"first source packets of four new flows; a fifth flow's session closed by the runner and started again by a source packet",
			"every nonce (four flows, both sessions of the fifth) distinct, non-zero, far apart (>= 10 bits differ)", csfNonceRandom),
		s("bound-to-hello-ack-source", "Session, C14", "the CSF sends all later messages of the flow to the address and port HELLO_ACK came from",
			"HELLO_ACK from another port of the runner's address than the one HELLO went to", "PARAM_UPDATE at that port, none at the one HELLO went to", csfBoundToAckSource),
		s("limits-minimum", "Session", "the effective limits are the minimum of both sides",
			"HELLO_ACK with Max k 6, Max m 1, Max T 1200, Cauchy only", "PARAM_UPDATE and REPAIRs within k <= 6, m <= 1, T <= 1200, scheme 1", csfLimitsMinimum),
		s("repair-symbols", "Sending Repair, Scheme 1", "ordinary repair symbols are R_i over all present positions, indices 0..m-1, Repair Session ID 0, the acknowledged Config ID",
			"bursts of 16 source packets", "REPAIRs whose every field and symbol match the runner's recomputation", csfRepairSymbols),
		s("present-bitmap-info", "Source Blocks, C13", "absent positions (a READ's response PSNs) are clear in the Present Bitmap; a PSN-range request naming them gets INFO",
			"3 WRITEs, a READ of 3 packets, 3 WRITEs; then REPAIR_REQUEST (RANGES) naming an absent PSN",
			"Present Bitmap without the READ's response PSNs; a REPAIR with INFO, Symbol Length 0, the block's Block Start PSN, k and Present Bitmap", csfPresentInfo),
		s("request-m-within-x", "Coded Retransmission", "a REPAIR_REQUEST is answered with M <= X coded symbols over exactly L, fresh indices, Repair Session ID = Request ID",
			"REPAIR_REQUEST for 3 of a block's sources, r = 0", "1 to 3 RETX REPAIRs, Lost Source Bitmap = L, symbols R_i[L] recomputed", csfRequestWithinX),
		s("request-once-per-srtt", "Coded Retransmission, C8", "at most one answer per block per SRTT",
			"two REPAIR_REQUESTs (new Request IDs) for one block back to back", "no answer to the second within SRTT/2 of the first answer", csfRequestOncePerSRTT),
		s("request-bound-address", "Coded Retransmission, Security Considerations, C14", "REPAIR goes only to the address bound at HELLO, never to a request's source",
			"REPAIR_REQUEST from another port of the runner's address; then one from the bound address",
			"no REPAIR at the other port; the bound address's request answered", csfRequestBoundAddress),
		s("appendix-exchange", "Appendix, Coded Retransmission", "the Appendix's exchange: X = 3, r = 2, M = 1 coded symbol over L = {0, 1, 2}",
			"four sources RDMA-PKT-0..3 in one block; REPAIR_REQUEST L = {0,1,2}, r 2, M_s 1",
			"exactly one REPAIR, byte for byte the runner's: flags 0x80, Lost Source Bitmap 0xE0000000, R_i[L]", csfAppendixExchange),
		s("fallback-after-two-rounds", "Fallback, C9", "no third coded round; FALLBACK is answered with Source Copy of every source in L",
			"three REPAIR_REQUESTs for one block SRTT apart (then one with FALLBACK if the third is not answered)",
			"RETX answers to the first two, no coded answer to the third; Source Copy symbols (scheme 0, index j, = S_j) for every j in L", csfFallback),
	}
	return append(all, csfMoreScenarios()...)
}

func csfHelloBackoff(h *Harness) {
	f := h.newCSFFlow()
	f.waitHello()
	nonce := f.hello.SenderNonce
	rs := h.collect("crem", 700*time.Millisecond, func(r rx) bool {
		if !f.isHello(r) {
			return false
		}
		m, _ := wire.ParseHello(r.b)
		return m.SenderNonce == nonce
	})
	at := []time.Time{f.helloAt[0]}
	for _, r := range rs {
		at = append(at, r.at)
	}
	var gaps []string
	for i := 1; i < len(at); i++ {
		gaps = append(gaps, at[i].Sub(at[i-1]).Round(100*time.Microsecond).String())
	}
	h.note("%d HELLO attempts with nonce %016x, gaps %s", len(at), nonce, list(gaps))
	if len(at) > 8 {
		h.fail("at most eight HELLO attempts (Session)", fmt.Sprintf("%d attempts within 700 ms, gaps %s", len(at), list(gaps)), "HELLO retransmitted beyond eight attempts")
	}
	if len(at) < 2 {
		h.fail("HELLO retransmitted while unanswered (Session)", "one HELLO", "no retransmission")
	}
	// Attempt i+1 is sent at least (2^i - 1) ms after the first, which is sent after the first
	// source packet: measured from that packet's send, a late receive timestamp of the runner's
	// own (a scheduling delay) can only lengthen what is measured. Allowance 10 % or 1 ms.
	for i := 1; i < len(at); i++ {
		want := time.Millisecond<<i - time.Millisecond
		if got := at[i].Sub(f.firstSent); got < want-max(want/10, time.Millisecond) {
			h.fail(fmt.Sprintf("exponential backoff from 1 ms: attempt %d at least %v after the first (Session)", i+1, want), "gaps "+list(gaps),
				"HELLO retransmitted sooner than the backoff")
		}
		// And not much later: a backoff that starts at 1 ms, not a slow fixed interval. The
		// allowance (twice the schedule and 50 ms) covers a loaded target's late timers.
		if late := 2*want + 50*time.Millisecond; at[i].Sub(f.firstSent) > late {
			h.fail(fmt.Sprintf("exponential backoff from 1 ms: attempt %d due %v after the first, at the latest %v (Session)", i+1, want, late), "gaps "+list(gaps),
				"HELLO retransmitted far later than a backoff from 1 ms")
		}
	}
}

func csfNonceRandom(h *Harness) {
	var nonces []uint64
	for range 4 {
		f := h.newCSFFlow()
		f.waitHello()
		nonces = append(nonces, f.hello.SenderNonce)
	}
	// A new session of one flow (after the CRF's CLOSE) draws a new nonce too: a nonce made
	// from the flow's descriptor would differ between flows and still be no random value.
	f := h.newCSFFlow()
	f.open(csfOpen{})
	first := f.hello.SenderNonce
	nonces = append(nonces, first)
	f.close()
	h.sleep(h.cfg.SRTT)
	restart := time.Now()
	f.source(200)
	// A HELLO of the new session: any nonce, sent after the new source packet (copies of the
	// first session's HELLO, received earlier, may still be pending).
	if r, ok := h.recv("crem", h.deadline(), func(r rx) bool { return f.isHello(r) && r.at.After(restart) }); ok {
		m, _ := wire.ParseHello(r.b)
		nonces = append(nonces, m.SenderNonce)
		h.note("the flow's new session after CLOSE: nonce %016x (the first %016x)", m.SenderNonce, first)
	} else {
		h.note("no new session after the CRF's CLOSE and a source packet: the nonce of a second session not seen")
	}
	h.note("nonces %x", nonces)
	for i, a := range nonces {
		if a == 0 {
			h.fail("a random, non-zero Sender Nonce", "0", "zero nonce")
		}
		for _, b := range nonces[:i] {
			d := a - b
			if b > a {
				d = b - a
			}
			if hd := bits.OnesCount64(a ^ b); hd < 10 || d < 1<<20 {
				h.fail("nonces of different flows drawn at random (Security Considerations)", fmt.Sprintf("%016x and %016x (%d bits differ)", a, b, hd),
					"nonces of new flows are equal or close")
			}
		}
	}
}

func csfLimitsMinimum(h *Harness) {
	f := h.newCSFFlow()
	caps := wire.Capabilities{FlowKind: wire.FlowKindRoCEv2, Schemes: wire.SchemeSet(0).With(wire.SchemeCauchy), MaxK: 6, MaxM: 1, MaxT: 1200}
	f.open(csfOpen{caps: &caps})
	c := f.cur
	h.note("configuration %d: scheme %v, k %d, m %d, T %d", c.ID, c.Scheme, c.K, c.M, c.T)
	if c.K > 6 || c.M > 1 || c.T > 1200 || c.Scheme != wire.SchemeCauchy {
		h.fail("PARAM_UPDATE within the minimum of both sides' limits: k <= 6, m <= 1, T <= 1200, scheme 1 (Configuration)",
			fmt.Sprintf("scheme %v, k %d, m %d, T %d", c.Scheme, c.K, c.M, c.T), "configuration beyond the CRF's limits")
	}
	f.burst(12, 200)
	for _, g := range f.repairs(4 * h.cfg.SRTT) {
		f.check(g)
	}
	f.close()
}

func csfRepairSymbols(h *Harness) {
	f := h.newCSFFlow()
	f.open(csfOpen{})
	bl := f.protectedBlock(16, 2)
	idx := map[int]bool{}
	for _, g := range bl {
		if g.m.RepairSessionID != 0 {
			h.fail("Repair Session ID 0 on ordinary repair symbols (Message Formats)", fmt.Sprint(g.m.RepairSessionID), "ordinary REPAIR with a session")
		}
		if idx[int(g.m.RepairIndex)] {
			h.fail("distinct Repair Indices in a block's round", fmt.Sprint(g.m.RepairIndex), "Repair Index repeated")
		}
		idx[int(g.m.RepairIndex)] = true
	}
	for i := range min(f.cur.M, len(bl)) {
		if !idx[i] {
			h.fail(fmt.Sprintf("Repair Indices 0 to m-1 = %d (Sending Repair)", f.cur.M-1), fmt.Sprint(keysInt(idx)), "a Repair Index below m is missing")
		}
	}
	h.note("block at PSN %d: k %d, %d present, %d symbols (indices %v) recomputed equal", uint32(bl[0].m.BlockStartPSN), bl[0].m.K,
		bl[0].m.Present.Count(), len(bl), keysInt(idx))
	f.close()
}

func keysInt(m map[int]bool) []int {
	var k []int
	for x := range m {
		k = append(k, x)
	}
	sort.Ints(k)
	return k
}

func csfPresentInfo(h *Harness) {
	f := h.newCSFFlow()
	f.open(csfOpen{})
	var blk *wire.Repair
	var rd, abs psn.PSN
	for try := 0; try < 3 && blk == nil; try++ {
		for range 3 {
			f.source(200)
		}
		rd = f.read(3)
		for range 3 {
			f.source(200)
		}
		h.sleep(h.cfg.BurstGap)
		rs := f.repairs(4 * h.cfg.SRTT)
		abs = rd.Add(1)
		for i := range rs {
			f.check(rs[i]) // the Present Bitmap must leave out the READ's response PSNs
			if m := &rs[i].m; m.BlockStartPSN.Forward(abs) < uint32(m.K) {
				blk = m
			}
		}
	}
	if blk == nil {
		h.fail(fmt.Sprintf("ordinary REPAIR for the block spanning the READ's absent PSNs %d-%d", uint32(abs), uint32(abs.Add(1))), "none after three bursts",
			"no repair for the block (m = %d)", f.cur.M)
	}
	h.note("block at PSN %d k %d, Present %v; READ at PSN %d", uint32(blk.BlockStartPSN), blk.K, bitsOf(blk.Present), uint32(rd))
	h.sendMsg("crem", f.csf, &wire.RepairRequest{FlowID: f.id, RangeForm: true, RequestID: 21, Ranges: []psn.Range{{Start: abs, Count: 1}}})
	r, ok := h.recv("crem", time.Now().Add(4*h.cfg.SRTT), func(r rx) bool {
		if !f.fromCSF(wire.TypeRepair)(r) {
			return false
		}
		m, err := wire.ParseRepair(r.b)
		return err == nil && m.Info
	})
	if !ok {
		h.fail(fmt.Sprintf("a REPAIR with the INFO flag for the block at PSN %d (Source Blocks: a PSN-range request naming absent positions)", uint32(blk.BlockStartPSN)),
			"none within 4 SRTT", "no INFO answer")
	}
	m, _ := wire.ParseRepair(r.b)
	if len(m.Symbol) != 0 || m.BlockStartPSN != blk.BlockStartPSN || m.K != blk.K || m.Present != blk.Present {
		h.fail(fmt.Sprintf("INFO: Symbol Length 0, Block Start PSN %d, k %d, Present %v", uint32(blk.BlockStartPSN), blk.K, bitsOf(blk.Present)),
			fmt.Sprintf("Symbol Length %d, Block Start PSN %d, k %d, Present %v", len(m.Symbol), uint32(m.BlockStartPSN), m.K, bitsOf(m.Present)), "INFO does not describe the block")
	}
	f.close()
}

// lostOf takes n present positions of the block, from the first.
func lostOf(b wire.Repair, n int) psn.Bitmap {
	var l psn.Bitmap
	for _, j := range bitsOf(b.Present) {
		if l.Count() == n {
			break
		}
		l.Set(j)
	}
	return l
}

func csfRequestWithinX(h *Harness) {
	f := h.newCSFFlow()
	f.open(csfOpen{})
	bl := f.protectedBlock(8, 4)
	b := bl[0].m
	L := lostOf(b, 3)
	used := map[int]bool{}
	for _, g := range bl {
		used[int(g.m.RepairIndex)] = true
	}
	f.request("crem", b, 31, L, 0, 3, false)
	ans := f.answers(31, 4*h.cfg.SRTT)
	h.note("L %v, r 0, M_s 3: %d RETX symbols", bitsOf(L), len(ans))
	if len(ans) == 0 {
		h.fail("a coded retransmission answering the REPAIR_REQUEST (Coded Retransmission)", "none within 4 SRTT", "request not answered")
	}
	if len(ans) > 3 {
		h.fail("M <= X = 3 symbols (Coded Retransmission)", fmt.Sprintf("%d symbols", len(ans)), "more symbols than lost packets")
	}
	for _, g := range ans {
		if !g.m.Retx || g.m.Lost != L {
			h.fail(fmt.Sprintf("RETX flag and Lost Source Bitmap = L = %v", bitsOf(L)), fmt.Sprintf("RETX %v, Lost %v", g.m.Retx, bitsOf(g.m.Lost)), "coded retransmission not over L")
		}
		if used[int(g.m.RepairIndex)] {
			h.fail("fresh Repair Indices for coded retransmission (C8)", fmt.Sprint(g.m.RepairIndex), "Repair Index used before in the block")
		}
		used[int(g.m.RepairIndex)] = true
		f.check(g) // R_i[L] over exactly L
	}
	f.close()
}

func csfRequestOncePerSRTT(h *Harness) {
	f := h.newCSFFlow()
	f.open(csfOpen{})
	bl := f.protectedBlock(8, 3)
	b := bl[0].m
	L := lostOf(b, 2)
	f.request("crem", b, 41, L, 0, 2, false)
	f.request("crem", b, 42, L, 0, 2, false)
	rs := f.repairs(4 * h.cfg.SRTT)
	var first, second time.Time
	for _, g := range rs {
		switch g.m.RepairSessionID {
		case 41:
			if first.IsZero() {
				first = g.at
			}
		case 42:
			if second.IsZero() {
				second = g.at
			}
		}
		f.check(g)
	}
	if first.IsZero() {
		h.fail("an answer to the first REPAIR_REQUEST (Coded Retransmission)", "none within 4 SRTT", "request not answered")
	}
	if !second.IsZero() {
		gap := second.Sub(first)
		h.note("second request answered %v after the first (SRTT imposed %v)", gap.Round(100*time.Microsecond), h.cfg.SRTT)
		if gap < h.cfg.SRTT/2 {
			h.fail(fmt.Sprintf("at most one answer per block per SRTT (%v): none to the second request before %v (Coded Retransmission)", h.cfg.SRTT, h.cfg.SRTT/2),
				fmt.Sprintf("the second answered %v after the first", gap.Round(100*time.Microsecond)), "two answers within one SRTT")
		}
	} else {
		h.note("second request not answered within 4 SRTT (C8 defers it to SRTT after the first answer)")
	}
	f.close()
}

func csfRequestBoundAddress(h *Harness) {
	f := h.newCSFFlow()
	f.open(csfOpen{})
	sp := h.open("spoof", netipAddrPort(h.cfg.Listen.Addr(), 0))
	bl := f.protectedBlock(8, 3)
	b := bl[0].m
	L := lostOf(b, 2)
	f.request("spoof", b, 51, L, 0, 2, false)
	got := h.collect(sp.name, 4*h.cfg.SRTT, func(r rx) bool { return len(r.b) > 0 && wire.Type(r.b[0]&0x0f) == wire.TypeRepair })
	if len(got) > 0 {
		h.fail(fmt.Sprintf("REPAIR only to the address bound at HELLO (%v), never to a request's source (Security Considerations)", h.cfg.Listen),
			fmt.Sprintf("%d REPAIRs to %v: %s", len(got), sp.addr, hexOf(got[0].b)), "REPAIR sent to the request's source")
	}
	if a := f.answers(51, time.Millisecond); len(a) > 0 {
		h.note("the request from %v was answered to the bound address (%d symbols)", sp.addr, len(a))
	}
	h.sleep(h.cfg.SRTT)
	f.request("crem", b, 52, L, 0, 2, false)
	if len(f.answers(52, 4*h.cfg.SRTT)) == 0 {
		h.fail("the control: the same request from the bound address answered", "none", "no answer from the bound address either")
	}
	f.close()
}

func csfAppendixExchange(h *Harness) {
	f := h.newCSFFlow()
	f.open(csfOpen{})
	if f.cur.K < 4 || f.cur.M < 2 || f.cur.Scheme != wire.SchemeCauchy {
		h.skip("the exchange needs k >= 4, m >= 2, scheme 1; the target's configuration has scheme %v k %d m %d", f.cur.Scheme, f.cur.K, f.cur.M)
	}
	var bl []gotRepair
	var start psn.PSN
	for try := 0; try < 3 && bl == nil; try++ {
		start = f.next
		for j := range 4 {
			p := f.next
			b := h.build(f.qp, roce.OpWriteMiddle, p, []byte(fmt.Sprintf("RDMA-PKT-%d", j)), 0, 0)
			f.sent[p] = b
			f.next = p.Add(1)
			h.send("rdma", h.cfg.Inject, b)
		}
		h.sleep(h.cfg.BurstGap)
		rs := f.repairs(4 * h.cfg.SRTT)
		for _, g := range rs {
			f.check(g)
		}
		if x := blocksOf(rs)[start]; len(x) >= 2 && x[0].m.K == 4 {
			bl = x
		}
	}
	if bl == nil {
		h.skip("the target did not make a block of exactly the four packets with two repair symbols (k %d, m %d)", f.cur.K, f.cur.M)
	}
	b := bl[0].m
	used := map[int]bool{}
	for _, g := range bl {
		used[int(g.m.RepairIndex)] = true
	}
	L := bitmapOf(0, 1, 2)
	f.request("crem", b, 7, L, 2, 1, false)
	ans := f.answers(7, 4*h.cfg.SRTT)
	if len(ans) != 1 {
		h.fail("exactly one coded symbol: M = X - r = 1 on a clean path (Appendix, C8)", fmt.Sprintf("%d symbols", len(ans)), "not the Appendix's one symbol")
	}
	g := ans[0]
	if used[int(g.m.RepairIndex)] {
		h.fail("a fresh Repair Index (the Appendix's is 2)", fmt.Sprint(g.m.RepairIndex), "Repair Index used before")
	}
	src, present, _ := sourceSymbols(f.sent, start, 4, f.cur.T)
	sym, _ := repairSymbol(wire.SchemeCauchy, int(g.m.RepairIndex), L, src, f.cur.T)
	want, err := (&wire.Repair{FlowID: f.id, Retx: true, ConfigID: b.ConfigID, Scheme: wire.SchemeCauchy, K: 4, RepairIndex: g.m.RepairIndex,
		BlockStartPSN: start, RepairSessionID: 7, Present: present, Lost: L, Symbol: sym}).Append(nil)
	if err != nil {
		h.fail("a REPAIR the runner can build", err.Error(), "cannot build the expected REPAIR")
	}
	if !equalBytes(want, g.b) {
		h.fail("the REPAIR byte for byte: "+hexOf(want), hexOf(g.b), "the coded retransmission differs from the Appendix's exchange: %s", firstDiff(want, g.b))
	}
	h.note("one REPAIR, Repair Index %d, %d octets, byte for byte as expected; header %s", g.m.RepairIndex, len(g.b), hexOf(g.b[:28]))
	f.close()
}

func csfFallback(h *Harness) {
	f := h.newCSFFlow()
	f.open(csfOpen{})
	bl := f.protectedBlock(8, 3)
	b := bl[0].m
	L := lostOf(b, 2)
	wait := 4 * h.cfg.SRTT
	for round, id := range []uint16{61, 62} {
		f.request("crem", b, id, L, 0, 2, false)
		ans := f.answers(id, wait)
		if len(ans) == 0 {
			h.fail(fmt.Sprintf("coded retransmission in round %d (Coded Retransmission)", round+1), "none", "request not answered")
		}
		for _, g := range ans {
			f.check(g)
			if !g.m.Retx {
				h.note("round %d answered with %v (not coded)", round+1, g.m.Scheme)
			}
		}
		h.sleep(h.cfg.SRTT)
	}
	f.request("crem", b, 63, L, 0, 2, false)
	third := f.answers(63, wait)
	for _, g := range third {
		f.check(g)
		if g.m.Retx {
			h.fail("no third coded retransmission round for a block (Fallback: after two rounds, per-packet retransmission)",
				"a RETX REPAIR answering the third request: "+hexOf(g.b), "third coded round")
		}
	}
	copies := third
	if len(third) == 0 {
		// The third request went unanswered: the FALLBACK request of C9 (a) is the one to
		// answer with Source Copy.
		h.sleep(h.cfg.SRTT)
		f.request("crem", b, 64, L, 0, 2, true)
		copies = f.answers(64, wait)
	} else {
		h.note("the third request was answered with %d Source Copy symbols (per-packet retransmission)", len(third))
	}
	got := map[int]bool{}
	for _, g := range copies {
		if g.m.Scheme != wire.SchemeSourceCopy {
			h.fail("Source Copy symbols (scheme 0) after two coded rounds (C8, C9)", fmt.Sprintf("scheme %v", g.m.Scheme), "fallback not answered with Source Copy")
		}
		f.check(g) // the source symbol itself
		got[int(g.m.RepairIndex)] = true
	}
	for _, j := range bitsOf(L) {
		if !got[j] {
			h.fail(fmt.Sprintf("Source Copy of every source in L = %v", bitsOf(L)), fmt.Sprint(keysInt(got)), "a source of L not copied")
		}
	}
	f.close()
}

func csfBoundToAckSource(h *Harness) {
	f := h.newCSFFlow()
	other := h.open("ack-from", netipAddrPort(h.cfg.Listen.Addr(), 0))
	f.open(csfOpen{ackVia: other.name, noParam: true})
	r, ok := h.recv(other.name, h.deadline(), f.fromCSF(wire.TypeParamUpdate))
	if !ok {
		if w, wrong := h.recv("crem", time.Now(), f.fromCSF(wire.TypeParamUpdate)); wrong {
			h.fail(fmt.Sprintf("PARAM_UPDATE to %v, where HELLO_ACK came from (Session)", other.addr),
				fmt.Sprintf("PARAM_UPDATE to %v, where HELLO went: %s", h.cfg.Listen, hexOf(w.b)), "later messages not sent to the HELLO_ACK's source")
		}
		h.fail(fmt.Sprintf("PARAM_UPDATE to %v, where HELLO_ACK came from (Session)", other.addr), "nothing within "+h.cfg.Timeout.String(), "no PARAM_UPDATE")
	}
	m, _ := wire.ParseParamUpdate(r.b)
	h.note("PARAM_UPDATE (Config ID %d) came to %v, HELLO_ACK's source", m.ConfigID, other.addr)
	h.sendMsg(other.name, f.csf, &wire.Close{FlowID: f.id, Reason: wire.ReasonNormal})
}
