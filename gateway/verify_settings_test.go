package gateway

import (
	"net/netip"
	"testing"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/flow"
)

// TestInboundVerifySettingsByMode: the settings a HELLO gets from the protect rules, by mode.
// TUN mode with tun.verify = "logical" and a rule without src_port accepts the flow (the CRF
// takes the UDP source port from the flow's packets, which cross the device: the shipped
// tun-a.toml and tun-b.toml serve the project's own endpoints with the logical check alone);
// TUN mode with "template" checks under the header template; relay mode still refuses a flow
// whose rule has no src_port, and counts it.
func TestInboundVerifySettingsByMode(t *testing.T) {
	d := flow.Descriptor{Src: netip.MustParseAddr("198.18.1.10"), Dst: netip.MustParseAddr("198.18.2.10"), DestQP: 0x1001}
	rules := []ProtectRule{{Src: MustParsePrefix("198.18.1.0/24"), Dst: MustParsePrefix("198.18.2.0/24")}}
	for _, c := range []struct {
		name   string
		mode   Mode
		verify Verify
		ok     bool
		want   crf.Verify
	}{
		{"tun logical, no src_port", ModeTun, VerifyLogical, true, crf.VerifyLogical},
		{"tun template", ModeTun, VerifyTemplate, true, crf.VerifyTemplate},
		{"relay, no src_port", ModeRelay, VerifyTemplate, false, 0},
	} {
		cfg := Config{CREMAddress: netip.MustParseAddrPort("127.0.0.1:7001"), Peer: netip.MustParseAddrPort("127.0.0.2:7001"), Mode: c.mode, Protect: rules}
		if c.mode == ModeTun {
			cfg.Tun = TunConfig{LocalPrefixes: []Prefix{MustParsePrefix("198.18.2.0/24")}, Verify: c.verify}
		} else {
			cfg.Relay = RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Target: netip.MustParseAddrPort("127.0.0.1:4791"), WANListen: netip.MustParseAddrPort("127.0.0.1:0"), PeerData: netip.MustParseAddrPort("127.0.0.2:7002")}
		}
		n, err := NewNode(cfg, NodeOptions{Seed: 1})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		s, ok := n.settings(d)
		if ok != c.ok {
			t.Fatalf("%s: accepted %v, want %v", c.name, ok, c.ok)
		}
		if ok && (s.Verify != c.want || s.SrcPort != 0) {
			t.Errorf("%s: verify %v src_port %d, want %v and 0", c.name, s.Verify, s.SrcPort, c.want)
		}
		if refused := n.stats.HelloRefusedNoPort; refused != map[bool]uint64{true: 0, false: 1}[c.ok] {
			t.Errorf("%s: hello_refused_no_src_port %d", c.name, refused)
		}
	}
}
