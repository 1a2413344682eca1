package gateway_test

import (
	"context"
	"testing"

	"github.com/crem-project/crem/gateway"
)

// startRelayPair runs gateways A and B back to back in relay mode on loopback, each with one
// shard: what arrives at A's RelayAddr crosses A's CSF and the WAN socket to B, whose CRF hands
// it to target. stop ends both and waits for them.
func startRelayPair(tb testing.TB, target string, rule []gateway.ProtectRule, pol gateway.PolicyConfig) (a, b *gateway.Gateway, stop func()) {
	tb.Helper()
	aCREM, bCREM, bWAN := freeUDP(tb), freeUDP(tb), freeUDP(tb)
	ctx, cancel := context.WithCancel(context.Background())
	var done []chan struct{}
	stop = func() {
		cancel()
		for _, d := range done {
			<-d
		}
	}
	mk := func(c gateway.Config) *gateway.Gateway {
		g, err := gateway.New(c, gateway.Options{Seed: 1})
		if err != nil {
			stop()
			tb.Fatal(err)
		}
		d := make(chan struct{})
		done = append(done, d)
		go func() { defer close(d); g.Run(ctx) }()
		return g
	}
	b = mk(gateway.Config{CREMAddress: bCREM, Peer: aCREM, Protect: rule, Shards: 1, Policy: pol,
		Relay: gateway.RelayConfig{Listen: "127.0.0.1:0", Target: target, WANListen: bWAN, PeerData: "127.0.0.1:9"}})
	a = mk(gateway.Config{CREMAddress: aCREM, Peer: bCREM, Protect: rule, Shards: 1, Policy: pol,
		Relay: gateway.RelayConfig{Listen: "127.0.0.1:0", Target: "127.0.0.1:9", WANListen: "127.0.0.1:0", PeerData: bWAN}})
	return a, b, stop
}
