package cremtest_test

import (
	"fmt"
	"time"

	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/internal/harness/cremtest"
	"github.com/crem-project/crem/wire"
)

// A driver runs a CSF and a CRF over a link with synthetic RoCEv2 packets: every fifth packet
// is lost, and CREM restores them all.
func Example() {
	p, err := cremtest.NewPair(cremtest.Config{
		Sender: []csf.Option{csf.WithConfig(wire.SchemeCauchy, 16, 4, 0), csf.WithAdaptation(false)},
	})
	if err != nil {
		panic(err)
	}
	p.Start()
	p.RunFor(10 * time.Millisecond) // HELLO, HELLO_ACK, PARAM_UPDATE, PARAM_ACK
	p.Link.Filter = func(pk *cremtest.Packet) cremtest.Fate {
		return cremtest.Fate{Drop: pk.Kind == cremtest.RDMA && pk.N%5 == 2}
	}
	for range 64 {
		p.Send(p.Synth.Next(1000))
		p.RunFor(10 * time.Microsecond)
	}
	p.RunFor(50 * time.Millisecond)
	st := p.Receiver.Stats().Flows
	fmt.Println("received", st.Sources, "restored", st.Restored, "abandoned", st.Abandoned)
	// Output: received 51 restored 13 abandoned 0
}
