package crf

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/internal/fault"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// A CRF-side fault's scenario: it drives a Receiver with the faults planted and returns "" when
// the Receiver obeyed the rule the fault breaks, else what it did instead.
type faultScenario func(t *testing.T, f fault.Set) string

// crfFaults are the faults the CRF makes, each with the scenario that shows it.
var crfFaults = map[fault.Set]faultScenario{
	fault.HelloAckLarger:       scenarioAckSize,
	fault.LimitsNotMinimum:     scenarioLimits,
	fault.LossReportRare:       scenarioReportRate,
	fault.LossReportMiscount:   scenarioReportCounts,
	fault.AcceptMalformed:      scenarioMalformedRepair,
	fault.SpoofedCloseHonoured: scenarioSpoofedClose,
}

// csfOnly are the faults the CSF alone makes: WithHooks takes them and the Receiver ignores them.
var csfOnly = []fault.Set{fault.WrongCoefficient, fault.RepairAboveX, fault.AnswerRequestSource,
	fault.RequestEverySRTT, fault.CodedRetxWholeBlock, fault.NoHelloBackoff, fault.FixedFlowNonce,
	fault.EarlyParams, fault.ParamRetryForever, fault.BreakerNeverResumes, fault.PathReportAnySource}

// TestFaultsDepartFromTheDraft: without a fault the Receiver obeys each rule a CRF-side fault
// breaks; with the fault planted it breaks it.
func TestFaultsDepartFromTheDraft(t *testing.T) {
	for f, sc := range crfFaults {
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

// TestFaultsCoverTheCRF: every fault is the CRF's (with a scenario here) or the CSF's alone,
// and the CSF's alone change nothing a CRF does.
func TestFaultsCoverTheCRF(t *testing.T) {
	var all fault.Set
	for _, c := range csfOnly {
		all |= c
	}
	for _, f := range fault.All() {
		_, crfSide := crfFaults[f]
		if crfSide == all.Has(f) {
			t.Errorf("fault %v: CRF scenario %v, CSF alone %v: want exactly one", f, crfSide, all.Has(f))
		}
	}
	for f, sc := range crfFaults {
		if got := sc(t, all); got != "" {
			t.Errorf("only CSF faults planted, yet %v's rule broke: %s", f, got)
		}
	}
}

// rawMsgs returns every datagram the Receiver queued, unparsed, with its destination.
func rawMsgs(r *Receiver) []flow.Datagram {
	var out []flow.Datagram
	r.Drain(func(d flow.Datagram) {
		d.Payload = append([]byte(nil), d.Payload...)
		out = append(out, d)
	})
	return out
}

// Security Considerations: HELLO_ACK is never larger than the HELLO it answers, the first
// answer or one to a HELLO sent again.
func scenarioAckSize(t *testing.T, f fault.Set) string {
	r := newReceiver(t, Settings{}, WithHooks(f))
	h := msg(t, &wire.Hello{Capabilities: flow.DefaultLimits().Capabilities(1024), SenderNonce: 42,
		Source: testFlow.Src, Destination: testFlow.Dst, FlowLabel: testFlow.DestQP})
	for n := range 2 {
		r.Handle(time.Duration(n)*time.Millisecond, testCSF, h, false)
		acks := 0
		for _, d := range rawMsgs(r) {
			if d.Payload[0]&0x0f != uint8(wire.TypeHelloAck) {
				continue
			}
			acks++
			if len(d.Payload) > len(h) {
				return fmt.Sprintf("a HELLO of %d octets answered by a HELLO_ACK of %d", len(h), len(d.Payload))
			}
		}
		if acks != 1 {
			t.Fatalf("HELLO %d: %d HELLO_ACKs", n+1, acks)
		}
	}
	return ""
}

// Section 6: the effective limits are the minimum of both sides': a configuration beyond the
// CSF's own Max k is refused with status 2, though within the CRF's.
func scenarioLimits(t *testing.T, f fault.Set) string {
	r := newReceiver(t, Settings{}, WithHooks(f))
	theirs := flow.DefaultLimits()
	theirs.MaxK = 8
	h := msg(t, &wire.Hello{Capabilities: theirs.Capabilities(1024), SenderNonce: 42, Source: testFlow.Src,
		Destination: testFlow.Dst, FlowLabel: testFlow.DestQP})
	r.Handle(0, testCSF, h, false)
	var id uint32
	for _, m := range drainMsgs(r) {
		if a, ok := m.(*wire.HelloAck); ok {
			id = a.FlowID
			if int(a.MaxK) <= theirs.MaxK {
				t.Fatalf("the CRF's own Max k is %d: the scenario needs one above the CSF's %d", a.MaxK, theirs.MaxK)
			}
		}
	}
	pu := wire.ParamUpdate{FlowID: id, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 16, M: 2, T: testT}
	r.Handle(time.Millisecond, testCSF, msg(t, &pu), false)
	for _, m := range drainMsgs(r) {
		if a, ok := m.(*wire.ParamAck); ok {
			if a.Status != wire.StatusLimitsExceeded {
				return fmt.Sprintf("k = 16 beyond the CSF's Max k of 8 answered with status %d", a.Status)
			}
			return ""
		}
	}
	t.Fatal("no PARAM_ACK")
	return ""
}

// Section 8: LOSS_REPORT goes at least once per SRTT while the flow is active.
func scenarioReportRate(t *testing.T, f fault.Set) string {
	r := newReceiver(t, Settings{}, WithHooks(f), WithInitialRTT(10*time.Millisecond))
	id := open(t, r, 0, cfg8)
	var at []time.Duration
	p := psn.PSN(0x100)
	for now := time.Duration(0); now < 200*time.Millisecond; now += 100 * time.Microsecond {
		r.Observe(now, id, packet(p, 200), false)
		p++
		if d, ok := r.NextDeadline(); ok && d <= now {
			r.Tick(now)
		}
		for _, m := range drainMsgs(r) {
			if _, ok := m.(*wire.LossReport); ok {
				at = append(at, now)
			}
		}
		drainDel(r)
	}
	// SRTT is 10 ms (no sample yet): about twenty reports, no gap much over 10 ms.
	if len(at) < 15 {
		return fmt.Sprintf("%d LOSS_REPORTs in 200 ms at an SRTT of 10 ms", len(at))
	}
	for n := 1; n < len(at); n++ {
		if gap := at[n] - at[n-1]; gap > 11*time.Millisecond {
			return fmt.Sprintf("LOSS_REPORTs %v apart at an SRTT of 10 ms", gap)
		}
	}
	return ""
}

// Section 8: LOSS_REPORT counts the interval's sources expected and received before
// restoration: a lost source restored by repair is still a loss.
func scenarioReportCounts(t *testing.T, f fault.Set) string {
	r := newReceiver(t, Settings{}, WithHooks(f))
	id := open(t, r, 0, cfg8)
	b := newBlock(0x100, 8)
	for j := range 8 {
		if j != 4 {
			r.Observe(time.Millisecond, id, b.pkts[j], false)
		}
	}
	r.Handle(time.Millisecond, testCSF, b.repair(t, id, 0, psn.Bitmap{}, 0), false)
	r.Tick(10 * time.Millisecond)
	for _, m := range drainMsgs(r) {
		if lr, ok := m.(*wire.LossReport); ok {
			if lr.Expected != 8 || lr.Received != 7 {
				return fmt.Sprintf("one source of eight lost (and restored), reported as %d expected, %d received", lr.Expected, lr.Received)
			}
			return ""
		}
	}
	t.Fatal("no LOSS_REPORT")
	return ""
}

// malformedRepairs are REPAIRs whose Length disagrees with their datagram, either way.
var malformedRepairs = []struct {
	name string
	cut  func(m []byte) []byte
}{
	{"an octet after its Length", func(m []byte) []byte { return append(m, 0) }},
	{"a Length an octet beyond the datagram", func(m []byte) []byte {
		binary.BigEndian.PutUint16(m[2:], uint16(len(m)+1))
		return m
	}},
}

// Section 4: a REPAIR whose Length disagrees with its datagram is discarded, whichever way it
// disagrees.
func scenarioMalformedRepair(t *testing.T, f fault.Set) string {
	for n := range malformedRepairs {
		if got := malformedRepair(t, f, n); got != "" {
			return got
		}
	}
	return ""
}

// TestAcceptMalformedBothWays: fault.AcceptMalformed uses a REPAIR whose Length is short of its
// datagram and one whose Length is beyond it.
func TestAcceptMalformedBothWays(t *testing.T) {
	for n, bad := range malformedRepairs {
		if malformedRepair(t, fault.AcceptMalformed, n) == "" {
			t.Errorf("a REPAIR with %s discarded under the fault", bad.name)
		}
	}
}

// malformedRepair sends the block's only REPAIR, malformed the nth way, for its one lost source.
func malformedRepair(t *testing.T, f fault.Set, n int) string {
	bad := malformedRepairs[n]
	r := newReceiver(t, Settings{}, WithHooks(f))
	id := open(t, r, 0, cfg8)
	b := newBlock(0x100, 8)
	for j := range 8 {
		if j != 4 {
			r.Observe(time.Millisecond, id, b.pkts[j], false)
		}
	}
	drainDel(r)
	r.Handle(time.Millisecond, testCSF, bad.cut(b.repair(t, id, 0, psn.Bitmap{}, 0)), false)
	for _, d := range drainDel(r) {
		if d.Kind == Restored {
			return fmt.Sprintf("a REPAIR with %s restored PSN %v", bad.name, d.PSN)
		}
	}
	if st := r.Stats(); st.MessagesMalformed != 1 {
		return fmt.Sprintf("a REPAIR with %s not counted malformed (%d)", bad.name, st.MessagesMalformed)
	}
	return ""
}

// Security Considerations: a CLOSE from another address than the one HELLO came from ends
// nothing, for a flow or a session still pending.
func scenarioSpoofedClose(t *testing.T, f fault.Set) string {
	other := netip.MustParseAddrPort("10.9.9.9:50000")
	r := newReceiver(t, Settings{}, WithHooks(f))
	id := open(t, r, 0, cfg8)
	r.Observe(time.Millisecond, id, packet(0x100, 200), false) // a flow, no longer pending
	if _, ok := r.FlowStats(id); !ok {
		t.Fatal("no flow")
	}
	r.Handle(2*time.Millisecond, other, msg(t, &wire.Close{FlowID: id, Reason: wire.ReasonIdle}), false)
	if _, ok := r.FlowStats(id); !ok {
		return "a CLOSE from another address released the flow"
	}
	h := hello(43)
	h.FlowLabel++
	r.Handle(3*time.Millisecond, testCSF, msg(t, &h), false)
	var pending uint32
	for _, m := range drainMsgs(r) {
		if a, ok := m.(*wire.HelloAck); ok {
			pending = a.FlowID
		}
	}
	r.Handle(4*time.Millisecond, other, msg(t, &wire.Close{FlowID: pending, Reason: wire.ReasonIdle}), false)
	if _, ok := r.FlowStats(pending); !ok {
		return "a CLOSE from another address ended a pending session"
	}
	return ""
}
