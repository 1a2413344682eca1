package csf

import (
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/wire"
)

// TestNoDefaultPortC14: the CRF's CREM port is always explicit; the random source is required.
func TestNoDefaultPortC14(t *testing.T) {
	if _, err := New(WithFlow(testFlow), WithCRF(netip.AddrPortFrom(testCRF.Addr(), 0)), WithRandom(counter())); err == nil {
		t.Fatal("a CRF address without a port was accepted")
	}
	if _, err := New(WithFlow(testFlow), WithCRF(testCRF)); err == nil {
		t.Fatal("no random source was accepted")
	}
}

// TestHelloBackoffC3: HELLO is retransmitted with exponential backoff from 1 ms, eight attempts
// in all; then the flow is unprotected (counted) and HELLO is tried again after the hold-off.
func TestHelloBackoffC3(t *testing.T) {
	var log strings.Builder
	s := newSender(t, WithHoldOff(10*time.Second), WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	s.Start(0)
	var sentAt []time.Duration
	var nonce uint64
	now := time.Duration(0)
	for range 20 {
		for _, m := range drain(s) {
			h, ok := m.(*wire.Hello)
			if !ok {
				t.Fatalf("unexpected %T", m)
			}
			if nonce != 0 && h.SenderNonce != nonce && len(sentAt) < 8 {
				t.Fatal("nonce changed between retransmissions")
			}
			nonce = h.SenderNonce
			if h.Source != testFlow.Src || h.DestQP() != testFlow.DestQP || h.RDMAMTU == 0 {
				t.Fatalf("HELLO flow descriptor %+v", h)
			}
			sentAt = append(sentAt, now)
		}
		d, ok := s.NextDeadline()
		if !ok || len(sentAt) == 9 {
			break
		}
		now = d
		s.Tick(now)
	}
	want := []time.Duration{0, 1, 3, 7, 15, 31, 63, 127}
	for i, w := range want {
		if sentAt[i] != w*time.Millisecond {
			t.Fatalf("attempt %d at %v, want %v (all: %v)", i+1, sentAt[i], w*time.Millisecond, sentAt)
		}
	}
	if st := s.Stats(); st.Unprotected != 1 || st.HelloSent != 9 || s.State() != StateHello {
		t.Fatalf("after hold-off: stats %+v state %v", st, s.State())
	}
	if sentAt[8] != (127+128)*time.Millisecond+10*time.Second {
		t.Fatalf("retry after hold-off at %v", sentAt[8])
	}
	if !strings.Contains(log.String(), "unprotected") {
		t.Fatalf("no log line: %q", log.String())
	}
}

// TestHelloAckBindsAddressC14: HELLO_ACK is accepted only with the nonce; every later message goes
// to the address it came from; messages for the flow from elsewhere are dropped.
func TestHelloAckBindsAddressC14(t *testing.T) {
	s := newSender(t)
	s.Start(0)
	h := drain(s)[0].(*wire.Hello)
	other := netip.MustParseAddrPort("10.9.9.9:50001")
	bad := wire.HelloAck{FlowID: 5, Capabilities: flow.DefaultLimits().Capabilities(1024), AF: wire.AF4, SenderNonce: h.SenderNonce + 1, MaxOpenBlocks: 8}
	b, _ := bad.Append(nil)
	s.Handle(0, other, b)
	if s.State() != StateHello || s.Stats().HelloAckIgnored != 1 {
		t.Fatal("HELLO_ACK with a wrong nonce accepted")
	}
	good := bad
	good.SenderNonce = h.SenderNonce
	b, _ = good.Append(nil)
	s.Handle(time.Millisecond, other, b)
	if s.State() != StateEstablished || s.FlowID() != 5 {
		t.Fatalf("state %v", s.State())
	}
	var to netip.AddrPort
	s.Drain(func(d flow.Datagram) { to = d.To })
	if to != other {
		t.Fatalf("PARAM_UPDATE went to %v, not to the HELLO_ACK's source %v", to, other)
	}
	pa := wire.ParamAck{FlowID: 5, ConfigID: 1}
	b, _ = pa.Append(nil)
	s.Handle(time.Millisecond, testCRF, b) // the configured address, but not the bound one
	if s.Stats().MessagesWrongSource != 1 {
		t.Fatal("a message from an address other than the bound one was accepted")
	}
	// A duplicate HELLO_ACK changes nothing.
	b, _ = good.Append(nil)
	s.Handle(time.Millisecond, other, b)
	if s.Stats().HelloAckIgnored != 2 {
		t.Fatal("duplicate HELLO_ACK not ignored")
	}
}

// TestEffectiveLimitsAreMinimum: the configuration is clipped to the smaller of both sides.
func TestEffectiveLimitsAreMinimum(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 32, 8, 0))
	s.Start(0)
	h := drain(s)[0].(*wire.Hello)
	caps := flow.DefaultLimits().Capabilities(1024)
	caps.MaxK, caps.MaxM, caps.MaxT = 16, 2, 600
	ack := wire.HelloAck{FlowID: 9, Capabilities: caps, AF: wire.AF4, SenderNonce: h.SenderNonce, MaxOpenBlocks: 4}
	b, _ := ack.Append(nil)
	s.Handle(time.Millisecond, testCRF, b)
	pu := drain(s)[0].(*wire.ParamUpdate)
	if pu.K != 16 || pu.M != 2 || pu.T != 600 || pu.ConfigID != 1 {
		t.Fatalf("PARAM_UPDATE %+v not clipped to the CRF's limits", pu)
	}
	if len(s.blocks) != 8 {
		t.Fatalf("held blocks %d, want twice Max Open Blocks", len(s.blocks))
	}
}

// TestParamUpdateRetransmitThenCloseC2: PARAM_UPDATE is retransmitted after max(2 SRTT, 1 ms),
// doubling, eight attempts; then CLOSE with reason 2 and all state released.
func TestParamUpdateRetransmitThenCloseC2(t *testing.T) {
	s := newSender(t, WithInitialRTT(2*time.Millisecond))
	s.Start(0)
	h := drain(s)[0].(*wire.Hello)
	ack := wire.HelloAck{FlowID: 7, Capabilities: flow.DefaultLimits().Capabilities(1024), AF: wire.AF4, SenderNonce: h.SenderNonce, MaxOpenBlocks: 8}
	b, _ := ack.Append(nil)
	s.Handle(time.Millisecond, testCRF, b) // SRTT sample 1 ms
	var at []time.Duration
	now := time.Millisecond
	for range 20 {
		for _, m := range drain(s) {
			switch m := m.(type) {
			case *wire.ParamUpdate:
				at = append(at, now)
			case *wire.Close:
				if m.Reason != wire.ReasonParamUnanswered || len(at) != 8 {
					t.Fatalf("CLOSE reason %v after %d attempts", m.Reason, len(at))
				}
				if s.State() != StateClosed || s.blocks != nil {
					t.Fatal("state not released")
				}
				if at[1]-at[0] != 2*time.Millisecond || at[2]-at[1] != 4*time.Millisecond {
					t.Fatalf("retransmission times %v", at)
				}
				return
			}
		}
		d, ok := s.NextDeadline()
		if !ok {
			break
		}
		now = d
		s.Tick(now)
	}
	t.Fatalf("no CLOSE; PARAM_UPDATE at %v", at)
}

// TestParamAckStatusKeepsConfig: a non-zero PARAM_ACK status keeps the configuration in force.
func TestParamAckStatusKeepsConfig(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 8, 2, 0), WithAdaptation(false))
	establish(t, s, 0, 3)
	if err := s.Reconfigure(time.Millisecond, flow.Config{Scheme: wire.SchemeCauchy, K: 8, M: 4, T: 1062}); err != nil {
		t.Fatal(err)
	}
	pu := drain(s)[0].(*wire.ParamUpdate)
	pa := wire.ParamAck{FlowID: 3, ConfigID: pu.ConfigID, Status: wire.StatusLimitsExceeded}
	b, _ := pa.Append(nil)
	s.Handle(2*time.Millisecond, testCRF, b)
	if cfg, _ := s.Config(); cfg.ID != 1 || cfg.M != 2 || s.Stats().ParamRejected != 1 {
		t.Fatalf("config %+v after a rejection", cfg)
	}
}

// TestConfigFromEffectivePSNAfterAckC6b: a new configuration is used only for blocks that start
// at or after its Effective PSN and after PARAM_ACK; every REPAIR names its Config ID.
func TestConfigFromEffectivePSNAfterAckC6b(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 4, 1, 0), WithAdaptation(false), WithRepairFraction(16))
	establish(t, s, 0, 3)
	now := time.Millisecond
	send := func(n int) []uint8 {
		var ids []uint8
		for range n {
			now += time.Microsecond
			s.Observe(now, packet(s.next, 100))
		}
		for _, m := range drain(s) {
			if r, ok := m.(*wire.Repair); ok {
				ids = append(ids, r.ConfigID)
			}
		}
		return ids
	}
	send(8)
	if err := s.Reconfigure(now, flow.Config{Scheme: wire.SchemeCauchy, K: 4, M: 2, T: 1062}); err != nil {
		t.Fatal(err)
	}
	pu := drain(s)[0].(*wire.ParamUpdate)
	if !s.next.Before(pu.EffectivePSN) {
		t.Fatalf("Effective PSN %v not ahead of the next PSN %v", pu.EffectivePSN, s.next)
	}
	// Past the Effective PSN without PARAM_ACK: still the old configuration.
	n := int(s.next.Forward(pu.EffectivePSN))
	for _, id := range send(n + 8) {
		if id != 1 {
			t.Fatalf("config %d used before PARAM_ACK", id)
		}
	}
	// The retransmission carries a later Effective PSN (draft, Configuration).
	var pu2 *wire.ParamUpdate
	for i := 0; i < 10 && pu2 == nil; i++ {
		d, _ := s.NextDeadline()
		s.Tick(d)
		for _, m := range drain(s) {
			if p, ok := m.(*wire.ParamUpdate); ok {
				pu2 = p
			}
		}
	}
	if pu2 == nil || pu2.ConfigID != pu.ConfigID || !pu.EffectivePSN.Before(pu2.EffectivePSN) || !s.next.Before(pu2.EffectivePSN) {
		t.Fatalf("retransmission %+v after the Effective PSN %v passed", pu2, pu.EffectivePSN)
	}
	pa := wire.ParamAck{FlowID: 3, ConfigID: pu.ConfigID}
	b, _ := pa.Append(nil)
	s.Handle(now, testCRF, b)
	n = int(s.next.Forward(pu2.EffectivePSN))
	for _, id := range send(n) {
		if id != 1 {
			t.Fatalf("config %d used for a block before the Effective PSN", id)
		}
	}
	ids := send(8)
	if len(ids) == 0 || ids[len(ids)-1] != pu.ConfigID {
		t.Fatalf("new configuration not used after the Effective PSN: %v", ids)
	}
}

// TestCloseEveryReasonC2: CLOSE goes out with each reason of C2 and the Sender releases the
// flow; a CLOSE received releases it too.
func TestCloseEveryReasonC2(t *testing.T) {
	for reason := wire.Reason(0); reason <= wire.ReasonProtocolError; reason++ {
		s := newSender(t)
		establish(t, s, 0, 3)
		s.Close(time.Millisecond, reason)
		ms := drain(s)
		c, ok := ms[len(ms)-1].(*wire.Close)
		if !ok || c.Reason != reason || c.FlowID != 3 || s.State() != StateClosed || s.blocks != nil {
			t.Fatalf("reason %v: %+v, state %v", reason, ms, s.State())
		}
		s2 := newSender(t)
		establish(t, s2, 0, 3)
		b, _ := (&wire.Close{FlowID: 3, Reason: reason}).Append(nil)
		s2.Handle(time.Millisecond, testCRF, b)
		if s2.State() != StateClosed || s2.Stats().CloseReceivedByReason[reason] != 1 {
			t.Fatalf("CLOSE %v received: state %v", reason, s2.State())
		}
	}
}

// TestIdleTimeoutC15: 30 s without source packets ends the flow with CLOSE reason 1 (the CRF
// here stays silent, so the peer-silence restart of E31 is set beyond the test).
func TestIdleTimeoutC15(t *testing.T) {
	s := newSender(t, WithPeerSilence(time.Hour))
	establish(t, s, 0, 3)
	s.Observe(time.Millisecond, packet(0, 100))
	drain(s)
	d, ok := s.NextDeadline()
	for ok && d < 31*time.Second {
		s.Tick(d)
		d, ok = s.NextDeadline()
	}
	if s.State() != StateClosed || s.Stats().CloseSentByReason[wire.ReasonIdle] != 1 {
		t.Fatalf("state %v, stats %+v", s.State(), s.Stats())
	}
}

// TestRTTSamplesKarnC4: HELLO->HELLO_ACK gives a sample only when HELLO was not retransmitted.
func TestRTTSamplesKarnC4(t *testing.T) {
	s := newSender(t)
	s.Start(0)
	h := drain(s)[0].(*wire.Hello)
	s.Tick(time.Millisecond) // second attempt
	drain(s)
	ack := wire.HelloAck{FlowID: 7, Capabilities: flow.DefaultLimits().Capabilities(1024), AF: wire.AF4, SenderNonce: h.SenderNonce, MaxOpenBlocks: 8}
	b, _ := ack.Append(nil)
	s.Handle(1500*time.Microsecond, testCRF, b)
	if s.Stats().RTTSamples != 0 {
		t.Fatal("sampled a retransmitted HELLO")
	}
	pu := drain(s)[0].(*wire.ParamUpdate)
	pa := wire.ParamAck{FlowID: 7, ConfigID: pu.ConfigID}
	b, _ = pa.Append(nil)
	s.Handle(3500*time.Microsecond, testCRF, b)
	if s.Stats().RTTSamples != 1 || s.SRTT() != 2*time.Millisecond {
		t.Fatalf("PARAM_UPDATE->PARAM_ACK sample: %d samples, SRTT %v", s.Stats().RTTSamples, s.SRTT())
	}
}
