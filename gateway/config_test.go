package gateway

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
)

func TestConfigErrors(t *testing.T) {
	relay := `
peer = "127.0.0.1:50001"
[relay]
listen = "127.0.0.1:0"
target = "127.0.0.1:4791"
wan_listen = "127.0.0.1:0"
peer_data = "127.0.0.1:7000"
`
	cases := []struct{ name, text, want string }{
		{"missing CREM port", relay, "crem_address is required"},
		{"CREM port 0", `crem_address = "127.0.0.1:0"` + relay, "port must not be 0"},
		{"unknown field", `crem_address = "127.0.0.1:50000"` + "\ncolour = 1\n" + relay, `unknown field "colour"`},
		{"non-loopback without protection", `crem_address = "192.0.2.1:50000"` + relay, "domain_protection must say"},
		{"bad protection", `crem_address = "127.0.0.1:50000"` + "\ndomain_protection = \"hope\"\n" + relay, "want ipsec or boundary"},
		{"bad mode", `crem_address = "127.0.0.1:50000"` + "\nmode = \"bridge\"\n" + relay, "want relay or tun"},
		{"k+m", `crem_address = "127.0.0.1:50000"` + relay + "[policy]\nk = 250\nm = 10\nmax_k = 255\nmax_m = 16\n", "k + m <= 255"},
		{"no peer", `crem_address = "127.0.0.1:50000"`, "peer is required"},
		// G22: reverse_qp names one flow's reverse QP.
		{"reverse_qp without qp", `crem_address = "127.0.0.1:50000"` + relay + "[[protect]]\nreverse_qp = 5\n", "reverse_qp 5 needs qp"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ParseConfig([]byte(c.text))
			if err == nil {
				err = cfg.Validate()
			}
			var ce *ConfigError
			if err == nil || !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a ConfigError with %q", err, c.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
}

func TestConfigPortInUse(t *testing.T) {
	busy, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	c := Config{CREMAddress: busy.LocalAddr().(*net.UDPAddr).AddrPort(), Peer: netip.MustParseAddrPort("127.0.0.1:50001"),
		Relay: RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Target: netip.MustParseAddrPort("127.0.0.1:4791"), WANListen: netip.MustParseAddrPort("127.0.0.1:0"), PeerData: netip.MustParseAddrPort("127.0.0.1:7000")}}
	_, err = New(c, Options{})
	var ce *ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("got %v, want a ConfigError naming the port in use", err)
	}
}

func TestConfigNonLoopbackWithProtection(t *testing.T) {
	c := Config{CREMAddress: netip.MustParseAddrPort("192.0.2.1:50000"), DomainProtection: ProtectionBoundary, Peer: netip.MustParseAddrPort("192.0.2.2:50000"),
		Relay: RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Target: netip.MustParseAddrPort("127.0.0.1:4791"), WANListen: netip.MustParseAddrPort("127.0.0.1:0"), PeerData: netip.MustParseAddrPort("127.0.0.1:7000")}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
