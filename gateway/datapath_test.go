package gateway

import (
	"errors"
	"strings"
	"testing"
)

const tunDatapathBase = `crem_address = "127.0.0.1:50000"
peer = "127.0.0.1:50001"
mode = "tun"
[tun]
local_prefixes = ["10.1.0.0/16"]
`

// TestConfigDatapath: tun.datapath chooses the TUN device (the default) or the xdp data path,
// which needs the LAN and WAN interfaces, two different ones, and sends with the raw socket
// where it sends through the kernel (write = device has no device to write into); every
// refusal is a one-line ConfigError naming its key. The resolved configuration shows the
// choice.
func TestConfigDatapath(t *testing.T) {
	for _, c := range []struct{ name, text, want string }{
		{"bad datapath", `datapath = "dpdk"`, "want tun, xdp or auto"},
		{"bad attach", `xdp_attach = "offload"`, "want auto, driver or generic"},
		{"xdp without lan", "datapath = \"xdp\"\nwan = \"eth1\"", "tun.lan is required"},
		{"auto without wan", "datapath = \"auto\"\nlan = \"eth0\"", "tun.wan is required"},
		{"same interface", "datapath = \"xdp\"\nlan = \"eth0\"\nwan = \"eth0\"", "must differ"},
		{"long name", "datapath = \"xdp\"\nlan = \"eth0\"\nwan = \"an-interface-name-too-long\"", "IFNAMSIZ"},
		{"device write", "datapath = \"xdp\"\nlan = \"eth0\"\nwan = \"eth1\"\nwrite = \"device\"", "want raw"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ParseConfig([]byte(tunDatapathBase + c.text + "\n"))
			if err == nil {
				err = cfg.Validate()
			}
			var ce *ConfigError
			if err == nil || !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %v, want a one-line ConfigError with %q", err, c.want)
			}
		})
	}
	for _, c := range []struct{ text, datapath, lan string }{
		{"", "tun", ""},
		{"datapath = \"xdp\"\nlan = \"eth0\"\nwan = \"eth1\"\nxdp_attach = \"generic\"", "xdp", "eth0"},
		{"datapath = \"auto\"\nlan = \"eth0\"\nwan = \"eth1\"", "auto", "eth0"},
	} {
		cfg, err := ParseConfig([]byte(tunDatapathBase + c.text + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		r, err := cfg.Resolve()
		if err != nil {
			t.Fatalf("%q: %v", c.text, err)
		}
		if r.Tun == nil || r.Tun.Datapath != c.datapath || r.Tun.LAN != c.lan {
			t.Errorf("%q: resolved %+v, want datapath %s lan %q", c.text, r.Tun, c.datapath, c.lan)
		}
	}
}
