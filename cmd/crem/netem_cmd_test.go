package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// startNetemEcho runs a UDP echo server on 127.0.0.1 for the test.
func startNetemEcho(t *testing.T) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65535)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			c.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// netemProc is a `crem netem` process of a test: this test binary run as crem (TestMain), its
// standard output and error kept, killed at the end of the test unless stopped.
type netemProc struct {
	cmd    *exec.Cmd
	out    bytes.Buffer
	errb   syncBuf
	exited chan error
	waited bool // stop has seen the process exit
}

// startNetem starts `crem netem` with args.
func startNetem(t *testing.T, args ...string) *netemProc {
	t.Helper()
	np := &netemProc{exited: make(chan error, 1)}
	np.cmd = exec.Command(os.Args[0], append([]string{"netem"}, args...)...)
	np.cmd.Env = append(os.Environ(), "CREM_TEST_AS_CREM=1")
	np.cmd.Stdout, np.cmd.Stderr = &np.out, &np.errb
	if err := np.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { np.exited <- np.cmd.Wait() }()
	t.Cleanup(func() {
		if !np.waited {
			np.cmd.Process.Kill()
			<-np.exited
		}
	})
	return np
}

// addr waits for the standard-error line that starts with prefix (and ends with suffix, if
// given) and returns the address that follows the prefix, up to sep.
func (np *netemProc) addr(t *testing.T, prefix, suffix, sep string) netip.AddrPort {
	t.Helper()
	for deadline := time.Now().Add(patience); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for line := range strings.Lines(np.errb.String()) {
			line = strings.TrimSpace(line)
			a, ok := strings.CutPrefix(line, prefix)
			if !ok || !strings.HasSuffix(line, suffix) {
				continue
			}
			if addr, _, ok := strings.Cut(a, sep); ok {
				return netip.MustParseAddrPort(addr)
			}
		}
	}
	t.Fatalf("no line %q...%q on standard error: %s", prefix, suffix, np.errb.String())
	return netip.AddrPort{}
}

// stop sends SIGTERM and returns how the process exited; it fails the test if the process
// does not stop within patience.
func (np *netemProc) stop(t *testing.T) error {
	t.Helper()
	np.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-np.exited:
		np.waited = true
		return err
	case <-time.After(patience):
		t.Fatalf("no stop on SIGTERM within %v", patience)
		return nil
	}
}

// TestNetemHelp: --help explains the command to a newcomer, with an example, and exits 0.
func TestNetemHelp(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"netem", "--help"}, stdio{in: strings.NewReader(""), out: &out, err: &errb})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"Example", "-listen", "-forward", "-delay", "-jitter", "-rate",
		"-loss", "-loss-model", "-queue", "-ecn-threshold", "-seed", "-reverse-loss", "-reverse-seed",
		"-drop-log", "-pcap", "-stats-interval", "-duration", "-json", "script:", "gilbert",
		"PSN", "CE", "-report-to", "-report-method", "-report-node-id", "-marking-period", "-report-listen",
		"PATH_REPORT", "Alternate Marking", "PREFIX=CSFADDR", "-report-merge", "-report-aggregation",
		"downstream reporters", "16 at most"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

// TestNetemBadFlags: each bad flag gets one clear error line on standard error and exit 2.
func TestNetemBadFlags(t *testing.T) {
	base := []string{"netem", "--listen", "127.0.0.1:0", "--forward", "127.0.0.1:9"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"netem", "--forward", "127.0.0.1:9"}, "--listen is required"},
		{[]string{"netem", "--listen", "127.0.0.1:0"}, "--forward is required"},
		{append(base, "--loss", "2"), "above 1"},
		{append(base, "--loss", "gilbert:p=0.1"), "missing r="},
		{append(base, "--loss-model", "pareto", "--loss", "0.1"), "pareto"},
		{append(base, "--loss-model", "gilbert:p=0.1,r=0.5", "--loss", "0.01"), "fixes its own loss"},
		{append(base, "--loss-model", "bernoulli"), "missing"},
		{append(base, "--loss-model", "gilbert", "--loss", "0.01"), "missing r="},
		{append(base, "--loss-model", "bernoulli", "--loss", "script:1"), "must be a fraction"},
		{append(base, "--rate", "100MBps"), "-rate"},
		{append(base, "--delay", "-5ms"), "-delay"},
		{append(base, "--delay", "10"), "-delay"},
		{append(base, "--queue", "lots"), "-queue"},
		{append(base, "--ecn-threshold", "-1"), "negative"},
		{append(base, "--reverse-loss", "1.5"), "reverse direction"},
		{append(base, "--reorder", "0.1"), "reorder delay"},
		{append(base, "--jitter-dist", "pareto"), "pareto"},
		{append(base, "--no-such-flag"), "no-such-flag"},
		{append(base, "extra"), "unexpected argument"},
		{append(base, "--max-clients", "0"), "max-clients"},
		{[]string{"netem", "--listen", "127.0.0.1:99999", "--forward", "127.0.0.1:9"}, "listen"},
		{[]string{"netem", "--listen", "127.0.0.1:0", "--forward", "127.0.0.1:0"}, "forward address"},
		{append(base, "--drop-log", filepath.Join(t.TempDir(), "no", "such", "dir", "log")), "drop log"},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, stdio{in: strings.NewReader(""), out: &out, err: &errb})
		msg := strings.TrimSuffix(errb.String(), "Run 'crem netem -h' for usage.\n") // a bad flag's hint
		if code != 2 || strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "crem netem: ") ||
			!strings.Contains(msg, c.want) || out.Len() != 0 {
			t.Errorf("%v: exit %d, stderr %q (want one line with %q), stdout %q", c.args[1:], code, msg, c.want, out.String())
		}
	}
}

// TestNetemLossSpec: --loss and --loss-model combine into the simulator's loss models.
func TestNetemLossSpec(t *testing.T) {
	for _, c := range []struct {
		loss, model, want string
		mean              float64
	}{
		{"", "", "none", 0},
		{"0.01", "", "bernoulli:0.01", 0.01},
		{"1%", "", "bernoulli:0.01", 0.01},
		{"gilbert:p=0.001,r=0.25", "", "gilbert:p=0.001,r=0.25", 0.001 / 0.251},
		{"0.01", "bernoulli", "bernoulli:0.01", 0.01},
		{"0.01", "gilbert-burst:burst=4", "gilbert-burst:rate=0.01,burst=4", 0.01},
		{"0.02", "gilbert:r=0.25", "", 0.02},
		{"0.02", "gilbert:r=0.5,h=0.5,k=0.01", "", 0.02},
		{"", "gilbert:p=0.01,r=0.5", "gilbert:p=0.01,r=0.5", 0.01 / 0.51},
		{"", "every:n=1,of=100", "every:n=1,of=100", 0.01},
		{"none", "bernoulli", "none", 0},
		{"0", "gilbert-burst:burst=4", "none", 0},
	} {
		s, err := lossSpec(c.loss, c.model)
		if err != nil {
			t.Errorf("lossSpec(%q, %q): %v", c.loss, c.model, err)
			continue
		}
		if c.want != "" && s.String() != c.want || math.Abs(s.MeanLoss()-c.mean) > 1e-12 {
			t.Errorf("lossSpec(%q, %q) = %v (mean %v), want %q (mean %v)", c.loss, c.model, s, s.MeanLoss(), c.want, c.mean)
		}
	}
}

// TestNetemRunsAndSummarizes: the command proxies real datagrams on 127.0.0.1 until SIGTERM,
// drops exactly the scripted one, logs it, and prints a JSON summary whose counters add up. It
// runs as a process of its own, stopped by the signal once it has done its work (and printed a
// --stats-interval line), so that no duration has to outlast a busy machine's delays.
func TestNetemRunsAndSummarizes(t *testing.T) {
	echo := startNetemEcho(t)
	dropLog := filepath.Join(t.TempDir(), "drops.jsonl")
	np := startNetem(t, "--listen", "127.0.0.1:0", "--forward", echo.String(),
		"--delay", "5ms", "--loss", "script:1", "--reverse-loss", "none",
		"--drop-log", dropLog, "--stats-interval", "200ms", "--json")
	proxy := np.addr(t, "crem netem: listening on ", "", ",")
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 5 {
		c.WriteToUDPAddrPort([]byte{byte(i)}, proxy)
	}
	answers := 0
	buf := make([]byte, 64)
	for answers < 4 {
		c.SetReadDeadline(time.Now().Add(patience))
		if _, _, err := c.ReadFromUDPAddrPort(buf); err != nil {
			break
		}
		answers++
	}
	if !waitLog(&np.errb, "forward: rx") {
		t.Errorf("no --stats-interval line on standard error:\n%s", np.errb.String())
	}
	var code int
	if err := np.stop(t); err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	if code != 0 || answers != 4 {
		t.Fatalf("exit %d, %d answers of 4; stderr:\n%s", code, answers, np.errb.String())
	}
	var sum struct {
		Listen  string  `json:"listen_addr"`
		Elapsed float64 `json:"elapsed_s"`
		Stats   struct {
			Forward, Reverse struct {
				Received    uint64 `json:"received"`
				Forwarded   uint64 `json:"forwarded"`
				DroppedLoss uint64 `json:"dropped_loss"`
			}
		} `json:"stats"`
	}
	dec := json.NewDecoder(bytes.NewReader(np.out.Bytes()))
	if err := dec.Decode(&sum); err != nil || dec.More() {
		t.Fatalf("standard output is not one JSON object (%v):\n%s", err, np.out.String())
	}
	f, r := sum.Stats.Forward, sum.Stats.Reverse
	if f.Received != 5 || f.Forwarded != 4 || f.DroppedLoss != 1 || r.Received != 4 || r.Forwarded != 4 ||
		sum.Listen != proxy.String() || sum.Elapsed <= 0 {
		t.Errorf("summary %+v", sum)
	}
	// The snake_case names are the contract for scripts.
	for _, key := range []string{`"dropped_loss": 1`, `"forwarded": 4`, `"ce_marked"`, `"dropped_overflow"`, `"write_errors"`} {
		if !strings.Contains(np.out.String(), key) {
			t.Errorf("JSON summary lacks %s:\n%s", key, np.out.String())
		}
	}
	lf, err := os.Open(dropLog)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	lines, _ := io.ReadAll(lf)
	sc := bufio.NewScanner(bytes.NewReader(lines))
	n := 0
	for sc.Scan() {
		var e struct {
			Dir    string `json:"dir"`
			Index  int    `json:"index"`
			Reason string `json:"reason"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Dir != "forward" || e.Index != 1 || e.Reason != "lost" {
			t.Errorf("drop log line %q (%v)", sc.Text(), err)
		}
		n++
	}
	if n != 1 {
		t.Errorf("drop log has %d lines, want 1:\n%s", n, lines)
	}
}

// TestNetemTable: without --json the summary is a table, one row per direction.
func TestNetemTable(t *testing.T) {
	echo := startNetemEcho(t)
	var out, errb bytes.Buffer
	code := run([]string{"netem", "--listen", "127.0.0.1:0", "--forward", echo.String(), "--duration", "50ms"},
		stdio{in: strings.NewReader(""), out: &out, err: &errb})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"direction", "received", "forwarded", "lost", "overflow", "ce-marked", "forward", "reverse"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(errb.String(), "reverse: delay 0s") || !strings.Contains(errb.String(), "seed 2") {
		t.Errorf("the reverse direction's line should show its own seed:\n%s", errb.String())
	}
}

// TestNetemReporterBadFlags: the reporter's flags are checked, each with one clear error line:
// no CREM port, no default (C14).
func TestNetemReporterBadFlags(t *testing.T) {
	base := []string{"netem", "--listen", "127.0.0.1:0", "--forward", "127.0.0.1:9"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{append(base, "--report-method", "marking"), "needs --report-to"},
		{append(base, "--marking-period", "10ms"), "needs --report-to"},
		{append(base, "--report-to", "0"), "CREM port"},
		{append(base, "--report-to", "70000"), "CREM port"},
		{append(base, "--report-to", "50000,10.0.0.0/8"), "PREFIX=CSFADDR"},
		{append(base, "--report-to", "50000,10.0.0.0/33=10.0.0.1"), "route"},
		{append(base, "--report-to", "50000,10.0.0.0/8=csf"), "route"},
		{append(base, "--report-to", "50000", "--report-method", "all"), "drops, marking or both"},
		{append(base, "--report-to", "50000", "--marking-period", "10ms"), "marking or both"},
		{append(base, "--report-to", "50000", "--report-method", "marking", "--marking-period", "0"), "positive"},
		{append(base, "--report-to", "50000", "--report-listen", "here"), "--report-listen"},
		{append(base, "--report-to", "50000", "--report-listen", "192.0.2.1:0"), "report"},
		{append(base, "--report-to", "50000", "--report-node-id", "4294967295"), "32 bits"},
		{append(base, "--report-merge"), "needs --report-to"},
		{append(base, "--report-to", "50000", "--report-merge"), "needs --report-merge-from"},
		{append(base, "--report-to", "50000", "--report-merge-from", "127.0.0.1"), "needs --report-merge"},
		{append(base, "--report-to", "50000", "--report-merge", "--report-merge-from", "nowhere"), "neither a prefix nor an address"},
		{append(base, "--report-aggregation", "1ms"), "needs --report-to"},
		{append(base, "--report-to", "50000", "--report-aggregation", "0"), "positive"},
		{append(base, "--report-to", "50000", "--report-aggregation", "-1ms"), "report-aggregation"},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, stdio{in: strings.NewReader(""), out: &out, err: &errb})
		msg := strings.TrimSuffix(errb.String(), "Run 'crem netem -h' for usage.\n") // a bad flag's hint
		if code != 2 || strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "crem netem: ") ||
			!strings.Contains(msg, c.want) || out.Len() != 0 {
			t.Errorf("%v: exit %d, stderr %q (want one line with %q), stdout %q", c.args[5:], code, msg, c.want, out.String())
		}
	}
}

// TestNetemPathReporter: with --report-to and --report-method both, a fake CSF on the CREM
// port gets method 3 reports naming exactly the scripted drops and method 1 reports whose Lost
// Counts add up to them, from the reporter's own socket, and --json carries the reporter's
// figures under "reporter".
func TestNetemPathReporter(t *testing.T) {
	echo := startNetemEcho(t)
	csf, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer csf.Close()
	cremPort := csf.LocalAddr().(*net.UDPAddr).AddrPort().Port()
	type got struct {
		from netip.AddrPort
		rep  wire.PathReport
	}
	var mu sync.Mutex
	var reports []got
	csfDone := make(chan struct{})
	go func() {
		defer close(csfDone)
		buf := make([]byte, 65535)
		for {
			n, from, err := csf.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if rep, err := wire.ParsePathReport(buf[:n]); err == nil {
				mu.Lock()
				reports = append(reports, got{from, rep})
				mu.Unlock()
			}
		}
	}()
	defer func() { csf.Close(); <-csfDone }()

	np := startNetem(t, "--listen", "127.0.0.1:0", "--forward", echo.String(),
		"--loss", "script:1,3", "--reverse-loss", "none", "--report-to", strconv.Itoa(int(cremPort)),
		"--report-method", "both", "--marking-period", "50ms", "--report-node-id", "40",
		"--report-listen", "127.0.0.1:0", "--json")
	proxy := np.addr(t, "crem netem: listening on ", "", ",")
	repAddr := np.addr(t, "crem netem: path reporter on ", "", ": ")
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 6 {
		p := roce.Packet{BTH: roce.BTH{OpCode: roce.OpWriteMiddle, PKey: 0xffff, DestQP: 0x44, PSN: psn.PSN(100 + i)}, Payload: []byte{byte(i)}}
		b, err := p.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		c.WriteToUDPAddrPort(b, proxy)
	}
	tally := func() (psns []psn.PSN, lost uint32) {
		mu.Lock()
		defer mu.Unlock()
		for _, g := range reports {
			for i, h := range g.rep.Hops {
				switch g.rep.Method {
				case wire.MethodNodeDrops:
					psns = append(psns, h.DroppedPSNs...)
				case wire.MethodAltMark:
					if i%2 == 1 {
						lost += h.LostCount
					}
				}
			}
		}
		slices.Sort(psns)
		return psns, lost
	}
	deadline := time.Now().Add(patience)
	for p, l := tally(); (len(p) < 2 || l < 2) && time.Now().Before(deadline); p, l = tally() {
		time.Sleep(5 * time.Millisecond)
	}
	if err := np.stop(t); err != nil {
		t.Fatalf("exit: %v; stderr:\n%s", err, np.errb.String())
	}
	psns, lost := tally()
	if !slices.Equal(psns, []psn.PSN{101, 103}) || lost != 2 {
		t.Fatalf("reported PSNs %v and a marking loss of %d, want [101 103] and 2; stderr:\n%s", psns, lost, np.errb.String())
	}
	mu.Lock()
	n := len(reports)
	for _, g := range reports {
		if g.from != repAddr || g.rep.Source != netip.MustParseAddr("127.0.0.1") || g.rep.FlowLabel != 0x44 || g.rep.Hops[0].NodeID != 40 {
			t.Errorf("report from %v: %+v", g.from, g.rep)
		}
	}
	mu.Unlock()
	var sum struct {
		Reporter map[string]any `json:"reporter"`
	}
	if err := json.Unmarshal(np.out.Bytes(), &sum); err != nil {
		t.Fatalf("summary: %v\n%s", err, np.out.String())
	}
	r := sum.Reporter
	num := func(k string) float64 { v, _ := r[k].(float64); return v }
	if num("drops_reported") != 2 || num("reports") != float64(n) || num("sent") != float64(n) || num("send_errors") != 0 ||
		num("drop_reports") < 1 || num("marking_reports") < 1 || num("drop_reports")+num("marking_reports") != float64(n) ||
		r["method"] != "both" || r["report_addr"] != repAddr.String() || num("crem_port") != float64(cremPort) {
		t.Errorf("reporter JSON %v, %d reports arrived", r, n)
	}
	for _, k := range []string{"truncated", "deferred_flow", "deferred_port", "events_lost", "not_roce", "psns_cut", "flows_overflow", "hops_overflow", "encode_errors", "unsent"} {
		if _, ok := r[k]; !ok {
			t.Errorf("reporter JSON lacks %q: %v", k, r)
		}
	}
	if m, ok := r["marking"].(map[string]any); !ok || m["lost"] != float64(2) || m["late"] != float64(0) {
		t.Errorf("marking JSON %v", r["marking"])
	}
}

// TestNetemReporterTable: without --json the summary table is followed by the reporter's line
// (and, with marking, the marking line).
func TestNetemReporterTable(t *testing.T) {
	echo := startNetemEcho(t)
	var out, errb bytes.Buffer
	code := run([]string{"netem", "--listen", "127.0.0.1:0", "--forward", echo.String(), "--duration", "50ms",
		"--report-to", "50000,10.0.0.0/8=10.0.0.1", "--report-method", "both"},
		stdio{in: strings.NewReader(""), out: &out, err: &errb})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"path reporter 0.0.0.0:", "0 reports", "0 send errors", "0 events lost"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(errb.String(), "drops (method 3) and marking every 100ms (method 1) to CREM port 50000,10.0.0.0/8=10.0.0.1") {
		t.Errorf("no reporter line on standard error:\n%s", errb.String())
	}
	if strings.Contains(out.String(), "merging:") {
		t.Errorf("a merging line without --report-merge:\n%s", out.String())
	}
	out.Reset()
	errb.Reset()
	code = run([]string{"netem", "--listen", "127.0.0.1:0", "--forward", echo.String(), "--duration", "50ms",
		"--report-to", "50000", "--report-merge", "--report-merge-from", "127.0.0.1"}, stdio{in: strings.NewReader(""), out: &out, err: &errb})
	if code != 0 || !strings.Contains(out.String(), "merging: 0 downstream PATH_REPORTs offered, 0 merged, 0 passed on") ||
		!strings.Contains(errb.String(), "to CREM port 50000, merging downstream reports") {
		t.Errorf("exit %d, with --report-merge:\n%s\n%s", code, out.String(), errb.String())
	}
}

// TestNetemReportMergePathReports (draft, Path Reports: a Path Reporter that forwards
// PATH_REPORT messages from downstream reporters for the same CSF MAY merge their Hop Entries
// with its own, up to 16 entries, within an aggregation interval): with --report-merge, the
// CSF (the client, on the CREM port) gets one PATH_REPORT from the reporter's socket with the
// proxy's entry for the scripted drop and the downstream reporter's entry, and not the
// downstream report itself; a downstream report of another flow comes through unchanged; and
// --json counts them.
func TestNetemReportMergePathReports(t *testing.T) {
	csf, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer csf.Close()
	cremPort := csf.LocalAddr().(*net.UDPAddr).AddrPort().Port()
	down, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	downAddr := down.LocalAddr().(*net.UDPAddr).AddrPort()

	np := startNetem(t, "--listen", "127.0.0.1:0", "--forward", downAddr.String(),
		"--loss", "script:0", "--reverse-loss", "none", "--report-to", strconv.Itoa(int(cremPort)),
		"--report-node-id", "40", "--report-listen", "127.0.0.1:0", "--report-merge", "--report-merge-from", "127.0.0.0/8",
		// A drop's report waits 2s for downstream reports: far longer than the loopback round
		// trip that brings the downstream report, on any machine.
		"--report-aggregation", "2s", "--json")
	proxy := np.addr(t, "crem netem: listening on ", "", ",")
	repAddr := np.addr(t, "crem netem: path reporter on ", ", merging downstream reports", ": ")

	// The CSF sends two datagrams of its flow; the first is dropped, the second reaches the
	// downstream reporter, which answers with its reports toward the CSF.
	const qp = 0x44
	for i := range 2 {
		p := roce.Packet{BTH: roce.BTH{OpCode: roce.OpWriteMiddle, PKey: 0xffff, DestQP: qp, PSN: psn.PSN(100 + i)}, Payload: []byte{byte(i)}}
		b, err := p.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		csf.WriteToUDPAddrPort(b, proxy)
	}
	buf := make([]byte, 65535)
	down.SetReadDeadline(time.Now().Add(patience))
	_, up, err := down.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("nothing reached the downstream reporter: %v", err)
	}
	lo := netip.MustParseAddr("127.0.0.1")
	report := func(flowLabel uint32) []byte {
		b, err := (&wire.PathReport{Method: wire.MethodNodeDrops, Source: lo, Destination: downAddr.Addr(), FlowLabel: flowLabel,
			Hops: []wire.HopEntry{{NodeID: 77, MarkingPeriodNumber: 3, LostCount: 1, Cause: wire.CauseCongestion, DroppedPSNs: []psn.PSN{7}}}}).Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	mergedOne, otherFlow := report(qp), report(qp+1)
	down.WriteToUDPAddrPort(mergedOne, up)
	down.WriteToUDPAddrPort(otherFlow, up)

	type got struct {
		from netip.AddrPort
		raw  []byte
	}
	var gots []got
	for fromRep, fromProxy := 0, 0; fromRep < 1 || fromProxy < 1; {
		csf.SetReadDeadline(time.Now().Add(patience))
		n, from, err := csf.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("the CSF got %d reports from the reporter and %d through the proxy: %v; stderr:\n%s", fromRep, fromProxy, err, np.errb.String())
		}
		gots = append(gots, got{from, bytes.Clone(buf[:n])})
		switch from {
		case repAddr:
			fromRep++
		case proxy:
			fromProxy++
		}
	}
	if err := np.stop(t); err != nil {
		t.Fatalf("exit: %v; stderr:\n%s", err, np.errb.String())
	}
	// Whatever else the proxy sent has arrived by now (loopback delivers at once): read it.
	for {
		csf.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, from, err := csf.ReadFromUDPAddrPort(buf)
		if err != nil {
			break
		}
		gots = append(gots, got{from, bytes.Clone(buf[:n])})
	}
	if len(gots) != 2 {
		t.Fatalf("the CSF got %d datagrams, want the merged report and the other flow's: %v", len(gots), gots)
	}
	for _, g := range gots {
		if g.from == proxy {
			if !bytes.Equal(g.raw, otherFlow) {
				t.Errorf("through the proxy came %x, want the other flow's report unchanged", g.raw)
			}
			continue
		}
		rep, err := wire.ParsePathReport(g.raw)
		if err != nil || g.from != repAddr || rep.FlowLabel != qp || len(rep.Hops) != 2 || rep.Hops[0].NodeID != 40 ||
			!slices.Equal(rep.Hops[0].DroppedPSNs, []psn.PSN{100}) || rep.Hops[1].NodeID != 77 ||
			!slices.Equal(rep.Hops[1].DroppedPSNs, []psn.PSN{7}) {
			t.Errorf("from %v: %+v (%v), want the merged report: the proxy's entry for PSN 100, then Node 77's", g.from, rep, err)
		}
	}
	var sum struct {
		Stats struct {
			Reverse map[string]any `json:"reverse"`
		} `json:"stats"`
		Reporter map[string]any `json:"reporter"`
	}
	if err := json.Unmarshal(np.out.Bytes(), &sum); err != nil {
		t.Fatalf("summary: %v\n%s", err, np.out.String())
	}
	r := sum.Reporter
	if r["merge"] != true || r["merge_offered"] != float64(2) || r["merged"] != float64(1) || r["merge_passed_on"] != float64(1) ||
		r["merge_malformed"] != float64(0) || r["merge_other_csf"] != float64(0) || r["aggregation_s"] != float64(2) ||
		r["sent"] != float64(1) || sum.Stats.Reverse["merged"] != float64(1) || sum.Stats.Reverse["forwarded"] != float64(1) {
		t.Errorf("reporter JSON %v, reverse %v", r, sum.Stats.Reverse)
	}
}
