package gateway_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/crem-project/crem/gateway"
)

// startRelayPair runs gateways A and B back to back in relay mode on loopback, each with one
// shard: what arrives at A's RelayAddr crosses A's CSF and the WAN socket to B, whose CRF hands
// it to target. stop ends both and waits for them.
func startRelayPair(tb testing.TB, target netip.AddrPort, rule []gateway.ProtectRule, pol gateway.PolicyConfig) (a, b *gateway.Gateway, stop func()) {
	tb.Helper()
	aCREM, bCREM, bWAN := boundUDP(tb), boundUDP(tb), boundUDP(tb)
	ctx, cancel := context.WithCancel(context.Background())
	var done []chan struct{}
	stop = func() {
		cancel()
		for _, d := range done {
			<-d
		}
	}
	mk := func(c gateway.Config, socks gateway.Sockets) *gateway.Gateway {
		g, err := gateway.New(c, gateway.Options{Seed: 1, Sockets: socks})
		if err != nil {
			stop()
			tb.Fatal(err)
		}
		d := make(chan struct{})
		done = append(done, d)
		go func() { defer close(d); g.Run(ctx) }()
		return g
	}
	b = mk(gateway.Config{Peer: addrOf(aCREM), Protect: rule, Shards: 1, Policy: pol,
		Relay: gateway.RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Target: target, PeerData: netip.MustParseAddrPort("127.0.0.1:9")}},
		gateway.Sockets{CREM: bCREM, WAN: bWAN})
	a = mk(gateway.Config{Peer: addrOf(bCREM), Protect: rule, Shards: 1, Policy: pol,
		Relay: gateway.RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Target: netip.MustParseAddrPort("127.0.0.1:9"), WANListen: netip.MustParseAddrPort("127.0.0.1:0"), PeerData: addrOf(bWAN)}},
		gateway.Sockets{CREM: aCREM})
	return a, b, stop
}
