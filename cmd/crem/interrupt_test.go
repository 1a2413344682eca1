package main

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cremRun is a crem process of a test (this test binary run as crem, TestMain), its standard
// output and error kept, killed at the end of the test unless it exited.
type cremRun struct {
	cmd      *exec.Cmd
	out, err syncBuf
	exited   chan error
	done     bool
}

func startCrem(t *testing.T, args ...string) *cremRun {
	t.Helper()
	p := &cremRun{exited: make(chan error, 1)}
	p.cmd = exec.Command(os.Args[0], args...)
	p.cmd.Env = append(os.Environ(), "CREM_TEST_AS_CREM=1")
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if !p.done {
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

func (p *cremRun) stdout() string { p.out.mu.Lock(); defer p.out.mu.Unlock(); return p.out.b.String() }
func (p *cremRun) stderr() string { p.err.mu.Lock(); defer p.err.mu.Unlock(); return p.err.b.String() }

// waitFor waits until ready says the run has started (a line it printed, a file it wrote),
// not a fixed time: the machine may be busy.
func (p *cremRun) waitFor(t *testing.T, what string, ready func() bool) {
	t.Helper()
	for deadline := time.Now().Add(patience); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ready() {
			return
		}
		select {
		case err := <-p.exited:
			p.done = true
			t.Fatalf("exited (%v) before %s: %s %s", err, what, p.stdout(), p.stderr())
		default:
		}
	}
	t.Fatalf("no %s within %v: %s %s", what, patience, p.stdout(), p.stderr())
}

// signal sends sig and returns the exit status.
func (p *cremRun) signal(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	p.cmd.Process.Signal(sig)
	select {
	case err := <-p.exited:
		p.done = true
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &ee):
			return ee.ExitCode() // -1: killed by the signal, not handled
		}
		t.Fatal(err)
	case <-time.After(patience):
		t.Fatalf("no exit within %v of %v: %s %s", patience, sig, p.stdout(), p.stderr())
	}
	return 0
}

// noFailureWords fails the test if out calls anything lost, corrupted or failed, or prints
// FAIL: only cancelled work is in it.
func noFailureWords(t *testing.T, what, out string) {
	t.Helper()
	for _, bad := range []string{"FAIL", "lost or corrupted", "corrupted", "failed", "did not verify", "unverified", "retry exceeded"} {
		if strings.Contains(out, bad) {
			t.Errorf("%s says %q though only cancelled:\n%s", what, bad, out)
		}
	}
}

// fileGrows is a ready function: the file exists with more than n octets.
func fileGrows(path string, n int64) func() bool {
	return func() bool {
		st, err := os.Stat(path)
		return err == nil && st.Size() > n
	}
}

// crem perf cut short by SIGTERM (the table) and SIGINT (the JSON) reports what it did:
// interrupted, the iterations completed and those cancelled in flight, exit status 143 and 130,
// no bandwidth figure, nothing called lost or failed. The run has started when its capture
// holds packets.
func TestPerfSignalReportsInterruptedRun(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
		json bool
	}{{syscall.SIGTERM, 143, false}, {syscall.SIGINT, 130, true}} {
		pcap := filepath.Join(t.TempDir(), "perf.pcap")
		args := []string{"perf", "write", "--loopback", "--size", "64KiB", "--iters", "1000000", "--rate", "100Mbit",
			"--retry-count", "1000", "--pcap", pcap}
		if tc.json {
			args = append(args, "--json")
		}
		p := startCrem(t, args...)
		p.waitFor(t, "packets in the capture", fileGrows(pcap, 1<<20)) // some 16 messages sent: some completed
		code := p.signal(t, tc.sig)
		out, errOut := p.stdout(), p.stderr()
		if code != tc.code {
			t.Fatalf("%v: exit %d, want %d: %s %s", tc.sig, code, tc.code, out, errOut)
		}
		noFailureWords(t, "perf", out+errOut)
		if !strings.Contains(errOut, "interrupted by "+map[syscall.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM"}[tc.sig]) {
			t.Errorf("%v: standard error does not say interrupted: %s", tc.sig, errOut)
		}
		if !tc.json {
			if !regexp.MustCompile(`(?m)^65536000000 +1000000 +tcaeth +[0-9.]+ +- .* interrupted$`).MatchString(out) {
				t.Errorf("table row not marked interrupted with no bandwidth:\n%s", out)
			}
			if !regexp.MustCompile(`(?m)^ 65536 +1000000 +- +- +-$`).MatchString(out) {
				t.Errorf("perftest row shows a bandwidth:\n%s", out)
			}
			if !regexp.MustCompile(`interrupted by SIGTERM: \d+ of 1000000 iterations completed and checked, \d+ in flight cancelled \(not lost\)`).MatchString(out) {
				t.Errorf("no closing line:\n%s", out)
			}
			continue
		}
		var res map[string]any
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("not one JSON object: %v: %q", err, out)
		}
		if res["interrupted"] != true || res["signal"] != "SIGINT" || res["verified"] != false || res["error"] != nil ||
			res["gbit_per_second"] != 0.0 || res["bw_average_gbit_per_second"] != 0.0 || res["cancelled"] == nil {
			t.Errorf("JSON: interrupted %v signal %v verified %v error %v Gbit/s %v average %v cancelled %v", res["interrupted"],
				res["signal"], res["verified"], res["error"], res["gbit_per_second"], res["bw_average_gbit_per_second"], res["cancelled"])
		}
		if c, _ := res["completed"].(float64); c < 1 {
			t.Errorf("JSON: %v iterations completed before the signal", res["completed"])
		}
	}
}

// A run that failed (not interrupted) prints no bandwidth as if it were a result: a server
// nobody answers fails the setup, and the table's Gb/s and perftest's BW are "-".
func TestPerfFailedRunPrintsNoBandwidth(t *testing.T) {
	code, out, errOut := runCmd("perf", "write", "--loopback", "--size", "64KiB", "--iters", "2000", "--rate", "2Gbit",
		"--loss", "0.5", "--retry-count", "1")
	if code != 1 {
		t.Fatalf("exit %d, want 1 (the run fails: half the packets lost, one retry): %s %s", code, out, errOut)
	}
	if !regexp.MustCompile(`(?m)^ 65536 +2000 +- +- +-$`).MatchString(out) {
		t.Errorf("perftest row of a failed run shows a bandwidth:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^131072000 +2000 +tcaeth +[0-9.]+ +- .* false$`).MatchString(out) {
		t.Errorf("crem row of a failed run shows a bandwidth:\n%s", out)
	}
	code, res, _ := perfJSON(t, "write", "--loopback", "--size", "64KiB", "--iters", "2000", "--rate", "2Gbit",
		"--loss", "0.5", "--retry-count", "1")
	if code != 1 || res["verified"] != false || res["error"] == nil || res["gbit_per_second"] != 0.0 ||
		res["bw_peak_gbit_per_second"] != 0.0 || res["msg_rate_mpps"] != 0.0 || res["interrupted"] != nil {
		t.Errorf("JSON of a failed run: exit %d verified %v error %v Gbit/s %v peak %v rate %v interrupted %v", code, res["verified"],
			res["error"], res["gbit_per_second"], res["bw_peak_gbit_per_second"], res["msg_rate_mpps"], res["interrupted"])
	}
}

// crem lab cut short by SIGINT: the run in progress is marked interrupted with no goodput,
// the configurations not started are listed as not run, the verdict says so, exit status 130,
// nothing called lost, corrupted or FAIL.
func TestLabSIGINTReportsInterruptedRun(t *testing.T) {
	p := startCrem(t, "lab", "--rtt", "2ms", "--loss", "0.01", "--rate", "40Mbit", "--messages", "4", "--size", "4MiB",
		"--retry-count", "100")
	p.waitFor(t, "the lab's first line", func() bool { return strings.Contains(p.stdout(), "CREM port") })
	time.Sleep(200 * time.Millisecond) // into the first run (gbn takes seconds at 40 Mbit/s); either way it is interrupted
	code := p.signal(t, syscall.SIGINT)
	out, errOut := p.stdout(), p.stderr()
	if code != 130 {
		t.Fatalf("exit %d, want 130: %s %s", code, out, errOut)
	}
	noFailureWords(t, "lab", out+errOut)
	if !strings.Contains(out, "interrupted by SIGINT") || !regexp.MustCompile(`(?m)^ +crem\+tcaeth +not run +-`).MatchString(out) {
		t.Errorf("table does not say interrupted and not run:\n%s", out)
	}
	if regexp.MustCompile(`(?m)^ +gbn +(true|false) `).MatchString(out) {
		t.Errorf("the interrupted run is reported as a result:\n%s", out)
	}
	if m := regexp.MustCompile(`(?m)^ +gbn +interrupted +[0-9.]+ +[0-9.]+ +(\S+) `).FindStringSubmatch(out); m != nil && m[1] != "-" {
		t.Errorf("the interrupted run shows a goodput %s:\n%s", m[1], out)
	}
	if !regexp.MustCompile(`(?m)^verdict: 0 of 4 runs verified every byte; .*not run: .*crem\+tcaeth`).MatchString(out) {
		t.Errorf("no verdict naming what did not run:\n%s", out)
	}
}

// The soak cut short by SIGTERM: not judged, not FAIL, the messages in flight cancelled, with
// --json the soak's verdict and the run marked interrupted, exit status 143.
func TestLabSoakSIGTERMIsNotJudged(t *testing.T) {
	p := startCrem(t, append([]string{"lab", "--duration", "10m", "--stats-interval", "300ms", "--json"}, soakArgs...)...)
	p.waitFor(t, "a soak interval", func() bool { return strings.Contains(p.stderr(), "messages verified") })
	code := p.signal(t, syscall.SIGTERM)
	out, errOut := p.stdout(), p.stderr()
	if code != 143 {
		t.Fatalf("exit %d, want 143: %s %s", code, out, errOut)
	}
	noFailureWords(t, "soak", out+errOut)
	var res struct {
		Interrupted bool   `json:"interrupted"`
		Signal      string `json:"signal"`
		Runs        []struct {
			Name             string  `json:"name"`
			Interrupted      bool    `json:"interrupted"`
			Error            string  `json:"error"`
			GoodputBps       float64 `json:"goodput_bps"`
			MessagesVerified int     `json:"messages_verified"`
			Soak             *struct {
				Pass        bool     `json:"pass"`
				Interrupted bool     `json:"interrupted"`
				Failures    []string `json:"failures"`
			} `json:"soak"`
		} `json:"runs"`
		Verdict *struct {
			Interrupted []string `json:"interrupted"`
			Line        string   `json:"line"`
		} `json:"verdict"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not one JSON object: %v: %q", err, out)
	}
	if !res.Interrupted || res.Signal != "SIGTERM" || len(res.Runs) != 1 {
		t.Fatalf("JSON: %+v", res)
	}
	r := res.Runs[0]
	if !r.Interrupted || r.Error != "" || r.GoodputBps != 0 || r.MessagesVerified < 1 || r.Soak == nil || !r.Soak.Interrupted ||
		r.Soak.Pass || len(r.Soak.Failures) != 0 {
		t.Errorf("soak run: %+v (soak %+v)", r, r.Soak)
	}
	if res.Verdict == nil || len(res.Verdict.Interrupted) != 1 || !strings.Contains(res.Verdict.Line, "crem+tcaeth interrupted") {
		t.Errorf("verdict: %+v", res.Verdict)
	}
}

// crem sim cut short by SIGINT: the cells print with the trials they completed, marked
// interrupted or not run, exit status 130, no shard file, CSV or figures; with --json (SIGTERM,
// 143) each cell carries interrupted and trials_planned.
func TestSimSignalReportsInterruptedSweep(t *testing.T) {
	args := []string{"sim", "--scenario", "metro", "--schemes", "gbn,tcaeth", "--sizes", "64MiB", "--drop-rates", "1e-3,1e-2",
		"--trials", "1000"}
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
		json bool
	}{{syscall.SIGINT, 130, false}, {syscall.SIGTERM, 143, true}} {
		dir := t.TempDir()
		a := append(append([]string(nil), args...), "--out", dir)
		if tc.json {
			a = append(a, "--json")
		}
		p := startCrem(t, a...)
		p.waitFor(t, "the sweep's start", func() bool { return strings.Contains(p.stderr(), "crem sim: running") })
		time.Sleep(300 * time.Millisecond) // some trials complete; either way the sweep is cut short
		code := p.signal(t, tc.sig)
		out, errOut := p.stdout(), p.stderr()
		if code != tc.code {
			t.Fatalf("%v: exit %d, want %d: %s %s", tc.sig, code, tc.code, out, errOut)
		}
		noFailureWords(t, "sim", out+errOut)
		if files, _ := os.ReadDir(dir); len(files) != 0 {
			t.Errorf("%v: files written by an interrupted sweep: %v", tc.sig, files)
		}
		if !strings.Contains(errOut, "no shard file, CSV or figures written") {
			t.Errorf("%v: standard error: %s", tc.sig, errOut)
		}
		if !tc.json {
			if !strings.Contains(out, "interrupted by SIGINT: ") || !regexp.MustCompile(`of 1000, (interrupted|not run)`).MatchString(out) {
				t.Errorf("table not marked interrupted:\n%s", out)
			}
			continue
		}
		var cells []map[string]any
		if err := json.Unmarshal([]byte(out), &cells); err != nil || len(cells) != 4 {
			t.Fatalf("JSON: %v: %q", err, out)
		}
		for _, c := range cells {
			if c["interrupted"] != true || c["trials_planned"] != 1000.0 {
				t.Errorf("cell %v %v: interrupted %v, trials planned %v", c["scheme"], c["drop_rate"], c["interrupted"], c["trials_planned"])
			}
		}
	}
}

// crem perf serve stops on SIGINT and on SIGTERM with status 0, its normal end, and says so.
func TestPerfServeStopsOnSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}) // a free setup port
		if err != nil {
			t.Fatal(err)
		}
		setup := c.LocalAddr().String()
		c.Close()
		p := startCrem(t, "perf", "serve", "--listen", setup, "--port", "0")
		p.waitFor(t, "the server's first line", func() bool { return strings.Contains(p.stderr(), "crem perf serve: setup on") })
		if code := p.signal(t, sig); code != 0 {
			t.Fatalf("%v: exit %d: %s", sig, code, p.stderr())
		}
		if name := map[syscall.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM"}[sig]; !strings.Contains(p.stderr(), "stopped by "+name) {
			t.Errorf("%v: %s", sig, p.stderr())
		}
	}
}
