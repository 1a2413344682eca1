package csf

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/internal/fault"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// A CSF-side fault's scenario: it drives a Sender with the faults planted and returns "" when
// the Sender obeyed the rule the fault breaks, else what it did instead.
type faultScenario func(t *testing.T, f fault.Set) string

// csfFaults are the faults the CSF makes, each with the scenario that shows it.
var csfFaults = map[fault.Set]faultScenario{
	fault.WrongCoefficient:     scenarioCoefficient,
	fault.RepairAboveX:         scenarioAboveX,
	fault.AnswerRequestSource:  scenarioRequestSource,
	fault.RequestEverySRTT:     scenarioEverySRTT,
	fault.CodedRetxWholeBlock:  scenarioOverL,
	fault.NoHelloBackoff:       scenarioHelloBackoff,
	fault.FixedFlowNonce:       scenarioNonce,
	fault.EarlyParams:          scenarioEarlyParams,
	fault.ParamRetryForever:    scenarioParamRetries,
	fault.BreakerNeverResumes:  scenarioBreakerResumes,
	fault.PathReportAnySource:  scenarioPathReportSource,
	fault.SpoofedCloseHonoured: scenarioSpoofedClose,
}

// crfOnly are the faults the CRF alone makes: WithHooks takes them and the Sender ignores them.
var crfOnly = []fault.Set{fault.HelloAckLarger, fault.LimitsNotMinimum, fault.LossReportRare,
	fault.LossReportMiscount, fault.AcceptMalformed}

// TestFaultsDepartFromTheDraft: without a fault the Sender obeys each rule a CSF-side fault
// breaks; with the fault planted it breaks it.
func TestFaultsDepartFromTheDraft(t *testing.T) {
	for f, sc := range csfFaults {
		t.Run(f.String(), func(t *testing.T) {
			if got := sc(t, 0); got != "" {
				t.Fatalf("no fault planted, yet %s", got)
			}
			if got := sc(t, f); got == "" {
				t.Fatalf("fault %v planted, yet the rule held", f)
			} else {
				t.Logf("with the fault: %s", got)
			}
		})
	}
}

// TestFaultsCoverTheCSF: every fault is the CSF's (with a scenario here) or the CRF's alone,
// and the CRF's alone change nothing a CSF does.
func TestFaultsCoverTheCSF(t *testing.T) {
	for _, f := range fault.All() {
		_, csfSide := csfFaults[f]
		crfSide := false
		for _, c := range crfOnly {
			crfSide = crfSide || c == f
		}
		if csfSide == crfSide {
			t.Errorf("fault %v: CSF scenario %v, CRF alone %v: want exactly one", f, csfSide, crfSide)
		}
	}
	var all fault.Set
	for _, c := range crfOnly {
		all |= c
	}
	for f, sc := range csfFaults {
		if got := sc(t, all); got != "" {
			t.Errorf("only CRF faults planted, yet %v's rule broke: %s", f, got)
		}
	}
}

// faultBlock is fullBlock with the faults planted: (Cauchy, k, m), one full block at 0x100.
func faultBlock(t *testing.T, f fault.Set, k, m int, opts ...Option) (*Sender, time.Duration, []*wire.Repair) {
	t.Helper()
	s := newSender(t, append([]Option{WithConfig(wire.SchemeCauchy, k, m, 0), WithAdaptation(false),
		WithRepairFraction(16), WithHooks(f)}, opts...)...)
	establish(t, s, 0, 3)
	now := time.Millisecond
	for j := range k {
		s.Observe(now, packet(psn.PSN(0x100+j), 300))
	}
	return s, now, repairs(drain(s))
}

// expected computes the scheme 1 symbols with the given indices over L of the block faultBlock
// sends, as Section 5 defines them.
func expected(t *testing.T, s *Sender, k int, over psn.Bitmap, idx ...int) [][]byte {
	t.Helper()
	cfg, _ := s.Config()
	src := make([][]byte, k)
	for j := range k {
		sym, err := fec.AppendSymbol(nil, packet(psn.PSN(0x100+j), 300), cfg.T)
		if err != nil {
			t.Fatal(err)
		}
		src[j] = sym
	}
	out := make([][]byte, len(idx))
	for n := range out {
		out[n] = make([]byte, cfg.T)
	}
	enc, err := fec.NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	if err := enc.Encode(out, idx, over, src); err != nil {
		t.Fatal(err)
	}
	return out
}

// Section 5: ordinary repair symbol i is the sum over the present positions of C(i, j) s_j.
func scenarioCoefficient(t *testing.T, f fault.Set) string {
	s, _, rs := faultBlock(t, f, 4, 2)
	if len(rs) != 2 {
		return fmt.Sprintf("%d ordinary symbols, want 2", len(rs))
	}
	want := expected(t, s, 4, rs[0].Present, 0, 1)
	for n, r := range rs {
		if r.Retx || int(r.RepairIndex) != n || !bytes.Equal(r.Symbol, want[n]) {
			return fmt.Sprintf("ordinary symbol %d is not the sum of C(i, j) s_j", r.RepairIndex)
		}
	}
	return ""
}

// Section 7: a request with X lost positions is answered with at most X symbols.
func scenarioAboveX(t *testing.T, f fault.Set) string {
	s, now, _ := faultBlock(t, f, 8, 2)
	req := wire.RepairRequest{RequestID: 7, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, BlockStartPSN: 0x100,
		SuggestedM: 1, Lost: lost(3)}
	if rs := sendRequest(t, s, now, req); len(rs) != 1 {
		return fmt.Sprintf("%d symbols answer a request with X = 1", len(rs))
	}
	return ""
}

// Section 7, Security Considerations: REPAIR goes only to the address bound at HELLO, never to
// a request's source, and only the bound address's requests are taken.
func scenarioRequestSource(t *testing.T, f fault.Set) string {
	s, now, _ := faultBlock(t, f, 8, 2)
	req := wire.RepairRequest{FlowID: 3, RequestID: 7, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8,
		BlockStartPSN: 0x100, SuggestedM: 1, Lost: lost(3)}
	b, _ := req.Append(nil)
	other := netip.MustParseAddrPort("10.9.9.9:50001")
	s.Handle(now, other, b)
	var to []netip.AddrPort
	s.Drain(func(d flow.Datagram) { to = append(to, d.To) })
	if len(to) > 0 {
		return fmt.Sprintf("a request from %v answered to %v", other, to)
	}
	// The bound address stays the only one answered.
	req.RequestID = 8
	b, _ = req.Append(nil)
	s.Handle(now, testCRF, b)
	s.Drain(func(d flow.Datagram) {
		if d.To != testCRF {
			t.Errorf("an answer to the bound CRF went to %v", d.To)
		}
	})
	return ""
}

// Section 7: at most one answer per block per SRTT; a sooner request waits.
func scenarioEverySRTT(t *testing.T, f fault.Set) string {
	s, now, _ := faultBlock(t, f, 8, 2)
	req := wire.RepairRequest{RequestID: 7, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, BlockStartPSN: 0x100,
		SuggestedM: 1, Lost: lost(3)}
	if len(sendRequest(t, s, now, req)) != 1 {
		t.Fatal("first request not answered")
	}
	req.RequestID = 8
	if rs := sendRequest(t, s, now+s.SRTT()/2, req); len(rs) != 0 {
		return fmt.Sprintf("a second request half an SRTT later answered at once (%d symbols)", len(rs))
	}
	return ""
}

// Sections 5 and 7: a coded retransmission is the sum over exactly L.
func scenarioOverL(t *testing.T, f fault.Set) string {
	s, now, _ := faultBlock(t, f, 8, 2)
	req := wire.RepairRequest{RequestID: 7, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, BlockStartPSN: 0x100,
		SuggestedM: 2, Lost: lost(2, 5)}
	rs := sendRequest(t, s, now, req)
	if len(rs) != 2 {
		t.Fatalf("%d symbols answer X = 2", len(rs))
	}
	want := expected(t, s, 8, req.Lost, int(rs[0].RepairIndex), int(rs[1].RepairIndex))
	for n, r := range rs {
		if !r.Retx || r.Lost != req.Lost || !bytes.Equal(r.Symbol, want[n]) {
			return fmt.Sprintf("coded retransmission %d is not the sum over L = {2, 5}", r.RepairIndex)
		}
	}
	return ""
}

// Section 6: HELLO goes with exponential backoff from 1 ms, at most eight attempts.
func scenarioHelloBackoff(t *testing.T, f fault.Set) string {
	s := newSender(t, WithHooks(f), WithHoldOff(time.Hour))
	s.Start(0)
	var at []time.Duration
	now := time.Duration(0)
	for now < 2*time.Second {
		for _, m := range drain(s) {
			if _, ok := m.(*wire.Hello); ok {
				at = append(at, now)
			}
		}
		d, ok := s.NextDeadline()
		if !ok || d > 2*time.Second {
			break
		}
		now = d
		s.Tick(now)
	}
	if len(at) > maxAttempts {
		return fmt.Sprintf("%d HELLOs in 2 s, want at most %d", len(at), maxAttempts)
	}
	for n := 2; n < len(at); n++ {
		if gap, prev := at[n]-at[n-1], at[n-1]-at[n-2]; gap != 2*prev {
			return fmt.Sprintf("HELLO gaps %v then %v: no backoff", prev, gap)
		}
	}
	return ""
}

// Section 6: the HELLO nonce is random: sessions do not repeat it.
func scenarioNonce(t *testing.T, f fault.Set) string {
	s := newSender(t, WithHooks(f))
	seen := map[uint64]bool{}
	for n := range 3 {
		s.Start(time.Duration(n) * time.Second)
		for _, m := range drain(s) {
			if h, ok := m.(*wire.Hello); ok {
				if seen[h.SenderNonce] {
					return fmt.Sprintf("HELLO nonce %#x repeated by a new session", h.SenderNonce)
				}
				seen[h.SenderNonce] = true
			}
		}
		s.Close(time.Duration(n)*time.Second, wire.ReasonIdle)
	}
	return ""
}

// Section 6: a PARAM_UPDATE's parameters apply only from its Effective PSN, once PARAM_ACK came.
func scenarioEarlyParams(t *testing.T, f fault.Set) string {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 4, 1, 0), WithAdaptation(false), WithRepairFraction(16), WithHooks(f))
	establish(t, s, 0, 3)
	now := time.Millisecond
	p := psn.PSN(0x100)
	for range 4 {
		s.Observe(now, packet(p, 300))
		p++
	}
	drain(s)
	cur, _ := s.Config()
	next := cur
	next.M = 2
	if err := s.Reconfigure(now, next); err != nil {
		t.Fatal(err)
	}
	drain(s) // the PARAM_UPDATE, never acknowledged
	for range 8 {
		now += 10 * time.Microsecond
		s.Observe(now, packet(p, 300))
		p++
	}
	for _, r := range repairs(drain(s)) {
		if r.ConfigID != cur.ID {
			return fmt.Sprintf("block at %v repaired under Config ID %d before its PARAM_ACK", r.BlockStartPSN, r.ConfigID)
		}
	}
	return ""
}

// Section 6: an unanswered PARAM_UPDATE is tried at most eight times, then CLOSE (reason 2).
func scenarioParamRetries(t *testing.T, f fault.Set) string {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 4, 1, 0), WithAdaptation(false), WithHooks(f))
	establish(t, s, 0, 3)
	cur, _ := s.Config()
	next := cur
	next.M = 2
	if err := s.Reconfigure(0, next); err != nil {
		t.Fatal(err)
	}
	updates, closed := 0, false
	now := time.Duration(0)
	for now < time.Minute && !closed {
		for _, m := range drain(s) {
			switch m := m.(type) {
			case *wire.ParamUpdate:
				updates++
			case *wire.Close:
				closed = m.Reason == wire.ReasonParamUnanswered
			}
		}
		d, ok := s.NextDeadline()
		if !ok {
			break
		}
		now = d
		s.Tick(now)
	}
	if updates > maxAttempts || !closed {
		return fmt.Sprintf("%d PARAM_UPDATEs in a minute, CLOSE reason 2: %v", updates, closed)
	}
	return ""
}

// Section 10: the circuit breaker resumes redundancy once its condition has been absent for ten
// seconds.
func scenarioBreakerResumes(t *testing.T, f fault.Set) string {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 8, 2, 0), WithAdaptation(false), WithHooks(f))
	establish(t, s, 0, 3)
	report := func(now time.Duration, expected, received uint32) {
		lr := wire.LossReport{FlowID: 3, IntervalUS: 100_000, Expected: expected, Received: received}
		b, _ := lr.Append(nil)
		s.Handle(now, testCRF, b)
	}
	now := time.Duration(0)
	for range 20 { // two seconds of half the packets lost
		now += 100 * time.Millisecond
		report(now, 1000, 500)
	}
	if s.M() != 0 {
		t.Fatalf("breaker not tripped: m = %d", s.M())
	}
	for range 150 { // fifteen seconds without loss
		now += 100 * time.Millisecond
		report(now, 1000, 1000)
	}
	if s.M() == 0 {
		return "m still 0 fifteen seconds after the loss ended"
	}
	return ""
}

// Section 9, C14: PATH_REPORT counts only from configured reporters.
func scenarioPathReportSource(t *testing.T, f fault.Set) string {
	s, now, _ := faultBlock(t, f, 8, 2, WithReporters(testReporter))
	s.Handle(now, netip.MustParseAddrPort("10.6.6.6:50000"), pathReport(t, wire.MethodNodeDrops,
		drops(wire.CauseCorruption, 0x101, 0x102)))
	if rs := repairs(drain(s)); len(rs) > 0 {
		return fmt.Sprintf("an unlisted reporter's PATH_REPORT drew %d extra symbols", len(rs))
	}
	return ""
}

// Security Considerations: a CLOSE from another address than the bound CRF's ends nothing.
func scenarioSpoofedClose(t *testing.T, f fault.Set) string {
	s, now, _ := faultBlock(t, f, 8, 2)
	b, _ := (&wire.Close{FlowID: 3, Reason: wire.ReasonIdle}).Append(nil)
	s.Handle(now, netip.MustParseAddrPort("10.9.9.9:50000"), b)
	if s.State() != StateEstablished {
		return fmt.Sprintf("a CLOSE from another address left the session %v", s.State())
	}
	return ""
}
