package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReporterUnitVerify runs systemd-analyze verify on the path reporter's unit (with the
// binary's path replaced by this test's executable, which verify needs to exist); any line
// about the unit fails the test, and a misspelt key is noticed.
func TestReporterUnitVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("needs systemd-analyze (Debian package systemd: apt-get install -y systemd)")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("systemd/crem-reporter.service")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), installed) {
		t.Fatalf("crem-reporter.service does not run %s", installed)
	}
	dir := t.TempDir()
	unit := filepath.Join(dir, "crem-reporter.service")
	verify := func(text string) (string, error) {
		if err := os.WriteFile(unit, []byte(strings.ReplaceAll(text, installed, exe)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(sa, "verify", unit).CombinedOutput()
		return string(out), err
	}
	out, err := verify(string(b))
	var mine []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "crem-reporter") || strings.Contains(l, dir) {
			mine = append(mine, l)
		}
	}
	if err != nil || len(mine) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	if out, _ := verify(string(b) + "[Service]\nAmbientCapabilitiez=CAP_BPF\n"); !strings.Contains(out, "AmbientCapabilitiez") {
		t.Errorf("a misspelt key went unnoticed: %s", out)
	}
}

// TestReporterUnitLeastPrivilege: the path reporter runs as a user of its own with CAP_BPF
// and CAP_PERFMON only (it loads and attaches a tracing program; it changes nothing in the
// packet path, so no CAP_NET_ADMIN), may call bpf(2) and perf_event_open(2) beside the
// ordinary system calls, checks its configuration first and is not restarted after exit 2.
func TestReporterUnitLeastPrivilege(t *testing.T) {
	b, err := os.ReadFile("systemd/crem-reporter.service")
	if err != nil {
		t.Fatal(err)
	}
	k := map[string][]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if key, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			k[key] = append(k[key], v)
		}
	}
	for key, want := range map[string]string{"DynamicUser": "yes", "CapabilityBoundingSet": "CAP_BPF CAP_PERFMON",
		"AmbientCapabilities": "CAP_BPF CAP_PERFMON", "NoNewPrivileges": "yes", "Restart": "on-failure",
		"RestartPreventExitStatus": "2", "ProtectSystem": "strict", "PrivateDevices": "yes",
		"SystemCallFilter": "@system-service bpf perf_event_open", "RestrictNamespaces": "yes"} {
		if v := k[key]; len(v) != 1 || v[0] != want {
			t.Errorf("%s=%q, want %q", key, v, want)
		}
	}
	pre, start := k["ExecStartPre"], k["ExecStart"]
	if len(pre) != 1 || len(start) != 1 || start[0]+" --check-config" != pre[0] {
		t.Errorf("ExecStartPre %q must check the configuration ExecStart %q runs", pre, start)
	}
}
