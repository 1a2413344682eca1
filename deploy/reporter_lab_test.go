package deploy

import (
	"strings"

	"bytes"
	"context"
	"fmt"
	"github.com/crem-project/crem/internal/harness/netnslock"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"
)

var reporterLabPass = regexp.MustCompile(`(?m)^PASS: the WAN queue dropped (\d+) packets \((\d+) RoCEv2, every one named, and (\d+) others\); the reporter sent (\d+) reports; gateway A's CSF took (\d+) and sent (\d+) extra repair symbols$`)

// TestReporterLabProactiveRepair runs deploy/tun/reporter-lab.sh: the TUN lab with crem
// reporter on its WAN router. Every drop of the WAN queue is accounted (the RoCEv2 ones named
// PSN by PSN, the rest counted), gateway A's CSF takes the reports (C14: the router is among
// its reporters) and sends extra repair at once (C16); the transfers verify and nothing is
// left behind. Needs what the TUN lab needs and a kernel with BTF; skips elsewhere.
func TestReporterLabProactiveRepair(t *testing.T) {
	goCmd := labNeeds(t)
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		t.Skip("needs the kernel's BTF (/sys/kernel/btf/vmlinux) for crem reporter")
	}
	netnslock.Take(t)
	crem := buildCrem(t, goCmd)
	prefix := fmt.Sprintf("crem-rl%d", os.Getpid()%100000)
	dir := t.TempDir()
	env := append(os.Environ(), "CREM="+crem, "CREM_LAB_PREFIX="+prefix, "CREM_LAB_DIR="+dir, "CREM_LAB_RUNS=2")
	t.Cleanup(func() {
		cmd := exec.Command("bash", "tun/reporter-lab.sh", "down")
		cmd.Env = env
		cmd.Run()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "tun/reporter-lab.sh")
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("reporter-lab.sh (%.1f s):\n%s", time.Since(start).Seconds(), out.String())
	if err != nil {
		t.Fatalf("reporter-lab.sh: %v", err)
	}
	m := reporterLabPass.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatal("no PASS verdict of the reporter")
	}
	n := make([]int, len(m))
	for i := 1; i < len(m); i++ {
		n[i], _ = strconv.Atoi(m[i])
	}
	if n[2] == 0 || n[2]+n[3] != n[1] || n[4] == 0 || n[5] == 0 || n[6] == 0 {
		t.Errorf("verdict %q: want RoCEv2 drops + others = the queue's drops, reports taken, extra repair sent", m[0])
	}
	if left := labNamespaces(t, prefix); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
}

var reporterRecovery = regexp.MustCompile(`(?m)^RECOVERY: beyond_m blocks without the reporter (\d+), median ([0-9.]+) ms \(([0-9.]+) RTT\); with it (\d+), median ([0-9.]+) ms \(([0-9.]+) RTT\); saved (-?[0-9.]+) ms = (-?[0-9.]+) RTT \(WAN RTT ([0-9.]+) ms\)$`)

// reporterSavingMargin is the least saving, in round trips, that the test takes for the
// reporter's. The ideal for a router in the middle of the path is 0.5 RTT (the simulator's 0.44
// to 0.49); on an idle 2-core machine single runs of the lab have saved from -0.58 to 0.63
// (docs/performance.md: the medians of some 250 blocks each way, whose recovery is bimodal, so a
// run's median moves by a mode's width), and inside `go test ./...`, with the other packages'
// tests on the same two cores, less: the reporter's gain is the gateways' promptness, which the
// load takes. 0.05 RTT (1 ms at 20 ms) still says the reporter restores the blocks beyond m
// sooner.
const reporterSavingMargin = 0.05

// reporterRTTAttempts is how many runs of the lab the test takes at most (some 15 s each).
const reporterRTTAttempts = 3

// TestReporterSavesRecoveryRTT runs scripts/reporter-rtt.sh: a relay-mode gateway pair across a
// Linux router whose token bucket drops (crem reporter on it) and a WAN round trip of 20 ms
// (crem netem), three pairs of transfers without and with the reporter. The blocks that lost
// more than their m are restored sooner with the reporter: gateway B's median recovery time
// (PR18) is lower by reporterSavingMargin RTT at least; and while the reporter runs, every
// packet the queue dropped is matched by the program and every RoCEv2 datagram among them named.
// Needs root, ip, tc, bash, network namespaces, the kernel's BTF and the go command; skips
// elsewhere.
func TestReporterSavesRecoveryRTT(t *testing.T) {
	goCmd := netnsNeeds(t)
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		t.Skip("needs the kernel's BTF (/sys/kernel/btf/vmlinux) for crem reporter")
	}
	crem := buildCrem(t, goCmd)
	netnslock.Take(t)
	// A measurement of medians on a shared machine: a run the load spoiled is run again, up to
	// reporterRTTAttempts runs, and the test fails only when every one falls short.
	var short []string
	for attempt := 1; attempt <= reporterRTTAttempts; attempt++ {
		line, saved := reporterRTTRun(t, crem, attempt)
		if saved >= reporterSavingMargin {
			return
		}
		short = append(short, fmt.Sprintf("run %d: %s: saved %.2f RTT", attempt, line, saved))
	}
	t.Errorf("the reporter saved less than %.2f RTT in all %d runs:\n%s", reporterSavingMargin, reporterRTTAttempts, strings.Join(short, "\n"))
}

// reporterRTTRun runs scripts/reporter-rtt.sh once and returns its RECOVERY line and the
// round trips the reporter saved.
func reporterRTTRun(t *testing.T, crem string, attempt int) (string, float64) {
	t.Helper()
	prefix := fmt.Sprintf("crem-rr%d", os.Getpid()%100000)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "../scripts/reporter-rtt.sh", "20ms")
	cmd.Env = append(os.Environ(), "CREM="+crem, "PREFIX="+prefix, "KEEP="+t.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("reporter-rtt.sh, run %d (%.1f s):\n%s", attempt, time.Since(start).Seconds(), out.String())
	if left := labNamespaces(t, prefix); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
	if err != nil {
		t.Fatalf("reporter-rtt.sh: %v", err)
	}
	m := reporterRecovery.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatal("no RECOVERY line")
	}
	num := func(i int) float64 {
		v, _ := strconv.ParseFloat(m[i], 64)
		return v
	}
	without, with, rtt := num(2), num(5), num(9)
	if num(1) < 20 || num(4) < 20 {
		t.Fatalf("%s: fewer than 20 blocks beyond m in a half, too few for a median", m[0])
	}
	return m[0], (without - with) / rtt
}
