package csf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// fullBlock establishes a Sender with (scheme, k, m) and sends one full block at PSN 0x100.
func fullBlock(t *testing.T, scheme wire.Scheme, k, m int, opts ...Option) (*Sender, time.Duration) {
	t.Helper()
	s := newSender(t, append([]Option{WithConfig(scheme, k, m, 0), WithAdaptation(false), WithRepairFraction(16)}, opts...)...)
	establish(t, s, 0, 3)
	now := time.Millisecond
	for j := 0; j < k; j++ {
		s.Observe(now, packet(psn.PSN(0x100+j), 300))
	}
	drain(s)
	return s, now
}

func sendRequest(t *testing.T, s *Sender, now time.Duration, m wire.RepairRequest) []*wire.Repair {
	t.Helper()
	m.FlowID = 3
	b, err := m.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Handle(now, testCRF, b)
	return repairs(drain(s))
}

func lost(js ...int) psn.Bitmap {
	var b psn.Bitmap
	for _, j := range js {
		b.Set(j)
	}
	return b
}

// TestRequestAnswerC8: M = min(X, max(M_s, X - r + delta)); RETX symbols over L with fresh
// indices and Repair Session ID = Request ID; each Request ID answered once; a request for an
// unknown block, a wrong Config ID or k, or an L naming absent positions is ignored.
func TestRequestAnswerC8(t *testing.T) {
	s, now := fullBlock(t, wire.SchemeCauchy, 8, 2)
	req := wire.RepairRequest{RequestID: 7, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, RepairsHeld: 1,
		BlockStartPSN: 0x100, SuggestedM: 1, Lost: lost(0, 1, 2)}
	rs := sendRequest(t, s, now, req)
	if len(rs) != 2 { // X - r = 2 beats M_s = 1
		t.Fatalf("%d symbols, want 2", len(rs))
	}
	for n, r := range rs {
		if !r.Retx || r.Lost != req.Lost || r.RepairSessionID != 7 || int(r.RepairIndex) != 2+n || r.ConfigID != 1 || r.K != 8 {
			t.Fatalf("coded retransmission %d: %+v", n, r)
		}
	}
	if rs := sendRequest(t, s, now+time.Hour, req); len(rs) != 0 || s.Stats().RequestsDuplicate != 1 {
		t.Fatal("a Request ID answered twice")
	}
	for _, bad := range []wire.RepairRequest{
		{RequestID: 8, ConfigID: 2, Scheme: wire.SchemeCauchy, K: 8, BlockStartPSN: 0x100, Lost: lost(0)},
		{RequestID: 9, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 7, BlockStartPSN: 0x100, Lost: lost(0)},
		{RequestID: 10, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, BlockStartPSN: 0x200, Lost: lost(0)},
	} {
		if rs := sendRequest(t, s, now+time.Hour, bad); len(rs) != 0 {
			t.Fatalf("answered %+v", bad)
		}
	}
	if st := s.Stats(); st.RequestsUnknownBlock != 3 {
		t.Fatalf("unknown-block counter %d", st.RequestsUnknownBlock)
	}
}

// TestRequestDeferredNotDroppedC8: a second request within one SRTT of an answer is deferred
// until SRTT has passed, then answered with fresh indices.
func TestRequestDeferredNotDroppedC8(t *testing.T) {
	s, now := fullBlock(t, wire.SchemeCauchy, 8, 2)
	srtt := s.SRTT()
	req := wire.RepairRequest{RequestID: 7, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, BlockStartPSN: 0x100, SuggestedM: 1, Lost: lost(3)}
	if len(sendRequest(t, s, now, req)) != 1 {
		t.Fatal("first request not answered")
	}
	req.RequestID = 8
	if rs := sendRequest(t, s, now+srtt/2, req); len(rs) != 0 || s.Stats().RequestsDeferred != 1 {
		t.Fatal("second request within SRTT answered at once")
	}
	d, ok := s.NextDeadline()
	if !ok || d != now+srtt {
		t.Fatalf("deferred answer due %v, want %v", d, now+srtt)
	}
	s.Tick(d)
	rs := repairs(drain(s))
	if len(rs) != 1 || rs[0].RepairSessionID != 8 || rs[0].RepairIndex != 3 {
		t.Fatalf("deferred answer %+v", rs)
	}
}

// TestRequestAbsentIgnoredC8: a block-form L that names an absent position is ignored.
func TestRequestAbsentIgnoredC8(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 4, 1, 0), WithAdaptation(false), WithRepairFraction(16), WithBurstGap(time.Microsecond))
	establish(t, s, 0, 3)
	s.Observe(time.Millisecond, packet(0x100, 100))
	s.Observe(time.Millisecond, packet(0x102, 100)) // 0x101 never emitted: absent
	s.Tick(2 * time.Millisecond)
	drain(s)
	req := wire.RepairRequest{RequestID: 7, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 3, BlockStartPSN: 0x100, Lost: lost(1)}
	if rs := sendRequest(t, s, 3*time.Millisecond, req); len(rs) != 0 || s.Stats().RequestsAbsent != 1 {
		t.Fatalf("answered a request naming an absent position: %+v", rs)
	}
}

// TestFallbackSourceCopyC9: a FALLBACK request is answered with Source Copy symbols (scheme 0,
// Repair Index = position) for every source in L; the sources go after the give-up time.
func TestFallbackSourceCopyC9(t *testing.T) {
	s, now := fullBlock(t, wire.SchemeCauchy, 8, 2)
	req := wire.RepairRequest{Fallback: true, RequestID: 7, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, BlockStartPSN: 0x100, SuggestedM: 2, Lost: lost(1, 5)}
	rs := sendRequest(t, s, now, req)
	if len(rs) != 2 || rs[0].Scheme != wire.SchemeSourceCopy || rs[0].RepairIndex != 1 || rs[1].RepairIndex != 5 || !rs[1].Last {
		t.Fatalf("Source Copy answer %+v", rs)
	}
	want, _ := fecSymbol(packet(0x101, 300), 1062)
	if string(rs[0].Symbol) != string(want) {
		t.Fatal("Source Copy symbol is not source symbol 1 unmodified")
	}
	for i := 0; i < 10; i++ {
		d, _ := s.NextDeadline()
		s.Tick(d)
	}
	if s.Stats().BlocksGivenUp != 1 {
		t.Fatal("block not dropped after the give-up time")
	}
}

// TestXORFallsBackC1: scheme 2 has no coded retransmission: a request gets Source Copy.
func TestXORFallsBackC1(t *testing.T) {
	s, now := fullBlock(t, wire.SchemeXOR, 4, 1)
	req := wire.RepairRequest{RequestID: 7, ConfigID: 1, Scheme: wire.SchemeXOR, K: 4, BlockStartPSN: 0x100, SuggestedM: 2, Lost: lost(0, 1)}
	rs := sendRequest(t, s, now, req)
	if len(rs) != 2 || rs[0].Scheme != wire.SchemeSourceCopy {
		t.Fatalf("XOR request answered with %+v", rs)
	}
}

// TestRangeRequestAndInfoC8: the PSN-range form is mapped onto blocks and answered with r = 0;
// a range naming absent positions gets an INFO message for its block.
func TestRangeRequestAndInfoC8(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 4, 0, 0), WithAdaptation(false), WithRepairFraction(16), WithBurstGap(time.Microsecond))
	establish(t, s, 0, 3)
	for _, p := range []psn.PSN{0x100, 0x101, 0x102, 0x103, 0x104, 0x106, 0x107} {
		s.Observe(time.Millisecond, packet(p, 100))
	}
	s.Tick(2 * time.Millisecond)
	drain(s)
	req := wire.RepairRequest{RangeForm: true, RequestID: 7, Ranges: []psn.Range{{Start: 0x101, Count: 2}, {Start: 0x104, Count: 3}}}
	rs := sendRequest(t, s, 3*time.Millisecond, req)
	var retx, info int
	for _, r := range rs {
		switch {
		case r.Info:
			info++
			if r.BlockStartPSN != 0x104 || r.Present[0] != 0b1011<<28 || len(r.Symbol) != 0 {
				t.Fatalf("INFO %+v", r)
			}
		case r.Retx:
			retx++
			if r.RepairSessionID != 7 {
				t.Fatalf("session %d", r.RepairSessionID)
			}
		}
	}
	if info != 1 || retx != 4 { // X = 2 in each block, r = 0
		t.Fatalf("%d INFO, %d RETX: %+v", info, retx, rs)
	}
}

// TestReverseAckReleasesBlocks: an RDMA ACK to the flow's reverse QP passing back releases the
// blocks it covers; a request for a released block is ignored.
func TestReverseAckReleasesBlocks(t *testing.T) {
	s, now := fullBlock(t, wire.SchemeCauchy, 8, 2, WithReverseQP(0x22))
	s.ObserveReverse(now, ackPacket(0x107))
	if s.Stats().BlocksAcked != 1 {
		t.Fatal("block not released by the ACK")
	}
	if at, ok := s.AckedThrough(); !ok || at != 0x107 {
		t.Fatalf("acked through %v %v", at, ok)
	}
	req := wire.RepairRequest{RequestID: 7, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, BlockStartPSN: 0x100, Lost: lost(0)}
	if rs := sendRequest(t, s, now, req); len(rs) != 0 {
		t.Fatal("answered for a released block")
	}
}

// TestOtherQPAckReleasesNothing (C9): the sources of a block are kept
// until the RDMA transport acknowledges the block. An ACK addressed to another queue pair
// between the same hosts belongs to another PSN space and releases nothing; nor does any ACK
// while the flow's reverse QP is unknown; nor an ACK of a PSN not yet sent. A request for the
// block is still answered afterwards.
func TestOtherQPAckReleasesNothing(t *testing.T) {
	unpaired, now := fullBlock(t, wire.SchemeCauchy, 8, 2)
	paired, _ := fullBlock(t, wire.SchemeCauchy, 8, 2, WithReverseQP(0x33))
	learned, _ := fullBlock(t, wire.SchemeCauchy, 8, 2)
	learned.SetReverseQP(0x33)
	for _, s := range []*Sender{unpaired, paired, learned} {
		s.ObserveReverse(now, ackPacket(0x107)) // an ACK to QP 0x22: not this flow's
	}
	if st := unpaired.Stats(); st.BlocksAcked != 0 || st.ReverseUnpaired != 1 {
		t.Fatalf("unpaired: acked %d, unpaired %d", st.BlocksAcked, st.ReverseUnpaired)
	}
	for _, s := range []*Sender{paired, learned} {
		if st := s.Stats(); st.BlocksAcked != 0 || st.ReverseIgnored != 1 {
			t.Fatalf("paired with 0x33: acked %d, ignored %d", st.BlocksAcked, st.ReverseIgnored)
		}
		if _, ok := s.AckedThrough(); ok {
			t.Fatal("an ACK of another QP counted as acknowledged")
		}
	}
	// An ACK to the flow's own QP of a PSN beyond what was sent: implausible, nothing released.
	ahead := ackPacket(0x500)
	ahead[5], ahead[6], ahead[7] = 0, 0, 0x33
	learned.ObserveReverse(now, ahead)
	if st := learned.Stats(); st.BlocksAcked != 0 || st.ReverseImplausible != 1 {
		t.Fatalf("ACK ahead of the sender: acked %d, implausible %d", st.BlocksAcked, st.ReverseImplausible)
	}
	if qp, ok := learned.ReverseQP(); !ok || qp != 0x33 {
		t.Fatalf("reverse QP %#x %v", qp, ok)
	}
	for _, s := range []*Sender{unpaired, paired, learned} {
		req := wire.RepairRequest{RequestID: 7, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, BlockStartPSN: 0x100, SuggestedM: 1, Lost: lost(0)}
		if rs := sendRequest(t, s, now, req); len(rs) != 1 || !rs[0].Retx {
			t.Fatalf("request after a foreign ACK: %d answers", len(rs))
		}
	}
	// Once the pairing is forgotten, nothing is released again.
	own := ackPacket(0x107)
	own[5], own[6], own[7] = 0, 0, 0x33
	learned.ClearReverseQP()
	learned.ObserveReverse(now, own)
	if st := learned.Stats(); st.BlocksAcked != 0 || st.ReverseUnpaired != 1 {
		t.Fatalf("after ClearReverseQP: acked %d, unpaired %d", st.BlocksAcked, st.ReverseUnpaired)
	}
	// The flow's own ACK releases the block.
	learned.SetReverseQP(0x33)
	learned.ObserveReverse(now, own)
	if learned.Stats().BlocksAcked != 1 {
		t.Fatal("the flow's own ACK released nothing")
	}
}

// TestBudgetLimitsRepairC11b: all repair passes the token bucket; a refused send is counted.
func TestBudgetLimitsRepairC11b(t *testing.T) {
	s, now := fullBlock(t, wire.SchemeCauchy, 8, 2, WithRepairFraction(0.01))
	for i := range 20 {
		req := wire.RepairRequest{RequestID: uint16(7 + i), ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, BlockStartPSN: 0x100, SuggestedM: 8, Lost: lost(0, 1, 2, 3, 4, 5, 6, 7)}
		sendRequest(t, s, now+time.Duration(i)*time.Second, req)
	}
	if st := s.Stats(); st.RepairDeniedBudget == 0 || st.RetxSent > 16 {
		t.Fatalf("budget: sent %d, denied %d", st.RetxSent, st.RepairDeniedBudget)
	}
}

func lossReport(t *testing.T, s *Sender, now time.Duration, exp, recv, ce, repCE uint32, interval time.Duration) {
	t.Helper()
	m := wire.LossReport{FlowID: 3, IntervalUS: uint32(interval / time.Microsecond), Expected: exp, Received: recv,
		CEMarked: ce, RepairsReceived: 10, RepairsCEMarked: repCE}
	b, _ := m.Append(nil)
	s.Handle(now, testCRF, b)
}

// TestCircuitBreakerC11f: loss above ten percent over one second sets m to zero and stops coded
// retransmission, the flow stays open; after ten seconds clear redundancy resumes; a condition
// lasting over a minute sends CLOSE with reason 4.
func TestCircuitBreakerC11f(t *testing.T) {
	s, now := fullBlock(t, wire.SchemeCauchy, 8, 2)
	for i := range 12 {
		lossReport(t, s, now+time.Duration(i)*100*time.Millisecond, 100, 80, 0, 0, 100*time.Millisecond)
	}
	now += 1200 * time.Millisecond
	if s.M() != 0 || s.State() != StateEstablished {
		t.Fatalf("breaker: m %d, state %v", s.M(), s.State())
	}
	req := wire.RepairRequest{RequestID: 7, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, BlockStartPSN: 0x100, Lost: lost(0)}
	if rs := sendRequest(t, s, now, req); len(rs) != 0 || s.Stats().RequestsBreaker != 1 {
		t.Fatal("coded retransmission while the breaker is open")
	}
	for i := range 101 {
		lossReport(t, s, now+time.Duration(i)*100*time.Millisecond, 100, 100, 0, 0, 100*time.Millisecond)
	}
	now += 10100 * time.Millisecond
	if s.M() != 2 {
		t.Fatalf("redundancy not resumed after ten seconds clear: m %d", s.M())
	}
	for i := range 620 {
		lossReport(t, s, now+time.Duration(i)*100*time.Millisecond, 100, 50, 0, 0, 100*time.Millisecond)
		if s.State() == StateClosed {
			break
		}
	}
	if s.State() != StateClosed || s.Stats().CloseSentByReason[wire.ReasonCircuitBreaker] != 1 {
		t.Fatalf("no CLOSE reason 4: state %v", s.State())
	}
}

// TestPolicyMovesMThroughParamUpdateC6: the binomial choice raises m after two intervals at one
// percent loss (k = 32: m = 4; intervals of 10,000 sources, enough for the evidence a raise
// needs, P15), through PARAM_UPDATE; intervals classified as congestion (CE
// marks) never raise it; CE on REPAIR halves the budget (C11 d).
func TestPolicyMovesMThroughParamUpdateC6(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 32, 0, 0))
	establish(t, s, 0, 3)
	now := time.Millisecond
	for range 2 {
		now += 10 * time.Millisecond
		lossReport(t, s, now, 1000, 900, 200, 0, 10*time.Millisecond) // CE on a fifth: congestion
	}
	if ms := drain(s); len(ms) != 0 {
		t.Fatalf("congestion raised m: %+v", ms)
	}
	s2 := newSender(t, WithConfig(wire.SchemeCauchy, 32, 0, 0))
	establish(t, s2, 0, 3)
	before := s2.budget.Fraction()
	for range 2 {
		now += 10 * time.Millisecond
		lossReport(t, s2, now, 10000, 9900, 0, 1, 10*time.Millisecond)
	}
	var pu *wire.ParamUpdate
	for _, m := range drain(s2) {
		if p, ok := m.(*wire.ParamUpdate); ok {
			pu = p
		}
	}
	if want := policy.ChooseM(32, 0.01, policy.DefaultEpsilon, policy.DefaultRho, 16); pu == nil || int(pu.M) != want || want != 4 {
		t.Fatalf("PARAM_UPDATE %+v, want m = %d", pu, want)
	}
	if s2.budget.Fraction() >= before {
		t.Fatal("CE on REPAIR did not halve the budget")
	}
}

// TestPathReportC14C16: PATH_REPORT only from configured reporters; dropped PSNs trigger extra
// ordinary symbols with fresh indices at once (never a coded retransmission); nothing is
// released by it.
func TestPathReportC14C16(t *testing.T) {
	rep := netip.MustParseAddr("10.5.5.5")
	s, now := fullBlock(t, wire.SchemeCauchy, 8, 2, WithReporters(rep))
	pr := wire.PathReport{Method: wire.MethodNodeDrops, Source: testFlow.Src, Destination: testFlow.Dst, FlowLabel: testFlow.DestQP,
		Hops: []wire.HopEntry{{NodeID: 1, LostCount: 2, Cause: wire.CauseCorruption, DroppedPSNs: []psn.PSN{0x101, 0x103}}}}
	b, _ := pr.Append(nil)
	s.Handle(now, netip.AddrPortFrom(netip.MustParseAddr("10.6.6.6"), 50000), b)
	if s.Stats().PathReportsRejected != 1 || len(drain(s)) != 0 {
		t.Fatal("PATH_REPORT from an unconfigured address acted on")
	}
	s.Handle(now, netip.AddrPortFrom(rep, 50000), b)
	// Two drops in a block of m = 2: the symbols beyond what m covers, and reportMargin more.
	rs := repairs(drain(s))
	if len(rs) != reportMargin || rs[0].Retx || rs[0].RepairIndex != 2 || rs[0].RepairSessionID != 0 {
		t.Fatalf("proactive symbols %+v", rs)
	}
	if s.Stats().BlocksAcked != 0 || s.find(0x101) < 0 {
		t.Fatal("a path report released data")
	}
}

func fecSymbol(p []byte, T int) ([]byte, error) {
	sym := make([]byte, T)
	sym[0], sym[1] = byte(len(p)>>8), byte(len(p))
	copy(sym[2:], p)
	return sym, nil
}

var _ = flow.Datagram{}

// TestRepairIndicesBoundedC8: Repair Indices satisfy i + k <= 255 and are never reused; when none
// is left, the answer is Source Copy.
func TestRepairIndicesBoundedC8(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 250, 2, 300), WithAdaptation(false), WithRepairFraction(16),
		WithLimits(func() flow.Limits { l := flow.DefaultLimits(); l.MaxK = 255; return l }()))
	s.Start(0)
	h := drain(s)[0].(*wire.Hello)
	caps := flow.DefaultLimits().Capabilities(1024)
	caps.MaxK = 255
	ack := wire.HelloAck{FlowID: 3, Capabilities: caps, AF: wire.AF4, SenderNonce: h.SenderNonce, MaxOpenBlocks: 4}
	b, _ := ack.Append(nil)
	s.Handle(0, testCRF, b)
	pu := drain(s)[0].(*wire.ParamUpdate)
	b, _ = (&wire.ParamAck{FlowID: 3, ConfigID: pu.ConfigID}).Append(nil)
	s.Handle(0, testCRF, b)
	for j := 0; j < 250; j++ {
		s.Observe(time.Millisecond, packet(psn.PSN(0x100+j), 100))
	}
	drain(s)
	seen := map[uint8]bool{0: true, 1: true}
	for i := range 2 {
		req := wire.RepairRequest{RequestID: uint16(7 + i), ConfigID: 1, Scheme: wire.SchemeCauchy, K: 250, BlockStartPSN: 0x100, SuggestedM: 4, Lost: lost(0, 1, 2, 3)}
		for _, r := range sendRequest(t, s, time.Duration(i+1)*time.Second, req) {
			if r.Scheme == wire.SchemeSourceCopy {
				if i != 1 {
					t.Fatalf("Source Copy before the indices ran out (request %d)", i)
				}
				continue
			}
			if int(r.RepairIndex)+250 > 255 || seen[r.RepairIndex] {
				t.Fatalf("Repair Index %d with k = 250", r.RepairIndex)
			}
			seen[r.RepairIndex] = true
		}
	}
	if len(seen) != 5 || s.Stats().RequestsNoIndex != 1 {
		t.Fatalf("indices %v, no-index %d", seen, s.Stats().RequestsNoIndex)
	}
}

// TestUnknownMessagesDiscarded: a message with an unknown Version or Type is discarded silently.
func TestUnknownMessagesDiscarded(t *testing.T) {
	s, now := fullBlock(t, wire.SchemeCauchy, 8, 2)
	for _, b := range [][]byte{{0x21, 0, 0, 8, 0, 0, 0, 3}, {0x1f, 0, 0, 8, 0, 0, 0, 3}} {
		s.Handle(now, testCRF, b)
	}
	if len(drain(s)) != 0 || s.Stats().MessagesIgnored != 2 {
		t.Fatal("unknown message acted on")
	}
}

// TestDeltaAboveOnePercentC8: with its own loss estimate above one percent the CSF sends
// M = min(X, max(M_s, X - r + 1)).
func TestDeltaAboveOnePercentC8(t *testing.T) {
	s, now := fullBlock(t, wire.SchemeCauchy, 8, 2)
	lossReport(t, s, now, 100, 95, 0, 0, 10*time.Millisecond)
	req := wire.RepairRequest{RequestID: 7, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, RepairsHeld: 2,
		BlockStartPSN: 0x100, SuggestedM: 1, Lost: lost(0, 1, 2, 3)}
	if rs := sendRequest(t, s, now, req); len(rs) != 3 { // X - r + 1 = 3
		t.Fatalf("%d symbols, want 3", len(rs))
	}
}

// TestPathReportCongestionNeverRaisesMC6c: losses a path reporter attributes to congestion
// (Cause 1) are taken out of the estimate: the same LOSS_REPORTs that raise m without the report
// leave it alone with it.
func TestPathReportCongestionNeverRaisesMC6c(t *testing.T) {
	rep := netip.MustParseAddr("10.5.5.5")
	s := newSender(t, WithConfig(wire.SchemeCauchy, 32, 0, 0), WithReporters(rep))
	establish(t, s, 0, 3)
	now := time.Millisecond
	next := psn.PSN(0x100)
	for range 2 {
		for range 1000 { // the interval's sources: what a Lost Count may plausibly reach
			s.Observe(now, packet(next, 100))
			next++
		}
		pr := wire.PathReport{Method: wire.MethodAltMark, Source: testFlow.Src, Destination: testFlow.Dst, FlowLabel: testFlow.DestQP,
			Hops: []wire.HopEntry{{NodeID: 9, LostCount: 10, Cause: wire.CauseCongestion}}}
		b, _ := pr.Append(nil)
		s.Handle(now, netip.AddrPortFrom(rep, 50000), b)
		now += 10 * time.Millisecond
		lossReport(t, s, now, 1000, 990, 0, 0, 10*time.Millisecond)
	}
	for _, m := range drain(s) {
		if _, ok := m.(*wire.ParamUpdate); ok {
			t.Fatal("congestion loss raised m")
		}
	}
	if s.Stats().PathReports != 2 {
		t.Fatal("reports not taken")
	}
}

// TestPathReportFindingsWaitForTheLossC6c: the CRF counts a lost PSN only once it is settled
// (E42), often in the LOSS_REPORT after the interval in which the reporter saw the drop. A path
// report's congestion finding therefore waits for the first interval that shows loss (within
// pathFindingsLife SRTT), and that loss does not raise m; a finding that waited longer is
// forgotten, and the same loss then counts as transmission loss and raises m.
func TestPathReportFindingsWaitForTheLossC6c(t *testing.T) {
	for _, wait := range []time.Duration{10 * time.Millisecond, time.Second} {
		rep := netip.MustParseAddr("10.5.5.5")
		s := newSender(t, WithConfig(wire.SchemeCauchy, 32, 0, 0), WithReporters(rep), WithInitialRTT(10*time.Millisecond))
		establish(t, s, 0, 3)
		now := time.Millisecond
		next := psn.PSN(0x100)
		for range 1000 {
			s.Observe(now, packet(next, 100))
			next++
		}
		pr := wire.PathReport{Method: wire.MethodNodeDrops, Source: testFlow.Src, Destination: testFlow.Dst, FlowLabel: testFlow.DestQP,
			Hops: []wire.HopEntry{{NodeID: 9, LostCount: 10, Cause: wire.CauseCongestion, QueueDelayChangeUS: 800}}}
		b, _ := pr.Append(nil)
		s.Handle(now, netip.AddrPortFrom(rep, 50000), b)
		// The interval of the drop shows no loss yet: the finding is kept.
		now += 10 * time.Millisecond
		lossReport(t, s, now, 990, 990, 0, 0, 10*time.Millisecond)
		now += wait
		lossReport(t, s, now, 10, 0, 0, 0, 10*time.Millisecond)
		raised := false
		for _, m := range drain(s) {
			if _, ok := m.(*wire.ParamUpdate); ok {
				raised = true
			}
		}
		if kept := wait < pathFindingsLife*s.srtt(); raised == kept {
			t.Fatalf("finding %v old (kept: %v): m raised %v", wait, kept, raised)
		}
	}
}
