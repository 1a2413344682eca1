package crf

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// logCount is a slog.Handler that counts the records it gets, by message.
type logCount struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *logCount) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCount) Handle(_ context.Context, rec slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	h.n[rec.Message]++
	return nil
}
func (h *logCount) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logCount) WithGroup(string) slog.Handler      { return h }
func (h *logCount) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.n {
		n += c
	}
	return n
}

// helloAck sends HELLO h from from and returns the Flow ID of the HELLO_ACK that answers it (0:
// none), checking that any answer goes to from.
func helloAck(t *testing.T, r *Receiver, now time.Duration, from netip.AddrPort, h wire.Hello) uint32 {
	t.Helper()
	r.Handle(now, from, msg(t, &h), false)
	var id uint32
	r.Drain(func(d flow.Datagram) {
		m, err := wire.Parse(d.Payload)
		if err != nil {
			t.Fatalf("a datagram that does not parse: %v", err)
		}
		if d.To != from {
			t.Fatalf("%T sent to %v, the HELLO came from %v", m, d.To, from)
		}
		if a, ok := m.(*wire.HelloAck); ok && a.SenderNonce == h.SenderNonce {
			id = a.FlowID
		}
	})
	return id
}

// configure sends PARAM_UPDATE of cfg8 for flow id from from; true when it was accepted.
func configure(t *testing.T, r *Receiver, now time.Duration, from netip.AddrPort, id uint32) bool {
	t.Helper()
	pu := wire.ParamUpdate{FlowID: id, ConfigID: cfg8.ID, Scheme: cfg8.Scheme, K: uint8(cfg8.K), M: uint8(cfg8.M), T: uint16(cfg8.T)}
	r.Handle(now, from, msg(t, &pu), false)
	for _, m := range drainMsgs(r) {
		if a, ok := m.(*wire.ParamAck); ok && a.FlowID == id && a.Status == wire.StatusAccepted {
			return true
		}
	}
	return false
}

// restores has flow id lose the second source of the block at start and checks that REPAIR
// from from restores it.
func restores(t *testing.T, r *Receiver, now time.Duration, from netip.AddrPort, id uint32, start psn.PSN) bool {
	t.Helper()
	b := newBlock(start, 8)
	for j, p := range b.pkts {
		if j != 1 {
			r.Observe(now, id, p, false)
		}
	}
	r.Handle(now, from, b.repair(t, id, 0, psn.Bitmap{}, 0), false)
	drainMsgs(r)
	for _, d := range drainDel(r) {
		if d.Kind == Restored && d.PSN == start.Add(1) && string(d.Packet) == string(b.pkts[1]) {
			return true
		}
	}
	return false
}

// TestHelloTakeover (draft, Session; C3, C14; E53): a HELLO with an established flow's
// descriptor from another address, with its nonce or another, is refused silently, counted and
// logged once, and the flow goes on restoring; one from the flow's own address with a new nonce
// opens a pending session that replaces the flow only when its first message proves it (a
// restarted CSF), and expires otherwise, leaving the flow as it was. Retransmitted HELLOs get
// the same HELLO_ACK throughout (C3).
func TestHelloTakeover(t *testing.T) {
	var logs logCount
	r := newReceiver(t, Settings{}, WithLogger(slog.New(&logs)))
	id := open(t, r, 0, cfg8)
	if !restores(t, r, time.Millisecond, testCSF, id, 0x100) {
		t.Fatal("no restoration before the attack")
	}
	spoof := netip.MustParseAddrPort("10.9.9.9:50000")
	for i, n := range []uint64{42, 43, 44} { // the flow's own nonce, then others
		h := hello(n)
		if got := helloAck(t, r, 2*time.Millisecond, spoof, h); got != 0 {
			t.Fatalf("HELLO %d from another address answered with Flow ID %#x", i, got)
		}
	}
	st := r.Stats()
	if st.TakeoverRefused != 3 || len(r.Flows()) != 1 || r.Flows()[0] != id || logs.total() != 1 {
		t.Fatalf("takeover: %d refused, flows %x, %d log lines", st.TakeoverRefused, r.Flows(), logs.total())
	}
	if k, _ := r.Lookup(testFlow.Key()); k != id {
		t.Fatalf("Lookup gives %#x, the flow is %#x", k, id)
	}
	if !restores(t, r, 3*time.Millisecond, testCSF, id, 0x108) {
		t.Fatal("no restoration after HELLOs from another address")
	}
	// C3: the flow's own HELLO again gets the same HELLO_ACK.
	if got := helloAck(t, r, 4*time.Millisecond, testCSF, hello(42)); got != id {
		t.Fatalf("retransmitted HELLO answered with %#x, want %#x", got, id)
	}

	// From the bound address with a new nonce: a pending session; unproven, it expires and the
	// flow is untouched.
	pend := helloAck(t, r, 5*time.Millisecond, testCSF, hello(77))
	if pend == 0 || pend == id || r.Stats().HandshakesRestart != 1 {
		t.Fatalf("HELLO from the bound address with a new nonce: Flow ID %#x, %+v", pend, r.Stats())
	}
	if again := helloAck(t, r, 6*time.Millisecond, testCSF, hello(77)); again != pend {
		t.Fatalf("its retransmission answered with %#x, want %#x (C3)", again, pend)
	}
	if !restores(t, r, 7*time.Millisecond, testCSF, id, 0x110) {
		t.Fatal("no restoration while a new session is pending")
	}
	now := 7 * time.Millisecond
	for end := now + defaultHandshake; ; {
		d, ok := r.NextDeadline()
		if !ok || d > end {
			break
		}
		now = d
		r.Tick(d)
		drainMsgs(r)
		r.Observe(now, id, packet(0x200, 100), false) // the flow stays active
	}
	if st := r.Stats(); st.HandshakesExpired != 1 || st.FlowsRestarted != 0 || len(r.Flows()) != 1 {
		t.Fatalf("unproven session from the bound address: %+v, flows %x", st, r.Flows())
	}
	if configure(t, r, now, testCSF, pend) {
		t.Fatal("an expired session configured")
	}

	// A restart: the new session's first message from the bound address replaces the flow.
	now += time.Millisecond
	nid := helloAck(t, r, now, testCSF, hello(88))
	if nid == 0 || !configure(t, r, now+time.Millisecond, testCSF, nid) {
		t.Fatal("restarted CSF not served")
	}
	if st := r.Stats(); st.FlowsRestarted != 1 || len(r.Flows()) != 1 || r.Flows()[0] != nid {
		t.Fatalf("restart: %+v, flows %x", st, r.Flows())
	}
	if k, _ := r.Lookup(testFlow.Key()); k != nid {
		t.Fatalf("Lookup after the restart gives %#x, want %#x", k, nid)
	}
	unknown := r.Stats().UnknownFlow
	r.Handle(now, testCSF, newBlock(0x300, 8).repair(t, id, 0, psn.Bitmap{}, 0), false)
	if r.Stats().UnknownFlow != unknown+1 {
		t.Fatal("the replaced flow's REPAIR was taken")
	}
	if !restores(t, r, now+2*time.Millisecond, testCSF, nid, 0x1000) {
		t.Fatal("no restoration after the restart")
	}
	if got := helloAck(t, r, now+3*time.Millisecond, testCSF, hello(88)); got != nid {
		t.Fatalf("the restarted session's HELLO again: %#x, want %#x (C3)", got, nid)
	}
}

// TestHelloFirstProofWins (draft, Session; C3; E53): sessions of one descriptor begun
// from two addresses before either proved itself (one spoofed by someone who guessed the
// descriptor) do not block each other; the first to send its PARAM_UPDATE gets the flow, the
// other is superseded, and its later messages find no flow. Lookup gives the oldest pending
// session, and what it noted goes to the flow (E52).
func TestHelloFirstProofWins(t *testing.T) {
	r := newReceiver(t, Settings{})
	spoof := netip.MustParseAddrPort("10.9.9.9:50000")
	fake := helloAck(t, r, 0, spoof, hello(1))
	real := helloAck(t, r, time.Millisecond, testCSF, hello(42))
	if fake == 0 || real == 0 || fake == real || len(r.Flows()) != 0 {
		t.Fatalf("two pending sessions: %#x %#x, flows %x", fake, real, r.Flows())
	}
	if k, _ := r.Lookup(testFlow.Key()); k != fake {
		t.Fatalf("Lookup before any proof: %#x, want the oldest %#x", k, fake)
	}
	r.Observe(time.Millisecond, fake, packet(0x50, 100), false)
	if !configure(t, r, 2*time.Millisecond, testCSF, real) {
		t.Fatal("the real session not configured")
	}
	st := r.Stats()
	if st.FlowsOpened != 1 || st.HandshakesSuperseded != 1 || len(r.Flows()) != 1 || r.Flows()[0] != real {
		t.Fatalf("%+v, flows %x", st, r.Flows())
	}
	if f := r.flows[real]; !f.havePre || f.preHigh != 0x50 || !f.active {
		t.Fatal("what went by before the proof was lost")
	}
	if configure(t, r, 3*time.Millisecond, spoof, fake) {
		t.Fatal("the superseded session configured")
	}
	// A session from elsewhere still pending when the flow is established is refused at its
	// first message; the flow stays.
	r2 := newReceiver(t, Settings{})
	other := helloAck(t, r2, 0, spoof, hello(1))
	mine := helloAck(t, r2, 0, testCSF, hello(42))
	if !configure(t, r2, time.Millisecond, testCSF, mine) {
		t.Fatal("not configured")
	}
	r2.pend.add(&pending{id: other, key: testFlow.Key(), from: spoof, src: spoof.Addr(), nonce: 1, at: 0})
	if configure(t, r2, 2*time.Millisecond, spoof, other) || r2.Stats().HandshakesRefused != 1 || r2.Flows()[0] != mine {
		t.Fatalf("a session from elsewhere took the flow: %+v", r2.Stats())
	}
}

// TestPendingClosedAndFull (C2, C3; E54): a pending session closed by its CSF never
// becomes a flow; one proven when the flow table is full gets CLOSE reason 3 (resources
// exhausted) at the proven address.
func TestPendingClosedAndFull(t *testing.T) {
	r := newReceiver(t, Settings{}, WithMaxFlows(1))
	a := helloAck(t, r, 0, testCSF, hello(1))
	h := hello(2)
	h.FlowLabel = 0x12
	b := helloAck(t, r, 0, testCSF, h)
	c := wire.Close{FlowID: a, Reason: wire.ReasonNormal}
	r.Handle(0, netip.MustParseAddrPort("10.9.9.9:1"), msg(t, &c), false)
	if _, ok := r.FlowStats(a); !ok {
		t.Fatal("a CLOSE from elsewhere closed a pending session")
	}
	r.Handle(0, testCSF, msg(t, &c), false)
	if _, ok := r.FlowStats(a); ok || r.Stats().HandshakesClosed != 1 || len(r.Flows()) != 0 {
		t.Fatalf("CLOSE of a pending session: %+v", r.Stats())
	}
	h3 := hello(3)
	h3.FlowLabel = 0x13
	d := helloAck(t, r, 0, testCSF, h3)
	if !configure(t, r, time.Millisecond, testCSF, b) {
		t.Fatal("not configured")
	}
	pu := wire.ParamUpdate{FlowID: d, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, M: 1, T: testT}
	r.Handle(time.Millisecond, testCSF, msg(t, &pu), false)
	ms := drainMsgs(r)
	if len(ms) != 1 || ms[0].(*wire.Close).Reason != wire.ReasonResourcesExhausted || r.Stats().HandshakesRefused != 1 {
		t.Fatalf("a session proven with the table full: %+v, %+v", ms, r.Stats())
	}
}

// TestIdleWithoutTraffic (C15; E54): a flow that has seen no source and no REPAIR since
// its handshake idles out after the handshake time, not the idle timeout; one that has, after
// the idle timeout.
func TestIdleWithoutTraffic(t *testing.T) {
	for _, traffic := range []bool{false, true} {
		r := newReceiver(t, Settings{}, WithHandshakes(16, 16, time.Second))
		id := open(t, r, 0, cfg8)
		if traffic {
			r.Observe(0, id, packet(0x10, 100), false)
		}
		var closedAt time.Duration
		for d, ok := r.NextDeadline(); ok && closedAt == 0; d, ok = r.NextDeadline() {
			r.Tick(d)
			for _, m := range drainMsgs(r) {
				if c, ok := m.(*wire.Close); ok && c.Reason == wire.ReasonIdle {
					closedAt = d
				}
			}
		}
		want := time.Second
		if traffic {
			want = 30 * time.Second
		}
		if closedAt != want {
			t.Fatalf("traffic %v: idle CLOSE at %v, want %v", traffic, closedAt, want)
		}
	}
}

// floodHello returns a HELLO with a random descriptor and nonce.
func floodHello(rng *rand.Rand) wire.Hello {
	h := hello(rng.Uint64())
	h.Source = netip.AddrFrom4([4]byte{10, byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))})
	h.FlowLabel = rng.Uint32() & 0xffffff
	return h
}

// TestPendingBudgets (C3; E54): pending sessions are bounded in all and per source
// address: beyond a budget the oldest is evicted, unless it is younger than the initial RTT,
// when the new HELLO is refused (silently, counted, logged once); every pending session expires
// after the handshake time, and with the last one every table entry it made.
func TestPendingBudgets(t *testing.T) {
	var logs logCount
	r := newReceiver(t, Settings{}, WithHandshakes(64, 8, time.Second), WithInitialRTT(10*time.Millisecond),
		WithLogger(slog.New(&logs)))
	rng := rand.New(rand.NewPCG(1, 2))
	one := netip.MustParseAddrPort("10.8.8.8:4000")
	// One source, faster than the grace: eight pending, the rest refused.
	for i := range 20 {
		r.Handle(time.Duration(i)*100*time.Microsecond, one, msg(t, new(floodHello(rng))), false)
	}
	drainMsgs(r)
	if st := r.Stats(); st.HandshakesOpened != 8 || st.HelloBusy != 12 || r.pend.all.n != 8 {
		t.Fatalf("one source: %+v", st)
	}
	// Past the grace its oldest make room.
	r.Handle(20*time.Millisecond, one, msg(t, new(floodHello(rng))), false)
	if st := r.Stats(); st.HandshakesEvicted != 1 || r.pend.bySrc[one.Addr()].n != 8 {
		t.Fatalf("after the grace: %+v", st)
	}
	// Many sources: the table holds 64.
	now := 30 * time.Millisecond
	for i := range 1000 {
		now += 50 * time.Microsecond
		from := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, byte(i >> 8), byte(i)}), 4000)
		r.Handle(now, from, msg(t, new(floodHello(rng))), false)
		drainMsgs(r)
		if r.pend.all.n > 64 || len(r.pend.byID) > 64 || len(r.pend.byHello) > 64 || len(r.pend.bySrc) > 64 || len(r.pend.byKey) > 64 {
			t.Fatalf("pending tables beyond their bound: %d %d %d %d %d", r.pend.all.n, len(r.pend.byID), len(r.pend.byHello), len(r.pend.bySrc), len(r.pend.byKey))
		}
	}
	if logs.total() != 1 {
		t.Fatalf("%d log lines for one flood", logs.total())
	}
	r.Tick(now + time.Second)
	if r.pend.all.n != 0 || len(r.pend.byID)+len(r.pend.byHello)+len(r.pend.bySrc)+len(r.pend.byKey) != 0 {
		t.Fatal("pending sessions outlive the handshake time")
	}
	st := r.Stats()
	if st.HandshakesOpened != st.HandshakesEvicted+st.HandshakesExpired || st.HelloReceived != st.HandshakesOpened+st.HelloBusy {
		t.Fatalf("counters do not add up: %+v", st)
	}
}

// TestFlowStatsOnlyCounters: FlowStats holds uint64 counters only, so that add can sum it as an
// array.
func TestFlowStatsOnlyCounters(t *testing.T) {
	ty := reflect.TypeFor[FlowStats]()
	for i := range ty.NumField() {
		if f := ty.Field(i); f.Type.Kind() != reflect.Uint64 {
			t.Fatalf("FlowStats.%s is %v", f.Name, f.Type)
		}
	}
	if ty.NumField() != flowCounters {
		t.Fatalf("%d fields, %d counters", ty.NumField(), flowCounters)
	}
	var a, b FlowStats
	reflect.ValueOf(&b).Elem().Field(ty.NumField() - 1).SetUint(3)
	b.Sources = 2
	a.add(&b)
	a.add(&b)
	if a.Sources != 4 || reflect.ValueOf(a).Field(ty.NumField()-1).Uint() != 6 {
		t.Fatalf("%+v", a)
	}
}

// forge returns REPAIR message rep with its symbol's bytes replaced: what someone at the CSF's
// address who does not know the data sends.
func forge(rep []byte, seed byte) []byte {
	out := append([]byte(nil), rep...)
	for i := 48; i < len(out); i++ {
		out[i] = byte(i*31) ^ seed
	}
	return out
}

// restoredAll reports whether every PSN of want was delivered restored with the right bytes,
// and fails the test on any delivery with other bytes (C12).
func restoredAll(t *testing.T, ds []Delivery, b *block, want ...int) bool {
	t.Helper()
	got := map[psn.PSN]bool{}
	for _, d := range ds {
		j := int(b.start.Forward(d.PSN))
		if d.Kind == Restored {
			if j >= len(b.pkts) || string(d.Packet) != string(b.pkts[j]) {
				t.Fatalf("PSN %v delivered with wrong bytes", d.PSN)
			}
			got[d.PSN] = true
		}
	}
	for _, j := range want {
		if !got[b.start.Add(j)] {
			return false
		}
	}
	return true
}

// TestForgedRepairFirst (C7 d, C7 e, C12; E56): a forged REPAIR from the CSF's address
// that arrives before the genuine one no longer costs the block: the solve's packets fail the
// ICRC check and are not delivered, and the block solves again with the genuine symbol, a
// second version of the same Repair Index, a surplus symbol, or a genuine Source Copy. Every
// outcome is counted.
func TestForgedRepairFirst(t *testing.T) {
	type step struct {
		idx   int  // Repair Index, or the position of a Source Copy
		forge bool // its bytes are not the CSF's
		sc    bool // a Source Copy
		last  bool // the LAST of the round
	}
	cases := []struct {
		name  string
		lost  []int
		steps []step
		want  func(st FlowStats) bool
	}{
		{"same index, forged first", []int{1}, []step{{0, true, false, false}, {0, false, false, false}},
			func(st FlowStats) bool {
				return st.RepairConflict == 1 && st.SolveRetries == 1 && st.BlocksRescued == 1
			}},
		{"two lost, forged first", []int{1, 5}, []step{{0, true, false, false}, {1, false, false, false}, {0, false, false, false}},
			func(st FlowStats) bool {
				return st.RepairConflict == 1 && st.BlocksRescued == 1 && st.ICRCMismatch == 2
			}},
		{"forged unused index, surplus genuine", []int{2, 6}, []step{{7, true, false, false}, {0, false, false, false}, {1, false, false, true}},
			func(st FlowStats) bool { return st.BlocksRescued == 1 && st.RepairConflict == 0 }},
		{"forged Source Copy", []int{3}, []step{{3, true, true, false}, {3, false, true, false}},
			func(st FlowStats) bool { return st.SourceCopyMismatch == 1 && st.RestoredSourceCopy == 1 }},
	}
	for _, c := range cases {
		r := newReceiver(t, Settings{})
		id := open(t, r, 0, cfg8)
		b := newBlock(0x100, 8)
		lost := map[int]bool{}
		for _, j := range c.lost {
			lost[j] = true
		}
		for j, p := range b.pkts {
			if !lost[j] {
				r.Observe(time.Millisecond, id, p, false)
			}
		}
		var ds []Delivery
		for i, s := range c.steps {
			var rep []byte
			if s.sc {
				sym := b.syms[s.idx]
				if s.forge { // a well-formed symbol of a packet that is not the source
					p := append([]byte(nil), b.pkts[s.idx]...)
					p[20] ^= 1
					sym, _ = fec.AppendSymbol(nil, p, testT)
				}
				m := wire.Repair{FlowID: id, ConfigID: 1, Scheme: wire.SchemeSourceCopy, K: 8, RepairIndex: uint8(s.idx),
					BlockStartPSN: b.start, Present: psn.FirstK(8), Symbol: sym}
				rep = msg(t, &m)
			} else {
				rep = b.repair(t, id, s.idx, psn.Bitmap{}, 0)
				if s.forge {
					rep = forge(rep, byte(i))
				}
			}
			if s.last {
				m, _ := wire.ParseRepair(rep)
				m.Last = true
				rep = msg(t, &m)
			}
			r.Handle(time.Millisecond+time.Duration(i)*10*time.Microsecond, testCSF, rep, false)
			ds = append(ds, drainDel(r)...)
			drainMsgs(r)
		}
		// The round ends (its timer) unanswered: the suspects are tried in other sets.
		for d, ok := r.NextDeadline(); ok && d < 5*time.Millisecond; d, ok = r.NextDeadline() {
			r.Tick(d)
			ds = append(ds, drainDel(r)...)
			drainMsgs(r)
		}
		st, _ := r.FlowStats(id)
		if !restoredAll(t, ds, b, c.lost...) || st.BlocksAbandoned != 0 || st.ICRCMismatch == 0 || !c.want(st) {
			t.Fatalf("%s: deliveries %+v\n%+v", c.name, ds, st)
		}
		if fp := r.Footprint(); fp.KeptSymbols != 0 {
			t.Fatalf("%s: %d symbols kept after the block ended", c.name, fp.KeptSymbols)
		}
	}
}

// TestForgedRepairAskedAgain (C7 f, C8, C12; E56): when every symbol a block holds has
// failed a solve, its request counts none of them as held (r = 0), and the coded retransmission
// that answers restores the block.
func TestForgedRepairAskedAgain(t *testing.T) {
	r := newReceiver(t, Settings{})
	id := open(t, r, 0, cfg8)
	b := newBlock(0x100, 8)
	for j := 2; j < 8; j++ {
		r.Observe(time.Millisecond, id, b.pkts[j], false)
	}
	r.Handle(time.Millisecond, testCSF, forge(b.repair(t, id, 0, psn.Bitmap{}, 0), 1), false)
	last, _ := wire.ParseRepair(forge(b.repair(t, id, 1, psn.Bitmap{}, 0), 2))
	last.Last = true
	r.Handle(time.Millisecond, testCSF, msg(t, &last), false)
	var req *wire.RepairRequest
	for _, x := range drainMsgs(r) {
		if q, ok := x.(*wire.RepairRequest); ok {
			req = q
		}
	}
	if req == nil || req.RepairsHeld != 0 || req.Lost.Count() != 2 || req.SuggestedM < 2 {
		t.Fatalf("request after a failed solve: %+v", req)
	}
	if ds := drainDel(r); len(ds) != 0 {
		t.Fatalf("delivered %+v", ds)
	}
	var ds []Delivery
	for i := range 2 {
		r.Handle(2*time.Millisecond, testCSF, b.repair(t, id, 2+i, req.Lost, req.RequestID), false)
		ds = append(ds, drainDel(r)...)
	}
	st, _ := r.FlowStats(id)
	if !restoredAll(t, ds, b, 0, 1) || st.BlocksRescued != 1 || st.ICRCMismatch != 2 {
		t.Fatalf("deliveries %+v\n%+v", ds, st)
	}
}

// TestTablesBounded (E55): every table a peer can grow has a bound and an expiry. Flows
// (with their order and key index) are bounded by WithMaxFlows and end at their idle time, the
// handshake time without traffic; the decoders and symbol buffers kept for reuse are bounded
// however many blocks decoded at once; a block keeps a bounded number of repair symbols however
// many arrive, and none once it ends. (Pending sessions: TestPendingBudgets.)
func TestTablesBounded(t *testing.T) {
	r := newReceiver(t, Settings{}, WithMaxFlows(8), WithHandshakes(64, 64, 500*time.Millisecond))
	for i := range 20 {
		from := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}), 5000)
		h := hello(uint64(i + 1))
		h.FlowLabel = uint32(0x100 + i)
		if id := helloAck(t, r, 0, from, h); id != 0 {
			configure(t, r, time.Millisecond, from, id)
		}
	}
	if len(r.flows) != 8 || len(r.order) != 8 || len(r.byKey) != 8 {
		t.Fatalf("flows %d, order %d, byKey %d; bound 8", len(r.flows), len(r.order), len(r.byKey))
	}
	r.Tick(time.Second)
	drainMsgs(r)
	if len(r.flows)+len(r.order)+len(r.byKey)+r.pend.all.n+len(r.pend.byID) != 0 {
		t.Fatalf("after the handshake time without traffic: flows %d, order %d, byKey %d, pending %d", len(r.flows), len(r.order), len(r.byKey), r.pend.all.n)
	}

	// Decoders and symbol buffers: 3 flows x 40 blocks decoding at once, then all complete.
	l := flow.DefaultLimits()
	l.MaxOpenBlocks = 64
	r = newReceiver(t, Settings{}, WithLimits(l))
	var ids []uint32
	for i := range 3 {
		h := hello(uint64(i + 1))
		h.FlowLabel = uint32(0x11 + i)
		id := helloAck(t, r, 0, testCSF, h)
		if !configure(t, r, 0, testCSF, id) {
			t.Fatal("not configured")
		}
		ids = append(ids, id)
	}
	blocks := map[uint32][]*block{}
	for _, id := range ids {
		for n := range 40 {
			b := newBlock(psn.PSN(8*n), 8)
			for j := 2; j < 8; j++ {
				r.Observe(time.Millisecond, id, b.pkts[j], false) // (the test's packets carry QP 0x11: the checks do not need it)
			}
			r.Handle(time.Millisecond, testCSF, b.repair(t, id, 0, psn.Bitmap{}, 0), false)
			blocks[id] = append(blocks[id], b)
		}
	}
	if fp := r.Footprint(); fp.Decoders < 100 || fp.KeptSymbols != 120 {
		t.Fatalf("while decoding: %+v", fp)
	}
	for _, id := range ids {
		for _, b := range blocks[id] {
			r.Handle(2*time.Millisecond, testCSF, b.repair(t, id, 1, psn.Bitmap{}, 0), false)
		}
	}
	drainDel(r)
	drainMsgs(r)
	if st := r.Stats().Flows; st.BlocksDecoded != 120 || st.ICRCMismatch != 0 {
		t.Fatalf("%+v", st)
	}
	if fp := r.Footprint(); fp.Decoders > maxPooledDecoders || fp.KeptSymbols != 0 || len(r.syms) > maxSpareSym {
		t.Fatalf("after decoding: %+v, %d symbol buffers", fp, len(r.syms))
	}

	// One block, a flood of REPAIRs with distinct indices and wrong bytes.
	r = newReceiver(t, Settings{})
	id := open(t, r, 0, cfg8)
	b := newBlock(0x100, 8)
	for j := 3; j < 8; j++ {
		r.Observe(time.Millisecond, id, b.pkts[j], false)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 600 {
		m := wire.Repair{FlowID: id, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, RepairIndex: uint8(rng.IntN(200)),
			BlockStartPSN: b.start, Present: psn.FirstK(8), Symbol: make([]byte, testT)}
		for k := range m.Symbol {
			m.Symbol[k] = byte(rng.Uint32())
		}
		r.Handle(time.Millisecond+time.Duration(i)*time.Microsecond, testCSF, msg(t, &m), false)
		if ds := drainDel(r); len(ds) != 0 {
			t.Fatalf("delivered %+v", ds)
		}
		f := r.flows[id]
		for k := range f.blocks {
			if bb := &f.blocks[k]; len(bb.cands) > keepLimit(bb) {
				t.Fatalf("%d symbols kept, bound %d", len(bb.cands), keepLimit(bb))
			}
		}
	}
	st, _ := r.FlowStats(id)
	if st.RepairNotKept == 0 || st.Restored != 0 || st.SolveRetries > maxSolves {
		t.Fatalf("%+v", st)
	}
	// Genuine symbols come too (the solves may be spent): whatever the block does, it ends
	// holding nothing.
	for i := range 3 {
		r.Handle(2*time.Millisecond, testCSF, b.repair(t, id, 240+i, psn.Bitmap{}, 0), false)
	}
	drainDel(r)
	for d, ok := r.NextDeadline(); ok && d < time.Second; d, ok = r.NextDeadline() {
		r.Tick(d)
		drainMsgs(r)
		drainDel(r)
	}
	if fp := r.Footprint(); fp.KeptSymbols != 0 {
		t.Fatalf("the block ended holding %d symbols", fp.KeptSymbols)
	}
}

// TestRestartDeliversHold (C7 a; E53): when a restarted CSF's session replaces an
// ordered flow, the packets the old flow held after a gap are delivered first, not dropped.
func TestRestartDeliversHold(t *testing.T) {
	r := newReceiver(t, Settings{Ordered: true})
	id := open(t, r, 0, cfg8)
	b := newBlock(0x100, 8)
	for j, p := range b.pkts {
		if j != 2 {
			r.Observe(time.Millisecond, id, p, false)
		}
	}
	if ds := drainDel(r); len(ds) != 0 {
		t.Fatalf("released before the gap ended: %+v", ds)
	}
	nid := helloAck(t, r, 2*time.Millisecond, testCSF, hello(99))
	if !configure(t, r, 3*time.Millisecond, testCSF, nid) || r.Stats().FlowsRestarted != 1 {
		t.Fatal("no restart")
	}
	n := 0
	for _, d := range drainDel(r) {
		if d.Kind == Received && d.Flow == id {
			n++
		}
	}
	if n != 5 {
		t.Fatalf("%d of the 5 held packets delivered at the restart", n)
	}
}
