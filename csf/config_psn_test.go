package csf

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// hello plays the CRF's HELLO_ACK and returns the first PARAM_UPDATE, unanswered.
func hello(t *testing.T, s *Sender, now time.Duration, flowID uint32) *wire.ParamUpdate {
	return helloRTT(t, s, now, 0, flowID)
}

// helloRTT is hello with the HELLO_ACK arriving rtt after the HELLO.
func helloRTT(t *testing.T, s *Sender, now, rtt time.Duration, flowID uint32) *wire.ParamUpdate {
	t.Helper()
	s.Start(now)
	var h *wire.Hello
	for _, m := range drain(s) {
		if x, ok := m.(*wire.Hello); ok {
			h = x
		}
	}
	if h == nil {
		t.Fatal("no HELLO")
	}
	ack := wire.HelloAck{FlowID: flowID, Capabilities: flow.DefaultLimits().Capabilities(1024), AF: wire.AF4,
		SenderNonce: h.SenderNonce, MaxOpenBlocks: 64}
	b, _ := ack.Append(nil)
	s.Handle(now+rtt, testCRF, b)
	pu := paramUpdates(drain(s))
	if len(pu) != 1 {
		t.Fatalf("%d PARAM_UPDATEs after HELLO_ACK", len(pu))
	}
	return pu[0]
}

func paramUpdates(ms []wire.Message) []*wire.ParamUpdate {
	var out []*wire.ParamUpdate
	for _, m := range ms {
		if p, ok := m.(*wire.ParamUpdate); ok {
			out = append(out, p)
		}
	}
	return out
}

// paramAck answers a PARAM_UPDATE with status.
func paramAck(s *Sender, now time.Duration, flowID uint32, id uint8, status wire.Status) {
	b, _ := (&wire.ParamAck{FlowID: flowID, ConfigID: id, Status: status}).Append(nil)
	s.Handle(now, testCRF, b)
}

// TestFirstConfigAnyStartPSN (draft, Configuration; E27): the first
// configuration applies wherever the flow's PSN space starts: sources seen before HELLO (a
// gateway starts the CSF on the first packet), sources that arrive between PARAM_UPDATE and
// PARAM_ACK, and sources after PARAM_ACK, for initial PSNs in both halves of the space and across
// the wrap. Every block after the configuration is in force gets its repair.
func TestFirstConfigAnyStartPSN(t *testing.T) {
	for _, start := range []psn.PSN{0x000000, 0x7fffff, 0x800000, 0x900000, 0xfffff0, 0xfffffe} {
		for _, when := range []string{"before HELLO", "before PARAM_ACK", "after PARAM_ACK"} {
			t.Run(fmt.Sprintf("%v/%s", start, when), func(t *testing.T) {
				s := newSender(t, WithConfig(wire.SchemeCauchy, 8, 2, 0), WithAdaptation(false), WithRepairFraction(16))
				now := time.Millisecond
				p := start
				send := func(n int) {
					for range n {
						s.Observe(now, packet(p, 200))
						p = p.Add(1)
					}
				}
				unprotected := 0
				if when == "before HELLO" {
					send(3)
					unprotected = 3
				}
				pu := hello(t, s, now, 3)
				if when == "before PARAM_ACK" {
					send(3)
					unprotected = 3
				}
				paramAck(s, now, 3, pu.ConfigID, wire.StatusAccepted)
				if _, ok := s.Config(); !ok {
					t.Fatal("no configuration in force after PARAM_ACK")
				}
				send(32) // crosses the wrap from 0xfffff0 and 0xfffffe
				s.Tick(now + time.Second)
				st := s.Stats()
				if st.SourcesUnprotected != uint64(unprotected) {
					t.Fatalf("%d sources unprotected, want %d", st.SourcesUnprotected, unprotected)
				}
				if st.BlocksOpened < 4 || st.RepairSent < 8 {
					t.Fatalf("blocks %d, repair %d: the flow is not protected", st.BlocksOpened, st.RepairSent)
				}
			})
		}
	}
}

// TestEffectivePSNPassedSendsAgain (draft, Configuration: "If the Effective PSN passes
// before the acknowledgment arrives, the CSF continues with the old configuration and sends
// PARAM_UPDATE again with a later Effective PSN"; E26): the update goes again at once, with the
// same Config ID and a later Effective PSN; blocks keep the old configuration until the
// acknowledgement, and the new one starts at or after the latest Effective PSN. The ACK of an
// update sent twice gives no RTT sample (Karn).
func TestEffectivePSNPassedSendsAgain(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 4, 1, 0), WithAdaptation(false), WithRepairFraction(16))
	now := time.Millisecond
	pu := helloRTT(t, s, now, 5*time.Millisecond, 3)
	now += 5 * time.Millisecond
	paramAck(s, now, 3, pu.ConfigID, wire.StatusAccepted)
	p := psn.PSN(0xffff00)
	send := func() []wire.Message { // a source every 100 us
		now += 100 * time.Microsecond
		s.Observe(now, packet(p, 200))
		p = p.Add(1)
		return drain(s)
	}
	for range 64 {
		send()
	}
	samples := s.Stats().RTTSamples
	if err := s.Reconfigure(now, flow.Config{Scheme: wire.SchemeCauchy, K: 4, M: 2, T: 1064}); err != nil {
		t.Fatal(err)
	}
	first := paramUpdates(drain(s))
	if len(first) != 1 {
		t.Fatalf("%d PARAM_UPDATEs", len(first))
	}
	eff := first[0].EffectivePSN
	var again []*wire.ParamUpdate
	for p.Before(eff.Add(40)) { // past the Effective PSN, no PARAM_ACK
		ms := send()
		again = append(again, paramUpdates(ms)...)
		for _, r := range repairs(ms) {
			if r.ConfigID != pu.ConfigID {
				t.Fatalf("block %v used config %d before PARAM_ACK", r.BlockStartPSN, r.ConfigID)
			}
		}
	}
	if len(again) != 1 || again[0].ConfigID != first[0].ConfigID || !again[0].EffectivePSN.After(eff) ||
		again[0].M != first[0].M {
		t.Fatalf("after passing %v: %d updates sent again (%+v)", eff, len(again), again)
	}
	paramAck(s, now, 3, first[0].ConfigID, wire.StatusAccepted)
	if s.Stats().RTTSamples != samples {
		t.Fatal("RTT sampled from the ACK of an update sent twice")
	}
	newCfg := 0
	for p.Before(again[0].EffectivePSN.Add(40)) {
		for _, r := range repairs(send()) {
			if r.ConfigID == first[0].ConfigID {
				newCfg++
				if r.BlockStartPSN.Before(again[0].EffectivePSN) {
					t.Fatalf("block %v uses the new configuration before its Effective PSN %v", r.BlockStartPSN, again[0].EffectivePSN)
				}
			}
		}
	}
	if newCfg == 0 || s.Stats().ParamEffectiveMoved != 1 {
		t.Fatalf("new configuration's symbols %d, moves %d", newCfg, s.Stats().ParamEffectiveMoved)
	}
}

// TestRefusedParamUpdateOfferedAgain (draft: "A CSF that receives a non-zero Status keeps
// its current configuration"; E28): the configuration stays, adaptation goes on,
// and the same choice is offered again after a back-off (not at the very next report), and once
// accepted it applies. A refused first configuration is offered again too.
func TestRefusedParamUpdateOfferedAgain(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 32, 0, 0), WithRepairFraction(16))
	now := time.Millisecond
	pu := hello(t, s, now, 3)
	paramAck(s, now, 3, pu.ConfigID, wire.StatusResourcesExhausted)
	if _, ok := s.Config(); ok {
		t.Fatal("a refused configuration in force")
	}
	d, ok := s.NextDeadline()
	if !ok {
		t.Fatal("no deadline for offering the refused first configuration again")
	}
	now = d
	s.Tick(now)
	pus := paramUpdates(drain(s))
	if len(pus) != 1 || pus[0].M != 0 {
		t.Fatalf("first configuration not offered again: %+v", pus)
	}
	paramAck(s, now, 3, pus[0].ConfigID, wire.StatusAccepted)
	p := psn.PSN(0x800000)
	for range 64 {
		s.Observe(now, packet(p, 200))
		p = p.Add(1)
	}
	drain(s)
	// Two intervals of 3 % loss: the policy chooses m > 0.
	report := func() []*wire.ParamUpdate {
		now += 20 * time.Millisecond
		for range 32 {
			s.Observe(now, packet(p, 200))
			p = p.Add(1)
		}
		lossReport(t, s, now, 1000, 970, 0, 0, 20*time.Millisecond)
		return paramUpdates(drain(s))
	}
	var asked *wire.ParamUpdate
	for range 4 {
		if u := report(); len(u) > 0 {
			asked = u[0]
			break
		}
	}
	if asked == nil || asked.M == 0 {
		t.Fatalf("no raise of m proposed: %+v", asked)
	}
	paramAck(s, now, 3, asked.ConfigID, wire.StatusResourcesExhausted)
	if c, _ := s.Config(); c.M != 0 {
		t.Fatalf("m %d in force after a refusal", c.M)
	}
	if u := report(); len(u) != 0 {
		t.Fatal("offered again at once, without a back-off")
	}
	var again *wire.ParamUpdate
	for range 400 {
		if u := report(); len(u) > 0 {
			again = u[0]
			break
		}
	}
	if again == nil || again.M != asked.M || again.ConfigID == asked.ConfigID {
		t.Fatalf("refused choice m=%d not offered again: %+v", asked.M, again)
	}
	if st := s.Stats(); st.ParamRejected != 2 {
		t.Fatalf("%d refusals counted", st.ParamRejected)
	}
	paramAck(s, now, 3, again.ConfigID, wire.StatusAccepted)
	for n := 0; n < 1<<16 && p.Before(again.EffectivePSN.Add(64)); n++ { // past the Effective PSN
		s.Observe(now, packet(p, 200))
		p = p.Add(1)
	}
	if c, _ := s.Config(); c.M != int(asked.M) {
		t.Fatalf("m %d in force after acceptance, want %d", c.M, asked.M)
	}
}

// TestBreakerFreshAfterClose (C11 f, RULINGS C2 reason 4): a session that
// the circuit breaker ended with CLOSE reason 4 and that is started again begins with a fresh
// breaker: clean reports keep it open and protected, and redundancy flows again.
func TestBreakerFreshAfterClose(t *testing.T) {
	s, now := fullBlock(t, wire.SchemeCauchy, 8, 2)
	for range 700 { // 70 s of 20 % loss
		now += 100 * time.Millisecond
		lossReport(t, s, now, 100, 80, 0, 0, 100*time.Millisecond)
	}
	if s.State() != StateClosed || s.Stats().CloseSentByReason[wire.ReasonCircuitBreaker] != 1 {
		t.Fatalf("state %v after a minute of 20 %% loss", s.State())
	}
	trips := s.Stats().BreakerTrips
	establish(t, s, now, 4)
	for range 30 {
		now += 100 * time.Millisecond
		b, _ := (&wire.LossReport{FlowID: 4, IntervalUS: 100000, Expected: 100, Received: 100}).Append(nil)
		s.Handle(now, testCRF, b)
	}
	if s.State() != StateEstablished || s.M() != 2 {
		t.Fatalf("restarted session: state %v, m %d", s.State(), s.M())
	}
	before := s.Stats().RepairSent
	for j := range 8 {
		s.Observe(now, packet(psn.PSN(0x400+j), 300))
	}
	if s.Stats().RepairSent != before+2 {
		t.Fatal("no redundancy after the restart")
	}
	if s.Stats().BreakerTrips != trips {
		t.Fatalf("breaker trips %d, want %d (the count goes on across sessions)", s.Stats().BreakerTrips, trips)
	}
}

// TestBreakerStopsPacedAndDeferredC11f (C11 f, C11 c, C8): while the breaker is
// open, no ordinary repair goes out, neither the paced symbols of a block closed before it
// tripped, nor a coded retransmission deferred before it tripped.
func TestBreakerStopsPacedAndDeferredC11f(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 8, 8, 0), WithAdaptation(false), WithRepairFraction(16))
	establish(t, s, 0, 3)
	now := time.Millisecond
	for j := range 8 {
		s.Observe(now+time.Duration(j)*100*time.Microsecond, packet(psn.PSN(0x100+j), 300))
	}
	now += time.Millisecond
	if n := len(repairs(drain(s))); n != 4 {
		t.Fatalf("%d symbols in the burst, want 4 (C11 c)", n)
	}
	req := wire.RepairRequest{RequestID: 7, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, BlockStartPSN: 0x100, SuggestedM: 1, Lost: lost(0)}
	if rs := sendRequest(t, s, now, req); len(rs) != 1 {
		t.Fatalf("%d answers", len(rs))
	}
	req.RequestID = 8
	sendRequest(t, s, now, req) // within SRTT of the answer: deferred
	if s.Stats().RequestsDeferred != 1 {
		t.Fatal("request not deferred")
	}
	for i := range 12 { // over a second of 20 % loss
		lossReport(t, s, now+time.Duration(i)*100*time.Millisecond, 100, 80, 0, 0, 100*time.Millisecond)
	}
	if s.M() != 0 {
		t.Fatal("breaker not open")
	}
	for range 50 {
		d, ok := s.NextDeadline()
		if !ok || d > now+time.Second {
			break
		}
		now = max(now, d)
		s.Tick(now)
	}
	if rs := repairs(drain(s)); len(rs) != 0 {
		t.Fatalf("%d REPAIRs sent while the breaker is open", len(rs))
	}
	if st := s.Stats(); st.RepairSkippedBreaker < 4 || st.RequestsBreaker < 1 {
		t.Fatalf("skipped %d paced, %d deferred", st.RepairSkippedBreaker, st.RequestsBreaker)
	}
}

// readRequest builds a READ request at p for dma octets.
func readRequest(p psn.PSN, dma uint32) []byte {
	pk := roce.Packet{BTH: roce.BTH{OpCode: roce.OpReadRequest, DestQP: testFlow.DestQP, PSN: p},
		RETH: roce.RETH{DMALength: dma}}
	b, _ := pk.Append(nil)
	return b
}

// TestAbsentBetweenBlocksInfo (C8, C13; E29): a PSN-range request for
// PSNs that belong to no block and carry no packet in this direction (a PSN the flow skipped
// between blocks; PSNs a READ consumed beyond its block's end) gets INFO messages with no
// present position, naming exactly those PSNs; PSNs never sent get no answer; with the circuit
// breaker open the INFO still goes, the coded retransmission does not.
func TestAbsentBetweenBlocksInfo(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 4, 1, 0), WithAdaptation(false), WithRepairFraction(16))
	establish(t, s, 0, 3)
	now := time.Millisecond
	for j := range 4 { // block 0xfffffe..0x000001, across the wrap
		s.Observe(now, packet(psn.PSN(0xfffffe).Add(j), 300))
	}
	// 0x000002 is skipped (the other direction's WRITE); block 0x000003..0x000006 ends in a READ
	// of 8 PSNs at 0x000006, consuming 0x000007..0x00000d.
	for j := range 3 {
		s.Observe(now, packet(psn.PSN(3+j), 300))
	}
	s.Observe(now, readRequest(6, 8*1024))
	s.Observe(now, packet(0x0e, 300))
	drain(s)
	ask := func(id uint16, ranges ...psn.Range) []*wire.Repair {
		return sendRequest(t, s, now, wire.RepairRequest{RangeForm: true, RequestID: id, Ranges: ranges})
	}
	rs := ask(20, psn.Range{Start: 0x000001, Count: 2}, psn.Range{Start: 0x000008, Count: 3})
	var infos, retx []*wire.Repair
	for _, r := range rs {
		if r.Info {
			infos = append(infos, r)
		} else if r.Retx {
			retx = append(retx, r)
		}
	}
	if len(retx) != 1 || retx[0].BlockStartPSN != 0xfffffe || !retx[0].Lost.Has(3) {
		t.Fatalf("coded answer for PSN 0x000001: %+v", retx)
	}
	want := map[psn.PSN]uint8{0x000002: 1, 0x000008: 3}
	if len(infos) != 2 {
		t.Fatalf("%d INFO messages, want 2: %+v", len(infos), infos)
	}
	for _, r := range infos {
		if !r.Present.Empty() || want[r.BlockStartPSN] != r.K || r.ConfigID != 1 {
			t.Fatalf("INFO %+v, want no present position over %v", r, want)
		}
	}
	if rs := ask(21, psn.Range{Start: 0x000100, Count: 4}); len(rs) != 0 {
		t.Fatalf("answered for PSNs never sent: %+v", rs)
	}
	for i := range 12 { // the breaker opens
		lossReport(t, s, now+time.Duration(i)*100*time.Millisecond, 100, 80, 0, 0, 100*time.Millisecond)
	}
	now += 2 * time.Second
	rs = ask(22, psn.Range{Start: 0x000000, Count: 3})
	if len(rs) != 1 || !rs[0].Info || rs[0].BlockStartPSN != 0x000002 {
		t.Fatalf("with the breaker open: %+v", rs)
	}
}

// TestSilentCRFStartsNewSessionE31 (peers that restart; E31): while sources flow and LOSS_REPORTs
// arrive, the session stays; when the CRF says nothing for the silence time while sources flow
// (it restarted and forgot the flow), the CSF starts a new session with a new HELLO. Messages
// from any other address do not count as the CRF's.
func TestSilentCRFStartsNewSessionE31(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 8, 1, 0), WithAdaptation(false))
	establish(t, s, 0, 3)
	now := time.Duration(0)
	p := psn.PSN(0x10)
	step := func(report bool, from netip.AddrPort) []wire.Message {
		now += 10 * time.Millisecond
		s.Observe(now, packet(p, 100))
		p = p.Add(1)
		if report {
			b, _ := (&wire.LossReport{FlowID: 3, IntervalUS: 10000, Expected: 1, Received: 1}).Append(nil)
			s.Handle(now, from, b)
		}
		if d, ok := s.NextDeadline(); ok && d <= now {
			s.Tick(now)
		}
		return drain(s)
	}
	for range 1000 { // 10 s with reports
		step(true, testCRF)
	}
	if s.State() != StateEstablished || s.Stats().PeerSilent != 0 {
		t.Fatalf("restarted while the CRF reports: %v", s.State())
	}
	var hellos int
	for range 400 { // 4 s of reports from elsewhere only
		for _, m := range step(true, netip.MustParseAddrPort("10.9.9.9:50000")) {
			if _, ok := m.(*wire.Hello); ok {
				hellos++
			}
		}
	}
	if hellos == 0 || s.Stats().PeerSilent != 1 || s.State() == StateEstablished {
		t.Fatalf("silent CRF: %d HELLOs, %d restarts, state %v", hellos, s.Stats().PeerSilent, s.State())
	}
}

// TestNewPSNSpaceStartsNewSessionE32 (peers that restart; E32): a queue pair created again under
// the same number starts a new random PSN space; when it lies behind the old one, its packets
// look like retransmissions. A run of them far behind (more than any outstanding window) starts a
// new session, and the new space is protected; retransmissions within the window never do.
func TestNewPSNSpaceStartsNewSessionE32(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 8, 1, 0), WithAdaptation(false), WithRepairFraction(16))
	establish(t, s, 0, 3)
	now := time.Millisecond
	for j := range 64 {
		s.Observe(now, packet(psn.PSN(0xc00000+j), 100))
	}
	for j := range 64 { // a go-back-N burst of retransmissions, then more of them: never a restart
		s.Observe(now, packet(psn.PSN(0xc00000+j), 100))
	}
	if st := s.Stats(); st.PSNSpaceRestarts != 0 || st.Retransmissions != 64 {
		t.Fatalf("restarts %d, retransmissions %d", st.PSNSpaceRestarts, st.Retransmissions)
	}
	for j := range 40 { // the new space, 0x400000 behind: 32 packets, then a new session
		s.Observe(now, packet(psn.PSN(0x800000+j), 100))
	}
	if st := s.Stats(); st.PSNSpaceRestarts != 1 || s.State() != StateHello {
		t.Fatalf("restarts %d, state %v", st.PSNSpaceRestarts, s.State())
	}
	establish(t, s, now, 4)
	before := s.Stats().RepairSent
	for j := range 16 {
		s.Observe(now, packet(psn.PSN(0x800028+j), 100))
	}
	if s.Stats().RepairSent != before+2 {
		t.Fatalf("the new space is not protected: %d repairs", s.Stats().RepairSent-before)
	}
}

// TestLearnsRDMAMTUE33 (C13; E33): a gateway configured with an RDMA MTU of 4096 in front of a
// connection whose MTU is 1024 takes the connection's from its full-sized packets: a new session
// announces it in HELLO, symbols are sized for it, and READ requests consume the PSNs the
// connection's MTU gives.
func TestLearnsRDMAMTUE33(t *testing.T) {
	s := newSender(t, WithRDMAMTU(4096), WithConfig(wire.SchemeCauchy, 8, 1, 0), WithAdaptation(false))
	establish(t, s, 0, 3)
	now := time.Millisecond
	for j := range 6 {
		s.Observe(now, packet(psn.PSN(0x40+j), 1024)) // WRITE MIDDLE packets of 1024 octets
	}
	if s.RDMAMTU() != 1024 || s.Stats().MTUChanges != 1 || s.State() != StateHello {
		t.Fatalf("MTU %d, changes %d, state %v", s.RDMAMTU(), s.Stats().MTUChanges, s.State())
	}
	var h *wire.Hello
	for _, m := range drain(s) {
		if x, ok := m.(*wire.Hello); ok {
			h = x
		}
	}
	if h == nil || h.RDMAMTU != 1024 {
		t.Fatalf("HELLO after the change: %+v", h)
	}
	establish(t, s, now, 4)
	if c, _ := s.Config(); c.T != 1024+38 {
		t.Fatalf("T = %d for an MTU of 1024", c.T)
	}
	s.Observe(now, readRequest(0x46, 8*1024)) // right after the WRITEs
	s.Observe(now, packet(0x4e, 100))         // the next request: right after the READ's 8 PSNs
	if st := s.Stats(); st.Retransmissions != 0 || st.SkippedPSNs != 0 {
		t.Fatalf("READ counted with the wrong MTU: %d retransmissions, %d skipped", st.Retransmissions, st.SkippedPSNs)
	}
	for j := range 8 { // short packets and other sizes never change it
		s.Observe(now, packet(psn.PSN(0x4f+j), 512*(j%2+1)))
	}
	if s.RDMAMTU() != 1024 {
		t.Fatalf("MTU %d after mixed sizes", s.RDMAMTU())
	}
}

// TestResendBeforeBigReadIsNoNewSpaceE32 (E32, C13): a go-back-N resend of the packets just before
// a READ of 2 GiB lies more than 2^20 PSNs behind the next PSN, all of them consumed by the READ:
// counted in the PSNs the flow carried it is a few packets back, a retransmission, not a new PSN
// space.
func TestResendBeforeBigReadIsNoNewSpaceE32(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 16, 2, 0), WithAdaptation(false))
	establish(t, s, 0, 3)
	now := time.Millisecond
	for j := range 40 {
		s.Observe(now, packet(psn.PSN(0x100+j), 100))
	}
	s.Observe(now, readRequest(0x128, 1<<31)) // 2^21 PSNs at an MTU of 1024
	for j := range 40 {
		s.Observe(now, packet(psn.PSN(0x100+j), 100))
	}
	if st := s.Stats(); st.PSNSpaceRestarts != 0 || st.Retransmissions != 40 || s.State() != StateEstablished {
		t.Fatalf("restarts %d, retransmissions %d, state %v", st.PSNSpaceRestarts, st.Retransmissions, s.State())
	}
}

// TestAbsentInOpenBlockInfoE29 (E29): a block stays open while its flow is slow (the burst gap
// follows the packet gap, C5), so a PSN it skipped (a requester's WRITE between two READs' responses)
// is asked for while it is open: it gets an INFO with no present position at once, and the block's
// own REPAIR, when it closes, still describes it as absent.
func TestAbsentInOpenBlockInfoE29(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 16, 1, 0), WithAdaptation(false), WithRepairFraction(16))
	establish(t, s, 0, 3)
	now := time.Millisecond
	for _, p := range []psn.PSN{0x10, 0x11, 0x15, 0x16} { // 0x12..0x14 skipped
		s.Observe(now, packet(p, 300))
		now += 50 * time.Millisecond
	}
	drain(s)
	rs := sendRequest(t, s, now, wire.RepairRequest{RangeForm: true, RequestID: 9, Ranges: []psn.Range{{Start: 0x12, Count: 3}}})
	if len(rs) != 1 || !rs[0].Info || !rs[0].Present.Empty() || rs[0].BlockStartPSN != 0x12 || rs[0].K != 3 {
		t.Fatalf("answer for the open block's skipped PSNs: %+v", rs)
	}
	s.Tick(now + time.Second) // the burst gap closes the block
	for _, r := range repairs(drain(s)) {
		if r.BlockStartPSN == 0x10 && (r.Present.Has(2) || r.Present.Has(3) || r.Present.Has(4) || !r.Present.Has(5)) {
			t.Fatalf("the block's REPAIR describes the skipped PSNs as present: %+v", r)
		}
	}
}

// TestTwoCodedRoundsThenSourceCopyC9 (C9 a; E34): a block gets at most two coded
// retransmission rounds, whichever form asked for them (requests in the PSN-range form for
// different PSNs of one block can be in flight before the CRF knows the block); a third request
// is answered with Source Copy symbols, as a FALLBACK request is.
func TestTwoCodedRoundsThenSourceCopyC9(t *testing.T) {
	s, now := fullBlock(t, wire.SchemeCauchy, 8, 2)
	ask := func(id uint16, m wire.RepairRequest) []*wire.Repair {
		now += time.Second // past C8's one answer per SRTT
		m.RequestID = id
		return sendRequest(t, s, now, m)
	}
	range1 := wire.RepairRequest{RangeForm: true, Ranges: []psn.Range{{Start: 0x101, Count: 1}}}
	range2 := wire.RepairRequest{RangeForm: true, Ranges: []psn.Range{{Start: 0x104, Count: 1}}}
	block := wire.RepairRequest{ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, BlockStartPSN: 0x100, SuggestedM: 2, Lost: lost(1, 4)}
	for i, m := range []wire.RepairRequest{range1, range2} {
		if rs := ask(uint16(10+i), m); len(rs) != 1 || !rs[0].Retx {
			t.Fatalf("round %d: %+v", i+1, rs)
		}
	}
	rs := ask(12, block)
	if len(rs) != 2 || rs[0].Scheme != wire.SchemeSourceCopy || rs[0].RepairIndex != 1 || rs[1].RepairIndex != 4 {
		t.Fatalf("third request: %+v, want Source Copy of positions 1 and 4", rs)
	}
	if st := s.Stats(); st.RequestsPastRounds != 1 || st.RetxSent != 2 || st.SourceCopySent != 2 {
		t.Fatalf("past rounds %d, retx %d, source copy %d", st.RequestsPastRounds, st.RetxSent, st.SourceCopySent)
	}
}

// TestBurstGapIgnoresIdleC5 (C5; E35): messages of packets 10 us apart with 20 ms of idle between
// them: the burst gap follows the packets of a burst, so the last block of every message closes,
// and its repair goes out, within a few packet gaps of its last packet, not after milliseconds
// the idle spells would add to a plain mean.
func TestBurstGapIgnoresIdleC5(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 32, 2, 0), WithAdaptation(false), WithRepairFraction(16))
	establish(t, s, 0, 3)
	now := time.Millisecond
	p := psn.PSN(0x100)
	for msg := range 10 {
		for range 20 { // 20 packets: a block of 32 stays open after them
			s.Observe(now, packet(p, 300))
			p = p.Add(1)
			now += 10 * time.Microsecond
		}
		drain(s)
		last := now - 10*time.Microsecond
		d, ok := s.NextDeadline()
		if !ok || d-last > 100*time.Microsecond {
			t.Fatalf("message %d: the open block closes %v after its last packet", msg, d-last)
		}
		s.Tick(d)
		if n := len(repairs(drain(s))); n != 2 {
			t.Fatalf("message %d: %d REPAIRs at the burst gap", msg, n)
		}
		now += 20 * time.Millisecond
	}
}

// TestGapAcrossSessionsInfoE29 (E29): a new session goes on in the flow's PSN space, so PSNs
// skipped between the last source of one session and the first of the next are absent all the
// same, and a PSN-range request for them gets INFO naming no block.
func TestGapAcrossSessionsInfoE29(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 4, 1, 0), WithAdaptation(false))
	establish(t, s, 0, 3)
	now := time.Millisecond
	for j := range 4 {
		s.Observe(now, packet(psn.PSN(0x10+j), 100))
	}
	s.Close(now, wire.ReasonNormal)
	establish(t, s, now, 4) // a new session (the gateway's, on the next packet)
	s.Observe(now, packet(0x20, 100))
	drain(s)
	b, _ := (&wire.RepairRequest{FlowID: 4, RangeForm: true, RequestID: 5, Ranges: []psn.Range{{Start: 0x15, Count: 2}}}).Append(nil)
	s.Handle(now, testCRF, b)
	rs := repairs(drain(s))
	if len(rs) != 1 || !rs[0].Info || !rs[0].Present.Empty() || rs[0].BlockStartPSN != 0x15 || rs[0].K != 2 {
		t.Fatalf("PSNs skipped across sessions: %+v", rs)
	}
}

// TestRetransmissionsKeepFlowC15 (C15): a flow whose RDMA transport still retransmits is not
// idle: CLOSE reason 1 comes 30 s after the last packet of the flow, new or sent again.
func TestRetransmissionsKeepFlowC15(t *testing.T) {
	s := newSender(t, WithPeerSilence(time.Hour))
	establish(t, s, 0, 3)
	s.Observe(time.Millisecond, packet(0, 100))
	for i := 1; i <= 25; i++ { // 25 s of retransmissions of PSN 0, one a second
		now := time.Duration(i) * time.Second
		if d, ok := s.NextDeadline(); ok && d <= now {
			s.Tick(now)
		}
		s.Observe(now, packet(0, 100))
	}
	if s.State() != StateEstablished {
		t.Fatalf("closed while retransmissions went on: %v", s.State())
	}
	d, ok := s.NextDeadline()
	for ok && d < 60*time.Second {
		s.Tick(d)
		d, ok = s.NextDeadline()
	}
	if s.State() != StateClosed || s.Stats().CloseSentByReason[wire.ReasonIdle] != 1 {
		t.Fatalf("state %v after 30 s without any packet", s.State())
	}
}
