package conform

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// csfFlow is one RDMA flow the runner drives through the target CSF, with the CRF's side of
// its session: the source packets sent (by PSN), the HELLO, the Flow ID the runner assigned,
// and the configurations it acknowledged.
type csfFlow struct {
	h       *Harness
	qp      uint32
	next    psn.PSN
	sent    map[psn.PSN][]byte // UDP payloads (BTH to ICRC) of the source packets
	absent  map[psn.PSN]bool   // PSNs a READ consumed
	hello   wire.Hello
	helloAt []time.Time // arrival of each HELLO attempt of the session (same nonce)
	csf     netip.AddrPort
	id      uint32
	cfgs    map[uint8]flow.Config // acknowledged
	cur     flow.Config
	eff     psn.PSN // Effective PSN of cur
	// autoAck: PARAM_UPDATEs met while collecting REPAIRs are accepted one SRTT after they
	// came (the scenario does not judge configuration changes, but must not leave them
	// unanswered: eight attempts end the flow).
	autoAck bool
	acks    []pendingAck
	// firstSent is when the flow's first source packet went out (before the first HELLO);
	// ackSent when HELLO_ACK went out (before the first PARAM_UPDATE).
	firstSent, ackSent time.Time
	lastParam          wire.ParamUpdate // the PARAM_UPDATE open answered (or left unanswered)
}

type pendingAck struct {
	due time.Time
	m   wire.ParamUpdate
}

// serve takes the PARAM_UPDATEs that came and sends the acknowledgements that are due.
func (f *csfFlow) serve() {
	if !f.autoAck {
		return
	}
	for {
		r, ok := f.h.recv("crem", time.Now(), f.fromCSF(wire.TypeParamUpdate))
		if !ok {
			break
		}
		if m, err := wire.ParseParamUpdate(r.b); err == nil {
			f.acks = append(f.acks, pendingAck{due: r.at.Add(f.h.cfg.SRTT), m: m})
		}
	}
	for len(f.acks) > 0 && !time.Now().Before(f.acks[0].due) {
		f.ack(f.acks[0].m, wire.StatusAccepted)
		f.acks = f.acks[1:]
	}
}

// csfOpen says how the runner answers the handshake.
type csfOpen struct {
	// answerAttempt: the HELLO attempt HELLO_ACK answers. The second (default) leaves the
	// target no RTT sample from HELLO (Karn's rule), so that the delayed PARAM_ACK sets it.
	answerAttempt int
	caps          *wire.Capabilities // HELLO_ACK's limits (nil: generous ones)
	maxOpen       uint16
	paramDelay    time.Duration // the PARAM_ACK's delay (default the run's SRTT)
	noParamAck    bool          // leave the first PARAM_UPDATE unanswered
	paramStatus   wire.Status
	ackVia        string // the runner's socket HELLO_ACK goes from (default "crem")
	noParam       bool   // return after HELLO_ACK: the scenario takes the PARAM_UPDATE itself
}

func (h *Harness) newCSFFlow() *csfFlow {
	return &csfFlow{h: h, qp: h.nextQP(), next: psn.PSN(h.rng.Uint32N(psn.Modulus)), sent: map[psn.PSN][]byte{},
		absent: map[psn.PSN]bool{}, cfgs: map[uint8]flow.Config{}}
}

// payloadOf is the payload of the source packet at PSN p: octets derived from the QP and PSN.
func payloadOf(qp uint32, p psn.PSN, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(uint32(p)*7 + uint32(i)*13 + qp)
	}
	return b
}

// logical is the header the runner seals its packets' ICRC under.
func (h *Harness) logical(srcPort uint16) roce.LogicalHeader {
	src, dst := h.cfg.FlowSrc, h.cfg.FlowDst
	if !src.IsValid() || !dst.IsValid() {
		src, dst = netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	}
	return roce.LogicalHeader{Src: src, Dst: dst, SrcPort: srcPort}
}

// build returns a RoCEv2 datagram (BTH to ICRC) of opcode op at PSN p.
func (h *Harness) build(qp uint32, op roce.Opcode, p psn.PSN, payload []byte, dma uint32, srcPort uint16) []byte {
	pkt := roce.Packet{BTH: roce.BTH{OpCode: op, PKey: 0xffff, DestQP: qp, PSN: p}, Payload: payload}
	if op == roce.OpReadRequest {
		pkt.RETH = roce.RETH{VA: 0x1000, RKey: 7, DMALength: dma}
		pkt.Payload = nil
	}
	b, err := pkt.Append(nil)
	if err != nil {
		panic(fmt.Sprintf("conform: building a RoCEv2 packet: %v", err)) // the runner's own arguments
	}
	if err := h.logical(srcPort).Seal(b); err != nil {
		panic(fmt.Sprintf("conform: sealing: %v", err))
	}
	return b
}

// source sends the next source packet (an RDMA WRITE MIDDLE with n payload octets).
func (f *csfFlow) source(n int) psn.PSN {
	p := f.next
	b := f.h.build(f.qp, roce.OpWriteMiddle, p, payloadOf(f.qp, p, n), 0, 0)
	if len(f.sent) == 0 {
		f.firstSent = time.Now()
	}
	f.sent[p] = b
	f.next = p.Add(1)
	f.h.send("rdma", f.h.cfg.Inject, b)
	return p
}

// burst sends n source packets of size octets each, then pauses for the burst gap, so that the
// target closes its block (C5).
func (f *csfFlow) burst(n, size int) (first psn.PSN) {
	first = f.next
	for range n {
		f.source(size)
	}
	f.h.sleep(f.h.cfg.BurstGap)
	return first
}

// read sends an RDMA READ request for pkts response packets of the target's RDMA MTU: the
// request occupies its PSN, the next pkts-1 are absent in this direction (C13).
func (f *csfFlow) read(pkts int) psn.PSN {
	p := f.next
	mtu := int(f.hello.RDMAMTU)
	if mtu == 0 {
		mtu = 4096
	}
	b := f.h.build(f.qp, roce.OpReadRequest, p, nil, uint32(pkts*mtu), 0)
	f.sent[p] = b
	for j := 1; j < pkts; j++ {
		f.absent[p.Add(j)] = true
	}
	f.next = p.Add(pkts)
	f.h.send("rdma", f.h.cfg.Inject, b)
	return p
}

// isHello accepts a HELLO for this flow (its destination QP), any nonce.
func (f *csfFlow) isHello(r rx) bool {
	if len(r.b) < wire.HeaderLen || wire.Type(r.b[0]&0x0f) != wire.TypeHello {
		return false
	}
	m, err := wire.ParseHello(r.b)
	return err == nil && m.DestQP() == f.qp
}

// fromCSF accepts a message of the flow's session (its Flow ID) of type t.
func (f *csfFlow) fromCSF(t wire.Type) func(rx) bool {
	return func(r rx) bool {
		return len(r.b) >= wire.HeaderLen && r.b[0]>>4 == wire.Version && wire.Type(r.b[0]&0x0f) == t &&
			uint32(r.b[4])<<24|uint32(r.b[5])<<16|uint32(r.b[6])<<8|uint32(r.b[7]) == f.id
	}
}

// waitHello sends one source packet if the flow has none yet and returns the first HELLO.
func (f *csfFlow) waitHello() rx {
	h := f.h
	if len(f.sent) == 0 {
		f.source(256)
	}
	r, ok := h.recv("crem", h.deadline(), f.isHello)
	if !ok {
		h.fail("HELLO for the flow (QP "+fmt.Sprint(f.qp)+") after its first source packet (Session)", "nothing within "+h.cfg.Timeout.String(),
			"the target sent no HELLO: is its peer the runner's --listen address, and does a protect rule cover the flow?")
	}
	m, err := wire.ParseHello(r.b)
	if err != nil {
		h.fail("a well-formed HELLO", hexOf(r.b), "HELLO does not parse: %v", err)
	}
	f.hello, f.csf, f.helloAt = m, r.from, []time.Time{r.at}
	return r
}

// open runs the handshake as the CRF and acknowledges the first configuration.
func (f *csfFlow) open(o csfOpen) {
	h := f.h
	f.waitHello()
	if o.answerAttempt == 0 {
		o.answerAttempt = 2
	}
	for len(f.helloAt) < o.answerAttempt {
		r, ok := h.recv("crem", h.deadline(), func(r rx) bool {
			if !f.isHello(r) {
				return false
			}
			m, _ := wire.ParseHello(r.b)
			return m.SenderNonce == f.hello.SenderNonce
		})
		if !ok {
			h.fail(fmt.Sprintf("HELLO retransmitted (attempt %d, same nonce) while unanswered (Session)", len(f.helloAt)+1),
				"nothing within "+h.cfg.Timeout.String(), "HELLO not retransmitted")
		}
		f.helloAt = append(f.helloAt, r.at)
	}
	caps := wire.Capabilities{FlowKind: wire.FlowKindRoCEv2,
		Schemes: wire.SchemeSet(0).With(wire.SchemeSourceCopy).With(wire.SchemeCauchy).With(wire.SchemeXOR),
		MaxK:    255, MaxM: 64, MaxT: 9216}
	if o.caps != nil {
		caps = *o.caps
	}
	caps.RDMAMTU = f.hello.RDMAMTU
	if o.maxOpen == 0 {
		o.maxOpen = 64
	}
	for f.id == 0 {
		f.id = h.rng.Uint32()
	}
	f.ackSent = time.Now()
	via := o.ackVia
	if via == "" {
		via = "crem"
	}
	h.sendMsg(via, f.csf, &wire.HelloAck{FlowID: f.id, Capabilities: caps, AF: f.hello.AF(),
		SenderNonce: f.hello.SenderNonce, MaxOpenBlocks: o.maxOpen})
	if o.noParam {
		return
	}
	pu := f.waitParam()
	f.lastParam = pu
	if o.noParamAck {
		return
	}
	if o.paramDelay == 0 {
		o.paramDelay = h.cfg.SRTT
	}
	h.sleep(o.paramDelay)
	if _, again := h.recv("crem", time.Now(), f.fromCSF(wire.TypeParamUpdate)); again {
		h.note("the target sent PARAM_UPDATE again before the runner's PARAM_ACK, delayed by --srtt %v: its retransmission timeout is shorter, so its SRTT is not the runner's (give it an initial RTT of %v)",
			o.paramDelay, h.cfg.SRTT)
	}
	f.ack(pu, o.paramStatus)
}

// waitParam returns the next PARAM_UPDATE of the session.
func (f *csfFlow) waitParam() wire.ParamUpdate {
	h := f.h
	r, ok := h.recv("crem", h.deadline(), f.fromCSF(wire.TypeParamUpdate))
	if !ok {
		h.fail("PARAM_UPDATE after HELLO_ACK, to propose the first configuration (Configuration)", "nothing within "+h.cfg.Timeout.String(),
			"no PARAM_UPDATE")
	}
	if r.from != f.csf {
		h.fail("PARAM_UPDATE from the address HELLO came from", r.from.String(), "PARAM_UPDATE from another address")
	}
	m, err := wire.ParseParamUpdate(r.b)
	if err != nil {
		h.fail("a well-formed PARAM_UPDATE", hexOf(r.b), "PARAM_UPDATE does not parse: %v", err)
	}
	return m
}

// ack answers a PARAM_UPDATE.
func (f *csfFlow) ack(m wire.ParamUpdate, st wire.Status) {
	f.h.sendMsg("crem", f.csf, &wire.ParamAck{FlowID: f.id, ConfigID: m.ConfigID, Status: st})
	if st == wire.StatusAccepted {
		c := flow.Config{ID: m.ConfigID, Scheme: m.Scheme, K: int(m.K), M: int(m.M), T: int(m.T)}
		f.cfgs[m.ConfigID], f.cur, f.eff = c, c, m.EffectivePSN
	}
}

// close ends the session (CLOSE reason 0) so that the target releases it.
func (f *csfFlow) close() {
	if f.id != 0 && f.csf.IsValid() {
		f.h.sendMsg("crem", f.csf, &wire.Close{FlowID: f.id, Reason: wire.ReasonNormal})
	}
}

// repairs collects the flow's REPAIR messages arriving within d, parsed (the datagram kept).
func (f *csfFlow) repairs(d time.Duration) []gotRepair {
	var out []gotRepair
	f.serve()
	defer f.serve()
	for _, r := range f.h.collect("crem", d, f.fromCSF(wire.TypeRepair)) {
		m, err := wire.ParseRepair(r.b)
		if err != nil {
			f.h.fail("well-formed REPAIR messages (Message Formats)", hexOf(r.b), "a REPAIR does not parse: %v", err)
		}
		out = append(out, gotRepair{rx: r, m: m})
	}
	return out
}

type gotRepair struct {
	rx
	m wire.Repair
}

// check verifies one REPAIR against what the runner sent: the configuration acknowledged, the
// Present Bitmap, i + k <= 255, Symbol Length T, and the symbol recomputed over the positions
// it claims (all present ones, or the set L of a coded retransmission).
func (f *csfFlow) check(g gotRepair) {
	h, m := f.h, g.m
	if g.from != f.csf {
		h.fail("REPAIR from the address HELLO came from", g.from.String(), "REPAIR from another address")
	}
	c, ok := f.cfgs[m.ConfigID]
	if !ok {
		h.fail("REPAIR only with a Config ID the CRF acknowledged with PARAM_ACK (Configuration)",
			fmt.Sprintf("Config ID %d; acknowledged: %v", m.ConfigID, keys(f.cfgs)), "REPAIR of an unacknowledged configuration")
	}
	if m.Scheme != c.Scheme && m.Scheme != wire.SchemeSourceCopy {
		h.fail(fmt.Sprintf("scheme %v of configuration %d", c.Scheme, c.ID), m.Scheme.String(), "REPAIR with the wrong scheme")
	}
	if int(m.K) > c.K {
		h.fail(fmt.Sprintf("k at most %d (configuration %d)", c.K, c.ID), fmt.Sprint(m.K), "REPAIR with a k above the configuration's")
	}
	_, present, err := sourceSymbols(f.sent, m.BlockStartPSN, int(m.K), c.T)
	if err != nil {
		h.fail("sources that fit T", err.Error(), "the runner's sources do not fit the configuration")
	}
	if m.Present != present {
		h.fail(fmt.Sprintf("Present Bitmap %v for the block at PSN %d, k %d: the positions that carry a source packet (Source Blocks)", bitsOf(present), uint32(m.BlockStartPSN), m.K),
			fmt.Sprint(bitsOf(m.Present)), "Present Bitmap does not match the source packets sent")
	}
	if m.Info {
		return
	}
	if m.Scheme == wire.SchemeCauchy && int(m.RepairIndex)+int(m.K) > 255 {
		h.fail("i + k <= 255 (Scheme 1)", fmt.Sprintf("i %d, k %d", m.RepairIndex, m.K), "Repair Index out of range")
	}
	if len(m.Symbol) != c.T {
		h.fail(fmt.Sprintf("Symbol Length %d (configuration %d)", c.T, c.ID), fmt.Sprint(len(m.Symbol)), "wrong Symbol Length")
	}
	over := m.Present
	if m.Retx {
		over = m.Lost
	}
	src, _, _ := sourceSymbols(f.sent, m.BlockStartPSN, int(m.K), c.T)
	want, err := repairSymbol(m.Scheme, int(m.RepairIndex), over, src, c.T)
	if err != nil {
		h.fail("a symbol the runner can recompute", err.Error(), "cannot recompute the symbol")
	}
	if !equalBytes(want, m.Symbol) {
		what := "R_i over all present positions"
		switch {
		case m.Retx:
			what = fmt.Sprintf("R_i[L] over exactly L = %v", bitsOf(m.Lost))
		case m.Scheme == wire.SchemeSourceCopy:
			what = "the source symbol itself (Source Copy)"
		}
		h.fail(fmt.Sprintf("symbol of Repair Index %d of the block at PSN %d = %s (Scheme 1): %s", m.RepairIndex, uint32(m.BlockStartPSN), what, hexOf(want)),
			hexOf(m.Symbol), "repair symbol differs from the recomputation: %s", firstDiff(want, m.Symbol))
	}
}

func keys[V any](m map[uint8]V) []uint8 {
	var k []uint8
	for id := range m {
		k = append(k, id)
	}
	return k
}

// blocks groups ordinary REPAIRs by their block start.
func blocksOf(rs []gotRepair) map[psn.PSN][]gotRepair {
	out := map[psn.PSN][]gotRepair{}
	for _, g := range rs {
		if !g.m.Retx && !g.m.Info && g.m.Scheme != wire.SchemeSourceCopy {
			out[g.m.BlockStartPSN] = append(out[g.m.BlockStartPSN], g)
		}
	}
	return out
}

// protectedBlock sends bursts until the target sends ordinary repair for a block with at least
// minPresent sources, checks every REPAIR on the way, and returns that block's REPAIRs.
func (f *csfFlow) protectedBlock(n, minPresent int) []gotRepair {
	h := f.h
	for try := 0; try < 3; try++ {
		f.burst(n, 200)
		rs := f.repairs(4 * h.cfg.SRTT)
		for _, g := range rs {
			f.check(g)
		}
		for _, bl := range blocksOf(rs) {
			if bl[0].m.Present.Count() >= minPresent {
				return bl
			}
		}
	}
	h.fail(fmt.Sprintf("ordinary REPAIR for a block of at least %d sources after bursts of %d source packets (Sending Repair)", minPresent, n),
		"none", "the target sent no repair for the flow: is m > 0 in its configuration (m = %d)?", f.cur.M)
	return nil
}

// request sends a block-form REPAIR_REQUEST for the block from the named socket.
func (f *csfFlow) request(via string, b wire.Repair, id uint16, lost psn.Bitmap, r, ms int, fallback bool) []byte {
	return f.h.sendMsg(via, f.csf, &wire.RepairRequest{FlowID: f.id, RequestID: id, Fallback: fallback, ConfigID: b.ConfigID,
		Scheme: b.Scheme, K: b.K, RepairsHeld: uint8(r), BlockStartPSN: b.BlockStartPSN, SuggestedM: uint8(ms), Lost: lost})
}

// answers collects the REPAIRs answering Request ID id (Repair Session ID, C4) within d.
func (f *csfFlow) answers(id uint16, d time.Duration) []gotRepair {
	var out []gotRepair
	for _, g := range f.repairs(d) {
		if g.m.RepairSessionID == id && (g.m.Retx || g.m.Scheme == wire.SchemeSourceCopy) {
			out = append(out, g)
		}
	}
	return out
}
