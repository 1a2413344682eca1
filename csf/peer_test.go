package csf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// TestDeadPeerProbedOncePerHoldOffC3: 100 flows toward a dead CRF share a Peer (E71). Each sends
// its eight HELLOs once; from then on the CRF gets one round of HELLOs (eight, one nonce) per
// hold-off in all, whichever flow sends it, for a minute of outage; flows started while it is down send nothing of their own.
// When the CRF answers a probe, every flow starts its session at its next Tick.
func TestDeadPeerProbedOncePerHoldOffC3(t *testing.T) {
	const flows = 100
	peer := NewPeer()
	var ss []*Sender
	for i := range flows {
		d := testFlow
		d.DestQP = uint32(0x100 + i)
		ss = append(ss, newSender(t, WithFlow(d), WithPeer(peer)))
	}
	hellos := func(now time.Duration) (n int, last *wire.Hello, by *Sender) {
		for _, s := range ss {
			for _, m := range drain(s) {
				if h, ok := m.(*wire.Hello); ok {
					n++
					last, by = h, s
				}
			}
		}
		return n, last, by
	}
	// run ticks every Sender at its deadlines up to end, counting HELLOs per second after from.
	run := func(now, end, from time.Duration) (time.Duration, map[int]int, *wire.Hello, *Sender) {
		perSecond := map[int]int{}
		var last *wire.Hello
		var by *Sender
		for now < end {
			next := end
			for _, s := range ss {
				if d, ok := s.NextDeadline(); ok && d < next {
					next = max(d, now)
				}
			}
			now = next
			for _, s := range ss {
				if d, ok := s.NextDeadline(); ok && d <= now {
					s.Tick(now)
				}
			}
			if n, h, s := hellos(now); n > 0 && now >= from {
				perSecond[int((now-from)/time.Second)] += n
				last, by = h, s
			}
		}
		return now, perSecond, last, by
	}
	for _, s := range ss[:flows/2] {
		s.Start(0)
	}
	now, _, _, _ := run(0, 300*time.Millisecond, 300*time.Millisecond)
	if st := peer.Stats(); !st.Down || st.Downs != 1 {
		t.Fatalf("after eight unanswered HELLOs of every flow: peer %+v", st)
	}
	for _, s := range ss[flows/2:] {
		s.Start(now) // toward a CRF taken for down: no HELLO series of their own
	}
	if n, _, _ := hellos(now); n != 0 {
		t.Fatalf("%d HELLOs from flows started toward a CRF taken for down", n)
	}
	now, perSecond, _, _ := run(now, 60*time.Second, now)
	total := 0
	for sec, n := range perSecond {
		if n > 2*maxAttempts {
			t.Fatalf("%d HELLOs in second %d of the outage, want a round (eight) a second at most", n, sec)
		}
		total += n
	}
	if pr := peer.Stats().Probes; pr < 58 || pr > 61 || uint64(total) != maxAttempts*pr {
		t.Fatalf("%d HELLOs in %d probes in a minute (peer %+v), want a round of eight a second", total, pr, peer.Stats())
	}
	// The CRF comes back and answers the next probe: every flow starts a session.
	var last *wire.Hello
	var by *Sender
	for last == nil {
		now, _, last, by = run(now, now+10*time.Millisecond, now)
	}
	ack := wire.HelloAck{FlowID: 7, Capabilities: flow.DefaultLimits().Capabilities(1024), AF: wire.AF4,
		SenderNonce: last.SenderNonce, MaxOpenBlocks: 64}
	b, _ := ack.Append(nil)
	by.Handle(now, testCRF, b)
	if by.State() != StateEstablished || peer.Stats().Down {
		t.Fatalf("probe answered: state %v, peer %+v", by.State(), peer.Stats())
	}
	started := 0
	for _, s := range ss {
		if d, ok := s.NextDeadline(); ok && d <= now {
			s.Tick(now)
		}
		if s.State() == StateHello || s.State() == StateEstablished {
			started++
		}
	}
	if started != flows {
		t.Fatalf("%d of %d flows started a session once the CRF answered", started, flows)
	}
}

// TestUnknownFlowCloseCountsSessionLost: a CLOSE with reason 5 from the bound CRF (the answer of
// a restarted CRF to a REPAIR for a Flow ID it does not know, E70) ends the session, and the
// sources coded since the CRF last spoke count as unprotected, session_lost (E72). The same CLOSE
// from another address, or naming another Flow ID, changes nothing.
func TestUnknownFlowCloseCountsSessionLost(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 8, 2, 0), WithAdaptation(false))
	establish(t, s, 0, 3)
	now := time.Millisecond
	for p := range psn.PSN(20) {
		s.Observe(now, packet(0x100+p, 200))
	}
	drain(s)
	closeOf := func(id uint32) []byte {
		b, _ := (&wire.Close{FlowID: id, Reason: wire.ReasonProtocolError}).Append(nil)
		return b
	}
	s.Handle(now, netip.MustParseAddrPort("10.9.9.9:50001"), closeOf(3))
	s.Handle(now, testCRF, closeOf(4))
	if s.State() != StateEstablished || s.Stats().UnprotectedSessionLost != 0 {
		t.Fatalf("a CLOSE from elsewhere or for another Flow ID: state %v, %+v", s.State(), s.Stats())
	}
	s.Handle(now, testCRF, closeOf(3))
	if st := s.Stats(); s.State() != StateClosed || st.UnprotectedSessionLost != 20 || st.CloseReceivedByReason[5] != 1 {
		t.Fatalf("CLOSE reason 5 from the bound CRF: state %v, session lost %d, want 20", s.State(), st.UnprotectedSessionLost)
	}
	// With no session, sources are unprotected for want of one.
	s.Observe(now, packet(0x200, 200))
	if st := s.Stats(); st.UnprotectedNoSession != 1 {
		t.Fatalf("a source with no session: %+v", st)
	}
}

// TestSilenceTimedFromFirstUnansweredSource: the CRF's silence is timed from the first source it
// has not answered (E70), not from its last message: a flow idle for longer than the silence
// that sends again is not taken for lost at once, and one whose CRF says nothing for 32 SRTT
// (at least 1 s) after that source is, its unanswered sources counted session_lost.
func TestSilenceTimedFromFirstUnansweredSource(t *testing.T) {
	s := newSender(t, WithConfig(wire.SchemeCauchy, 8, 2, 0), WithAdaptation(false))
	establish(t, s, 0, 3)
	now := 5 * time.Second // idle since the handshake: longer than the silence
	// Sources for longer than E82's span (four SRTT, at least 4 ms), so that the CRF owed
	// several LOSS_REPORTs: a single one lost after a quiet flow's last source is no sign.
	const sources = 10
	for i := range sources {
		s.Observe(now+time.Duration(i)*time.Millisecond, packet(0x100+psn.PSN(i), 200))
		s.Tick(now + time.Duration(i)*time.Millisecond)
	}
	if s.State() != StateEstablished {
		t.Fatalf("sources after an idle spell: state %v", s.State())
	}
	d, ok := s.NextDeadline()
	if !ok || d > now+time.Second {
		t.Fatalf("deadline %v %v, want the silence within a second of the first source", d, ok)
	}
	s.Tick(now + time.Second)
	if st := s.Stats(); st.PeerSilent != 1 || st.UnprotectedSessionLost != sources || s.State() != StateHello {
		t.Fatalf("a second of silence after a source: state %v, %+v", s.State(), st)
	}
}
