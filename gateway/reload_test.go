package gateway_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/gateway"
	"github.com/crem-project/crem/internal/harness/cremtest"
	"github.com/crem-project/crem/wire"
)

// TestGatewayReload: a running gateway takes a new protect rule (Reload, what SIGHUP calls):
// a flow it left unprotected before is protected after, while the flow it protected since
// before keeps its session and keeps carrying. A configuration that changes a socket, or that
// does not validate, is refused with a *ConfigError naming the key, and the gateway runs on
// as it was.
func TestGatewayReload(t *testing.T) {
	target := boundUDP(t)
	go func() { // the endpoint behind B: drains what arrives
		buf := make([]byte, 9216)
		for {
			if _, err := target.Read(buf); err != nil {
				return
			}
		}
	}()
	ep1, ep2 := boundUDP(t), boundUDP(t)
	port1, port2 := addrOf(ep1).Port(), addrOf(ep2).Port()
	const qp1, qp2 = 0x42, 0x43
	off := false
	pol := gateway.PolicyConfig{K: new(8), M: new(2), MTU: new(256), Adapt: &off, BurstGap: gateway.Dur(time.Millisecond), HelloHoldOff: gateway.Dur(100 * time.Millisecond)}
	both := []gateway.ProtectRule{{QP: qp1, SrcPort: port1}, {QP: qp2, SrcPort: port2}}
	aCREM, bCREM, bWAN := boundUDP(t), boundUDP(t), boundUDP(t)
	ctx, cancel := context.WithCancel(context.Background())
	var done []chan struct{}
	defer func() {
		cancel()
		for _, d := range done {
			<-d
		}
	}()
	run := func(g *gateway.Gateway) {
		d := make(chan struct{})
		done = append(done, d)
		go func() { defer close(d); g.Run(ctx) }()
	}
	b, err := gateway.New(gateway.Config{Peer: addrOf(aCREM), Protect: both, Shards: 1, Policy: pol,
		Relay: gateway.RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Target: addrOf(target), PeerData: netip.MustParseAddrPort("127.0.0.1:9")}},
		gateway.Options{Seed: 1, Sockets: gateway.Sockets{CREM: bCREM, WAN: bWAN}})
	if err != nil {
		t.Fatal(err)
	}
	run(b)
	aConfig := gateway.Config{Peer: addrOf(bCREM), Protect: both[:1], Shards: 1, Policy: pol,
		Relay: gateway.RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Target: netip.MustParseAddrPort("127.0.0.1:9"),
			WANListen: netip.MustParseAddrPort("127.0.0.1:0"), PeerData: addrOf(bWAN)}}
	a, err := gateway.New(aConfig, gateway.Options{Seed: 1, Sockets: gateway.Sockets{CREM: aCREM}})
	if err != nil {
		t.Fatal(err)
	}
	run(a)

	lo := netip.MustParseAddr("127.0.0.1")
	flow1 := cremtest.Synth{Desc: flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: lo, Dst: lo, DestQP: qp1, SrcPort: port1}, PSN: 1}
	flow2 := cremtest.Synth{Desc: flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: lo, Dst: lo, DestQP: qp2, SrcPort: port2}, PSN: 1}
	sendSome := func(ep *net.UDPConn, s *cremtest.Synth) {
		for range 16 {
			ep.WriteToUDPAddrPort(s.Next(256), a.RelayAddr())
		}
	}
	// waitFor sends both flows' sources until cond holds of the gateways' counters.
	waitFor := func(what string, cond func(sa, sb gateway.Stats) bool) (gateway.Stats, gateway.Stats) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			sendSome(ep1, &flow1)
			sendSome(ep2, &flow2)
			sa, sb := a.Stats(), b.Stats()
			if cond(sa, sb) {
				return sa, sb
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: A %+v; B's CRF %+v", what, sa.Sender, sb.Receiver)
			}
		}
	}
	_, sb := waitFor("flow 1 protected", func(sa, sb gateway.Stats) bool {
		return sa.Flows == 1 && sa.Sender.ConfigsApplied > 0 && sb.Receiver.FlowsOpened == 1 && sb.Receiver.Flows.Sources > 0
	})
	if a.Stats().Flows != 1 {
		t.Fatalf("flow 2 has a CSF before the rule that covers it")
	}

	// Refused: a socket cannot change, nor can a value that does not validate; nothing changes.
	moved := aConfig
	moved.Protect = both
	moved.Relay.Target = netip.MustParseAddrPort("127.0.0.1:10")
	var ce *gateway.ConfigError
	if _, err := a.Reload(moved); !errors.As(err, &ce) || ce.Key != "relay.target" || !strings.Contains(err.Error(), "cannot change while the gateway runs") {
		t.Fatalf("a new relay.target: %v, want a refusal naming relay.target", err)
	}
	bad := aConfig
	bad.Protect = both
	bad.Policy.Epsilon = new(2.0)
	if _, err := a.Reload(bad); !errors.As(err, &ce) || ce.Key != "policy.epsilon" {
		t.Fatalf("epsilon 2: %v, want a refusal naming policy.epsilon", err)
	}
	time.Sleep(50 * time.Millisecond)
	sendSome(ep2, &flow2)
	time.Sleep(50 * time.Millisecond)
	if a.Stats().Flows != 1 {
		t.Fatal("a refused configuration changed the rules")
	}

	// Taken: the rule for flow 2.
	next := aConfig
	next.Protect = both
	changed, err := a.Reload(next)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(changed, " "), "protect[1].qp") {
		t.Errorf("changed %q, want the new rule's keys", changed)
	}
	sources := sb.Receiver.Flows.Sources
	waitFor("flow 2 protected after the reload, flow 1 still carrying", func(sa, sb gateway.Stats) bool {
		return sa.Flows == 2 && sb.Receiver.FlowsOpened == 2 && sb.Receiver.Flows.Sources > sources+64
	})
	if sb := b.Stats(); sb.Receiver.FlowsOpened != 2 || sb.Receiver.FlowsClosed != 0 || sb.Receiver.FlowsRestarted != 0 {
		t.Errorf("flow 1's session did not survive the reload: B opened %d flows, closed %d", sb.Receiver.FlowsOpened, sb.Receiver.FlowsClosed)
	}
}
