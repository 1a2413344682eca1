package deploy

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// envFile reads KEY=VALUE lines (comments and blank lines skipped), as systemd's
// EnvironmentFile does for these files.
func envFile(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var env []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || l[0] == '#' {
			continue
		}
		if !strings.Contains(l, "=") {
			t.Fatalf("%s: %q is no KEY=VALUE", path, l)
		}
		env = append(env, l)
	}
	return env
}

// TestTunRoutingNetns runs deploy/tun/crem-tun-routing with deploy/examples/tun-a.env in a
// network namespace of its own (gateway A of the user guide, its endpoint on the same host) and
// checks what the user guide says to check: `ip rule` in order, and `ip route get` for each kind
// of packet (an endpoint's to the other site and one from the WAN into the device, the gateway's
// own sends to the WAN or to local delivery, CREM to the peer by the WAN). Running it again
// changes nothing; down restores the rules. With CREM_SITE_IF (endpoints on hosts behind the
// gateway) its own deliveries to them leave by that interface. Needs root, ip(8) and
// /dev/net/tun; skips elsewhere.
func TestTunRoutingNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8) (Debian package iproute2)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("needs /dev/net/tun")
	}
	ns := fmt.Sprintf("crem-route-%d", os.Getpid()%100000)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace here: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	in := func(env []string, args ...string) (string, error) {
		cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := in(nil, args...)
		if err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		return out
	}
	// Gateway A's host: its WAN interface va (198.18.10.1, the router 198.18.10.2 on link), the
	// endpoint 198.18.1.1 on lo, the peer gateway's WAN reached through the router.
	must("ip", "link", "add", "va", "type", "veth", "peer", "name", "wa")
	must("ip", "link", "set", "lo", "up")
	must("ip", "link", "set", "va", "up")
	must("ip", "link", "set", "wa", "up")
	must("ip", "addr", "add", "198.18.10.1/24", "dev", "va")
	must("ip", "addr", "add", "198.18.1.1/32", "dev", "lo")
	must("ip", "route", "add", "198.18.20.0/24", "via", "198.18.10.2")

	script, err := filepath.Abs("tun/crem-tun-routing")
	if err != nil {
		t.Fatal(err)
	}
	env := append(envFile(t, "examples/tun-a.env"), "CREM_SRC=198.18.1.1", "CREM_SAME_HOST=1")
	if out, err := in(env, "sh", script, "up"); err != nil {
		t.Fatalf("up: %v: %s", err, out)
	}
	rules := func() []string {
		var r []string
		for _, l := range strings.Split(strings.TrimSpace(must("ip", "rule")), "\n") {
			r = append(r, strings.Join(strings.Fields(l), " "))
		}
		return r
	}
	want := []string{"100: from all to 198.18.1.0/24 iif va lookup 100", "1000: from all lookup local",
		"1001: from all fwmark 0x43 lookup 200", "32766: from all lookup main", "32767: from all lookup default"}
	if got := rules(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("ip rule:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"198.18.2.1", "from", "198.18.1.1"}, "198.18.2.1 from 198.18.1.1 dev cremA"},
		{[]string{"198.18.1.1", "from", "198.18.2.1", "iif", "va"}, "198.18.1.1 from 198.18.2.1 dev cremA table 100"},
		{[]string{"198.18.2.1", "mark", "0x43"}, "198.18.2.1 via 198.18.10.2 dev va table 200 src 198.18.10.1 mark 0x43"},
		{[]string{"198.18.1.1", "mark", "0x43"}, "local 198.18.1.1 dev lo table local src 198.18.1.1 mark 0x43"},
		{[]string{"198.18.20.1"}, "198.18.20.1 via 198.18.10.2 dev va src 198.18.10.1"},
	} {
		out := must(append([]string{"ip", "route", "get"}, c.args...)...)
		if !strings.HasPrefix(strings.Join(strings.Fields(out), " "), c.want) {
			t.Errorf("ip route get %s: %q, want %q", strings.Join(c.args, " "), out, c.want)
		}
	}
	for key, v := range map[string]string{"net.ipv4.ip_forward": "1", "net.ipv4.udp_early_demux": "0", "net.ipv4.conf.cremA.rp_filter": "0"} {
		if got := strings.TrimSpace(must("sysctl", "-n", key)); got != v {
			t.Errorf("%s = %s, want %s", key, got, v)
		}
	}
	if mtu := must("ip", "link", "show", "cremA"); !strings.Contains(mtu, "mtu 9000") {
		t.Errorf("cremA: %s", mtu)
	}
	// Again: nothing changes.
	if out, err := in(env, "sh", script, "up"); err != nil {
		t.Fatalf("up again: %v: %s", err, out)
	}
	if got := rules(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ip rule after a second up:\n%s", strings.Join(got, "\n"))
	}
	if out, err := in(env, "sh", script, "down"); err != nil {
		t.Fatalf("down: %v: %s", err, out)
	}
	want = []string{"0: from all lookup local", "32766: from all lookup main", "32767: from all lookup default"}
	if got := rules(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ip rule after down:\n%s", strings.Join(got, "\n"))
	}
	for _, table := range []string{"100", "200"} {
		if out := strings.TrimSpace(must("ip", "route", "show", "table", table)); out != "" {
			t.Errorf("table %s after down: %s", table, out)
		}
	}
	// Endpoints on hosts of their own behind the gateway (CREM_SITE_IF): the gateway's own
	// deliveries to them leave by the site's interface, not by the WAN router; down takes the
	// route out again.
	must("ip", "link", "add", "la", "type", "veth", "peer", "name", "ea")
	must("ip", "link", "set", "la", "up")
	must("ip", "link", "set", "ea", "up")
	siteEnv := append(envFile(t, "examples/tun-a.env"), "CREM_SITE_IF=la")
	if out, err := in(siteEnv, "sh", script, "up"); err != nil {
		t.Fatalf("up with CREM_SITE_IF: %v: %s", err, out)
	}
	if out := strings.Join(strings.Fields(must("ip", "route", "get", "198.18.1.10", "mark", "0x43")), " "); !strings.HasPrefix(out, "198.18.1.10 dev la table 200") {
		t.Errorf("with CREM_SITE_IF=la, ip route get 198.18.1.10 mark 0x43: %q, want by la (table 200)", out)
	}
	if out, err := in(siteEnv, "sh", script, "down"); err != nil {
		t.Fatalf("down with CREM_SITE_IF: %v: %s", err, out)
	}
	if out := strings.TrimSpace(must("ip", "route", "show", "table", "200")); out != "" {
		t.Errorf("table 200 after down with CREM_SITE_IF: %s", out)
	}
	// A setting missing: refused, nothing done.
	if out, err := in([]string{"CREM_TUN_DEV=cremA"}, "sh", script, "up"); err == nil || !strings.Contains(out, "CREM_WAN_IF") {
		t.Errorf("without CREM_WAN_IF: %v %s", err, out)
	}
}
