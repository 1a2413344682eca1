package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// labNeeds skips where deploy/tun/tun-lab.sh cannot run: it needs root, ip(8) and tc(8)
// (iproute2), /dev/net/tun, bash, network namespaces, and the go command to build crem.
func labNeeds(t *testing.T) (goCmd string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("TUN mode is Linux only")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil && os.Geteuid() == 0 {
		t.Skip("needs /dev/net/tun")
	}
	return netnsNeeds(t)
}

// netnsNeeds skips where a namespace lab script cannot run: it needs Linux, root, ip(8) and
// tc(8) (iproute2), bash, network namespaces, and the go command to build crem, which it
// returns.
func netnsNeeds(t *testing.T) (goCmd string) {
	t.Helper()
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("needs Linux and root to create network namespaces")
	}
	for _, tool := range []string{"ip", "tc", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (ip and tc: Debian package iproute2)", tool)
		}
	}
	ns := fmt.Sprintf("crem-probe-%d", os.Getpid()%100000)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace here: %v: %s", err, out)
	}
	exec.Command("ip", "netns", "del", ns).Run()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		goCmd = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goCmd); err != nil {
			t.Skip("needs the go command to build crem")
		}
	}
	return goCmd
}

// labNamespaces lists the network namespaces whose names start with prefix.
func labNamespaces(t *testing.T, prefix string) []string {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	var ns []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			ns = append(ns, f[0])
		}
	}
	return ns
}

var (
	labFail     = regexp.MustCompile(`(?m)^FAIL: .*restored (\d+), ICRC mismatches (\d+) \(`)
	labGatewayB = regexp.MustCompile(`(?m)^gateway B: .* restored (\d+) icrc_mismatch (\d+) `)
)

// labRun runs the script as a user would (bash deploy/tun/tun-lab.sh ARGS) with the lab's
// namespaces under prefix and the settings env, and returns its output and exit status. A run
// past limit is killed; the namespaces are removed in any case.
func labRun(t *testing.T, crem, prefix string, limit time.Duration, env []string, args ...string) (string, int) {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() {
		cmd := exec.Command("bash", "tun/tun-lab.sh", "down")
		cmd.Env = append(os.Environ(), "CREM_LAB_PREFIX="+prefix, "CREM_LAB_DIR="+dir)
		cmd.Run()
	})
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{"tun/tun-lab.sh"}, args...)...)
	cmd.Env = append(os.Environ(), append([]string{"CREM=" + crem, "CREM_LAB_PREFIX=" + prefix, "CREM_LAB_DIR=" + dir}, env...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("tun-lab.sh %v: still running after %v:\n%s", args, limit, out.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("tun-lab.sh: %v", err)
	}
	return out.String(), code
}

// labCrem is crem built once for the tests of this package that run it (TestMain removes it).
var labCrem struct {
	once      sync.Once
	dir, path string
	err       error
}

func buildCrem(t *testing.T, goCmd string) string {
	t.Helper()
	labCrem.once.Do(func() {
		if labCrem.dir, labCrem.err = os.MkdirTemp("", "crem-lab-build"); labCrem.err != nil {
			return
		}
		labCrem.path = filepath.Join(labCrem.dir, "crem")
		cmd := exec.Command(goCmd, "build", "-o", labCrem.path, "../cmd/crem")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			labCrem.err = fmt.Errorf("go build ./cmd/crem: %v: %s", err, out)
		}
	})
	if labCrem.err != nil {
		t.Fatal(labCrem.err)
	}
	return labCrem.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if labCrem.dir != "" {
		os.RemoveAll(labCrem.dir)
	}
	os.Exit(code)
}

// TestTunLabRestoresAndVerifies runs deploy/tun/tun-lab.sh as the user guide does: five network
// namespaces (client, gateway A, WAN router with a token bucket, gateway B, server), the
// shipped deploy/examples/tun-a.toml and tun-b.toml with their routing (tun-a.env, tun-b.env),
// and three `crem perf write` transfers through the pair. It requires the verdict PASS, every
// transfer verified, gateway B's restored packets > 0 and 0 ICRC mismatches (its metrics, read
// by the script), the exit status 0, and no namespace left behind. Then, with the gateways
// checking under the header template (RoCE NICs' setting, which the project's endpoints do
// not seal under), the script must say FAIL with ICRC mismatches, exit 1 and still take
// everything down. Needs root, iproute2, /dev/net/tun, bash and go; skips elsewhere.
func TestTunLabRestoresAndVerifies(t *testing.T) {
	goCmd := labNeeds(t)
	crem := buildCrem(t, goCmd)
	prefix := fmt.Sprintf("crem-tl%d", os.Getpid()%100000)
	start := time.Now()
	out, code := labRun(t, crem, prefix, 120*time.Second, nil)
	t.Logf("tun-lab.sh (%.1f s):\n%s", time.Since(start).Seconds(), out)
	if code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	m := labGatewayB.FindStringSubmatch(out)
	if m == nil {
		t.Fatal("no counters of gateway B")
	}
	restored, _ := strconv.Atoi(m[1])
	mismatch, _ := strconv.Atoi(m[2])
	if restored == 0 || mismatch != 0 {
		t.Errorf("gateway B restored %d, ICRC mismatches %d; want > 0 and 0", restored, mismatch)
	}
	if !strings.Contains(out, "\nPASS: ") || strings.Count(out, " true\n") != 3 {
		t.Errorf("no PASS verdict, or not three verified transfers")
	}
	if left := labNamespaces(t, prefix); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}

	// The gateways as RoCE NICs need them: every restoration fails its check, and the script
	// says so. The lab's own path, one transfer: it loses 5 to 25 percent, which the gateways'
	// repair answers. A bucket slower than the sender lost 20 to 40 percent, and gateway A's
	// reader, busy with that data, took the HELLO_ACKs from its socket some 65 ms after B sent
	// them (the gateways' captures): the flow's configuration came after half the transfer, or
	// (on a slower machine) after all of it, and nothing was restored to mismatch. A run that
	// restores nothing all the same is run again, up to three times.
	var v []string
	for try := 1; try <= 3; try++ {
		out, code = labRun(t, crem, prefix, 90*time.Second, []string{"CREM_LAB_VERIFY=template", "CREM_LAB_RUNS=1"})
		t.Logf("with --tun-verify template, try %d (%.1f s in all):\n%s", try, time.Since(start).Seconds(), out)
		if v = labFail.FindStringSubmatch(out); v != nil && v[2] != "0" {
			break
		}
	}
	if code != 1 || v == nil || v[2] == "0" {
		t.Errorf("with --tun-verify template: exit %d, verdict %q; want 1 and FAIL with ICRC mismatches:\n%s", code, v, out)
	}
	if left := labNamespaces(t, prefix); len(left) > 0 {
		t.Errorf("namespaces left behind after a failed run: %v", left)
	}
}

// TestTunLabInterruptTearsDown: Ctrl-C (SIGINT to the script's process group, as a terminal
// sends it) while the transfers run ends the script with status 130 and removes every
// namespace and process it started. Needs what TestTunLabRestoresAndVerifies needs.
func TestTunLabInterruptTearsDown(t *testing.T) {
	goCmd := labNeeds(t)
	crem := buildCrem(t, goCmd)
	prefix := fmt.Sprintf("crem-ti%d", os.Getpid()%100000)
	dir := t.TempDir()
	t.Cleanup(func() {
		cmd := exec.Command("bash", "tun/tun-lab.sh", "down")
		cmd.Env = append(os.Environ(), "CREM_LAB_PREFIX="+prefix, "CREM_LAB_DIR="+dir)
		cmd.Run()
	})
	cmd := exec.Command("bash", "tun/tun-lab.sh")
	cmd.Env = append(os.Environ(), "CREM="+crem, "CREM_LAB_PREFIX="+prefix, "CREM_LAB_DIR="+dir, "CREM_LAB_RUNS=50")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "run 1:") {
		if time.Now().After(deadline) {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			t.Fatalf("no first transfer within 60 s:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(labNamespaces(t, prefix)) != 5 {
		t.Fatalf("the lab is not up: %v", labNamespaces(t, prefix))
	}
	var pids []int
	for _, name := range []string{"gateway-a", "gateway-b", "perf-server"} {
		b, err := os.ReadFile(filepath.Join(dir, name+".pid"))
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			t.Fatalf("%s: no pid file: %v", name, err)
		}
		pids = append(pids, pid)
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Fatalf("the script did not end within 30 s of SIGINT:\n%s", out.String())
	}
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 130 {
		t.Errorf("exit %v, want status 130", err)
	}
	if left := labNamespaces(t, prefix); len(left) > 0 {
		t.Errorf("namespaces left behind after SIGINT: %v", left)
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("process %d (a gateway or the perf server) still runs", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if !strings.Contains(out.String(), "interrupted; taking the lab down") {
		t.Errorf("no word of the interruption:\n%s", out.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a process's writes and the test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
