package cremtest

import (
	"testing"
	"time"

	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/wire"
)

// TestScriptedLink: drop this, delay that, duplicate the other, in both directions: the link
// does exactly what it is told, and CREM restores the dropped source.
func TestScriptedLink(t *testing.T) {
	p, err := NewPair(Config{Sender: []csf.Option{csf.WithConfig(wire.SchemeCauchy, 4, 1, 0), csf.WithAdaptation(false)}})
	if err != nil {
		t.Fatal(err)
	}
	establish(t, p)
	var order []int
	p.Trace = func(_ time.Duration, pk Packet) {
		if pk.Dir == Forward && pk.Kind == RDMA {
			order = append(order, pk.N)
		}
	}
	p.Link.Filter = Chain(Drop(Forward, RDMA, 1), Delay(Forward, RDMA, 0, 500*time.Microsecond), Duplicate(Forward, RDMA, 2),
		Drop(Backward, CREM, 99))
	for range 4 {
		p.Send(p.Synth.Next(300))
		p.RunFor(10 * time.Microsecond)
	}
	p.RunFor(20 * time.Millisecond)
	want := []int{2, 2, 3, 0}
	if len(order) != len(want) {
		t.Fatalf("arrival order %v", order)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("arrival order %v, want %v", order, want)
		}
	}
	if p.Link.Dropped[Forward] != 1 || p.Link.Duplicated[Forward] != 1 {
		t.Fatalf("dropped %v duplicated %v", p.Link.Dropped, p.Link.Duplicated)
	}
	if o := p.Outcomes[1]; o == nil || o.Restored != 1 {
		t.Fatalf("PSN 1: %+v\n%+v\n%+v", o, p.Receiver.Stats().Flows, p.Sender.Stats())
	}
}
