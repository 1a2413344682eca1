// Package cremtest runs a CREM sender function and a CREM receiver function against each other
// in virtual time: a manual clock, a scriptable two-way link (drop this, delay that, reorder,
// duplicate, mark CE, in both directions, in the style of pion/transport's test bridge) and a
// source of synthetic RoCEv2 packets with correct ICRCs. Tests, the simulator and `crem demo`
// drive the engines through it.
//
// A minimal run:
//
//	p, _ := cremtest.NewPair(cremtest.Config{})
//	p.Start()
//	p.RunFor(5 * time.Millisecond)          // HELLO, PARAM_UPDATE
//	for range 100 {
//		p.Send(p.Synth.Next(1000))          // the RDMA sender emits a packet
//		p.RunFor(10 * time.Microsecond)
//	}
//	p.RunFor(100 * time.Millisecond)
//	// p.Outcomes says, per PSN, whether it was received, restored or abandoned.
//
// Nothing here touches a socket or the wall clock.
package cremtest
