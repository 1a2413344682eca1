package crf

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// The fuzz target runs a program against a Receiver with small bounds and checks, after every
// step, what the CRF promises whatever arrives: every datagram it sends parses and goes to the
// address its flow is bound to (C14: a HELLO_ACK to where its HELLO came from); every restored
// packet delivered passes the ICRC check of its flow (C12); the counters add up; and every table
// stays within its bound (E55).
//
// A program is a series of steps; the first byte of the input sets the flows' delivery mode.
// Each step starts with a byte whose low two bits choose it:
//
//	0 message: flags, length (2 octets), the datagram. flags: bits 0-1 the sender's address, bit
//	  2 CE, bit 3 put the Flow ID of an answered HELLO (bits 4-7 say which) at octets 4-7.
//	1 source: flags, length (2), a RoCEv2 packet observed for the flow bits 4-7 name; bit 2 CE.
//	2 time: 2 octets of 10 us; the timers due run.
//	3 long time: 1 octet of 50 ms; the timers due run.

const (
	fuzzOpMessage = iota
	fuzzOpSource
	fuzzOpTime
	fuzzOpLongTime
)

// fuzzAddrs are the addresses messages come from: the CSF's first.
var fuzzAddrs = [4]netip.AddrPort{testCSF, netip.MustParseAddrPort("10.0.0.9:50000"),
	netip.MustParseAddrPort("10.66.0.1:4000"), netip.MustParseAddrPort("[2001:db8::1]:50000")}

// The rig's bounds: small, so that a short program reaches them.
const (
	fuzzMaxFlows  = 3
	fuzzPending   = 6
	fuzzPerSource = 3
	fuzzHandshake = 200 * time.Millisecond
	fuzzQueue     = 256
	fuzzDeliv     = 512
)

func fuzzLimits() flow.Limits {
	l := flow.DefaultLimits()
	l.MaxK, l.MaxOpenBlocks = 16, 4
	return l
}

// fuzzRig runs programs and checks the invariants.
type fuzzRig struct {
	t     testing.TB
	r     *Receiver
	now   time.Duration
	acks  []uint32                    // Flow IDs of HELLO_ACKs, in order, each once
	bound map[uint32]netip.AddrPort   // where each Flow ID's HELLO came from
	hello map[uint64][]netip.AddrPort // where HELLOs with each nonce came from
	descs map[uint32]flow.Descriptor
	sent  []flow.Datagram // what the last step sent (the recorder hands it to the CSF)
}

func newFuzzRig(t testing.TB, mode byte) *fuzzRig {
	set := Settings{Ordered: mode&1 != 0, SrcPort: testFlow.SrcPort, Idle: 2 * time.Second}
	r, err := New(WithRandom(counter()), WithLimits(fuzzLimits()), WithMaxFlows(fuzzMaxFlows),
		WithHandshakes(fuzzPending, fuzzPerSource, fuzzHandshake), WithQueues(fuzzQueue, fuzzDeliv),
		WithInitialRTT(2*time.Millisecond),
		WithSettings(func(flow.Descriptor) (Settings, bool) { return set, true }))
	if err != nil {
		t.Fatal(err)
	}
	return &fuzzRig{t: t, r: r, bound: map[uint32]netip.AddrPort{}, hello: map[uint64][]netip.AddrPort{},
		descs: map[uint32]flow.Descriptor{}}
}

// run executes a whole program.
func (g *fuzzRig) run(prog []byte) {
	for len(prog) > 0 {
		prog = g.step(prog)
	}
}

// ref returns the Flow ID of the n-th answered HELLO (0 if none).
func (g *fuzzRig) ref(n byte) uint32 {
	if len(g.acks) == 0 {
		return 0
	}
	return g.acks[int(n)%len(g.acks)]
}

// step executes the program's first step and returns the rest.
func (g *fuzzRig) step(prog []byte) []byte {
	op := prog[0] & 3
	prog = prog[1:]
	switch op {
	case fuzzOpMessage, fuzzOpSource:
		if len(prog) < 3 {
			return nil
		}
		flags, n := prog[0], int(binary.BigEndian.Uint16(prog[1:]))
		prog = prog[3:]
		n = min(n, len(prog))
		b := append([]byte(nil), prog[:n]...)
		prog = prog[n:]
		ce := flags&4 != 0
		if op == fuzzOpSource {
			g.r.Observe(g.now, g.ref(flags>>4), b, ce)
			break
		}
		from := fuzzAddrs[flags&3]
		if flags&8 != 0 && len(b) >= 8 {
			binary.BigEndian.PutUint32(b[4:], g.ref(flags>>4))
		}
		if len(b) >= wire.HeaderLen && b[0] == wire.Version<<4|uint8(wire.TypeHello) {
			if h, err := wire.ParseHello(b); err == nil {
				g.hello[h.SenderNonce] = append(g.hello[h.SenderNonce], from)
			}
		}
		g.r.Handle(g.now, from, b, ce)
	case fuzzOpTime, fuzzOpLongTime:
		var d time.Duration
		if op == fuzzOpTime {
			if len(prog) < 2 {
				return nil
			}
			d = time.Duration(binary.BigEndian.Uint16(prog)) * 10 * time.Microsecond
			prog = prog[2:]
		} else {
			if len(prog) < 1 {
				return nil
			}
			d = time.Duration(prog[0]) * 50 * time.Millisecond
			prog = prog[1:]
		}
		end := g.now + d
		for n := 0; n < 10000; n++ {
			t, ok := g.r.NextDeadline()
			if !ok || t > end {
				break
			}
			g.now = max(g.now, t)
			g.r.Tick(g.now)
			g.collect()
		}
		g.now = end
	}
	g.collect()
	g.check()
	return prog
}

// collect drains what the Receiver wants sent and delivered, checking each.
func (g *fuzzRig) collect() {
	for id, f := range g.r.flows {
		g.descs[id] = f.desc
	}
	for id, p := range g.r.pend.byID {
		g.descs[id] = p.desc
	}
	g.r.Drain(func(d flow.Datagram) {
		m, err := wire.Parse(d.Payload)
		if err != nil {
			g.t.Fatalf("the Receiver sent a datagram that does not parse: %v: %x", err, d.Payload)
		}
		g.sent = append(g.sent, flow.Datagram{To: d.To, Payload: append([]byte(nil), d.Payload...)})
		h, _ := wire.ParseHeader(d.Payload)
		if a, ok := m.(*wire.HelloAck); ok {
			ok := false
			for _, from := range g.hello[a.SenderNonce] {
				ok = ok || from == d.To
			}
			if !ok {
				g.t.Fatalf("HELLO_ACK with nonce %#x to %v: no such HELLO came from there (C14)", a.SenderNonce, d.To)
			}
			if _, seen := g.bound[a.FlowID]; !seen {
				g.acks = append(g.acks, a.FlowID)
			}
			g.bound[a.FlowID] = d.To
			return
		}
		if to, ok := g.bound[h.FlowID]; !ok || to != d.To {
			g.t.Fatalf("%T of flow %#x to %v; its HELLO came from %v (C14)", m, h.FlowID, d.To, to)
		}
	})
	g.r.DrainDeliveries(func(d Delivery) {
		if d.Kind != Restored {
			return
		}
		desc, ok := g.descs[d.Flow]
		if !ok {
			g.t.Fatalf("a delivery for flow %#x, never served", d.Flow)
		}
		if err := desc.LogicalHeader().Verify(d.Packet); err != nil {
			g.t.Fatalf("flow %#x PSN %v: a restored packet delivered whose ICRC fails (C12): %v", d.Flow, d.PSN, err)
		}
	})
}

// check verifies that the counters add up and every table is within its bound.
func (g *fuzzRig) check() {
	r, t := g.r, g.t
	st := r.Stats()
	if got := st.HelloReceived + st.ParamUpdates + st.CloseReceived + st.Flows.Repairs + st.MessagesIgnored +
		st.MessagesMalformed + st.MessagesWrongSource + st.UnknownFlow + st.HandshakesRefused; got != st.Messages {
		t.Fatalf("%d messages, %d outcomes: %+v", st.Messages, got, st)
	}
	if st.HelloReceived != st.HelloDuplicate+st.HelloRefused+st.TakeoverRefused+st.HelloBusy+st.HandshakesOpened {
		t.Fatalf("HELLOs do not add up: %+v", st)
	}
	if st.HandshakesOpened != st.FlowsOpened+st.HandshakesEvicted+st.HandshakesExpired+st.HandshakesSuperseded+
		st.HandshakesClosed+st.HandshakesRefused+uint64(r.pend.all.n) {
		t.Fatalf("pending sessions do not add up (%d pending): %+v", r.pend.all.n, st)
	}
	if st.FlowsOpened != st.FlowsClosed+uint64(len(r.flows)) || st.ParamUpdates != st.ParamAccepted+st.ParamRejected {
		t.Fatalf("flows or PARAM_UPDATEs do not add up (%d flows): %+v", len(r.flows), st)
	}
	// The tables.
	if len(r.flows) > fuzzMaxFlows || len(r.order) != len(r.flows) || len(r.byKey) != len(r.flows) {
		t.Fatalf("flows %d, order %d, byKey %d (bound %d)", len(r.flows), len(r.order), len(r.byKey), fuzzMaxFlows)
	}
	p := &r.pend
	if n := p.all.n; n > fuzzPending || len(p.byID) != n || len(p.byHello) > n || len(p.bySrc) > n || len(p.byKey) > n {
		t.Fatalf("pending %d (bound %d): byID %d byHello %d bySrc %d byKey %d", n, fuzzPending, len(p.byID), len(p.byHello), len(p.bySrc), len(p.byKey))
	}
	for a, l := range p.bySrc {
		if l.n > fuzzPerSource || l.n == 0 {
			t.Fatalf("%d pending sessions from %v (bound %d)", l.n, a, fuzzPerSource)
		}
	}
	if p.all.head != nil && g.now >= p.all.head.at+fuzzHandshake+time.Millisecond && g.now > 0 {
		// Expiry runs at Tick, and the time steps tick what is due: nothing outlives its time
		// by more than the step that is running.
		if d, ok := r.NextDeadline(); !ok || d > p.all.head.at+fuzzHandshake {
			t.Fatalf("a pending session from %v outlives its expiry with no timer for it", p.all.head.at)
		}
	}
	if len(r.decs) > maxPooledDecoders || r.q.Len() > fuzzQueue || r.dq.n > fuzzDeliv || len(r.syms) > maxSpareSym {
		t.Fatalf("pools: %d decoders, %d messages, %d deliveries, %d symbol buffers", len(r.decs), r.q.Len(), r.dq.n, len(r.syms))
	}
	aside := uint64(0)
	for _, f := range r.order {
		if len(f.aside) > maxAside || cap(f.aside) > maxAside {
			t.Fatalf("flow %#x: %d REPAIRs aside, %d slots (bound %d)", f.id, len(f.aside), cap(f.aside), maxAside)
		}
		aside += uint64(len(f.aside))
	}
	if fs := st.Flows; fs.RepairAside != fs.RepairAsideTaken+fs.RepairAsideUnneeded+fs.RepairAsideExpired+fs.RepairAsideDropped+aside {
		t.Fatalf("REPAIRs aside do not add up: %d aside, %d taken, %d unneeded, %d expired, %d dropped, %d still aside",
			fs.RepairAside, fs.RepairAsideTaken, fs.RepairAsideUnneeded, fs.RepairAsideExpired, fs.RepairAsideDropped, aside)
	}
	lim := fuzzLimits()
	for _, f := range r.order {
		if f.win == nil {
			continue
		}
		if len(f.blocks) > 2*lim.MaxOpenBlocks || f.live > f.eff.MaxOpenBlocks || f.live < 0 {
			t.Fatalf("flow %#x: %d block slots, %d live (Max Open Blocks %d)", f.id, len(f.blocks), f.live, f.eff.MaxOpenBlocks)
		}
		live := 0
		for i := range f.blocks {
			b := &f.blocks[i]
			if b.used && !b.ended {
				live++
			}
			if len(b.cands) > keepLimit(b) || (b.ended || !b.used) && len(b.cands) > 0 {
				t.Fatalf("flow %#x block %d: %d symbols kept (bound %d), ended %v", f.id, i, len(b.cands), keepLimit(b), b.ended)
			}
		}
		if live != f.live {
			t.Fatalf("flow %#x: %d blocks live, counted %d", f.id, live, f.live)
		}
		hp, hb := f.holdLimits()
		if f.heldPkts > hp+1 || f.heldBytes > hb+1<<16 || f.heldPkts < 0 || f.heldBytes < 0 {
			t.Fatalf("flow %#x holds %d packets, %d octets (bounds %d, %d)", f.id, f.heldPkts, f.heldBytes, hp, hb)
		}
		if f.missing < 0 || f.missing > len(f.win) || len(f.holes)-f.h0 > len(f.win)+1 {
			t.Fatalf("flow %#x: %d missing, %d holes, window %d", f.id, f.missing, len(f.holes)-f.h0, len(f.win))
		}
		if f.misses.Len() > 2*f.missing+65 || f.timers.Len() > 4*len(f.blocks)+65 || len(f.spare) > maxSpare {
			t.Fatalf("flow %#x: %d range timers (%d missing), %d block timers, %d spare buffers", f.id, f.misses.Len(), f.missing, f.timers.Len(), len(f.spare))
		}
	}
}

// FuzzReceiver runs programs (above) against a Receiver and checks its invariants after every
// step. The seeds under testdata/fuzz/FuzzReceiver are real sessions of package csf's Sender,
// with loss, restarts, spoofed HELLOs, floods and forged REPAIRs (TestWriteFuzzCorpus).
func FuzzReceiver(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		newFuzzRig(t, data[0]).run(data[1:])
	})
}

// fuzzSeeds are a few hand-made programs: raw messages, and sources of every kind.
func fuzzSeeds(t testing.TB) [][]byte {
	var out [][]byte
	b := newBlock(0x100, 8)
	h := hello(3)
	for _, m := range []wire.Message{
		&wire.ParamUpdate{ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, M: 1, T: testT},
		&wire.Repair{ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, BlockStartPSN: 0x100, Present: psn.FirstK(8), Symbol: b.syms[0]},
		&wire.Repair{ConfigID: 1, Scheme: wire.SchemeSourceCopy, K: 8, RepairIndex: 2, BlockStartPSN: 0x100, Present: psn.FirstK(8), Symbol: b.syms[2]},
		&wire.Repair{Info: true, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 4, BlockStartPSN: 0x100, Present: psn.FirstK(2)},
		&wire.Close{},
	} {
		var p fuzzProg
		p.mode = 1
		p.message(0, msg(t, &h), false)
		p.message(0, msg(t, m), true)
		for j := 0; j < 8; j += 2 {
			p.source(b.pkts[j])
		}
		p.source(readRequest(0x108, 100000))
		p.message(0, msg(t, m), true)
		p.time(20 * time.Millisecond)
		out = append(out, p.bytes())
	}
	return out
}

// fuzzProg builds a program.
type fuzzProg struct {
	mode byte
	b    []byte
}

func (p *fuzzProg) bytes() []byte { return append([]byte{p.mode}, p.b...) }

// message adds a datagram from fuzzAddrs[from]; patch puts the first answered HELLO's Flow ID in.
func (p *fuzzProg) message(from int, b []byte, patch bool) { p.messageRef(from, b, patch, 0) }

func (p *fuzzProg) messageRef(from int, b []byte, patch bool, ref int) {
	flags := byte(from&3) | byte(ref&15)<<4
	if patch {
		flags |= 8
	}
	p.b = append(p.b, fuzzOpMessage, flags, byte(len(b)>>8), byte(len(b)))
	p.b = append(p.b, b...)
}

// source adds a source packet of the first answered HELLO's flow.
func (p *fuzzProg) source(b []byte) { p.sourceRef(b, 0) }

func (p *fuzzProg) sourceRef(b []byte, ref int) {
	p.b = append(p.b, fuzzOpSource, byte(ref&15)<<4, byte(len(b)>>8), byte(len(b)))
	p.b = append(p.b, b...)
}

// time adds a step of d (rounded down to 10 us, at most 655 ms).
func (p *fuzzProg) time(d time.Duration) {
	n := min(d/(10*time.Microsecond), 0xffff)
	p.b = append(p.b, fuzzOpTime, byte(n>>8), byte(n))
}

func (p *fuzzProg) longTime(d time.Duration) {
	p.b = append(p.b, fuzzOpLongTime, byte(min(d/(50*time.Millisecond), 255)))
}

// TestFuzzSeedsHoldInvariants runs the committed corpus and the hand-made seeds through the
// rig: the invariants hold for realistic traffic, attacks included (E55, E57).
func TestFuzzSeedsHoldInvariants(t *testing.T) {
	seeds := fuzzSeeds(t)
	files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzReceiver", "*"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		v, err := parseCorpusFile(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		seeds = append(seeds, v)
	}
	if len(files) == 0 {
		t.Fatal("no corpus under testdata/fuzz/FuzzReceiver (go test ./crf -run TestWriteFuzzCorpus -update-corpus)")
	}
	for _, s := range seeds {
		newFuzzRig(t, s[0]).run(s[1:])
	}
}

var updateCorpus = flag.Bool("update-corpus", false, "write the FuzzReceiver seed corpus under testdata/fuzz")

// TestWriteFuzzCorpus writes the seed corpus of FuzzReceiver from sessions of a real CSF
// (package csf) in virtual time, each with the CRF's rig: clean and lossy transfers in both
// delivery modes, a restart of the CSF, HELLOs for the flow from elsewhere, a HELLO flood, and
// forged REPAIRs from the CSF's address. Run by hand: go test ./crf -run TestWriteFuzzCorpus
// -update-corpus.
func TestWriteFuzzCorpus(t *testing.T) {
	if !*updateCorpus {
		t.Skip("writes the corpus only with -update-corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzReceiver")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, o := range old {
		_ = os.Remove(o)
	}
	n := 0
	for _, sc := range fuzzScenarios {
		for mode := range byte(2) {
			for seed := range uint64(sc.seeds) {
				prog := recordSession(t, sc, mode, seed)
				name := filepath.Join(dir, fmt.Sprintf("%s-%s-%d", sc.name, [...]string{"at-once", "ordered"}[mode], seed))
				if err := os.WriteFile(name, corpusFile(prog), 0o644); err != nil {
					t.Fatal(err)
				}
				n++
			}
		}
	}
	t.Logf("%d files in %s", n, dir)
}

// corpusFile encodes one []byte argument in the fuzzing engine's corpus format.
func corpusFile(b []byte) []byte {
	return fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", b)
}

// parseCorpusFile decodes what corpusFile wrote.
func parseCorpusFile(b []byte) ([]byte, error) {
	var s string
	if _, err := fmt.Sscanf(string(b), "go test fuzz v1\n[]byte(%q)\n", &s); err != nil {
		return nil, fmt.Errorf("corpus file: %w", err)
	}
	return []byte(s), nil
}

// fuzzScenario is a session recorded for the corpus.
type fuzzScenario struct {
	name    string
	seeds   int
	loss    float64 // of source packets
	forge   float64 // of the CSF's REPAIRs, a forged copy from its address arrives first
	packets int
	attack  func(p *fuzzProg, g *fuzzRig, s *csf.Sender, rng *rand.Rand, n int) // before the n-th packet
}

var fuzzScenarios = []fuzzScenario{
	{name: "clean", seeds: 1, packets: 40},
	{name: "lossy", seeds: 2, loss: 0.15, packets: 48},
	{name: "burst", seeds: 1, loss: 0.4, packets: 32},
	{name: "restart", seeds: 1, loss: 0.1, packets: 48, attack: func(p *fuzzProg, g *fuzzRig, s *csf.Sender, rng *rand.Rand, n int) {
		if n == 24 {
			s.Start(g.now) // a new session from the flow's own address
		}
	}},
	{name: "takeover", seeds: 1, loss: 0.1, packets: 40, attack: func(p *fuzzProg, g *fuzzRig, s *csf.Sender, rng *rand.Rand, n int) {
		if n%8 == 4 {
			h := hello(uint64(n))
			g.exec(p, func(q *fuzzProg) { q.message(1+n%3, msg(g.t, &h), false) })
		}
	}},
	{name: "flood", seeds: 1, loss: 0.1, packets: 32, attack: func(p *fuzzProg, g *fuzzRig, s *csf.Sender, rng *rand.Rand, n int) {
		for range 3 {
			h := floodHello(rng)
			g.exec(p, func(q *fuzzProg) { q.message(rng.IntN(4), msg(g.t, &h), false) })
		}
	}},
	{name: "forged", seeds: 2, loss: 0.2, forge: 0.5, packets: 48},
}

// fuzzT is the symbol length of the recorded sessions (small sources keep the corpus small).
const fuzzT = 128

// exec adds steps to the program and runs them on the rig at once.
func (g *fuzzRig) exec(p *fuzzProg, add func(q *fuzzProg)) {
	var q fuzzProg
	add(&q)
	p.b = append(p.b, q.b...)
	g.run(q.b)
}

// recordSession plays a real CSF against the rig over a link of 200 us each way: every
// datagram the CSF sends and every source that survives the loss becomes a step of the program.
func recordSession(t *testing.T, sc fuzzScenario, mode byte, seed uint64) []byte {
	g := newFuzzRig(t, mode)
	rng := rand.New(rand.NewPCG(seed, 77))
	crfAddr := netip.MustParseAddrPort("10.0.0.2:50000")
	s, err := csf.New(csf.WithFlow(testFlow), csf.WithCRF(crfAddr), csf.WithRandom(rng.Uint64),
		csf.WithLimits(fuzzLimits()), csf.WithConfig(wire.SchemeCauchy, 8, 2, fuzzT),
		csf.WithAdaptation(false), csf.WithInitialRTT(2*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	p := &fuzzProg{mode: mode}
	// ref is the index of the CSF's Flow ID among the answered HELLOs.
	ref := func(id uint32) int {
		for i, a := range g.acks {
			if a == id {
				return i
			}
		}
		return 0
	}
	const hop = 200 * time.Microsecond
	var toCRF, toCSF []flow.Datagram
	take := func(d flow.Datagram) {
		toCRF = append(toCRF, flow.Datagram{To: d.To, Payload: append([]byte(nil), d.Payload...)})
	}
	// advance runs one hop: what each side sent a hop ago arrives, the timers due run.
	advance := func() {
		g.exec(p, func(q *fuzzProg) { q.time(hop) })
		for _, d := range toCRF {
			h, err := wire.ParseHeader(d.Payload)
			if err != nil || h.FlowID == 0 {
				g.exec(p, func(q *fuzzProg) { q.message(0, d.Payload, false) })
				continue
			}
			if h.Type == wire.TypeRepair && rng.Float64() < sc.forge {
				m, err := wire.ParseRepair(d.Payload)
				if err == nil && !m.Info {
					m.Symbol = append([]byte(nil), m.Symbol...)
					for i := range m.Symbol {
						m.Symbol[i] = byte(rng.Uint32())
					}
					g.exec(p, func(q *fuzzProg) { q.messageRef(0, msg(t, &m), true, ref(h.FlowID)) })
				}
			}
			g.exec(p, func(q *fuzzProg) { q.messageRef(0, d.Payload, true, ref(h.FlowID)) })
		}
		toCRF = toCRF[:0]
		for _, d := range toCSF {
			s.Handle(g.now, crfAddr, d.Payload)
		}
		toCSF = toCSF[:0]
		for _, d := range g.sent {
			if d.To == fuzzAddrs[0] {
				toCSF = append(toCSF, d)
			}
		}
		g.sent = g.sent[:0]
		if d, ok := s.NextDeadline(); ok && d <= g.now {
			s.Tick(g.now)
		}
		s.Drain(take)
	}
	s.Start(0)
	s.Drain(take)
	for range 20 {
		advance()
	}
	for n := range sc.packets {
		if sc.attack != nil {
			sc.attack(p, g, s, rng, n)
			s.Drain(take)
		}
		pkt := packet(psn.PSN(n), 40+rng.IntN(60))
		s.Observe(g.now, pkt)
		if rng.Float64() >= sc.loss {
			g.exec(p, func(q *fuzzProg) { q.sourceRef(pkt, ref(s.FlowID())) })
		}
		advance()
	}
	for range 100 {
		advance()
	}
	return p.bytes()
}
