package cremtest

import (
	"testing"
	"time"

	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/wire"
)

// TestQuietFlowKeepsItsSession (E82): a flow whose sources stop (a requester's direction after
// its WRITE and READ request) loses the one LOSS_REPORT that covered its last source, and no
// REPAIR follows (m = 0: the cost rule's configuration while messages of known length go by,
// P9). The CRF has nothing more to report; the CSF must not take that silence for a CRF that
// forgot the flow (E31): a new session would have no source to see, and the CRF would close it
// idle after the handshake time.
func TestQuietFlowKeepsItsSession(t *testing.T) {
	p, err := NewPair(Config{Delay: 10 * time.Millisecond, Seed: 5,
		Sender: []csf.Option{csf.WithConfig(wire.SchemeCauchy, 32, 0, 0), csf.WithAdaptation(false),
			csf.WithInitialRTT(20 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	quiet, dropped := false, 0
	p.Link.Filter = func(pk *Packet) Fate {
		if quiet && dropped == 0 && pk.Dir == Backward && pk.Kind == CREM {
			if m, err := wire.Parse(pk.Data); err == nil && m.Type() == wire.TypeLossReport {
				dropped++
				return Fate{Drop: true}
			}
		}
		return Fate{}
	}
	p.Start()
	p.RunFor(50 * time.Millisecond)
	for range 200 {
		p.Send(p.Synth.Next(1000))
		p.RunFor(100 * time.Microsecond)
	}
	p.RunFor(200 * time.Millisecond) // the CRF reports them
	id := p.FlowID()
	quiet = true
	p.Send(p.Synth.Next(64)) // the last source: a READ request, say
	p.RunFor(10 * time.Second)
	ss, rs := p.Sender.Stats(), p.Receiver.Stats()
	if dropped != 1 || ss.PeerSilent != 0 || ss.CloseReceived+ss.CloseSent+rs.CloseSent != 0 || p.FlowID() != id {
		t.Fatalf("%d reports dropped; the CSF restarted %d times, CLOSE sent %d received %d, the CRF sent %d; Flow ID %d, was %d",
			dropped, ss.PeerSilent, ss.CloseSent, ss.CloseReceived, rs.CloseSent, p.FlowID(), id)
	}
}
