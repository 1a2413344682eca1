package deploy

import (
	"net/netip"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/crem-project/crem/gateway"
	"github.com/crem-project/crem/reporter/kdrop"
)

// checkExample is what `crem gateway --check-config FILE` does with the file.
func checkExample(t *testing.T, name string) gateway.Resolved {
	t.Helper()
	c, err := gateway.LoadConfig(filepath.Join("examples", name))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	r, err := c.Resolve()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(r.Warnings) > 0 {
		t.Errorf("%s: warnings %q", name, r.Warnings)
	}
	return r
}

// TestExamplesCheckConfig: each example configuration passes --check-config, and each pair
// is the mirror of itself: each gateway's peer is the other's CREM address, relay mode's
// peer_data the other's wan_listen and its endpoints the other's reversed, TUN mode's local
// prefixes the other's destinations. TUN mode resolves on Linux only.
func TestExamplesCheckConfig(t *testing.T) {
	files, _ := filepath.Glob("examples/*.toml")
	if len(files) != 5 {
		t.Errorf("examples: %q, want relay-a, relay-b, reporter, tun-a, tun-b", files)
	}
	a, b := checkExample(t, "relay-a.toml"), checkExample(t, "relay-b.toml")
	if a.Mode != "relay" || b.Mode != "relay" || a.Peer != b.CREMAddress || b.Peer != a.CREMAddress ||
		a.Relay.PeerData != b.Relay.WANListen || b.Relay.PeerData != a.Relay.WANListen ||
		a.Relay.LocalEndpoint != b.Relay.RemoteEndpoint || b.Relay.LocalEndpoint != a.Relay.RemoteEndpoint ||
		a.DomainProtection == "" || b.DomainProtection == "" {
		t.Errorf("relay pair does not mirror:\n%+v %+v\n%+v %+v", a, a.Relay, b, b.Relay)
	}
	for _, r := range []gateway.Resolved{a, b} {
		if len(r.Protect) != 2 || r.Protect[0].Src != r.Protect[1].Dst || r.Protect[0].Dst != r.Protect[1].Src {
			t.Errorf("relay rules: want one per direction: %+v", r.Protect)
		}
	}
	if runtime.GOOS != "linux" {
		t.Logf("skipping tun-a.toml and tun-b.toml: TUN mode resolves on Linux only (%s)", runtime.GOOS)
		return
	}
	a, b = checkExample(t, "tun-a.toml"), checkExample(t, "tun-b.toml")
	if a.Mode != "tun" || b.Mode != "tun" || a.Peer != b.CREMAddress || b.Peer != a.CREMAddress || a.Tun.Name == b.Tun.Name ||
		len(a.Tun.LocalPrefixes) != 1 || len(b.Tun.LocalPrefixes) != 1 || a.Tun.Mark != 0x43 || b.Tun.Mark != 0x43 {
		t.Errorf("tun pair does not mirror:\n%+v %+v\n%+v %+v", a, a.Tun, b, b.Tun)
	}
	for _, r := range []gateway.Resolved{a, b} {
		other := b
		if r.Tun.Name == b.Tun.Name {
			other = a
		}
		out := [2]string{r.Tun.LocalPrefixes[0], other.Tun.LocalPrefixes[0]}
		in := [2]string{out[1], out[0]}
		got := map[[2]string]bool{}
		for _, p := range r.Protect {
			got[[2]string{p.Src, p.Dst}] = true
		}
		if len(r.Protect) != 2 || !got[out] || !got[in] {
			t.Errorf("%s: rules must cover both directions between the sites: %+v", r.Tun.Name, r.Protect)
		}
	}
}

// TestReporterExampleCheckConfig: the path reporter's example passes --check-config's checks,
// reports to the gateways' CREM port, watches the relay pair's WAN port beside RoCEv2's, and
// keeps the limits the draft asks for (50us aggregation, rate limits per flow and per port).
func TestReporterExampleCheckConfig(t *testing.T) {
	c, err := kdrop.LoadConfig(filepath.Join("examples", "reporter.toml"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	gw := checkExample(t, "relay-a.toml")
	if port := netip.MustParseAddrPort(gw.CREMAddress).Port(); r.Engine.Port != port {
		t.Errorf("crem_port %d, the gateways' %d", r.Engine.Port, port)
	}
	if wan := netip.MustParseAddrPort(gw.Relay.WANListen).Port(); !slices.Contains(r.Ports, 4791) || !slices.Contains(r.Ports, wan) {
		t.Errorf("udp_ports %v: want 4791 and the relay pair's %d", r.Ports, wan)
	}
	if r.Engine.Aggregation != 50*time.Microsecond || r.Engine.FlowInterval <= 0 || r.Engine.PortRate <= 0 || !r.Source.IsValid() {
		t.Errorf("limits or source address missing: %+v, source %v", r.Engine, r.Source)
	}
}
