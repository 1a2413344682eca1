package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/internal/testenv"
)

// --via, --bind and --reorder-window take what they say and nothing else: an address with a
// port, an IP, a duration from 0 to 1 s; --via and --bind are for a client of a remote server.
func TestPerfViaFlags(t *testing.T) {
	for _, args := range [][]string{
		{"write", "--loopback", "--via", "127.0.0.1:4791"},
		{"write", "--loopback", "--bind", "127.0.0.1"},
		{"write", "--server", "127.0.0.1:18515", "--via", "127.0.0.1"},
		{"write", "--server", "127.0.0.1:18515", "--via", "nowhere:port"},
		{"write", "--server", "127.0.0.1:18515", "--bind", "127.0.0.1:5"},
		{"write", "--loopback", "--reorder-window", "2s"},
		{"write", "--loopback", "--reorder-window", "-1ms"},
		{"serve", "--listen", "127.0.0.1:0", "--via", "127.0.0.1"},
	} {
		code, _, errOut := runPerfCLI(args...)
		if code != 2 || !strings.Contains(errOut, "--") {
			t.Errorf("%q: exit %d (%s), want 2 and the flag named", args, code, errOut)
		}
	}
}

// scripts/perf-relay.sh as a user runs it: crem perf write through two relay-mode gateways with
// crem netem as the WAN between them, 20 ms round trip and 1 percent loss each way, the client
// starting with the RTT unknown (--via). Every byte verifies, CREM restores packets (none failing
// the ICRC check), and RDMA retransmits at most 1.3 times the RoCEv2 datagrams the WAN lost plus
// two per timeout. The processes are this test binary acting as crem; the addresses are a /24 of
// loopback of their own and the ports random, so that runs beside other tests do not meet.
// Under the race detector, which slows every process several times over, a smaller run at
// 50 Mbit/s checks the bytes and the restorations, not the retransmission count.
func TestPerfRelayPairScript(t *testing.T) {
	if testing.Short() {
		t.Skip("five processes on real sockets for some seconds")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash")
	}
	script, err := filepath.Abs("../../scripts/perf-relay.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "crem")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nCREM_TEST_AS_CREM=1 exec "+os.Args[0]+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	r := rand.New(rand.NewPCG(seed, 1))
	base := fmt.Sprintf("127.%d.%d", 100+r.IntN(150), 1+r.IntN(250))
	crem := 49152 + r.IntN(16000)
	env := []string{"CREM=" + wrapper, "BASE=" + base, "KEEP=" + filepath.Join(dir, "run"),
		"CREM_PORT=" + strconv.Itoa(crem), "WAN_PORT=" + strconv.Itoa(crem+1), "SETUP_PORT=" + strconv.Itoa(crem+2),
		"ROCE_PORT=" + strconv.Itoa(crem+3), "METRICS_PORT=" + strconv.Itoa(crem+4)}
	if testenv.Race {
		env = append(env, "RATE=50Mbit", "ITERS=4")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script, "20ms", "0.01")
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%v (addresses %s.x, CREM port %d, seed %d)", err, base, crem, seed)
	}
	logs := func() string {
		var b strings.Builder
		for _, f := range []string{"perf.err", "gateway-a.err", "gateway-b.err", "netem-ab.err", "netem-ba.err", "server.err"} {
			c, _ := os.ReadFile(filepath.Join(dir, "run", f))
			fmt.Fprintf(&b, "--- %s\n%s", f, c)
		}
		return b.String()
	}
	t.Logf("addresses %s.x, CREM port %d, seed %d:\n%s", base, crem, seed, out)
	fig := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.Contains(k, " ") {
			fig[k] = v
		}
	}
	num := func(k string) float64 {
		v, err := strconv.ParseFloat(fig[k], 64)
		if err != nil {
			t.Fatalf("no figure %s in the script's output (%v):\n%s\n%s", k, err, out, logs())
		}
		return v
	}
	if fig["verified"] != "true" {
		t.Fatalf("not every byte verified:\n%s\n%s", out, logs())
	}
	lost, retx, timeouts := num("roce_lost"), num("rdma_retransmitted"), num("timeouts")
	if lost == 0 {
		t.Errorf("the WAN lost nothing at 1 percent: the loss did not apply")
	}
	if bound := 1.3*lost + 2*timeouts; retx > bound && !testenv.Race {
		t.Errorf("%v RDMA retransmissions, more than 1.3 x %v lost + 2 x %v timeouts = %v", retx, lost, timeouts, bound)
	}
	if num("restored") == 0 {
		t.Errorf("no packet restored by CREM")
	}
	if num("icrc_mismatch") != 0 {
		t.Errorf("%v restored packets failed the ICRC check", num("icrc_mismatch"))
	}
	if (err != nil || !strings.Contains(string(out), "PASS:")) && !testenv.Race {
		t.Errorf("the script's verdict: %v\n%s", err, out)
	}
	if t.Failed() {
		t.Log(logs())
	}
}
