package deploy

import (
	"bytes"
	"context"
	"fmt"
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
