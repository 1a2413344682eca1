package csf

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/internal/fuzzcorpus"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// FuzzSender drives a Sender with a sequence of operations cut from the input (sources built
// from a few fields or taken as raw octets, RDMA acknowledgements, CREM messages from the bound
// CRF, from other addresses and from a path reporter, well-formed or raw, the passing of time,
// the driver's calls) and checks, after every one, what must hold whatever the input:
//
//   - every datagram drained parses, and re-encodes to the same octets;
//   - HELLO goes to the configured CRF, every other message to the address the accepted
//     HELLO_ACK came from, with the Flow ID it assigned, and nothing outside a session (C14);
//   - a message from anywhere but the bound address (bar HELLO_ACK during the handshake and
//     PATH_REPORT from a configured reporter) changes nothing: a twin Sender that never sees
//     it sends the same octets, keeps the same state and the same counters (C14);
//   - the counters add up: every packet, reverse packet and message is counted in exactly one
//     outcome, and every datagram sent is counted under its kind;
//   - REPAIR only under a configuration the CRF accepted, with fresh Repair Indices within
//     i + k <= 255 (C16), at most two coded rounds per block (E34), coded retransmissions and
//     Source Copy only in answer to a request, and every symbol computed from the sources the
//     RDMA sender emitted;
//   - no block reaches past the newest source; at most eight HELLOs per nonce (C3);
//   - Tick before the next deadline does nothing and after Tick no deadline is due (a driver
//     that sleeps until NextDeadline neither misses a timer nor spins); a minute without
//     sources ends an established flow (C15);
//   - memory within the configured bounds: held blocks, their source octets and retained
//     buffers, the timer heap, the absent runs, the queue; the held blocks in the order the
//     lookup (find) relies on.
func FuzzSender(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	seedCapture(f)
	f.Fuzz(func(t *testing.T, data []byte) { runFuzz(t, data) })
}

// Operations of the fuzz input: a kind octet, a length octet and that many argument octets.
// The high three bits of a message kind's octet choose where the message comes from.
const (
	fopSource  = iota // a source the harness builds: opcode, PSN step, length, DMA length
	fopRaw            // the argument as a forward packet, aimed at the flow's QP or not
	fopReverse        // an acknowledgement the harness builds, or the argument raw
	fopMessage        // the argument as a CREM message, its Flow ID set to the session's or not
	fopCRF            // a well-formed message the harness builds from the argument
	fopTime           // time passes; the timers due run
	fopControl        // Start, Close, Reconfigure, the reverse QP, Acknowledge
	fopCount
)

// The addresses messages come from: the CRF, three others, and a configured path reporter.
var (
	fuzzReporter = netip.MustParseAddrPort("10.0.0.9:7000")
	fuzzFrom     = [...]netip.AddrPort{testCRF, testCRF, testCRF, testCRF,
		netip.MustParseAddrPort("10.0.0.2:50001"), netip.MustParseAddrPort("10.0.0.66:50000"),
		netip.MustParseAddrPort("[::ffff:10.0.0.2]:50000"), fuzzReporter}
)

const (
	fuzzQP        = 0x11 // testFlow.DestQP
	fuzzReverseQP = 0x22
	fuzzMaxOps    = 400
)

// fuzzK are the block sizes the first setup octet chooses from.
var fuzzK = [16]int{8, 1, 2, 3, 4, 5, 16, 32, 64, 7, 12, 255, 8, 2, 4, 8}

// fuzzSetup is what the first five input octets configure.
type fuzzSetup struct {
	k, m, T                   int
	xor, noAdapt              bool
	unestablished             bool // the handshake is left to the input
	long, msgPolicy           bool
	reverse                   bool
	queue                     int // 0: the default
	initialLoss               bool
	maxHeld                   int // 0: the default, twice Max Open Blocks
	maxOpen                   int // the CRF's Max Open Blocks
	base                      psn.PSN
	mtu                       int
	schemes                   wire.SchemeSet // the CRF's
	crfMaxK, crfMaxM, crfMaxT int
	rejectFirstConfig         bool
}

func parseSetup(b []byte) fuzzSetup {
	var s [5]byte
	copy(s[:], b)
	u := fuzzSetup{k: fuzzK[s[0]&15], m: int(s[1] % 6), mtu: 1024}
	if s[0]&0x10 != 0 {
		u.T = 64 // most payloads are then too long to code
	}
	u.xor, u.noAdapt, u.unestablished = s[0]&0x20 != 0, s[0]&0x40 != 0, s[0]&0x80 != 0
	u.long, u.msgPolicy, u.reverse = s[1]&0x08 != 0, s[1]&0x10 != 0, s[1]&0x20 != 0
	if s[1]&0x40 != 0 {
		u.queue = 1 + int(s[1]%8)
	}
	u.initialLoss = s[1]&0x80 != 0
	if s[2]&0x80 == 0 {
		u.maxHeld = 2 + int(s[2]%15)
	}
	u.maxOpen = 1 + int(s[2]>>4&7)*9
	u.base = psn.Of(0xfffff0 + uint32(s[3]))
	if s[4]&1 != 0 {
		u.mtu = 256
	}
	u.schemes = flow.DefaultLimits().Schemes
	if s[4]&2 != 0 {
		u.schemes = wire.SchemeSet(0).With(wire.SchemeCauchy)
	}
	u.crfMaxK, u.crfMaxM, u.crfMaxT = 64, 16, 4096
	if s[4]&4 != 0 {
		u.crfMaxK, u.crfMaxM, u.crfMaxT = 16, 4, 600
	}
	u.rejectFirstConfig = s[4]&8 != 0
	return u
}

// fuzzRun is the harness: the Sender under test, its twin, and what the harness knows
// independently of them.
type fuzzRun struct {
	t    *testing.T
	set  fuzzSetup
	a, b *Sender // b never sees the messages that must change nothing
	now  time.Duration
	enc  *fec.Encoder

	// The session as the harness saw it start: the accepted HELLO_ACK's source and Flow ID.
	inSession bool
	bound     netip.AddrPort
	flowID    uint32
	configs   map[uint8][]flow.Config // PARAM_UPDATEs sent in the session, by Config ID
	accepted  map[uint8]bool          // Config IDs the harness acknowledged with Status 0
	requested map[uint16]bool         // Request IDs the harness sent from the bound CRF
	blocks    map[fuzzBlockKey]*fuzzBlockSeen
	recent    []fuzzBlockKey // blocks seen in REPAIR, newest last, for requests to name

	nonce  uint64 // the latest HELLO's
	hellos int    // HELLOs with that nonce
	pendID uint8  // the latest PARAM_UPDATE's Config ID
	maxT   int    // the largest T of any configuration proposed

	// The sources the RDMA sender emitted, by PSN: the payload, or nil when two sources of
	// the run took the same PSN (the PSN space wrapped), so their blocks cannot be checked.
	sources map[psn.PSN][]byte

	handled    uint64 // Handle calls on a
	sent       [10]uint64
	ordinary   uint64
	retx       uint64
	sourceCopy uint64
	info       uint64
	far        int // consecutive far-behind sources so far
	ticks      int
	lastSent   int     // datagrams of the latest call
	prevNext   psn.PSN // the Sender's next PSN before the latest call
	hadNext    bool
	exhausted  bool // the budget of timers is spent: the rest of the input is not run
}

type fuzzBlockKey struct {
	flowID uint32
	start  psn.PSN
	k      uint8
	config uint8
}

type fuzzBlockSeen struct {
	present  psn.Bitmap
	indices  [4]uint64 // Repair Indices sent, ordinary and coded
	ordinary int
	rounds   map[uint16]int // coded symbols per Request ID
}

func newFuzzSender(t testing.TB, u fuzzSetup) *Sender {
	opts := []Option{WithConfig(wire.SchemeCauchy, u.k, u.m, u.T), WithAdaptation(!u.noAdapt),
		WithReporters(fuzzReporter.Addr()), WithRDMAMTU(u.mtu)}
	if u.k > 64 {
		opts[0] = WithConfig(wire.SchemeCauchy, 255, 0, u.T)
		opts = append(opts, WithLimits(flow.Limits{Schemes: flow.DefaultLimits().Schemes, MaxK: 255, MaxM: 16,
			MaxT: 4096, MaxOpenBlocks: 64}))
	}
	if u.xor {
		opts[0] = WithConfig(wire.SchemeXOR, min(u.k, 64), min(u.m, 1), u.T)
	}
	if u.long {
		opts = append(opts, WithLongMessageRepair(2, 4096))
	}
	if u.msgPolicy {
		opts = append(opts, WithMessagePolicy(func(packets int, p float64) (int, int) { return packets % 9, packets % 3 }))
	}
	if u.reverse {
		opts = append(opts, WithReverseQP(fuzzReverseQP))
	}
	if u.queue > 0 {
		opts = append(opts, WithQueue(u.queue))
	}
	if u.initialLoss {
		opts = append(opts, WithInitialLoss(0.05))
	}
	if u.maxHeld > 0 {
		opts = append(opts, WithMaxHeldBlocks(u.maxHeld))
	}
	return newSender(t, opts...)
}

// runFuzz runs one input and returns the harness, for tests that look at what it reached.
func runFuzz(t *testing.T, data []byte) *fuzzRun {
	u := parseSetup(data)
	enc, err := fec.NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	r := &fuzzRun{t: t, set: u, a: newFuzzSender(t, u), b: newFuzzSender(t, u), enc: enc, sources: map[psn.PSN][]byte{}}
	r.endSession()
	r.now = time.Millisecond
	r.call("Start", func(s *Sender) { s.Start(r.now) })
	if !u.unestablished {
		r.helloAck(testCRF, r.nonce, [6]byte{})
		r.paramAck(testCRF, r.pendID, u.rejectFirstConfig)
	}
	if len(data) > 5 {
		data = data[5:]
	} else {
		data = nil
	}
	for ops := 0; len(data) >= 2 && ops < fuzzMaxOps && !r.exhausted; ops++ {
		kind, n := data[0], int(data[1])
		data = data[2:]
		arg := data[:min(n, len(data))]
		data = data[len(arg):]
		r.op(kind, arg)
	}
	r.runUntil(r.now + time.Minute)
	if _, sourced := r.a.NextPSN(); !r.exhausted && r.a.State() == StateEstablished && sourced {
		t.Fatalf("a minute without sources and still established (C15: idle timeout 30 s)")
	}
	return r
}

// fuzzArg reads an operation's argument; octets past its end read as zero.
type fuzzArg []byte

func (a fuzzArg) u8(i int) uint8 {
	if i < len(a) {
		return a[i]
	}
	return 0
}

func (a fuzzArg) u16(i int) uint16 { return uint16(a.u8(i))<<8 | uint16(a.u8(i+1)) }

func (a fuzzArg) u32(i int) uint32 { return uint32(a.u16(i))<<16 | uint32(a.u16(i+2)) }

func (a fuzzArg) tail(i int) []byte {
	if i < len(a) {
		return a[i:]
	}
	return nil
}

func (r *fuzzRun) op(kind uint8, arg fuzzArg) {
	from := fuzzFrom[kind>>5]
	switch kind & 31 % fopCount {
	case fopSource:
		r.source(arg)
	case fopRaw:
		pkt := bytes.Clone(arg.tail(1))
		if arg.u8(0)&1 == 0 && len(pkt) >= roce.BTHLen {
			pkt[5], pkt[6], pkt[7] = 0, 0, fuzzQP
		}
		r.observe(pkt)
	case fopReverse:
		r.reverse(arg)
	case fopMessage:
		msg := bytes.Clone(arg.tail(1))
		if arg.u8(0)&1 == 0 && len(msg) >= wire.HeaderLen {
			binary.BigEndian.PutUint32(msg[4:], r.a.FlowID())
		}
		r.handle(from, msg)
	case fopCRF:
		r.crfMessage(from, arg)
	case fopTime:
		d := time.Duration(arg.u16(0)) * [4]time.Duration{time.Microsecond, 10 * time.Microsecond,
			time.Millisecond, 100 * time.Millisecond}[arg.u8(2)%4]
		r.early()
		r.runUntil(r.now + d)
	case fopControl:
		r.control(arg)
	}
}

// fuzzOpcodes are the source opcodes the harness builds packets of.
var fuzzOpcodes = [...]roce.Opcode{roce.OpWriteMiddle, roce.OpWriteFirst, roce.OpWriteLast, roce.OpWriteOnly,
	roce.OpSendFirst, roce.OpSendMiddle, roce.OpSendLast, roce.OpSendOnly, roce.OpReadRequest,
	roce.OpReadResponseFirst, roce.OpReadResponseMiddle, roce.OpReadResponseLast, roce.OpReadResponseOnly,
	roce.OpWriteOnlyWithImmediate, roce.OpFetchAdd, roce.OpWriteMiddle}

// source builds a sealed source packet: opcode, PSN relative to the next one expected (back
// for a retransmission, ahead for a gap, far away for a new PSN space), payload length.
func (r *fuzzRun) source(arg fuzzArg) {
	op := fuzzOpcodes[arg.u8(0)%16]
	next, ok := r.a.NextPSN()
	if !ok {
		next = r.set.base
	}
	var p psn.PSN
	step := arg.u8(1)
	if step != 0x80 {
		r.far = 0
	}
	switch {
	case step == 0x80:
		// Far behind, consecutive: a new PSN space after a run of these (E32).
		p = next.Add(-(1<<20 + 1<<19) + r.far)
		r.far++
	case step == 0x81:
		p = next.Add(1 << 22)
	default:
		p = next.Add(int(int8(step)) / 8)
	}
	mtu := r.a.RDMAMTU()
	// The length: the RDMA MTU in use (a full packet), another RDMA MTU (the flow's own, E33),
	// or any up to the MTU.
	var n int
	switch arg.u8(2) >> 6 {
	case 0, 1:
		n = mtu
	case 2:
		n = 256 << (arg.u8(3) % 5)
	default:
		n = int(arg.u16(2)&0x3fff) % (mtu + 1)
	}
	info := op.Info()
	if info.Headers&roce.HasPayload == 0 {
		n = 0
	}
	pk := roce.Packet{BTH: roce.BTH{OpCode: op, DestQP: fuzzQP, PSN: p}, Payload: fuzzPayload(p, n, arg.u8(8))}
	pk.RETH.DMALength = arg.u32(4)
	if op == roce.OpReadRequest {
		pk.RETH.DMALength %= 1 << 16
	}
	b, err := pk.Append(nil)
	if err != nil {
		r.t.Fatalf("building %v: %v", op, err)
	}
	if err := testFlow.LogicalHeader().Seal(b); err != nil {
		r.t.Fatal(err)
	}
	r.observe(b)
}

// fuzzPayload is the payload of PSN p: the same for every copy unless salt says otherwise.
func fuzzPayload(p psn.PSN, n int, salt uint8) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(uint32(p)>>uint(i%3*8)) ^ byte(i) ^ salt&0x0f
	}
	return b
}

func (r *fuzzRun) observe(pkt []byte) {
	before := r.a.Stats()
	r.step("Observe", func(s *Sender) { s.Observe(r.now, pkt) }, func() {
		if r.a.Stats().Sources == before.Sources || len(pkt) < roce.BTHLen {
			return
		}
		// A new source: record what the blocks hold for its PSN.
		p := psn.PSN(uint32(pkt[9])<<16 | uint32(pkt[10])<<8 | uint32(pkt[11]))
		if _, seen := r.sources[p]; seen {
			r.sources[p] = nil
		} else {
			r.sources[p] = bytes.Clone(pkt)
		}
	})
}

// reverse sends an acknowledgement the RDMA receiver builds (ACK, NAK, READ response; to the
// reverse QP or another), or the argument raw.
func (r *fuzzRun) reverse(arg fuzzArg) {
	var pkt []byte
	next, _ := r.a.NextPSN()
	p := next.Add(-1 - int(arg.u8(1)%32))
	qp := uint32(fuzzReverseQP)
	if arg.u8(2)&1 != 0 {
		qp = 0x33
	}
	switch arg.u8(0) % 5 {
	case 0, 1:
		pk := roce.Packet{BTH: roce.BTH{OpCode: roce.OpAcknowledge, DestQP: qp, PSN: p}, AETH: roce.ACK(31, 0)}
		pkt, _ = pk.Append(nil)
	case 2:
		pk := roce.Packet{BTH: roce.BTH{OpCode: roce.OpAcknowledge, DestQP: qp, PSN: p}, AETH: roce.NAK(0, 0)}
		pkt, _ = pk.Append(nil)
	case 3:
		pk := roce.Packet{BTH: roce.BTH{OpCode: roce.OpReadResponseOnly, DestQP: qp, PSN: p}, Payload: []byte{1, 2, 3, 4}}
		pkt, _ = pk.Append(nil)
	default:
		pkt = bytes.Clone(arg.tail(3))
	}
	r.call("ObserveReverse", func(s *Sender) { s.ObserveReverse(r.now, pkt) })
}

// crfMessage builds a well-formed message: PARAM_ACK of the latest update, LOSS_REPORT,
// REPAIR_REQUEST for a block seen in REPAIR or by PSN range, CLOSE, HELLO_ACK with the latest
// nonce, PATH_REPORT naming dropped PSNs.
func (r *fuzzRun) crfMessage(from netip.AddrPort, arg fuzzArg) {
	id := r.a.FlowID()
	var m wire.Message
	switch arg.u8(0) % 8 {
	case 0:
		m = &wire.ParamAck{FlowID: id, ConfigID: r.pendID + arg.u8(1)/128, Status: wire.Status(arg.u8(2) % 3)}
	case 1:
		exp := uint32(arg.u16(2))
		m = &wire.LossReport{FlowID: id, IntervalUS: uint32(arg.u16(1)) * 10, Expected: exp,
			Received: min(exp, uint32(arg.u16(4))), CEMarked: uint32(arg.u8(6)), RepairsReceived: uint32(arg.u8(7)),
			RepairsCEMarked: uint32(arg.u8(8) % 4)}
	case 2, 3:
		if len(r.recent) == 0 {
			return
		}
		key := r.recent[len(r.recent)-1-int(arg.u8(1))%len(r.recent)]
		seen := r.blocks[key]
		var lost psn.Bitmap
		for w := range lost {
			lost[w] = seen.present[w] & (uint32(arg.u8(2+w%4)) * 0x01010101)
		}
		if arg.u8(6)&1 != 0 {
			lost = seen.present
		}
		m = &wire.RepairRequest{FlowID: id, RequestID: 1 + arg.u16(7)%64, Fallback: arg.u8(6)&2 != 0,
			ConfigID: key.config, Scheme: wire.SchemeCauchy, K: key.k, RepairsHeld: arg.u8(9) % 4,
			BlockStartPSN: key.start, SuggestedM: arg.u8(10) % 8, Lost: lost}
		if lost.Empty() {
			m.(*wire.RepairRequest).Lost.Set(0)
		}
	case 4:
		next, _ := r.a.NextPSN()
		rr := &wire.RepairRequest{FlowID: id, RangeForm: true, RequestID: 1 + arg.u16(1)%64, Fallback: arg.u8(3)&1 != 0}
		for i := 0; i < 1+int(arg.u8(4)%4); i++ {
			rr.Ranges = append(rr.Ranges, psn.Range{Start: next.Add(-1 - int(arg.u8(5+2*i))), Count: 1 + uint32(arg.u8(6+2*i)%64)})
		}
		m = rr
	case 5:
		m = &wire.Close{FlowID: id, Reason: wire.Reason(arg.u8(1) % 7)}
	case 6:
		var caps [6]byte
		copy(caps[:], arg.tail(1))
		r.helloAck(from, r.nonce^uint64(arg.u8(7)&1), caps)
		return
	default:
		next, _ := r.a.NextPSN()
		hop := wire.HopEntry{NodeID: 1, LostCount: uint32(arg.u8(2)), Cause: wire.Cause(arg.u8(3) % 3)}
		for i := 0; i < int(arg.u8(1)%8); i++ {
			hop.DroppedPSNs = append(hop.DroppedPSNs, next.Add(-1-int(arg.u8(4+i))))
		}
		m = &wire.PathReport{Method: wire.MethodNodeDrops, Source: testFlow.Src, Destination: testFlow.Dst,
			FlowLabel: testFlow.DestQP, Hops: []wire.HopEntry{hop}}
		if arg.u8(12)&1 == 0 {
			from = fuzzReporter
		}
	}
	b, err := m.Append(nil)
	if err != nil {
		return // a combination the wire refuses (a Flow ID of 0, say)
	}
	r.handle(from, b)
}

// helloAck answers the latest HELLO; caps narrow the CRF's limits.
func (r *fuzzRun) helloAck(from netip.AddrPort, nonce uint64, caps [6]byte) {
	u := r.set
	maxK, maxM, maxT := u.crfMaxK, u.crfMaxM, u.crfMaxT
	if caps[0]&1 != 0 {
		maxK, maxM, maxT = 1+int(caps[1]%64), int(caps[2]%17), 2+int(binary.BigEndian.Uint16(caps[3:])%4096)
	}
	ack := wire.HelloAck{FlowID: 0x10000 + uint32(caps[5]), AF: wire.AF4, SenderNonce: nonce,
		MaxOpenBlocks: uint16(u.maxOpen), Capabilities: wire.Capabilities{FlowKind: wire.FlowKindRoCEv2,
			Schemes: u.schemes, MaxK: uint8(maxK), MaxM: uint8(maxM), MaxT: uint16(maxT), RDMAMTU: uint16(r.a.RDMAMTU())}}
	b, err := ack.Append(nil)
	if err != nil {
		return
	}
	r.handle(from, b)
}

func (r *fuzzRun) paramAck(from netip.AddrPort, id uint8, reject bool) {
	m := wire.ParamAck{FlowID: r.a.FlowID(), ConfigID: id}
	if reject {
		m.Status = 1
	}
	b, err := m.Append(nil)
	if err != nil {
		return
	}
	r.handle(from, b)
}

func (r *fuzzRun) control(arg fuzzArg) {
	switch arg.u8(0) % 7 {
	case 0:
		r.call("Start", func(s *Sender) { s.Start(r.now) })
	case 1:
		r.call("Close", func(s *Sender) { s.Close(r.now, wire.Reason(arg.u8(1)%6)) })
	case 2:
		cfg, _ := r.a.Config()
		cfg.M = int(arg.u8(1) % 8)
		if arg.u8(2)&1 != 0 {
			cfg.K = 1 + int(arg.u8(3)%64)
		}
		if arg.u8(2)&2 != 0 {
			cfg.T = 2 + int(arg.u16(4)%1200)
		}
		var ea, eb error
		r.call("Reconfigure", func(s *Sender) {
			if s == r.a {
				ea = s.Reconfigure(r.now, cfg)
			} else {
				eb = s.Reconfigure(r.now, cfg)
			}
		})
		if (ea == nil) != (eb == nil) {
			r.t.Fatalf("Reconfigure: %v, the twin %v", ea, eb)
		}
	case 3:
		r.call("SetReverseQP", func(s *Sender) { s.SetReverseQP(fuzzReverseQP) })
	case 4:
		r.call("ClearReverseQP", func(s *Sender) { s.ClearReverseQP() })
	case 5:
		next, ok := r.a.NextPSN()
		if ok {
			r.call("Acknowledge", func(s *Sender) { s.Acknowledge(next.Add(-1 - int(arg.u8(1)))) })
		}
	default:
		r.call("SetReverseQP", func(s *Sender) { s.SetReverseQP(0x33) })
	}
}

// handle delivers a message from from to the Sender, and to the twin unless it must change
// nothing: from another address than the bound one, unless it is HELLO_ACK during the handshake
// or PATH_REPORT from a configured reporter.
func (r *fuzzRun) handle(from netip.AddrPort, msg []byte) {
	h, herr := wire.ParseHeader(msg)
	refused := r.a.State() != StateHello || herr != nil || h.Type != wire.TypeHelloAck
	if herr == nil && h.Type == wire.TypePathReport && from == fuzzReporter {
		refused = false
	}
	if r.a.State() == StateEstablished && from == r.bound {
		refused = false
	}
	// What the harness sends from the bound CRF within a session.
	if herr == nil && r.inSession && from == r.bound && h.FlowID == r.flowID {
		switch h.Type {
		case wire.TypeParamAck:
			if m, err := wire.ParseParamAck(msg); err == nil && m.Status == wire.StatusAccepted {
				r.accepted[m.ConfigID] = true
			}
		case wire.TypeRepairRequest:
			if m, err := wire.ParseRepairRequest(msg); err == nil {
				r.requested[m.RequestID] = true
			}
		}
	}
	r.handled++
	before := r.a.Stats()
	r.step("Handle", func(s *Sender) {
		if s == r.a || !refused {
			s.Handle(r.now, from, msg)
		}
	}, func() {
		if r.a.Stats().HelloAckAccepted != before.HelloAckAccepted {
			r.startSession(from, h.FlowID)
		}
	})
}

// call runs f on the Sender and its twin, then checks everything.
func (r *fuzzRun) call(name string, f func(*Sender)) { r.step(name, f, nil) }

func (r *fuzzRun) step(name string, f func(*Sender), after func()) {
	r.prevNext, r.hadNext = r.a.NextPSN()
	f(r.a)
	f(r.b)
	if after != nil {
		after()
	}
	r.drainAndCheck(name)
	if r.a.State() != StateEstablished {
		r.endSession()
	}
}

// early calls Tick before the next deadline: a driver that sleeps until NextDeadline would miss
// whatever it does, so it must do nothing.
func (r *fuzzRun) early() {
	if d, ok := r.a.NextDeadline(); ok && d <= r.now {
		return
	}
	before := r.a.Stats()
	state := r.a.State()
	r.call("Tick before the deadline", func(s *Sender) { s.Tick(r.now) })
	if r.a.Stats() != before || r.a.State() != state || r.lastSent > 0 {
		r.t.Fatalf("Tick(%v) before the next deadline changed %v to %v, counters\n%+v\n%+v", r.now, state, r.a.State(), before, r.a.Stats())
	}
}

// fuzzMaxTicks bounds the timers one input runs (hours of HELLO hold-offs would take seconds).
const fuzzMaxTicks = 5000

// runUntil runs the timers due up to t, in order, and leaves the clock at t; past the run's
// budget of timers it stops the run.
func (r *fuzzRun) runUntil(t time.Duration) {
	for !r.exhausted {
		d, ok := r.a.NextDeadline()
		if !ok || d > t {
			r.now = max(r.now, t)
			return
		}
		r.now = max(r.now, d)
		r.call("Tick", func(s *Sender) { s.Tick(r.now) })
		if d2, ok := r.a.NextDeadline(); ok && d2 <= r.now {
			r.t.Fatalf("after Tick(%v) in state %v the next deadline is %v: a driver would spin", r.now, r.a.State(), d2)
		}
		r.ticks++
		r.exhausted = r.ticks >= fuzzMaxTicks
	}
}

func (r *fuzzRun) startSession(from netip.AddrPort, id uint32) {
	r.inSession, r.bound, r.flowID = true, from, id
	r.configs, r.accepted, r.requested = map[uint8][]flow.Config{}, map[uint8]bool{}, map[uint16]bool{}
	r.blocks, r.recent = map[fuzzBlockKey]*fuzzBlockSeen{}, nil
}

func (r *fuzzRun) endSession() {
	r.inSession, r.bound, r.flowID = false, netip.AddrPort{}, 0
	r.configs, r.accepted, r.requested = map[uint8][]flow.Config{}, map[uint8]bool{}, map[uint16]bool{}
	r.blocks, r.recent = map[fuzzBlockKey]*fuzzBlockSeen{}, nil
}

type fuzzDatagram struct {
	to  netip.AddrPort
	msg []byte
}

func drainAll(s *Sender) []fuzzDatagram {
	var out []fuzzDatagram
	s.Drain(func(d flow.Datagram) { out = append(out, fuzzDatagram{d.To, bytes.Clone(d.Payload)}) })
	return out
}

// drainAndCheck drains both Senders after the call name and checks every invariant.
func (r *fuzzRun) drainAndCheck(name string) {
	t := r.t
	got, twin := drainAll(r.a), drainAll(r.b)
	if len(got) != len(twin) {
		t.Fatalf("%s: %d datagrams, the twin %d (a refused message changed something, C14)", name, len(got), len(twin))
	}
	for i := range got {
		if got[i].to != twin[i].to || !bytes.Equal(got[i].msg, twin[i].msg) {
			t.Fatalf("%s: datagram %d to %v differs from the twin's to %v (C14)\n %x\n %x", name, i, got[i].to,
				twin[i].to, got[i].msg, twin[i].msg)
		}
	}
	r.lastSent = len(got)
	for _, d := range got {
		r.checkDatagram(name, d)
	}
	r.checkTwin(name)
	r.checkCounters(name)
	r.checkMemory(name)
}

func (r *fuzzRun) checkDatagram(name string, d fuzzDatagram) {
	t := r.t
	m, err := wire.Parse(d.msg)
	if err != nil {
		t.Fatalf("%s: sent a datagram that does not parse: %v\n %x", name, err, d.msg)
	}
	if again, err := m.Append(nil); err != nil || !bytes.Equal(again, d.msg) {
		t.Fatalf("%s: sent %v that re-encodes differently (%v)\n %x\n %x", name, m.Type(), err, d.msg, again)
	}
	r.sent[m.Type()]++
	if h, ok := m.(*wire.Hello); ok {
		if d.to != testCRF {
			t.Fatalf("%s: HELLO to %v, the configured CRF is %v", name, d.to, testCRF)
		}
		if h.SenderNonce != r.nonce {
			r.nonce, r.hellos = h.SenderNonce, 0
		}
		if r.hellos++; r.hellos > maxAttempts {
			t.Fatalf("%s: HELLO %d with nonce %#x: at most %d (C3)", name, r.hellos, r.nonce, maxAttempts)
		}
		return
	}
	if !r.inSession {
		t.Fatalf("%s: %v to %v outside a session", name, m.Type(), d.to)
	}
	if d.to != r.bound {
		t.Fatalf("%s: %v to %v, the session is bound to %v (C14)", name, m.Type(), d.to, r.bound)
	}
	if id := binary.BigEndian.Uint32(d.msg[4:]); id != r.flowID {
		t.Fatalf("%s: %v with Flow ID %#x, the session's is %#x", name, m.Type(), id, r.flowID)
	}
	switch m := m.(type) {
	case *wire.ParamUpdate:
		r.pendID = m.ConfigID
		cfg := flow.Config{ID: m.ConfigID, Scheme: m.Scheme, K: int(m.K), M: int(m.M), T: int(m.T)}
		r.configs[m.ConfigID] = append(r.configs[m.ConfigID], cfg)
		r.maxT = max(r.maxT, cfg.T)
	case *wire.Repair:
		r.checkRepair(name, m)
	case *wire.Close:
	default:
		t.Fatalf("%s: the CSF sent %v", name, m.Type())
	}
}

// checkRepair checks a REPAIR against the session and the sources.
func (r *fuzzRun) checkRepair(name string, m *wire.Repair) {
	t := r.t
	if !r.accepted[m.ConfigID] {
		t.Fatalf("%s: REPAIR under Config ID %d, which the CRF never accepted", name, m.ConfigID)
	}
	if m.Info {
		// A block's INFO, or one naming PSNs of no block (E29), whose k counts those PSNs.
		r.info++
		if len(m.Symbol) != 0 {
			t.Fatalf("%s: INFO with a symbol of %d octets", name, len(m.Symbol))
		}
		return
	}
	var cfg flow.Config
	found := false
	for _, c := range r.configs[m.ConfigID] {
		if int(m.K) <= c.K && len(m.Symbol) == c.T {
			cfg, found = c, true
		}
	}
	if !found {
		t.Fatalf("%s: REPAIR k %d T %d fits no configuration %d sent: %+v", name, m.K, len(m.Symbol), m.ConfigID, r.configs[m.ConfigID])
	}
	switch {
	case m.Retx:
		r.retx++
	case m.Scheme == wire.SchemeSourceCopy:
		r.sourceCopy++
	default:
		r.ordinary++
	}
	// Behind the next PSN, before the call (a source that closed the block may move it by a
	// READ's PSNs) or after.
	last := m.BlockStartPSN.Add(int(m.K) - 1)
	if next, ok := r.a.NextPSN(); !ok || last.After(next.Add(-1)) && (!r.hadNext || last.After(r.prevNext.Add(-1))) {
		t.Fatalf("%s: block %v of k %d reaches past the newest source (next %v, before %v)", name, m.BlockStartPSN, m.K, next, r.prevNext)
	}
	key := fuzzBlockKey{r.flowID, m.BlockStartPSN, m.K, m.ConfigID}
	seen := r.blocks[key]
	if seen == nil {
		seen = &fuzzBlockSeen{present: m.Present, rounds: map[uint16]int{}}
		r.blocks[key] = seen
		r.recent = append(r.recent, key)
		if len(r.recent) > 32 {
			r.recent = r.recent[1:]
		}
	}
	if seen.present != m.Present {
		t.Fatalf("%s: block %v present %x, earlier %x", name, m.BlockStartPSN, m.Present, seen.present)
	}
	if m.Present.Beyond(int(m.K)) {
		t.Fatalf("%s: block %v k %d present beyond k: %x", name, m.BlockStartPSN, m.K, m.Present)
	}
	i := int(m.RepairIndex)
	switch {
	case m.Scheme == wire.SchemeSourceCopy:
		if i >= int(m.K) || !m.Present.Has(i) || !r.requested[m.RepairSessionID] {
			t.Fatalf("%s: Source Copy of position %d (present %x) for Request ID %d", name, i, m.Present, m.RepairSessionID)
		}
	case m.Scheme != cfg.Scheme:
		t.Fatalf("%s: REPAIR of scheme %v under a configuration of %v", name, m.Scheme, cfg.Scheme)
	case m.Scheme == wire.SchemeXOR && (i != 0 || m.Retx):
		t.Fatalf("%s: XOR symbol index %d retx %v", name, i, m.Retx)
	case i+int(m.K) > 255:
		t.Fatalf("%s: Repair Index %d with k %d: i + k <= 255", name, i, m.K)
	default:
		if seen.indices[i/64]&(1<<(i%64)) != 0 {
			t.Fatalf("%s: Repair Index %d of block %v sent twice (C16: fresh indices)", name, i, m.BlockStartPSN)
		}
		seen.indices[i/64] |= 1 << (i % 64)
		if m.Retx {
			if !r.requested[m.RepairSessionID] {
				t.Fatalf("%s: coded retransmission for Request ID %d, never requested", name, m.RepairSessionID)
			}
			if !m.Present.Contains(&m.Lost) || m.Lost.Empty() {
				t.Fatalf("%s: coded retransmission over %x, present %x", name, m.Lost, m.Present)
			}
			seen.rounds[m.RepairSessionID]++
			if len(seen.rounds) > maxCodedRounds {
				t.Fatalf("%s: block %v answered with %d coded rounds (E34)", name, m.BlockStartPSN, len(seen.rounds))
			}
			if seen.rounds[m.RepairSessionID] > m.Lost.Count() {
				t.Fatalf("%s: %d coded symbols for %d lost", name, seen.rounds[m.RepairSessionID], m.Lost.Count())
			}
		} else if seen.ordinary++; seen.ordinary > max(r.a.eff.MaxM, 1) {
			t.Fatalf("%s: %d ordinary symbols for block %v, Max m %d (C16)", name, seen.ordinary, m.BlockStartPSN, r.a.eff.MaxM)
		}
	}
	r.checkSymbol(name, m)
}

// checkSymbol recomputes the symbol from the sources the RDMA sender emitted.
func (r *fuzzRun) checkSymbol(name string, m *wire.Repair) {
	T := len(m.Symbol)
	src := make([][]byte, m.K)
	ok := true
	over := m.Present
	if m.Retx {
		over = m.Lost
	}
	over.Each(func(j int) {
		pkt, seen := r.sources[m.BlockStartPSN.Add(j)]
		if !seen {
			r.t.Fatalf("%s: block %v position %d present, but no source had its PSN", name, m.BlockStartPSN, j)
		}
		if pkt == nil {
			ok = false // two sources of that PSN in the run: which one is ambiguous
			return
		}
		sym, err := fec.AppendSymbol(nil, pkt, T)
		if err != nil {
			r.t.Fatalf("%s: block %v position %d present, but its source of %d octets does not fit T %d", name,
				m.BlockStartPSN, j, len(pkt), T)
		}
		src[j] = sym
	})
	if !ok {
		return
	}
	want := make([]byte, T)
	switch {
	case m.Scheme == wire.SchemeSourceCopy:
		want = src[m.RepairIndex]
	case m.Scheme == wire.SchemeXOR:
		if err := r.enc.XOR(want, over, src); err != nil {
			r.t.Fatal(err)
		}
	default:
		if err := r.enc.Encode([][]byte{want}, []int{int(m.RepairIndex)}, over, src); err != nil {
			r.t.Fatal(err)
		}
	}
	if !bytes.Equal(want, m.Symbol) {
		r.t.Fatalf("%s: REPAIR index %d scheme %v retx %v of block %v is not computed from the sources", name,
			m.RepairIndex, m.Scheme, m.Retx, m.BlockStartPSN)
	}
}

// checkTwin compares the Sender with its twin: the same state, the same counters but for
// those of the messages only the Sender saw.
func (r *fuzzRun) checkTwin(name string) {
	a, b := r.a.Stats(), r.b.Stats()
	for _, st := range []*Stats{&a, &b} {
		st.MessagesIgnored, st.MessagesMalformed, st.MessagesWrongSource = 0, 0, 0
		st.HelloAckIgnored, st.PathReportsRejected, st.PathReportsUnlisted = 0, 0, 0
	}
	if a != b {
		r.t.Fatalf("%s: counters differ from the twin's (C14):\n%+v\n%+v", name, a, b)
	}
	if r.a.State() == StateEstablished && (!r.inSession || r.a.bound != r.bound || r.a.FlowID() != r.flowID) {
		r.t.Fatalf("%s: established with flow %#x bound to %v; the accepted HELLO_ACK came from %v with %#x",
			name, r.a.FlowID(), r.a.bound, r.bound, r.flowID)
	}
	da, oka := r.a.NextDeadline()
	db, okb := r.b.NextDeadline()
	ca, _ := r.a.Config()
	cb, _ := r.b.Config()
	if r.a.State() != r.b.State() || r.a.FlowID() != r.b.FlowID() || r.a.bound != r.b.bound || ca != cb ||
		da != db || oka != okb || r.a.SRTT() != r.b.SRTT() || r.a.M() != r.b.M() {
		r.t.Fatalf("%s: state differs from the twin's (C14): %v %v, flow %#x %#x, deadline %v %v", name,
			r.a.State(), r.b.State(), r.a.FlowID(), r.b.FlowID(), da, db)
	}
}

// checkCounters checks that every input is counted in exactly one outcome and every datagram
// under its kind.
func (r *fuzzRun) checkCounters(name string) {
	s := r.a.Stats()
	sum := func(v ...uint64) (n uint64) {
		for _, x := range v {
			n += x
		}
		return n
	}
	checks := []struct {
		what      string
		got, want uint64
	}{
		{"observed packets", s.Observed, sum(s.Malformed, s.NonSource, s.OtherQP, s.Sources, s.Retransmissions)},
		{"reverse packets", s.ReverseObserved, sum(s.ReverseIgnored, s.ReverseUnpaired, s.ReverseImplausible, s.ReverseAcks)},
		{"messages handled", r.handled, sum(s.MessagesIgnored, s.MessagesMalformed, s.MessagesWrongSource,
			s.HelloAckAccepted, s.HelloAckIgnored, s.PathReportsRejected, s.PathReports, s.ParamAccepted,
			s.ParamRejected, s.ParamAckIgnored, s.RequestsReceived, s.LossReports, s.CloseReceived)},
		{"CLOSE sent by reason", s.CloseSent, sum(s.CloseSentByReason[:]...)},
		{"CLOSE received by reason", s.CloseReceived, sum(s.CloseReceivedByReason[:]...)},
		{"HELLO datagrams", r.sent[wire.TypeHello], s.HelloSent},
		{"PARAM_UPDATE datagrams", r.sent[wire.TypeParamUpdate], s.ParamUpdateSent},
		{"CLOSE datagrams", r.sent[wire.TypeClose], s.CloseSent},
		{"ordinary REPAIR datagrams", r.ordinary, s.RepairSent},
		{"coded retransmissions", r.retx, s.RetxSent},
		{"Source Copy datagrams", r.sourceCopy, s.SourceCopySent},
		{"INFO datagrams", r.info, s.InfoSent},
	}
	for _, c := range checks {
		if c.got != c.want {
			r.t.Fatalf("%s: %s: %d, the outcomes add up to %d\n%+v", name, c.what, c.got, c.want, s)
		}
	}
	le := []struct {
		what      string
		part, all uint64
	}{
		{"HELLO retransmitted", s.HelloRetransmitted, s.HelloSent},
		{"PARAM_UPDATE retransmitted", s.ParamUpdateRetransmitted, s.ParamUpdateSent},
		{"extra repair", s.ExtraSent, s.RepairSent},
		{"INFO naming no block", s.InfoAbsentSent, s.InfoSent},
		{"sources unprotected", s.SourcesUnprotected, s.Sources},
		{"retransmissions classified", sum(s.RetransmissionUnheld, s.ReadReissued, s.RetransmissionMismatch), s.Retransmissions},
		{"range and fallback requests", max(s.RangeRequests, s.FallbackRequests), s.RequestsReceived},
		{"configurations applied", s.ConfigsApplied, s.ParamAccepted},
		{"blocks closed", s.BlocksClosedFull + s.BlocksClosedBurst, s.BlocksOpened},
		{"blocks released", s.BlocksAcked + s.BlocksGivenUp + s.BlocksEvicted, s.BlocksClosedFull + s.BlocksClosedBurst},
		{"blocks released or far behind", s.BlocksAcked + s.BlocksGivenUp + s.BlocksEvicted + s.BlocksFarBehind, s.BlocksOpened},
		{"eight unanswered HELLOs", 8 * s.Unprotected, s.HelloSent + s.QueueFull},
	}
	for _, c := range le {
		if c.part > c.all {
			r.t.Fatalf("%s: %s: %d of %d\n%+v", name, c.what, c.part, c.all, s)
		}
	}
}

// checkMemory checks that what the Sender holds stays within its configured bounds.
func (r *fuzzRun) checkMemory(name string) {
	s, t := r.a, r.t
	if n := s.q.Len(); n != 0 {
		t.Fatalf("%s: %d datagrams left after Drain", name, n)
	}
	if s.absent.n > maxAbsentRuns || len(s.absent.r) > maxAbsentRuns {
		t.Fatalf("%s: %d absent runs in %d, bound %d", name, s.absent.n, len(s.absent.r), maxAbsentRuns)
	}
	if s.state != StateEstablished {
		if s.blocks != nil || s.timers.Len() != 0 {
			t.Fatalf("%s: %v with %d block slots and %d timers held", name, s.state, len(s.blocks), s.timers.Len())
		}
		return
	}
	held := r.set.maxHeld
	if held == 0 {
		held = 2 * s.eff.MaxOpenBlocks
	}
	if len(s.blocks) != held || s.eff.MaxOpenBlocks > r.set.maxOpen {
		t.Fatalf("%s: %d block slots, want %d (Max Open Blocks %d)", name, len(s.blocks), held, s.eff.MaxOpenBlocks)
	}
	if n := s.timers.Len(); n > 4*len(s.blocks)+65 {
		t.Fatalf("%s: %d timers for %d blocks", name, n, len(s.blocks))
	}
	maxT := max(r.maxT, 64)
	var retained, kept int
	used, open := 0, 0
	var prev *block
	var base psn.PSN
	for seq := s.seq - min(s.seq, uint64(len(s.blocks))); seq < s.seq; seq++ {
		b := &s.blocks[seq%uint64(len(s.blocks))]
		if !b.used || b.seq != seq {
			continue
		}
		used++
		if !b.closed {
			open++
		}
		if !b.last().Before(s.next) {
			t.Fatalf("%s: block %v (k %d) held, not behind the next PSN %v", name, b.start, b.k, s.next)
		}
		if b.k > b.limit || b.limit > b.cfg.K {
			t.Fatalf("%s: block %v covers %d of %d positions (k %d)", name, b.start, b.k, b.limit, b.cfg.K)
		}
		b.present.Each(func(j int) { kept += len(b.syms[j]) })
		// find's binary search: counted from the oldest block's start, every block starts
		// after the one before it ends.
		if prev == nil {
			base = b.start
		} else if base.Forward(b.start) <= base.Forward(prev.last()) {
			t.Fatalf("%s: block %v (k %d) does not follow block %v (k %d) counted from %v: find relies on the order",
				name, b.start, b.k, prev.start, prev.k, base)
		}
		prev = b
	}
	for i := range s.blocks {
		for _, sym := range s.blocks[i].syms {
			retained += cap(sym)
		}
		retained += cap(s.blocks[i].pre)
	}
	if open > 1 || open == 1 && s.open < 0 {
		t.Fatalf("%s: %d blocks open, open slot %d", name, open, s.open)
	}
	if kept > used*s.eff.MaxK*maxT {
		t.Fatalf("%s: %d source octets in %d blocks, bound %d", name, kept, used, used*s.eff.MaxK*maxT)
	}
	if bound := len(s.blocks) * max(s.eff.MaxK, 1) * (2*maxT + 64); retained > bound {
		t.Fatalf("%s: %d octets retained for %d block slots, bound %d", name, retained, len(s.blocks), bound)
	}
	if cap(s.symbuf) > 255*maxT || len(s.scratch) > 255 {
		t.Fatalf("%s: scratch of %d symbols, %d octets", name, len(s.scratch), cap(s.symbuf))
	}
}

// fuzzSeeds are inputs that reach the interesting states: an established flow with sources,
// losses answered, reports, time passing, foreign messages.
func fuzzSeeds() [][]byte {
	op := func(kind uint8, arg ...byte) []byte { return append([]byte{kind, byte(len(arg))}, arg...) }
	sources := func(n int, opc byte) []byte {
		var b []byte
		for range n {
			b = append(b, op(fopSource, opc, 0, 0, 0)...)
		}
		return b
	}
	var seeds [][]byte
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	// k 8, m 2: two blocks, a request for each form, a loss report, time.
	seeds = append(seeds, cat([]byte{0, 2, 4, 0, 0}, sources(20, 0), op(fopTime, 0, 10, 1),
		op(fopCRF, 2, 0, 0x55, 0x55, 0x55, 0x55, 0, 0, 1), op(fopCRF, 4, 0, 7, 0, 1, 3, 5),
		op(fopCRF, 1, 0, 100, 0, 100, 0, 90), op(fopTime, 0, 1, 2)))
	// Foreign messages and a refused request from elsewhere.
	seeds = append(seeds, cat([]byte{3, 1, 2, 0, 0}, sources(10, 1), op(fopTime, 0, 10, 1),
		op(fopCRF|4<<5, 2, 0, 0xff, 0xff, 0xff, 0xff, 1, 0, 2), op(fopCRF|5<<5, 5, 1),
		op(fopCRF|6<<5, 0, 0, 0), op(fopCRF|7<<5, 7, 3, 5, 0, 1, 2, 3), op(fopCRF, 7, 3, 5, 0, 1, 2, 3)))
	// A handshake left to the input; a HELLO_ACK from elsewhere.
	seeds = append(seeds, cat([]byte{0x80, 0, 0, 0, 0}, op(fopTime, 0, 3, 0), op(fopCRF|5<<5, 6),
		op(fopCRF, 0), sources(9, 3), op(fopTime, 0, 100, 1)))
	// Reverse acknowledgements, retransmissions, a READ request, a PSN space restart.
	seeds = append(seeds, cat([]byte{4, 0x23, 0x83, 0x10, 0}, sources(12, 0), op(fopSource, 0, 0xf0),
		op(fopSource, 8, 0, 0x80, 100, 0, 0, 0x40, 0), op(fopReverse, 0, 2), op(fopReverse, 2, 0),
		sources(1, 0), op(fopTime, 0x10, 0, 3)))
	seeds = append(seeds, cat([]byte{1, 0, 0, 0, 0}, bytes.Repeat(op(fopSource, 0, 0x80), 33), op(fopTime, 1, 0, 3)))
	// The flow's RDMA MTU is 256, not the configured 1024 (E33); then a refused update offered
	// again; then loss over a second, enough to open the circuit breaker.
	seeds = append(seeds, cat([]byte{0, 2, 0, 0, 0}, bytes.Repeat(op(fopSource, 0, 0, 0x80, 0), 5), op(fopTime, 0, 5, 2),
		op(fopCRF, 6), op(fopCRF, 0, 0, 1), sources(9, 0), op(fopTime, 1, 0, 2),
		op(fopCRF, 1, 0xc3, 0x50, 0, 0x10, 0), op(fopCRF, 1, 0xc3, 0x50, 0, 0x10, 0), sources(9, 0), op(fopTime, 2, 0, 3)))
	// Raw CREM messages of each type from the CRF.
	for _, m := range []wire.Message{
		&wire.RepairRequest{FlowID: 3, RequestID: 1, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, BlockStartPSN: 0x100, Lost: lost(1)},
		&wire.RepairRequest{FlowID: 3, RangeForm: true, RequestID: 2, Ranges: []psn.Range{{Start: 0x100, Count: 9}}},
		&wire.LossReport{FlowID: 3, IntervalUS: 1000, Expected: 10, Received: 5},
		&wire.Close{FlowID: 3},
		&wire.ParamAck{FlowID: 3, ConfigID: 2},
	} {
		b, _ := m.Append(nil)
		seeds = append(seeds, cat([]byte{0, 2, 0, 0, 0}, sources(9, 0), op(fopMessage, append([]byte{0}, b...)...)))
	}
	return seeds
}

// seedCapture adds the real capture's RoCEv2 packets (read in place, never copied into the
// repository) as raw forward and reverse packets of an established flow.
func seedCapture(f *testing.F) {
	pkts, err := fuzzcorpus.RealRoCEv2()
	if err != nil {
		f.Logf("real capture not used: %v", err)
		return
	}
	var all []byte
	for i, p := range pkts {
		if len(p) > 250 {
			p = p[:250] // an operation's argument is at most 255 octets
		}
		kind := byte(fopRaw)
		if i%2 == 1 {
			kind = fopReverse
			p = append([]byte{4, 0, 0}, p...)
		} else {
			p = append([]byte{0}, p...)
		}
		op := append([]byte{kind, byte(len(p))}, p...)
		f.Add(append([]byte{0, 2, 0, 0, 0}, op...))
		if len(all) < 4000 {
			all = append(all, op...)
		}
	}
	f.Add(append([]byte{0, 2, 0, 0, 0}, all...))
}
