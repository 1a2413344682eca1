package gateway

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
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

const relayBase = `crem_address = "127.0.0.1:50000"
peer = "127.0.0.1:50001"
[relay]
listen = "127.0.0.1:7000"
target = "127.0.0.1:4791"
wan_listen = "127.0.0.1:7001"
peer_data = "127.0.0.2:7101"
[[protect]]
src_port = 4791
`

// TestConfigExplicitZero: a key written takes its value, zero included; a key left out takes
// the default. m = 0 is a first configuration without repair (coded retransmission alone);
// max_open_blocks = 0 is no value and is refused, not read as the default.
func TestConfigExplicitZero(t *testing.T) {
	r := resolveText(t, relayBase+"[policy]\nm = 0\n")
	if r.Policy.M != 0 || r.Policy.K != 32 {
		t.Fatalf("m = 0 resolved to k %d m %d, want 32 and 0", r.Policy.K, r.Policy.M)
	}
	if r := resolveText(t, relayBase); r.Policy.M != 4 || r.Policy.MaxOpenBlocks != 64 {
		t.Fatalf("no m: m %d, max_open_blocks %d; want the defaults 4 and 64", r.Policy.M, r.Policy.MaxOpenBlocks)
	}
	for _, line := range []string{"max_open_blocks = 0", "k = 0", "max_k = 0", "rdma_mtu = 0", "idle_timeout = \"0s\""} {
		c, err := ParseConfig([]byte(relayBase + "[policy]\n" + line + "\n"))
		if err == nil {
			err = c.Validate()
		}
		key := "policy." + strings.TrimSpace(strings.Split(line, "=")[0])
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Key != key {
			t.Errorf("%s: %v, want a refusal of %s", line, err, key)
		}
	}
	// In process: nil is the default, a pointer to 0 is 0.
	c, _ := ParseConfig([]byte(relayBase))
	c.Policy.M = new(0)
	n, err := NewNode(c, NodeOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n.cfg.m != 0 {
		t.Fatalf("M: new(0) ran with m %d", n.cfg.m)
	}
}

// TestConfigErrorsNameLineAndValue: an error of a file names the file and the line of the bad
// key, the key as TOML spells it and the value as written; a flag's names the flag.
func TestConfigErrorsNameLineAndValue(t *testing.T) {
	f := filepath.Join(t.TempDir(), "gw.toml")
	os.WriteFile(f, []byte(relayBase+"\n[policy]\nk = 16\nepsilon   =   2.0   # a probability?\n"), 0o644)
	c, err := LoadConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Where != f+":13" || ce.Key != "policy.epsilon" || ce.Value != "2.0" {
		t.Fatalf("got %#v (%v), want %s:13, policy.epsilon, 2.0", ce, err, f)
	}
	os.WriteFile(f, []byte(relayBase+"[[protect]]\nsrc = 10\n"), 0o644)
	_, err = LoadConfig(f)
	if !errors.As(err, &ce) || ce.Where != f+":11" || ce.Key != "protect[1].src" || ce.Value != "10" ||
		!strings.HasPrefix(ce.Err.Error(), "want an address or prefix") {
		t.Fatalf("got %#v (%v)", ce, err)
	}
	c, _ = ParseConfig([]byte(relayBase))
	err = c.Set("--peer", "peer", `"peer.example:61234"`)
	if !errors.As(err, &ce) || ce.Where != "--peer" || ce.Key != "peer" {
		t.Fatalf("a flag's value: %#v (%v)", ce, err)
	}
}

// TestConfigSocketsApart: two sockets of one gateway on one port are refused where one would
// take the other's datagrams or the second bind fail; port 0 is the kernel's choice each time.
func TestConfigSocketsApart(t *testing.T) {
	for _, c := range []struct {
		listen, wan string
		ok          bool
	}{
		{"127.0.0.1:7000", "127.0.0.1:7000", false},
		{"0.0.0.0:7000", "127.0.0.1:7000", false},
		{"127.0.0.1:7000", "0.0.0.0:7000", false},
		{"[::]:7000", "127.0.0.1:7000", false},
		{"0.0.0.0:50000", "127.0.0.1:7001", false}, // the CREM socket's port
		{"127.0.0.1:0", "127.0.0.1:0", true},
		{"127.0.0.1:7000", "127.0.0.2:7000", true},
		{"127.0.0.1:7000", "127.0.0.1:7001", true},
	} {
		text := strings.Replace(strings.Replace(relayBase, `listen = "127.0.0.1:7000"`, `listen = "`+c.listen+`"`, 1),
			`wan_listen = "127.0.0.1:7001"`, `wan_listen = "`+c.wan+`"`, 1)
		cfg, err := ParseConfig([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		err = cfg.Validate()
		if (err == nil) != c.ok || err != nil && !strings.Contains(err.Error(), "takes this port too") {
			t.Errorf("listen %s, wan_listen %s: %v, want ok %v", c.listen, c.wan, err, c.ok)
		}
	}
}
