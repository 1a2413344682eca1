//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crem-project/crem/internal/harness/promalert"
)

// The crash tests: scripts/perf-relay.sh's relay pair (client -> gateway A -> crem netem -> gateway
// B -> server, 20 ms round trip, 3 % loss each way) carrying crem perf write at 40 Mbit/s in
// tcaeth mode, one gateway killed with SIGKILL while the transfer runs and started again on the
// same addresses. Every byte must verify, protection must come back within a second of the
// restart (read from the metrics endpoints: B's restorations counting again, A's CSF
// established), and the packets A's CSF counts as unprotected must match what crossed while
// there was no protection.

// restartPair is one relay pair of real processes: this test binary acting as crem.
type restartPair struct {
	t      *testing.T
	dir    string
	base   string
	crem   int // the CREM port; the WAN, setup, RoCE and metrics ports follow it
	procs  map[string]*exec.Cmd
	logs   map[string]*syncBuf
	client *exec.Cmd
	out    *syncBuf
}

func (p *restartPair) addr(host int) string { return fmt.Sprintf("%s.%d", p.base, host) }

func (p *restartPair) port(i int) int { return p.crem + i }

// start runs this binary as crem under name; a name started again replaces the old process.
func (p *restartPair) start(name string, args ...string) {
	logs := &syncBuf{}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "CREM_TEST_AS_CREM=1")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.procs[name], p.logs[name] = cmd, logs
}

func (p *restartPair) gatewayConfig(name string, self, wanEnd, endpoint, local, remote int) string {
	c := fmt.Sprintf(`crem_address = "%[1]s:%[7]d"
peer = "%[2]s:%[7]d"
mode = "relay"
log_level = "info"
shards = 1
metrics_address = "%[1]s:%[11]d"

[relay]
listen = "%[1]s:%[10]d"
target = "%[3]s:%[10]d"
wan_listen = "%[1]s:%[8]d"
peer_data = "%[2]s:%[7]d"
local_endpoint = "%[4]s"
remote_endpoint = "%[5]s"

[[protect]]
src = "%[4]s"
dst = "%[5]s"
src_port = %[10]d
ordered = false

[[protect]]
src = "%[5]s"
dst = "%[4]s"
src_port = %[10]d
ordered = false

[policy]
k = 32
m = 4
initial_rtt = "20ms"
max_open_blocks = 256
rdma_mtu = 1024
`, p.addr(self), p.addr(wanEnd), p.addr(endpoint), p.addr(local), p.addr(remote), 0,
		p.port(0), p.port(1), p.port(2), p.port(3), p.port(4))
	f := filepath.Join(p.dir, "gateway-"+name+".toml")
	if err := os.WriteFile(f, []byte(c), 0o644); err != nil {
		p.t.Fatal(err)
	}
	return f
}

// newRestartPair starts the netem proxies, both gateways and the perf server, on a /24 of
// loopback of their own and random ports; abFlags go to the netem from A to B.
func newRestartPair(t *testing.T, abFlags ...string) *restartPair {
	seed := uint64(time.Now().UnixNano())
	r := rand.New(rand.NewPCG(seed, 7))
	p := &restartPair{t: t, dir: t.TempDir(), base: fmt.Sprintf("127.%d.%d", 100+r.IntN(150), 1+r.IntN(250)),
		crem: 20000 + 5*r.IntN(5000), procs: map[string]*exec.Cmd{}, logs: map[string]*syncBuf{}}
	t.Logf("addresses %s.x, CREM port %d (seed %d)", p.base, p.crem, seed)
	t.Cleanup(p.stop)
	// client .1, gateway A .2, WAN ends .3 and .4, gateway B .5, server .6 (scripts/perf-relay.sh)
	p.gatewayConfig("a", 2, 3, 1, 1, 6)
	p.gatewayConfig("b", 5, 4, 6, 6, 1)
	netem := func(name string, listen, from, to int, s int, extra ...string) {
		p.start("netem-"+name, append([]string{"netem", "--listen", fmt.Sprintf("%s:%d", p.addr(listen), p.port(0)),
			"--forward", fmt.Sprintf("%s:%d", p.addr(to), p.port(0)),
			"--route", fmt.Sprintf("%s:%d=%s:%d", p.addr(from), p.port(1), p.addr(to), p.port(1)),
			"--delay", "10ms", "--loss", "0.03", "--seed", strconv.Itoa(s), "--queue", "100000"}, extra...)...)
	}
	netem("ab", 3, 2, 5, 5, abFlags...)
	netem("ba", 4, 5, 2, 7)
	p.startGateway("a")
	p.startGateway("b")
	p.start("server", "perf", "serve", "--listen", fmt.Sprintf("%s:%d", p.addr(6), p.port(2)), "--port", strconv.Itoa(p.port(3)),
		"--via", fmt.Sprintf("%s:%d", p.addr(5), p.port(3)))
	for _, w := range []struct{ name, line string }{{"netem-ab", "listening on"}, {"netem-ba", "listening on"},
		{"a", "gateway running"}, {"b", "gateway running"}, {"server", "setup on"}} {
		if !waitLog(p.logs[w.name], w.line) {
			t.Fatalf("%s: no %q: %s", w.name, w.line, p.logs[w.name])
		}
	}
	return p
}

func (p *restartPair) startGateway(name string) {
	p.start(name, "gateway", "--config", filepath.Join(p.dir, "gateway-"+name+".toml"))
}

// write starts crem perf write: iters MiB at 40 Mbit/s, RDMA retrying for as long as it takes.
func (p *restartPair) write(iters int) {
	p.out = &syncBuf{}
	logs := &syncBuf{}
	cmd := exec.Command(os.Args[0], "perf", "write", "--server", fmt.Sprintf("%s:%d", p.addr(6), p.port(2)),
		"--bind", p.addr(1), "--via", fmt.Sprintf("%s:%d", p.addr(2), p.port(3)), "--port", strconv.Itoa(p.port(3)),
		"--mode", "tcaeth", "--rate", "40Mbit", "--size", "1MiB", "--iters", strconv.Itoa(iters), "--mtu", "1024",
		"--retry-count", "60", "--reorder-window", "5ms", "--json")
	cmd.Env = append(os.Environ(), "CREM_TEST_AS_CREM=1")
	cmd.Stdout, cmd.Stderr = p.out, logs
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.client, p.logs["client"] = cmd, logs
}

// verified waits for the client and reports whether every byte verified.
func (p *restartPair) verified(within time.Duration) bool {
	done := make(chan error, 1)
	go func() { done <- p.client.Wait() }()
	select {
	case err := <-done:
		var res struct{ Verified bool }
		if err != nil || json.Unmarshal([]byte(p.out.String()), &res) != nil {
			p.t.Logf("perf write: %v: %s\n%s", err, p.out, p.logs["client"])
			return false
		}
		return res.Verified
	case <-time.After(within):
		p.client.Process.Kill()
		p.t.Logf("perf write did not finish in %v: %s", within, p.logs["client"])
		return false
	}
}

func (p *restartPair) kill(name string) {
	cmd := p.procs[name]
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
}

func (p *restartPair) stop() {
	if p.client != nil && p.client.ProcessState == nil {
		p.client.Process.Kill()
		p.client.Wait()
	}
	for _, cmd := range p.procs {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}
}

// metrics scrapes a gateway's /metrics: each series (name with labels) and its value.
func (p *restartPair) metrics(name string) map[string]float64 {
	host := map[string]int{"a": 2, "b": 5}[name]
	c := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := c.Get(fmt.Sprintf("http://%s:%d/metrics", p.addr(host), p.port(4)))
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
			m[l[:i]] = v
		}
	}
	return m
}

// unprotected sums A's crem_csf_packets_unprotected_total over the reasons given.
func unprotected(m map[string]float64, reasons ...string) float64 {
	var n float64
	for _, r := range reasons {
		n += m[`crem_csf_packets_unprotected_total{reason="`+r+`"}`]
	}
	return n
}

const (
	restoredMetric = "crem_crf_flows_restored_total"
	liveCRF        = `crem_gateway_live_flows{half="crf"}`
)

// waitFor polls f every 10 ms until it holds or within passes; it returns the time it held.
func waitFor(within time.Duration, f func() bool) (time.Time, bool) {
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if f() {
			return time.Now(), true
		}
	}
	return time.Time{}, false
}

// restartCase is one crash: which gateway is killed and how long it stays down.
type restartCase struct {
	victim string
	down   time.Duration
}

// restartOutcome is what one crash showed.
type restartOutcome struct {
	back     time.Duration // from the restart to the new session's configuration in force at both ends
	restored time.Duration // from the restart to B's first restoration with the new session
	ready    time.Duration // from the restart to the restarted gateway's "gateway running"
	// A's unprotected sources (no_session, no_config, session_lost) counted from the kill to
	// protection back, and the sources A's CSF took meanwhile (what crossed unprotected).
	counted, observed float64
	// believed: the sources A took from the kill until it learned of the crash, sent with the
	// session it still held (zero where A itself was killed: the new A holds none).
	believed float64
	// A's unheld retransmissions counted and the retransmissions it saw, from the kill on.
	unheld, retx float64
	rate         float64 // A's sources a second before the kill
	// firing: the user guide's alerts that fire on A, evaluated over its scrapes at the kill
	// and when protection was back.
	firing []string
}

// runRestart runs one crash: the transfer, the kill, the restart, and the measurements.
func runRestart(t *testing.T, c restartCase) restartOutcome {
	p := newRestartPair(t)
	p.write(30)
	// Protection established and working: B restores.
	if _, ok := waitFor(10*time.Second, func() bool { return p.metrics("b")[restoredMetric] >= 5 }); !ok {
		var names []string
		for k, v := range p.metrics("b") {
			if strings.HasPrefix(k, "crem_crf_") && v > 0 {
				names = append(names, fmt.Sprintf("%s=%v", k, v))
			}
		}
		t.Fatalf("no restoration before the crash:\nA: %s\nB: %s\nclient: %s\nB's CRF: %v", p.logs["a"], p.logs["b"], p.logs["client"], names)
	}
	a0 := p.metrics("a")
	time.Sleep(time.Second)
	a1 := p.metrics("a")
	rate := a1["crem_csf_sources_total"] - a0["crem_csf_sources_total"]
	// The figures at the kill: publishEvery (100 ms) old at most.
	before := a1
	alerts := guideAlerts(t)
	var alertsFrom promalert.Scrape
	if c.victim == "b" {
		alertsFrom = p.scrape("a")
	} else { // the new A's counters start from zero: the evaluator takes them for a reset
		alertsFrom = promalert.Scrape{At: time.Now()}
	}
	readyAt := make(chan time.Time, 1)
	p.kill(c.victim)
	killed := time.Now()
	time.Sleep(c.down)
	p.startGateway(c.victim)
	restarted := time.Now()
	go func() {
		// When the restarted gateway says it runs: its own start is not the protocol's time.
		if at, ok := waitFor(10*time.Second, func() bool { return strings.Contains(p.logs[c.victim].String(), "gateway running") }); ok {
			readyAt <- at
		}
		close(readyAt)
	}()
	var aBase map[string]float64 // the counters A's CSF started from: the new A's are zero
	if c.victim == "a" {
		aBase = map[string]float64{}
	} else {
		aBase = before
	}
	restoredAt := 0.0
	if c.victim == "a" {
		restoredAt = p.metrics("b")[restoredMetric]
	}
	lost := []string{"no_session", "no_config", "session_lost"}
	// A learns of B's crash from B's CLOSE or its own silence, not at the kill: the sources it
	// takes before then it sends with a session it still believes in. Poll A until its first
	// unprotected count; from that one scrape on (counters published together), every source
	// must be counted until protection is back.
	learned := make(chan map[string]float64, 1)
	stopLearning := make(chan struct{})
	go func() {
		defer close(learned)
		for {
			select {
			case <-stopLearning:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if m := p.metrics("a"); m != nil && unprotected(m, lost...) > unprotected(aBase, lost...) {
				learned <- m
				return
			}
		}
	}()
	var atBack map[string]float64
	// Protection back: A's CSF has a configuration of a new session in force (one more applied
	// than at the kill: no PARAM_ACK comes while B is down) and B's CRF holds the flow.
	applied := aBase["crem_csf_configs_applied_total"]
	backAt, ok := waitFor(10*time.Second, func() bool {
		b := p.metrics("b")
		if b == nil || b[liveCRF] < 1 {
			return false
		}
		atBack = p.metrics("a")
		return atBack != nil && atBack["crem_csf_configs_applied_total"] > applied
	})
	close(stopLearning)
	if !ok {
		t.Fatalf("protection not back within 10 s of the restart:\nA: %s\nB: %s", p.logs["a"], p.logs["b"])
	}
	firing, err := promalert.Firing(alerts, alertsFrom, p.scrape("a"))
	if err != nil {
		t.Fatal(err)
	}
	atLearned, ok := <-learned
	if !ok {
		t.Fatalf("A counted no unprotected source between the kill and protection back:\nA: %s", p.logs["a"])
	}
	// Restorations resume once the RDMA transport sends again and the path loses a packet.
	restoredBack, _ := waitFor(10*time.Second, func() bool { return p.metrics("b")[restoredMetric] > restoredAt })
	if !p.verified(60 * time.Second) {
		t.Fatalf("the transfer did not verify:\nA: %s\nB: %s", p.logs["a"], p.logs["b"])
	}
	end := p.metrics("a")
	ready, ok := <-readyAt
	if !ok {
		t.Fatalf("the restarted gateway never said it runs: %s", p.logs[c.victim])
	}
	o := restartOutcome{back: backAt.Sub(restarted), ready: ready.Sub(restarted), restored: restoredBack.Sub(restarted), rate: rate, firing: firing}
	o.counted = unprotected(atBack, lost...) - unprotected(aBase, lost...)
	o.observed = atBack["crem_csf_sources_total"] - aBase["crem_csf_sources_total"]
	o.believed = (atLearned["crem_csf_sources_total"] - aBase["crem_csf_sources_total"]) -
		(unprotected(atLearned, lost...) - unprotected(aBase, lost...))
	o.unheld = unprotected(end, "unheld_retransmission") - unprotected(aBase, "unheld_retransmission")
	o.retx = end["crem_csf_retransmissions_total"] - aBase["crem_csf_retransmissions_total"]
	t.Logf("%s killed, down %v: ready %v after the restart; protection back %v after the restart (%v after the kill), restorations %v after it; A counted %v unprotected sources of %v taken from the kill to protection back, %v of them sent before it learned of the crash (%.0f sources/s before); %v unheld of %v retransmissions",
		c.victim, c.down, o.ready.Round(time.Millisecond), o.back.Round(time.Millisecond), backAt.Sub(killed).Round(time.Millisecond), o.restored.Round(time.Millisecond), o.counted, o.observed, o.believed, rate, o.unheld, o.retx)
	if testing.Verbose() {
		bm := p.metrics("b")
		t.Logf("B: unknown-flow CLOSEs sent %v capped %v; A: CLOSE reason 5 received %v, peer silent %v, probes %v\nA: %s\nB: %s",
			bm["crem_gateway_unknown_flow_closes_sent_total"], bm["crem_gateway_unknown_flow_closes_capped_total"],
			end[`crem_csf_close_received_by_reason_total{reason="protocol_error"}`], end["crem_csf_peer_silent_total"], end["crem_csf_hello_probes_total"],
			p.logs["a"], p.logs["b"])
	}
	return o
}

// checkRestart asserts a crash's outcome: protection back within a bound of the restarted
// gateway being ready (its own start is the host's time, not the protocol's: 0.15 s on an idle
// host, over 0.7 s on a loaded one), every source that crossed without protection once A knew
// counted, within what the metrics' publication (100 ms old at most at each end, so 0.2 s of
// sources) blurs.
func checkRestart(t *testing.T, o restartOutcome, within time.Duration, alerts ...string) {
	if o.back-o.ready > within {
		t.Errorf("protection back %v after the restart, %v after the gateway was ready: want within %v of it", o.back, o.back-o.ready, within)
	}
	tol := 0.2*o.rate + 64
	if diff := o.counted - (o.observed - o.believed); diff > tol || -diff > tol {
		t.Errorf("%v unprotected sources counted, %v observed after A learned of the crash: more apart than %v", o.counted, o.observed-o.believed, tol)
	}
	if o.believed < 0 || o.believed > o.observed {
		t.Errorf("%v sources sent with the old session of %v observed", o.believed, o.observed)
	}
	if o.unheld > o.retx {
		t.Errorf("%v unheld retransmissions counted of %v retransmissions", o.unheld, o.retx)
	}
	t.Logf("alerts firing on A from the kill to protection back: %q", o.firing)
	for _, a := range append([]string{"protection falls: unprotected against sources"}, alerts...) {
		if !slices.Contains(o.firing, a) {
			t.Errorf("the guide's alert %q does not fire on A from the kill to protection back (firing: %q)", a, o.firing)
		}
	}
}

func skipCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes killed and started again for some seconds")
	}
}

// TestGatewayRestartCRFSide: gateway B (the CRF of the transfer) killed with SIGKILL, started
// again 0.5 s later. B answers A's REPAIRs for the lost session with CLOSE (G58), A starts a new
// one at once: protection back within a round trip or two of B being ready. When B's start
// takes so long that A's silence (1 s) ended the session first and its eight HELLOs (255 ms)
// found no one, the next probe comes within the hold-off (E71): the bound is the hold-off, plus
// the handshake, the metrics' publication and polling.
func TestGatewayRestartCRFSide(t *testing.T) {
	skipCrash(t)
	o := runRestart(t, restartCase{victim: "b", down: 500 * time.Millisecond})
	checkRestart(t, o, 1400*time.Millisecond, "peer restarted or lost the session")
}

// TestGatewayRestartCSFSide: gateway A (the CSF) killed and started again 0.5 s later: its new
// CSF's HELLO from the bound address takes over the flow at B (E53). The new A never held what
// the RDMA transport sends again: each such retransmission is counted unheld.
func TestGatewayRestartCSFSide(t *testing.T) {
	skipCrash(t)
	o := runRestart(t, restartCase{victim: "a", down: 500 * time.Millisecond})
	checkRestart(t, o, time.Second)
	if o.back > time.Second {
		t.Errorf("protection back %v after the restart, want within 1 s", o.back)
	}
	if o.unheld == 0 {
		t.Errorf("no unheld retransmission counted by the new A (%v retransmissions)", o.retx)
	}
}

// TestGatewayPeerDownFiveSeconds: gateway B down for 5 s. A's CSF takes it for down after eight
// HELLOs and probes it once per hold-off (1 s): protection back within the hold-off after B is
// ready again, plus the handshake (two round trips), the metrics' publication (0.1 s) and
// polling.
func TestGatewayPeerDownFiveSeconds(t *testing.T) {
	skipCrash(t)
	o := runRestart(t, restartCase{victim: "b", down: 5 * time.Second})
	checkRestart(t, o, 1400*time.Millisecond, "peer does not answer", "peer restarted or lost the session")
}
