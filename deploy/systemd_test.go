package deploy

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// installed is where the units expect the crem binary, installedRouting the TUN routing script.
const (
	installed        = "/usr/local/bin/crem"
	installedRouting = "/usr/local/sbin/crem-tun-routing"
)

// TestSystemdUnitsVerify runs systemd-analyze verify on each unit: the single unit, an
// instance of the template, the single unit with the TUN drop-in, and the TUN routing unit. verify needs the
// ExecStart binary to exist, so the units are checked in a directory of their own with the
// binary's path replaced by this test's executable. Any warning about them fails the test
// (verify exits 0 on an unknown key, and says so).
func TestSystemdUnitsVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("needs systemd-analyze (Debian package systemd: apt-get install -y systemd)")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script, err := filepath.Abs("tun/crem-tun-routing")
	if err != nil {
		t.Fatal(err)
	}
	copyUnit := func(from, to string) {
		t.Helper()
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(from, ".service") && !strings.Contains(string(b), installed) && !strings.Contains(string(b), installedRouting) {
			t.Fatalf("%s runs neither %s nor %s", from, installed, installedRouting)
		}
		text := strings.ReplaceAll(strings.ReplaceAll(string(b), installed, exe), installedRouting, script)
		os.MkdirAll(filepath.Dir(filepath.Join(dir, to)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, to), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copyUnit("systemd/crem-gateway.service", "crem-gateway.service")
	copyUnit("systemd/crem-gateway@.service", "crem-gateway@.service")
	copyUnit("systemd/crem-gateway.service.d/tun.conf", "crem-gateway.service.d/tun.conf")
	copyUnit("systemd/crem-gateway.service.d/xdp.conf", "crem-gateway.service.d/xdp.conf")
	copyUnit("systemd/crem-gateway@.service", "crem-gateway@wan1.service")
	copyUnit("tun/crem-tun-routing.service", "crem-tun-routing.service")
	for _, unit := range []string{"crem-gateway.service", "crem-gateway@wan1.service", "crem-tun-routing.service"} {
		cmd := exec.Command(sa, "verify", filepath.Join(dir, unit))
		out, err := cmd.CombinedOutput()
		var mine []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "crem-gateway") || strings.Contains(l, dir) {
				mine = append(mine, l)
			}
		}
		if err != nil || len(mine) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out)
		}
	}
	// The drop-in is read (a key it does not know is reported), so the check above covers it.
	bad := filepath.Join(dir, "crem-gateway.service.d", "tun.conf")
	b, _ := os.ReadFile(bad)
	os.WriteFile(bad, append(b, "AmbientCapabilitiez=CAP_NET_RAW\n"...), 0o644)
	out, _ := exec.Command(sa, "verify", filepath.Join(dir, "crem-gateway.service")).CombinedOutput()
	if !strings.Contains(string(out), "AmbientCapabilitiez") {
		t.Errorf("a misspelt key in the drop-in went unnoticed: %s", out)
	}
}

// TestSystemdUnitsHardened: the units run the gateway as a user of its own with no
// capability, let the gateway check its configuration itself, restart on failure but not on a
// bad configuration, reload on SIGHUP; the TUN drop-in grants CAP_NET_ADMIN and CAP_NET_RAW and /dev/net/tun, and
// nothing else; the xdp drop-in CAP_BPF besides, the bpf system call and locked memory. (systemd-analyze verify checks the syntax, this what the lines say.)
func TestSystemdUnitsHardened(t *testing.T) {
	keys := func(file string) map[string][]string {
		b, err := os.ReadFile(filepath.Join("systemd", file))
		if err != nil {
			t.Fatal(err)
		}
		m := map[string][]string{}
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
				m[k] = append(m[k], v)
			}
		}
		return m
	}
	for _, unit := range []string{"crem-gateway.service", "crem-gateway@.service"} {
		k := keys(unit)
		for key, want := range map[string]string{"DynamicUser": "yes", "CapabilityBoundingSet": "", "AmbientCapabilities": "",
			"NoNewPrivileges": "yes", "Restart": "on-failure", "RestartPreventExitStatus": "2", "ProtectSystem": "strict",
			"PrivateDevices": "yes", "SystemCallFilter": "@system-service"} {
			if v := k[key]; len(v) != 1 || v[0] != want {
				t.Errorf("%s: %s=%q, want %q", unit, key, v, want)
			}
		}
		// RestartPreventExitStatus covers the main process alone: a check in ExecStartPre that
		// fails would restart the unit until the start limit (TestSystemdBadConfigNotRestarted).
		if pre := k["ExecStartPre"]; len(pre) != 0 {
			t.Errorf("%s: ExecStartPre %q: the main process checks the configuration", unit, pre)
		}
		if start := k["ExecStart"]; len(start) != 1 || !strings.HasPrefix(start[0], installed+" gateway --config /etc/crem/") {
			t.Errorf("%s: ExecStart %q", unit, start)
		}
		if r := k["ExecReload"]; len(r) != 1 || r[0] != "/bin/kill -HUP $MAINPID" {
			t.Errorf("%s: ExecReload %q, want SIGHUP to the gateway", unit, r)
		}
	}
	k := keys("crem-gateway.service.d/tun.conf")
	if len(k) != 5 || k["CapabilityBoundingSet"][0] != "CAP_NET_ADMIN CAP_NET_RAW" || k["AmbientCapabilities"][0] != "CAP_NET_ADMIN CAP_NET_RAW" ||
		k["DeviceAllow"][0] != "/dev/net/tun rw" || k["PrivateDevices"][0] != "no" {
		t.Errorf("tun.conf: %q", k)
	}
	k = keys("crem-gateway.service.d/xdp.conf")
	if len(k) != 4 || k["CapabilityBoundingSet"][0] != "CAP_BPF CAP_NET_ADMIN CAP_NET_RAW" || k["AmbientCapabilities"][0] != "CAP_BPF CAP_NET_ADMIN CAP_NET_RAW" ||
		k["SystemCallFilter"][0] != "bpf" || k["LimitMEMLOCK"][0] != "infinity" {
		t.Errorf("xdp.conf: %q", k)
	}
}

// TestSystemdBadConfigNotRestarted: the command line of each unit's ExecStart, run on a
// configuration that does not check out, exits 2 with one line (what the journal shows) and
// binds nothing; the unit says Restart=on-failure with RestartPreventExitStatus=2, so systemd
// does not restart it (systemd.service: RestartPreventExitStatus= applies to the main process,
// and ExecStart's is the main process; the units have no ExecStartPre, whose failure would
// restart them). The gateway is built from ../cmd/crem.
func TestSystemdBadConfigNotRestarted(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs go to build crem")
	}
	crem := buildCrem(t, goCmd)
	dir := t.TempDir()
	bad := filepath.Join(dir, "gw.toml")
	// relay-a.toml with epsilon 2 (it is a probability).
	example, err := os.ReadFile("examples/relay-a.toml")
	if err != nil {
		t.Fatal(err)
	}
	text, line := "", 0
	for i, l := range strings.Split(string(example), "\n") {
		if strings.HasPrefix(l, "epsilon ") {
			l, line = "epsilon = 2", i+1
		}
		text += l + "\n"
	}
	os.WriteFile(bad, []byte(text), 0o644)
	for unit, conf := range map[string]string{"crem-gateway.service": "/etc/crem/gateway.toml", "crem-gateway@.service": "/etc/crem/%i.toml"} {
		b, err := os.ReadFile(filepath.Join("systemd", unit))
		if err != nil {
			t.Fatal(err)
		}
		var start string
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
				start = v
			}
		}
		args := strings.Fields(strings.ReplaceAll(start, conf, bad))
		if len(args) < 2 || args[0] != installed {
			t.Fatalf("%s: ExecStart=%s", unit, start)
		}
		cmd := exec.Command(crem, args[1:]...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err = cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 ||
			!strings.Contains(stderr.String(), fmt.Sprintf("%s:%d: policy.epsilon = 2", bad, line)) {
			t.Errorf("%s: %v, stderr %q; want exit 2 and one line naming the file, line and key", unit, err, stderr.String())
		}
	}
}
