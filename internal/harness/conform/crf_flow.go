package conform

import (
	"fmt"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// crfFlow is one flow the runner opens at the target CRF as its CSF: the HELLO and its
// HELLO_ACK, the configurations acknowledged, and every source packet built (by PSN).
type crfFlow struct {
	h     *Harness
	qp    uint32
	nonce uint64
	hello wire.Hello
	id    uint32
	ack   wire.HelloAck
	cfg   flow.Config
	next  psn.PSN
	pkts  map[psn.PSN][]byte
	got   map[psn.PSN]bool // delivered so far
}

func (h *Harness) newCRFFlow() *crfFlow {
	f := &crfFlow{h: h, qp: h.nextQP(), nonce: h.rng.Uint64() | 1, next: psn.PSN(h.rng.Uint32N(psn.Modulus)), pkts: map[psn.PSN][]byte{}, got: map[psn.PSN]bool{}}
	f.hello = wire.Hello{Capabilities: wire.Capabilities{FlowKind: wire.FlowKindRoCEv2,
		Schemes: wire.SchemeSet(0).With(wire.SchemeSourceCopy).With(wire.SchemeCauchy).With(wire.SchemeXOR),
		MaxK:    255, MaxM: 64, MaxT: 9216, RDMAMTU: 4096}, SenderNonce: f.nonce, Source: h.cfg.FlowSrc, Destination: h.cfg.FlowDst, FlowLabel: f.qp}
	return f
}

// fromCRF accepts a message of type t with the flow's Flow ID.
func (f *crfFlow) fromCRF(t wire.Type) func(rx) bool {
	return func(r rx) bool {
		return len(r.b) >= wire.HeaderLen && r.b[0]>>4 == wire.Version && wire.Type(r.b[0]&0x0f) == t &&
			uint32(r.b[4])<<24|uint32(r.b[5])<<16|uint32(r.b[6])<<8|uint32(r.b[7]) == f.id
	}
}

// isAck accepts the HELLO_ACK for the flow's nonce.
func (f *crfFlow) isAck(r rx) bool {
	m, err := parseAck(r.b)
	return err == nil && m.SenderNonce == f.nonce
}

// parseAck parses a HELLO_ACK, and also one longer than its 32 octets (its Length saying so), so
// that a HELLO_ACK larger than the HELLO is seen and judged rather than dropped as malformed.
func parseAck(b []byte) (wire.HelloAck, error) {
	if len(b) < wire.HeaderLen || b[0]>>4 != wire.Version || wire.Type(b[0]&0x0f) != wire.TypeHelloAck {
		return wire.HelloAck{}, fmt.Errorf("not a HELLO_ACK")
	}
	m, err := wire.ParseHelloAck(b)
	if err == nil || len(b) <= helloAckLen || int(b[2])<<8|int(b[3]) != len(b) {
		return m, err
	}
	head := append([]byte(nil), b[:helloAckLen]...)
	head[2], head[3] = 0, helloAckLen
	return wire.ParseHelloAck(head)
}

// helloAckLen is HELLO_ACK's size: header, the twelve octets of limits, nonce, Max Open Blocks
// and reserved.
const helloAckLen = wire.HeaderLen + 12 + 8 + 4

// sayHello sends HELLO from the named socket and returns the HELLO_ACK (false: none came).
func (f *crfFlow) sayHello(via string) (wire.HelloAck, rx, []byte, bool) {
	h := f.h
	// As a CSF does (Session): HELLO again with exponential backoff from 1 ms, eight
	// attempts, the last one waiting out the run's timeout.
	var hb []byte
	var r rx
	ok := false
	for a := 0; a < 8 && !ok; a++ {
		hb = h.sendMsg(via, h.cfg.Target, &f.hello)
		wait := time.Millisecond << a
		if a == 7 {
			wait = h.cfg.Timeout
		}
		r, ok = h.recv(via, time.Now().Add(wait), f.isAck)
		if ok && a > 0 {
			h.note("HELLO_ACK came after %d HELLO attempts", a+1)
		}
	}
	if !ok {
		return wire.HelloAck{}, r, hb, false
	}
	m, _ := parseAck(r.b)
	return m, r, hb, true
}

// handshake sends HELLO from the runner's CREM socket and takes the Flow ID.
func (f *crfFlow) handshake() {
	h := f.h
	m, _, _, ok := f.sayHello("crem")
	if !ok {
		h.fail("HELLO_ACK to a HELLO (Session)", "nothing within "+h.cfg.Timeout.String(),
			"the target did not answer HELLO: does a protect rule cover the flow (--flow-src, --flow-dst, --flow-src-port)?")
	}
	f.ack, f.id = m, m.FlowID
}

// propose sends PARAM_UPDATE and returns the PARAM_ACK's status (false: none came).
func (f *crfFlow) propose(c flow.Config, eff psn.PSN) (wire.Status, bool) {
	h := f.h
	h.sendMsg("crem", h.cfg.Target, &wire.ParamUpdate{FlowID: f.id, ConfigID: c.ID, Scheme: c.Scheme, K: uint8(c.K), M: uint8(c.M), T: uint16(c.T), EffectivePSN: eff})
	r, ok := h.recv("crem", h.deadline(), func(r rx) bool {
		if !f.fromCRF(wire.TypeParamAck)(r) {
			return false
		}
		m, err := wire.ParseParamAck(r.b)
		return err == nil && m.ConfigID == c.ID
	})
	if !ok {
		return 0, false
	}
	m, _ := wire.ParseParamAck(r.b)
	return m.Status, true
}

// open runs the handshake and has configuration 1 (scheme 1, k, m, T) acknowledged. The
// PARAM_UPDATE waits one SRTT after HELLO_ACK: the CRF's first RTT sample is the runner's.
func (f *crfFlow) open(k, m, T int) {
	h := f.h
	f.handshake()
	h.sleep(h.cfg.SRTT)
	c := flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: k, M: m, T: T}
	st, ok := f.propose(c, f.next)
	if !ok || st != wire.StatusAccepted {
		h.fail(fmt.Sprintf("PARAM_ACK accepting configuration 1 (k %d, m %d, T %d) within the limits (Configuration)", k, m, T),
			fmt.Sprintf("answered %v, status %v", ok, st), "configuration not acknowledged")
	}
	f.cfg = c
}

// packet builds (once) the source packet at PSN p: an RDMA WRITE MIDDLE with n payload octets,
// sealed under the flow's logical header (C12).
func (f *crfFlow) packet(p psn.PSN, payload []byte) []byte {
	if b, ok := f.pkts[p]; ok {
		return b
	}
	b := f.h.build(f.qp, roce.OpWriteMiddle, p, payload, 0, f.h.cfg.FlowSrcPort)
	f.pkts[p] = b
	return b
}

// block builds the next k source packets and sends those not in lost into the target, as the
// path delivers them. It returns the block's start.
func (f *crfFlow) block(k int, lost psn.Bitmap, size int) psn.PSN {
	start := f.next
	for j := range k {
		p := start.Add(j)
		b := f.packet(p, payloadOf(f.qp, p, size))
		if !lost.Has(j) {
			f.h.send("rdma", f.h.cfg.Inject, b)
		}
	}
	f.next = start.Add(k)
	return start
}

// repair builds the REPAIR of Repair Index i for the block, over over (all present positions
// for an ordinary symbol, L for a coded retransmission).
func (f *crfFlow) repair(start psn.PSN, k, i int, over psn.Bitmap, retx bool, rsid uint16, last bool) wire.Repair {
	src, present, err := sourceSymbols(f.pkts, start, k, f.cfg.T)
	if err != nil {
		panic(fmt.Sprintf("conform: %v", err)) // the runner's own sources
	}
	scheme := f.cfg.Scheme
	sym, err := repairSymbol(scheme, i, over, src, f.cfg.T)
	if err != nil {
		panic(fmt.Sprintf("conform: %v", err))
	}
	m := wire.Repair{FlowID: f.id, Retx: retx, Last: last, ConfigID: f.cfg.ID, Scheme: scheme, K: uint8(k), RepairIndex: uint8(i),
		BlockStartPSN: start, RepairSessionID: rsid, Present: present, Symbol: sym}
	if retx {
		m.Lost = over
	}
	return m
}

// sendRepair sends a REPAIR from the runner's CREM socket.
func (f *crfFlow) sendRepair(m wire.Repair) []byte { return f.h.sendMsg("crem", f.h.cfg.Target, &m) }

// ordinary sends the block's ordinary symbols with the given indices, LAST on the final one.
func (f *crfFlow) ordinary(start psn.PSN, k int, idx ...int) {
	_, present, _ := sourceSymbols(f.pkts, start, k, f.cfg.T)
	for n, i := range idx {
		f.sendRepair(f.repair(start, k, i, present, false, 0, n == len(idx)-1))
	}
}

// delivered collects the flow's packets the target delivers within d, until every PSN in want
// has come (then it returns at once), and returns which of want have come (since the flow
// began); each delivered packet must equal the one the runner built, byte for byte.
func (f *crfFlow) delivered(want []psn.PSN, d time.Duration) map[psn.PSN]bool {
	h := f.h
	until := time.Now().Add(d)
	need := map[psn.PSN]bool{}
	for _, p := range want {
		if !f.got[p] {
			need[p] = true
		}
	}
	for len(need) > 0 {
		r, ok := h.recv("data", until, func(r rx) bool {
			_, qp, _, ok := roceOf(r.b)
			return ok && qp == f.qp
		})
		if !ok {
			break
		}
		_, _, p, _ := roceOf(r.b)
		orig, ok := f.pkts[p]
		if !ok {
			h.fail("only packets the runner sent delivered", fmt.Sprintf("PSN %d: %s", uint32(p), hexOf(r.b)), "delivered a packet never sent")
		}
		if !equalBytes(orig, r.b) {
			h.fail(fmt.Sprintf("PSN %d delivered exactly as sent: %s", uint32(p), hexOf(orig)), hexOf(r.b),
				"delivered packet differs from the source (%s)", firstDiff(orig, r.b))
		}
		f.got[p] = true
		delete(need, p)
	}
	out := map[psn.PSN]bool{}
	for _, p := range want {
		out[p] = f.got[p]
	}
	return out
}

// mustDeliver fails unless every PSN in want is delivered within the timeout.
func (f *crfFlow) mustDeliver(what string, want []psn.PSN) {
	got := f.delivered(want, f.h.cfg.Timeout)
	var missing []uint32
	for _, p := range want {
		if !got[p] {
			missing = append(missing, uint32(p))
		}
	}
	if len(missing) > 0 {
		f.h.fail(what, fmt.Sprintf("PSNs %v not delivered within %v", missing, f.h.cfg.Timeout), "packets not restored")
	}
}

// psns lists the PSNs of the block's positions in set (all positions if set is nil).
func psns(start psn.PSN, k int, set *psn.Bitmap) []psn.PSN {
	var out []psn.PSN
	for j := range k {
		if set == nil || set.Has(j) {
			out = append(out, start.Add(j))
		}
	}
	return out
}

// waitRequest returns the next block-form REPAIR_REQUEST for the block at start.
func (f *crfFlow) waitRequest(start psn.PSN, d time.Duration) (wire.RepairRequest, rx, bool) {
	r, ok := f.h.recv("crem", time.Now().Add(d), func(r rx) bool {
		if !f.fromCRF(wire.TypeRepairRequest)(r) {
			return false
		}
		m, err := wire.ParseRepairRequest(r.b)
		return err != nil || m.RangeForm || m.BlockStartPSN == start
	})
	if !ok {
		return wire.RepairRequest{}, r, false
	}
	m, err := wire.ParseRepairRequest(r.b)
	if err != nil {
		f.h.fail("a well-formed REPAIR_REQUEST (Message Formats, Coded Retransmission)", hexOf(r.b), "REPAIR_REQUEST does not parse: %v", err)
	}
	return m, r, true
}

// close ends the flow (CLOSE reason 0).
func (f *crfFlow) close() {
	if f.id != 0 {
		f.h.sendMsg("crem", f.h.cfg.Target, &wire.Close{FlowID: f.id, Reason: wire.ReasonNormal})
	}
}
