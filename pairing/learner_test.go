package pairing

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// must returns an encoded MAD, or panics: the tests' messages are valid.
func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// cmPacket is a CM MAD to QP 1.
func cmPacket(t testing.TB, mad []byte) []byte {
	t.Helper()
	b, err := roce.AppendGSIPacket(nil, 0xffff, 0, mad)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCMPairsBothDirections (C9): a ConnectRequest leaving and its ConnectReply passing
// back pair both directions of the connection at once: the flow to the responder's QP with the
// requester's QP, the flow to the requester's QP with the responder's. ACKs of either are
// offered to their flow from the first one; an ACK of a third QP to nobody.
func TestCMPairsBothDirections(t *testing.T) {
	x := newLearner(t, nil)
	const reqQP, repQP, other = 0x000123, 0x000456, 0x000789
	x.Forward(0, hostA, hostB, cmPacket(t, must(roce.CMReq{LocalCommID: 77, LocalQPN: reqQP, StartingPSN: 0xfffffe}.AppendMAD(nil, 5))))
	if evs := events(x); len(evs) != 0 {
		t.Fatalf("a REQ alone pairs nothing: %+v", evs)
	}
	// A REP of another connection (another Communication ID) pairs nothing.
	x.Reverse(time.Millisecond, hostB, hostA, cmPacket(t, must(roce.CMRep{LocalCommID: 9, RemoteCommID: 78, LocalQPN: repQP}.AppendMAD(nil, 5))))
	if evs := events(x); len(evs) != 0 || x.Stats().CMUnmatched != 1 {
		t.Fatalf("an unmatched REP: %+v %+v", evs, x.Stats())
	}
	x.Reverse(time.Millisecond, hostB, hostA, cmPacket(t, must(roce.CMRep{LocalCommID: 9, RemoteCommID: 77, LocalQPN: repQP, StartingPSN: 0x10}.AppendMAD(nil, 5))))
	evs := events(x)
	ab := flow.Key{Src: hostA, Dst: hostB, DestQP: repQP}
	ba := flow.Key{Src: hostB, Dst: hostA, DestQP: reqQP}
	if len(evs) != 2 || evs[0] != (Event{Kind: Paired, Flow: ab, ReverseQP: reqQP, By: ByCM}) ||
		evs[1] != (Event{Kind: Paired, Flow: ba, ReverseQP: repQP, By: ByCM}) {
		t.Fatalf("events %+v", evs)
	}
	// Data from the REQ's Starting PSN across the wrap; the first ACK is offered.
	for i := range 4 {
		x.Forward(2*time.Millisecond, hostA, hostB, write(repQP, psn.PSN(0xfffffe).Add(i)))
	}
	if k, ok := x.Reverse(3*time.Millisecond, hostB, hostA, ack(reqQP, 0xffffff)); !ok || k != ab {
		t.Fatalf("the first ACK: %v %v", k, ok)
	}
	if _, ok := x.Reverse(3*time.Millisecond, hostB, hostA, ack(other, 0x000001)); ok {
		t.Fatal("an ACK of another QP was offered to a flow")
	}
	// The other direction: the responder's requests from the REP's Starting PSN.
	x.Forward(4*time.Millisecond, hostB, hostA, write(reqQP, 0x10))
	if k, ok := x.Reverse(5*time.Millisecond, hostA, hostB, ack(repQP, 0x10)); !ok || k != ba {
		t.Fatalf("the other direction's ACK: %v %v", k, ok)
	}
	if st := x.Stats(); st.PairedByCM != 2 || st.CMRequests != 1 || st.CMReplies != 2 || st.PairedByCorrelation != 0 {
		t.Fatalf("stats %+v", st)
	}
	// A UC connection has no ACKs to pair.
	x.Forward(0, hostA, hostB, cmPacket(t, must(roce.CMReq{LocalCommID: 80, LocalQPN: 0x999, TransportService: roce.CMTransportUC}.AppendMAD(nil, 6))))
	if x.Stats().CMNotRC != 1 {
		t.Fatalf("a UC REQ: %+v", x.Stats())
	}
}

// TestCorrelationManyQPsAnyPSN (C9): 24 QPs between one pair of hosts, initial PSNs drawn
// over the whole 24-bit space (a few just below the wrap), requests and cumulative ACKs
// interleaved at random. No ACK is ever offered to another flow than its own; none before
// Confirm ACKs of its QP were seen; every flow is paired with its own reverse QP.
func TestCorrelationManyQPsAnyPSN(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		x := newLearner(t, nil)
		w := newWorkload(t, x, seed, 24, func(i int, r *rand.Rand) psn.PSN {
			if i < 3 {
				return psn.PSN(0xffffff - uint32(i)*5) // across the wrap
			}
			return psn.PSN(r.Uint32N(psn.Modulus))
		})
		for range 4000 {
			w.step()
		}
		if !w.pairedAll() {
			st := x.Stats()
			t.Fatalf("seed %d: not every flow paired after 4000 steps: %+v", seed, st)
		}
		for _, q := range w.qps {
			if w.firstOK[q.rev] < DefaultLimits().Confirm {
				t.Fatalf("seed %d: QP %#x offered after %d responses, want at least %d", seed, q.rev, w.firstOK[q.rev], DefaultLimits().Confirm)
			}
		}
		if st := x.Stats(); st.PairedByCorrelation != 24 || st.Strikes != 0 || st.Contradictions != 0 {
			t.Fatalf("seed %d: stats %+v", seed, st)
		}
	}
}

// TestCorrelationOverlappingRanges (C9): two flows whose PSN ranges overlap (initial
// PSNs 3 apart, the same pace, ACKs lagging by 5): every ACK lies in both ranges and counts for
// neither, so none is offered to any flow; once one flow runs ahead, its ACKs beyond the other's
// range pair it, and the other is then paired by elimination (its ACKs can belong to no other
// unpaired flow). No ACK is ever offered to the wrong flow.
func TestCorrelationOverlappingRanges(t *testing.T) {
	x := newLearner(t, nil)
	const s0 = psn.PSN(0xfffff0) // across the wrap as well
	w := newWorkload(t, x, 7, 2, func(i int, _ *rand.Rand) psn.PSN { return s0.Add(3 * i) })
	a, b := w.qps[0], w.qps[1]
	w.send(a, 8)
	w.send(b, 8)
	for range 200 {
		w.send(a, 1)
		w.send(b, 1)
		w.deliver(a, ack(a.rev, a.next.Add(-5)))
		w.deliver(b, ack(b.rev, b.next.Add(-5)))
		w.now += time.Microsecond
	}
	if len(w.right) != 0 {
		t.Fatalf("ACKs offered while every one was in both ranges: %v", w.right)
	}
	if st := x.Stats(); st.Ambiguous != 400 || st.PairedByCorrelation != 0 {
		t.Fatalf("stats %+v", st)
	}
	// b runs ahead by 100 requests; its ACKs beyond a's range are b's alone.
	w.send(b, 100)
	for i := range 20 {
		w.deliver(b, ack(b.rev, b.next.Add(-50+i)))
	}
	if rq, ok := x.ReverseQP(b.key()); !ok || rq != b.rev {
		t.Fatalf("b: %#x %v, want %#x", rq, ok, b.rev)
	}
	for range 20 {
		w.send(a, 1)
		w.deliver(a, ack(a.rev, a.next.Add(-1)))
	}
	if rq, ok := x.ReverseQP(a.key()); !ok || rq != a.rev {
		t.Fatalf("a: %#x %v, want %#x (stats %+v)", rq, ok, a.rev, x.Stats())
	}
	if w.wrong != 0 {
		t.Fatal("a response was offered to the wrong flow")
	}
}

// TestCorrelationFlood (C9, C15): a million ACKs and READ responses with random QPs and
// PSNs (half of them in the real flows' ranges) passing back while 16 real connections start: the tables stay within their bounds, no
// flood QP is ever paired, and the real flows still pair with their own QPs.
func TestCorrelationFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("a million packets")
	}
	l := DefaultLimits()
	x := newLearner(t, nil)
	const seed = 11
	w := newWorkload(t, x, seed, 16, func(int, *rand.Rand) psn.PSN { return 0 })
	for _, q := range w.qps {
		q.next = psn.PSN(w.rng.Uint32N(psn.Modulus))
		q.acked = q.next.Add(-1)
	}
	real := map[uint32]bool{}
	for _, q := range w.qps {
		real[q.rev] = true
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	ops := []roce.Opcode{roce.OpAcknowledge, roce.OpReadResponseOnly, roce.OpReadResponseMiddle, roce.OpAtomicAcknowledge}
	maxRev := 0
	for i := range 1_000_000 {
		qp := rng.Uint32N(1 << 24)
		if real[qp] {
			continue
		}
		p := psn.PSN(rng.Uint32N(psn.Modulus))
		if i%2 == 0 {
			// In a real flow's range: the flood then enters candidates, and evicts them.
			q := w.qps[rng.IntN(len(w.qps))]
			p = q.next.Add(-1 - rng.IntN(64))
		}
		k, ok := x.Reverse(w.now, hostB, hostA, bth(ops[rng.IntN(len(ops))], qp, p))
		if ok {
			t.Fatalf("seed %d: flood packet %d (QP %#x) offered to flow %#x", seed, i, qp, k.DestQP)
		}
		switch {
		case i%50 != 0:
		case i < 500_000:
			// The first half: the flows send, nothing answers them; the flood alone passes back.
			w.send(w.qps[rng.IntN(len(w.qps))], 4)
		default:
			w.step() // then the real responses come, among the flood
		}
		if i == 499_999 && x.Stats().ProbationEvicted == 0 {
			t.Fatalf("the flood evicted no candidate: %+v", x.Stats())
		}
		if i%100_000 == 0 {
			x.Expire(w.now)
		}
		_, rev, _ := x.Tables()
		maxRev = max(maxRev, rev)
	}
	for range 4000 {
		w.step()
	}
	if bound := l.MaxProbation + l.MaxCandidates + 16; maxRev > bound {
		t.Fatalf("reverse table reached %d entries, bound %d", maxRev, bound)
	}
	if !w.pairedAll() {
		t.Fatalf("the real flows did not all pair through the flood: %+v", x.Stats())
	}
	st := x.Stats()
	if st.PairedByCorrelation != 16 {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("largest reverse table %d; %+v", maxRev, st)
}

// TestStrayStreamNeverPairs (C9): one QP passing back a stream of PSNs unrelated to any
// flow (uniform over the space, or one spoofed ACK in a flow's range) is never paired: one
// packet cannot pair, and contradictions block the QP; so is a stream in one unpaired flow's
// range whose PSNs do not advance.
func TestStrayStreamNeverPairs(t *testing.T) {
	x := newLearner(t, nil)
	w := newWorkload(t, x, 3, 16, func(i int, _ *rand.Rand) psn.PSN { return psn.PSN(i) << 20 })
	for range 200 {
		w.step()
	}
	// Four flows whose responses never come (not paired: the stray's PSNs can land in their
	// ranges).
	for i := range 4 {
		for j := range 20000 {
			x.Forward(w.now, hostA, hostB, write(uint32(0x100+i), psn.PSN(0x800000+i<<20+j)))
		}
	}
	const stray = 0xabcdef
	// One spoofed ACK exactly in a flow's range pairs nothing.
	q := w.qps[0]
	if _, ok := x.Reverse(w.now, hostB, hostA, ack(stray, q.next.Add(-1))); ok {
		t.Fatal("one ACK paired a QP")
	}
	rng := rand.New(rand.NewPCG(3, 3))
	for i := range 100_000 {
		if k, ok := x.Reverse(w.now, hostB, hostA, ack(stray, psn.PSN(rng.Uint32N(psn.Modulus)))); ok {
			t.Fatalf("stray packet %d offered to flow %#x", i, k.DestQP)
		}
		if i%20 == 0 {
			w.step()
		}
	}
	if st := x.Stats(); st.Blocked == 0 || st.BlockedDropped == 0 {
		t.Fatalf("the stray QP was never blocked: %+v", st)
	}
	// Random PSNs in an unpaired flow's range, from another QP.
	for i := range 100_000 {
		p := psn.PSN(0x800000 + rng.IntN(20000))
		if k, ok := x.Reverse(w.now, hostB, hostA, ack(stray+1, p)); ok {
			t.Fatalf("in-range stray packet %d offered to flow %#x", i, k.DestQP)
		}
	}
}

// TestRestartRepairs (C9): a paired connection is set up again with a new initial PSN
// far from the old (a restarted QP): the flow is unpaired at its first request of the new
// space, late ACKs of the old connection are offered to nobody, and the flow is paired again
// after Confirm ACKs of the new connection, also when the requester's QP number changed.
func TestRestartRepairs(t *testing.T) {
	for _, newRev := range []bool{false, true} {
		x := newLearner(t, nil)
		w := newWorkload(t, x, 5, 4, func(i int, _ *rand.Rand) psn.PSN { return psn.PSN(0x100000 * (i + 1)) })
		for range 500 {
			w.step()
		}
		if !w.pairedAll() {
			t.Fatal("not paired before the restart")
		}
		events(x)
		q := w.qps[1]
		oldRev, oldNext := q.rev, q.next
		q.next, q.acked, q.sent = 0xf00000, 0xefffff, nil
		if newRev {
			q.rev = 0x00abcd
		}
		w.send(q, 4)
		evs := events(x)
		if len(evs) != 1 || evs[0].Kind != Unpaired || evs[0].Reason != ReasonRestart || evs[0].Flow != q.key() {
			t.Fatalf("newRev %v: events at the restart %+v", newRev, evs)
		}
		// Late ACKs of the old connection.
		for i := range 3 {
			if _, ok := x.Reverse(w.now, hostB, hostA, ack(oldRev, oldNext.Add(-3+i))); ok {
				t.Fatal("an ACK of the old connection was offered")
			}
		}
		for range 200 {
			w.send(q, 1)
			w.respond(q)
			w.step()
		}
		if rq, ok := x.ReverseQP(q.key()); !ok || rq != q.rev {
			t.Fatalf("newRev %v: after the restart paired with %#x %v, want %#x (%+v)", newRev, rq, ok, q.rev, x.Stats())
		}
		if x.Stats().UnpairedRestart != 1 || w.wrong != 0 {
			t.Fatalf("stats %+v", x.Stats())
		}
	}
}

// TestContradictionUnpairs (C9): a paired QP whose responses leave its flow's range is
// not offered them; Unpair of them in a row unpair it; fewer, between consistent ones, do not.
func TestContradictionUnpairs(t *testing.T) {
	x := newLearner(t, nil)
	w := newWorkload(t, x, 9, 2, func(i int, _ *rand.Rand) psn.PSN { return psn.PSN(0x200000 * (i + 1)) })
	for range 300 {
		w.step()
	}
	if !w.pairedAll() {
		t.Fatal("not paired")
	}
	q := w.qps[0]
	far := q.next.Add(0x400000)
	for range 5 {
		for range DefaultLimits().Unpair - 1 {
			if _, ok := x.Reverse(w.now, hostB, hostA, ack(q.rev, far)); ok {
				t.Fatal("a response outside the range was offered")
			}
		}
		w.send(q, 1)
		w.respond(q)
	}
	if rq, ok := x.ReverseQP(q.key()); !ok || rq != q.rev {
		t.Fatal("unpaired by contradictions that were not in a row")
	}
	for range DefaultLimits().Unpair {
		x.Reverse(w.now, hostB, hostA, ack(q.rev, far))
	}
	if _, ok := x.ReverseQP(q.key()); ok {
		t.Fatal("still paired after Unpair contradictions in a row")
	}
	if st := x.Stats(); st.UnpairedContradiction != 1 || st.Contradictions != uint64(5*(DefaultLimits().Unpair-1)+DefaultLimits().Unpair) {
		t.Fatalf("stats %+v", st)
	}
}

// TestReadResponsesPair (C9, C13): READ responses carry the READ request's PSNs; a 1 GiB
// READ (262,144 PSNs at MTU 4096, and up to 4 Mi at the smallest MTU) pairs its flow from
// its responses, which stay in range however long the READ.
func TestReadResponsesPair(t *testing.T) {
	x := newLearner(t, nil)
	const dest, rev = 0x51, 0x52
	k := flow.Key{Src: hostA, Dst: hostB, DestQP: dest}
	start := psn.PSN(0xfff000)
	x.Forward(0, hostA, hostB, read(dest, start, 1<<30))
	// Responses at MTU 1024 (more PSNs than the CSF's count at 4096).
	offered := 0
	for i := 0; i < 1<<20; i += 997 {
		if kk, ok := x.Reverse(time.Millisecond, hostB, hostA, bth(roce.OpReadResponseMiddle, rev, start.Add(i))); ok {
			if kk != k {
				t.Fatalf("offered to %v", kk)
			}
			offered++
		}
	}
	if rq, ok := x.ReverseQP(k); !ok || rq != rev || offered == 0 {
		t.Fatalf("READ responses: %#x %v, %d offered (%+v)", rq, ok, offered, x.Stats())
	}
	if x.Stats().Contradictions != 0 {
		t.Fatalf("contradictions %+v", x.Stats())
	}
	// The next request after the READ, at MTU 1024's count, is no restart.
	x.Forward(2*time.Millisecond, hostA, hostB, write(dest, start.Add(1<<20)))
	if x.Stats().Restarts != 0 {
		t.Fatal("the request after a READ at a smaller MTU was taken for a restart")
	}
}

// TestConfiguredPinned: a configured reverse QP is offered its flow's responses at once,
// without range checks, never unpaired, replaced or expired; CM does not override it.
func TestConfiguredPinned(t *testing.T) {
	x := newLearner(t, nil)
	k := flow.Key{Src: hostA, Dst: hostB, DestQP: 0x42}
	x.Configure(k, 0x43)
	if evs := events(x); len(evs) != 1 || evs[0].By != ByConfig || evs[0].ReverseQP != 0x43 {
		t.Fatalf("events %+v", evs)
	}
	for i := range 10 {
		if kk, ok := x.Reverse(time.Duration(i), hostB, hostA, ack(0x43, psn.PSN(i*0x100000))); !ok || kk != k {
			t.Fatal("a configured pairing checks ranges")
		}
	}
	x.Forward(0, hostA, hostB, cmPacket(t, must(roce.CMReq{LocalCommID: 1, LocalQPN: 0x99}.AppendMAD(nil, 1))))
	x.Reverse(0, hostB, hostA, cmPacket(t, must(roce.CMRep{RemoteCommID: 1, LocalQPN: 0x42}.AppendMAD(nil, 1))))
	x.Expire(time.Hour)
	if rq, ok := x.ReverseQP(k); !ok || rq != 0x43 || x.Stats().PinnedIgnored != 1 {
		t.Fatalf("after CM and an hour: %#x %v %+v", rq, ok, x.Stats())
	}
}

// TestExpiry (C15): flows, candidates, blocked QPs and REQs expire; a flow's pairing
// goes with it; the tables empty out and NextDeadline says when to sweep.
func TestExpiry(t *testing.T) {
	x := newLearner(t, nil)
	if _, ok := x.NextDeadline(); ok {
		t.Fatal("an empty learner has a deadline")
	}
	w := newWorkload(t, x, 2, 4, func(i int, _ *rand.Rand) psn.PSN { return psn.PSN(i << 21) })
	for range 300 {
		w.step()
	}
	if !w.pairedAll() {
		t.Fatal("not paired")
	}
	x.Forward(w.now, hostA, hostB, write(0x5555, 0x600000))
	x.Reverse(w.now, hostB, hostA, ack(0x777777, 0x600000)) // a candidate of that flow
	x.Forward(w.now, hostA, hostB, cmPacket(t, must(roce.CMReq{LocalCommID: 3, LocalQPN: 0x99}.AppendMAD(nil, 1))))
	events(x)
	d, ok := x.NextDeadline()
	if !ok || d > w.now {
		t.Fatalf("deadline %v %v", d, ok)
	}
	x.Expire(w.now)
	if flows, rev, pend := x.Tables(); flows != 5 || rev != 5 || pend != 1 {
		t.Fatalf("tables after a sweep at once: %d %d %d", flows, rev, pend)
	}
	l := DefaultLimits()
	x.Expire(w.now + l.FlowIdle + time.Second)
	if flows, rev, pend := x.Tables(); flows != 0 || rev != 0 || pend != 0 {
		t.Fatalf("tables after FlowIdle: %d %d %d", flows, rev, pend)
	}
	evs := events(x)
	if len(evs) != 4 || evs[0].Kind != Unpaired || evs[0].Reason != ReasonExpired {
		t.Fatalf("events %+v", evs)
	}
	if st := x.Stats(); st.FlowsExpired != 5 || st.CandidatesIdle != 1 || st.CMPendingIdle != 1 || st.UnpairedExpired != 4 {
		t.Fatalf("stats %+v", st)
	}
	if _, ok := x.NextDeadline(); ok {
		t.Fatal("an empty learner has a deadline")
	}
}

// TestBounds (C15): the flow and CM tables refuse beyond their bounds and count it.
func TestBounds(t *testing.T) {
	x := newLearner(t, func(l *Limits) { l.MaxFlows, l.MaxPending = 8, 4 })
	for i := range 20 {
		x.Forward(0, hostA, hostB, write(uint32(100+i), 0))
		x.Forward(0, hostA, hostB, cmPacket(t, must(roce.CMReq{LocalCommID: uint32(i), LocalQPN: 0x99}.AppendMAD(nil, 1))))
	}
	if flows, _, pend := x.Tables(); flows != 8 || pend != 4 {
		t.Fatalf("tables %d %d", flows, pend)
	}
	if st := x.Stats(); st.FlowsRefused != 12 || st.CMPendingFull != 16 {
		t.Fatalf("stats %+v", st)
	}
	if _, err := New(Limits{}); err == nil {
		t.Fatal("zero limits accepted")
	}
}

// TestShortAndOtherPackets: what the learner cannot read is counted, never a panic.
func TestShortAndOtherPackets(t *testing.T) {
	x := newLearner(t, nil)
	x.Forward(0, hostA, hostB, []byte{1, 2, 3})
	x.Reverse(0, hostB, hostA, nil)
	x.Forward(0, hostA, hostB, bth(roce.OpReadRequest, 5, 0)[:14])
	x.Forward(0, hostA, hostB, bth(roce.OpAcknowledge, 5, 0))
	x.Reverse(0, hostB, hostA, write(5, 0))
	x.Forward(0, hostA, hostB, append(bth(roce.OpUDSendOnly, 1, 0), make([]byte, 20)...))
	st := x.Stats()
	if st.ForwardShort != 2 || st.ReverseShort != 1 || st.ForwardOther != 1 || st.ReverseOther != 1 || st.CMMalformed != 1 {
		t.Fatalf("stats %+v", st)
	}
	_ = netip.Addr{}
}

// TestBlockedBounded: stray reverse QPs struck out (one response in a flow's range,
// then responses in none) are blocked up to MaxBlocked; beyond, they are forgotten, so the
// reverse table stays within its bounds however many come within BlockFor. Before, every one
// stayed blocked for BlockFor: a flood grew the table by its rate times ten seconds.
func TestBlockedBounded(t *testing.T) {
	x := newLearner(t, func(l *Limits) { l.MaxProbation, l.MaxCandidates, l.MaxBlocked = 8, 4, 16 })
	for j := range 64 {
		x.Forward(0, hostA, hostB, write(0x42, psn.PSN(1000+j)))
	}
	most := 0
	for i := range 1000 {
		qp := uint32(0x10000 + i)
		x.Reverse(time.Millisecond, hostB, hostA, ack(qp, 1010)) // in the flow's range
		for j := range 4 {
			x.Reverse(time.Millisecond, hostB, hostA, ack(qp, psn.PSN(0x400000+j))) // in none
		}
		_, rev, _ := x.Tables()
		most = max(most, rev)
	}
	st := x.Stats()
	if bound := 8 + 4 + 16 + 1; most > bound {
		t.Fatalf("reverse table reached %d entries, bound %d (%+v)", most, bound, st)
	}
	if st.Blocked != 16 || st.BlockedForgotten != 1000-16 {
		t.Fatalf("blocked %d, forgotten %d: want 16 and %d", st.Blocked, st.BlockedForgotten, 1000-16)
	}
	// Once the blocks expire there is room again.
	x.Expire(time.Millisecond + DefaultLimits().BlockFor)
	if _, rev, _ := x.Tables(); rev != 0 {
		t.Fatalf("%d reverse entries after the blocks expired", rev)
	}
	x.Reverse(time.Minute, hostB, hostA, ack(0x20000, 1010))
	for j := range 4 {
		x.Reverse(time.Minute, hostB, hostA, ack(0x20000, psn.PSN(0x400000+j)))
	}
	if st := x.Stats(); st.Blocked != 17 {
		t.Fatalf("a QP struck out after the blocks expired: blocked %d, want 17", st.Blocked)
	}
}
