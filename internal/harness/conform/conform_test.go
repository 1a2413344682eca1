package conform_test

import (
	"context"
	"flag"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/gateway"
	"github.com/crem-project/crem/internal/fault"
	"github.com/crem-project/crem/internal/harness/conform"
)

func bound(t testing.TB, ip string) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ap(c *net.UDPConn) netip.AddrPort { return c.LocalAddr().(*net.UDPAddr).AddrPort() }

// target is a gateway in relay mode set up as docs/conform.md tells, and the runner's
// configuration that points at it.
type target struct {
	cfg  conform.Config
	stop func()
}

// The policy docs/conform.md gives the target: the runner's SRTT as its initial RTT, a short
// HELLO hold-off, a burst gap below the runner's pause.
var targetPolicy = gateway.PolicyConfig{K: new(16), M: new(2), InitialRTT: gateway.Dur(20 * time.Millisecond), HelloHoldOff: gateway.Dur(time.Second), BurstGap: gateway.Dur(2 * time.Millisecond)}

// startTarget starts a gateway for the half (with the faults planted) and returns the runner's
// configuration for it.
func startTarget(t testing.TB, half conform.Half, faults fault.Set) target {
	t.Helper()
	return startTargetOpt(t, half, faults, netip.AddrPort{})
}

// startTargetVia starts a right gateway whose CSF sends HELLO to peer (a proxy in front of the
// runner) instead of the runner's CREM address.
func startTargetVia(t testing.TB, half conform.Half, peer netip.AddrPort) target {
	t.Helper()
	return startTargetOpt(t, half, 0, peer)
}

func startTargetOpt(t testing.TB, half conform.Half, faults fault.Set, peer netip.AddrPort) target {
	t.Helper()
	cremC, dataC := bound(t, "127.0.0.1"), bound(t, "127.0.0.1")
	gCREM, gRelay, gWAN := bound(t, "127.0.0.1"), bound(t, "127.0.0.1"), bound(t, "127.0.0.1")
	if !peer.IsValid() {
		peer = ap(cremC)
	}
	c := gateway.Config{Peer: peer, Shards: 1, Policy: targetPolicy, Faults: faults,
		Relay: gateway.RelayConfig{LocalEndpoint: netip.MustParseAddr("127.0.0.1"), RemoteEndpoint: netip.MustParseAddr("127.0.0.2")}}
	cc := conform.Config{Half: half, Target: ap(gCREM), CREMConn: cremC, DataConn: dataC, SRTT: 20 * time.Millisecond}
	switch half {
	case conform.HalfCSF:
		c.Relay.Target, c.Relay.PeerData = netip.MustParseAddrPort("127.0.0.1:9"), ap(dataC)
		c.Reporters = []netip.Addr{netip.MustParseAddr("127.0.0.2")}
		cc.Inject = ap(gRelay)
		cc.Reporter, cc.Stranger = netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")
	case conform.HalfCRF:
		c.Relay.Target, c.Relay.PeerData = ap(dataC), netip.MustParseAddrPort("127.0.0.1:9")
		c.Protect = []gateway.ProtectRule{{SrcPort: 40000}}
		cc.Inject = ap(gWAN)
		cc.FlowSrc, cc.FlowDst, cc.FlowSrcPort = netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.1"), 40000
	}
	g, err := gateway.New(c, gateway.Options{Sockets: gateway.Sockets{CREM: gCREM, Relay: gRelay, WAN: gWAN}})
	if err != nil {
		cremC.Close()
		dataC.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	return target{cfg: cc, stop: func() { cancel(); <-done }}
}

// runHalf runs the half's scenarios that run selects against a fresh gateway.
func runHalf(t *testing.T, half conform.Half, faults fault.Set, run string, long bool) *conform.Report {
	t.Helper()
	tg := startTarget(t, half, faults)
	defer tg.stop()
	cfg := tg.cfg
	cfg.Long = long
	if run != "" {
		cfg.Run = mustRegexp(t, run)
	}
	var progress strings.Builder
	cfg.Progress = &progress
	rep, err := conform.Run(cfg, conform.Scenarios())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", progress.String())
	return rep
}

// optionalSkips are the scenarios the gateway may SKIP: long ones without --long.
var optionalSkips = map[string]string{
	"csf/breaker-resume": "long (10 s): runs with --long",
	"csf/breaker-close":  "long (60 s): runs with --long",
}

func checkAllPass(t *testing.T, rep *conform.Report) {
	t.Helper()
	var b strings.Builder
	rep.WriteTable(&b)
	t.Logf("\n%s", b.String())
	for _, r := range rep.Results {
		switch r.Status {
		case conform.Fail:
			t.Errorf("%s failed: %s", r.Name, r.Reason)
		case conform.Skip:
			if _, ok := optionalSkips[r.Name]; !ok {
				t.Errorf("%s skipped: %s", r.Name, r.Reason)
			}
		}
	}
}

// TestConformCSF: every csf scenario passes against a crem gateway in relay mode.
func TestConformCSF(t *testing.T) {
	checkAllPass(t, runHalf(t, conform.HalfCSF, 0, "", false))
}

// TestConformCRF: every crf scenario passes against a crem gateway in relay mode.
func TestConformCRF(t *testing.T) {
	checkAllPass(t, runHalf(t, conform.HalfCRF, 0, "", false))
}

var longRuns = flag.Bool("conform.long", false, "run the long scenarios (the circuit breaker's 10 s and 60 s) against the gateway")

// TestConformBreakerLong runs the long breaker scenarios (about 80 s) with -conform.long.
func TestConformBreakerLong(t *testing.T) {
	if !*longRuns {
		t.Skip("long (80 s): run with -conform.long")
	}
	checkAllPass(t, runHalf(t, conform.HalfCSF, 0, "breaker", true))
}
