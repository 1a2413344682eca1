//go:build linux

package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/internal/harness/netnslock"
	"github.com/crem-project/crem/internal/testenv"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// The chain of TestNetnsForwarding and TestTunGSONetns: four namespaces joined by three veth
// pairs, all in 198.18.0.0/15 (the benchmarking range) and inside the namespaces only:
//
//	sender (s0 198.18.1.1) -- (a0 198.18.1.254) gateway A (aw 198.18.10.1)
//	  -- WAN -- (bw 198.18.10.2) gateway B (b1 198.18.2.254) -- (r0 198.18.2.1) receiver
//
// Both gateway hosts forward (ip_forward=1). As plain routers that is all; as CREM gateways in
// TUN mode each has a TUN device and two policy rules sending what arrives from its LAN for
// the other site, and what arrives from the WAN for its own site, into the device (table 100);
// the gateway's own raw-socket sends are local output, which those rules (iif) never match,
// so they follow the main table out.
const (
	nsSenderAddr   = "198.18.1.1"
	nsReceiverAddr = "198.18.2.1"
	nsSrcPort      = 49152
	nsCREMPort     = 61300
	nsQP           = 0x4d2
	nsReverseQP    = 0x4d3 // the requester's QP, which the receiver's ACKs are addressed to
)

type netnsChain struct {
	t          *testing.T
	s, a, b, r string // namespace names
	dir        string
	// nextPSN is where the sender's next run starts: each run goes on with the flow's
	// PSNs, so that the CSF sees new sources, never retransmissions.
	nextPSN psn.PSN
}

func netnsRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	for _, tool := range []string{"ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (iproute2)", tool)
		}
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("needs /dev/net/tun")
	}
}

// newNetnsChain builds the four namespaces and their links; Cleanup removes them (and every
// process in them is killed by its own Cleanup first).
func newNetnsChain(t *testing.T) *netnsChain {
	sfx := strconv.Itoa(os.Getpid() % 100000)
	c := &netnsChain{t: t, s: "crem-fs-" + sfx, a: "crem-fa-" + sfx, b: "crem-fb-" + sfx, r: "crem-fr-" + sfx, dir: t.TempDir(), nextPSN: 0x100}
	for _, ns := range []string{c.s, c.a, c.b, c.r} {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Skipf("cannot create network namespaces here: %v: %s", err, out)
		}
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	link := func(a, an, b, bn string) {
		c.sh("", "ip", "link", "add", an, "mtu", "9000", "netns", a, "type", "veth", "peer", "name", bn, "mtu", "9000", "netns", b)
	}
	link(c.s, "s0", c.a, "a0")
	link(c.a, "aw", c.b, "bw")
	link(c.b, "b1", c.r, "r0")
	for _, ns := range []string{c.s, c.a, c.b, c.r} {
		c.sh(ns, "ip", "link", "set", "lo", "up")
		c.sh(ns, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0")
	}
	addr := func(ns, dev, a string) {
		c.sh(ns, "ip", "addr", "add", a, "dev", dev)
		c.sh(ns, "ip", "link", "set", dev, "up")
		c.sh(ns, "sysctl", "-qw", "net.ipv4.conf."+dev+".rp_filter=0")
	}
	addr(c.s, "s0", nsSenderAddr+"/24")
	addr(c.a, "a0", "198.18.1.254/24")
	addr(c.a, "aw", "198.18.10.1/24")
	addr(c.b, "bw", "198.18.10.2/24")
	addr(c.b, "b1", "198.18.2.254/24")
	addr(c.r, "r0", nsReceiverAddr+"/24")
	c.sh(c.s, "ip", "route", "add", "default", "via", "198.18.1.254")
	c.sh(c.r, "ip", "route", "add", "default", "via", "198.18.2.254")
	c.sh(c.a, "ip", "route", "add", "198.18.2.0/24", "via", "198.18.10.2")
	c.sh(c.b, "ip", "route", "add", "198.18.1.0/24", "via", "198.18.10.1")
	for _, ns := range []string{c.a, c.b} {
		c.sh(ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	}
	if os.Getenv("CREM_NETNS_GRO") == "1" {
		// GRO on every interface that receives (veth runs NAPI for it), and UDP GRO of
		// forwarded traffic: what the sender sends one by one reaches the next hop as
		// super-packets, for the kernel routers and the gateways alike.
		for _, x := range []struct{ ns, devs string }{{c.a, "a0 aw"}, {c.b, "bw b1"}, {c.r, "r0"}} {
			if out, err := c.helper(x.ns, "features", "CREM_NETNS_DEVS="+x.devs,
				"CREM_NETNS_FEATURES=rx-gro rx-udp-gro-forwarding").CombinedOutput(); err != nil {
				t.Fatalf("GRO on %s: %v: %s", x.devs, err, out)
			}
		}
	}
	return c
}

func (c *netnsChain) sh(ns string, args ...string) {
	c.t.Helper()
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		c.t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// drops lists the interfaces' drop counters in the gateway namespaces (non-zero only).
func (c *netnsChain) drops() string {
	var b strings.Builder
	for _, ns := range []string{c.s, c.a, c.b, c.r} {
		out, _ := exec.Command("ip", "-n", ns, "-s", "-j", "link").Output()
		var links []struct {
			Ifname string
			Stats  struct {
				Rx, Tx struct{ Dropped int64 }
			} `json:"stats64"`
		}
		json.Unmarshal(out, &links)
		for _, l := range links {
			if l.Stats.Rx.Dropped+l.Stats.Tx.Dropped > 0 {
				fmt.Fprintf(&b, "%s rx %d tx %d; ", l.Ifname, l.Stats.Rx.Dropped, l.Stats.Tx.Dropped)
			}
		}
	}
	if out, err := exec.Command("ip", "netns", "exec", c.r, "cat", "/proc/net/snmp").Output(); err == nil {
		var names []string
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "Udp:" {
				if names == nil {
					names = f[1:]
					continue
				}
				for i, v := range f[1:] {
					if i < len(names) && (names[i] == "RcvbufErrors" || names[i] == "InCsumErrors") {
						fmt.Fprintf(&b, "receiver %s %s; ", names[i], v)
					}
				}
			}
		}
	}
	return b.String()
}

// tunDrops sums what the kernel dropped on the way into the gateways' TUN devices (their
// transmit queues full: a gateway that did not read them in time).
func (c *netnsChain) tunDrops() float64 {
	var n int64
	for _, d := range []struct{ ns, dev string }{{c.a, "cremA"}, {c.b, "cremB"}} {
		out, err := exec.Command("ip", "-n", d.ns, "-s", "-j", "link", "show", "dev", d.dev).Output()
		if err != nil {
			continue // not in TUN mode
		}
		var links []struct {
			Stats struct {
				Tx struct{ Dropped int64 }
			} `json:"stats64"`
		}
		json.Unmarshal(out, &links)
		for _, l := range links {
			n += l.Stats.Tx.Dropped
		}
	}
	return float64(n)
}

// tunRouting adds (up) or removes the TUN devices and the rules that bring the traffic
// through them.
func (c *netnsChain) tunRouting(up bool) {
	for _, s := range []struct{ ns, dev, lan, wan, local, remote string }{
		{c.a, "cremA", "a0", "aw", "198.18.1.0/24", "198.18.2.0/24"},
		{c.b, "cremB", "b1", "bw", "198.18.2.0/24", "198.18.1.0/24"},
	} {
		if !up {
			exec.Command("ip", "netns", "exec", s.ns, "ip", "rule", "del", "pref", "100").Run()
			exec.Command("ip", "netns", "exec", s.ns, "ip", "rule", "del", "pref", "101").Run()
			exec.Command("ip", "netns", "exec", s.ns, "ip", "link", "del", s.dev).Run()
			continue
		}
		c.sh(s.ns, "ip", "tuntap", "add", "dev", s.dev, "mode", "tun")
		// A queue of 500 (the default) overflows whenever the gateway's reader waits for a
		// core a few milliseconds on a busy machine.
		c.sh(s.ns, "ip", "link", "set", s.dev, "mtu", "9000", "txqueuelen", "10000", "up")
		c.sh(s.ns, "sysctl", "-qw", "net.ipv4.conf."+s.dev+".rp_filter=0")
		c.sh(s.ns, "ip", "route", "replace", "default", "dev", s.dev, "table", "100")
		c.sh(s.ns, "ip", "rule", "add", "pref", "100", "iif", s.lan, "to", s.remote, "lookup", "100")
		c.sh(s.ns, "ip", "rule", "add", "pref", "101", "iif", s.wan, "to", s.local, "lookup", "100")
	}
}

// gateway is a running crem gateway process in a namespace.
type nsGateway struct {
	cmd  *exec.Cmd
	logs *syncBuf
	ns   string
	// metrics is the /metrics address inside the namespace.
	metrics string
}

// startGateways starts gateway A and B from bin (empty: this test binary as crem), with
// extra flags; k = 32, m = 4, adaptation off.
func (c *netnsChain) startGateways(bin string, extra ...string) [2]*nsGateway {
	t := c.t
	// The interfaces for the xdp data path (a crem of before it knows no such keys).
	xdpFlags := slices.Contains(extra, "--tun-datapath")
	conf := func(name, self, peer, tun, local, lan, wan string) string {
		ifs := ""
		if xdpFlags {
			ifs = fmt.Sprintf("lan = %q\nwan = %q\n", lan, wan)
			if a := os.Getenv("CREM_NETNS_XDP_ATTACH"); a != "" { // driver or generic (auto: driver on veth)
				ifs += fmt.Sprintf("xdp_attach = %q\n", a)
			}
		}
		f := filepath.Join(c.dir, name+".toml")
		os.WriteFile(f, []byte(fmt.Sprintf(`crem_address = "%s:%d"
domain_protection = "boundary"
peer = "%s:%d"
mode = "tun"
log_level = "info"
metrics_address = "%s:9464"
[tun]
name = "%s"
local_prefixes = ["%s"]
verify = "logical"
%s[[protect]]
ordered = false
src_port = %d
qp = %d
reverse_qp = %d
[policy]
k = 32
m = 4
adapt = false
initial_rtt = "1ms"
burst_gap = "1ms"
`, self, nsCREMPort, peer, nsCREMPort, self, tun, local, ifs, nsSrcPort, nsQP, nsReverseQP)), 0o644)
		return f
	}
	var gws [2]*nsGateway
	for i, g := range []struct{ ns, name, self, peer, tun, local, lan, wan string }{
		{c.b, "b", "198.18.10.2", "198.18.10.1", "cremB", "198.18.2.0/24", "b1", "bw"},
		{c.a, "a", "198.18.10.1", "198.18.10.2", "cremA", "198.18.1.0/24", "a0", "aw"},
	} {
		args := append([]string{"gateway", "--config", conf(g.name, g.self, g.peer, g.tun, g.local, g.lan, g.wan)}, extra...)
		gw := &nsGateway{logs: &syncBuf{}, ns: g.ns, metrics: g.self + ":9464"}
		gw.cmd = c.command(g.ns, bin, args...)
		gw.cmd.Stdout, gw.cmd.Stderr = gw.logs, gw.logs
		if err := gw.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { gw.cmd.Process.Kill(); gw.cmd.Wait() })
		if !waitLog(gw.logs, "gateway running") {
			t.Fatalf("gateway %s: not running within %v: %s", g.name, patience, gw.logs.String())
		}
		gws[1-i] = gw
	}
	return gws
}

// stop ends a gateway with SIGTERM.
func (g *nsGateway) stop(t *testing.T) {
	g.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- g.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("gateway exit: %v: %s", err, g.logs.String())
		}
	case <-time.After(patience):
		g.cmd.Process.Kill()
		t.Errorf("gateway did not stop on SIGTERM")
	}
}

// command runs bin (empty: this test binary acting as crem) in namespace ns.
func (c *netnsChain) command(ns, bin string, args ...string) *exec.Cmd {
	self := bin == ""
	if self {
		bin = os.Args[0]
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	if self {
		cmd.Env = append(os.Environ(), "CREM_TEST_AS_CREM=1")
	}
	return cmd
}

// helper runs this test binary as netnsHelper in ns, in mode with env settings.
func (c *netnsChain) helper(ns, mode string, env ...string) *exec.Cmd {
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0])
	cmd.Env = append(append(os.Environ(), "CREM_NETNS_HELPER="+mode), env...)
	return cmd
}

// metric reads one metric of a gateway (summing its series).
func (c *netnsChain) metrics(g *nsGateway) map[string]float64 {
	out, err := c.helper(g.ns, "get", "CREM_NETNS_URL=http://"+g.metrics+"/metrics").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		c.t.Fatalf("metrics of %s: %v: %s\ngateway: %s", g.ns, err, stderr, g.logs.String())
	}
	m := map[string]float64{}
	for _, l := range strings.Split(string(out), "\n") {
		if l == "" || l[0] == '#' {
			continue
		}
		// A series and its value: a name, labels perhaps (values with spaces among them), a
		// number. Kept by series (crem_gateway_packets_total{direction="rx",socket="tun"}) and summed by name.
		sp := strings.LastIndexByte(l, ' ')
		if sp <= 0 {
			continue
		}
		series := l[:sp]
		v, _ := strconv.ParseFloat(l[sp+1:], 64)
		name := series
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
			m[series] = v
		}
		m[name] += v
	}
	return m
}

// blastResult is what the receiver helper reports.
type blastResult struct {
	// Packets counts distinct PSNs (Dups the copies beyond the first: a packet the CRF
	// restored whose original came late).
	Packets, Bytes, Bad, Dups int64
	// Stale counts packets of an earlier blast (a PSN before this one's first) that a
	// gateway or the kernel held until this receiver ran: not counted as delivered.
	Stale           int64
	FirstNS, LastNS int64
	Sent            int64 // the sender's
	Next            uint32
}

func (r blastResult) pps() float64 {
	if r.Packets < 2 || r.LastNS <= r.FirstNS {
		return 0
	}
	return float64(r.Packets-1) / (float64(r.LastNS-r.FirstNS) / 1e9)
}

// cpuTicks is the machine's CPU time from /proc/stat: busy (all but idle and iowait) and
// softirq, in clock ticks.
func cpuTicks(t *testing.T) (busy, softirq int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
	for i, s := range f[1:] {
		v, _ := strconv.ParseInt(s, 10, 64)
		switch i {
		case 3, 4: // idle, iowait
		case 6:
			softirq = v
			busy += v
		case 8, 9: // guest, guest_nice: inside user already
		default:
			busy += v
		}
	}
	return busy, softirq
}

// procTicks is a process's user and system CPU time in clock ticks.
func procTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return u + k
}

// ksoftirqdTicks is the CPU time of the softirq threads (where the kernel runs softirqs it
// could not run on the way out of a system call or interrupt).
func ksoftirqdTicks() int64 {
	var n int64
	ds, _ := os.ReadDir("/proc")
	for _, d := range ds {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.HasPrefix(string(c), "ksoftirqd/") {
			n += procTicks(pid)
		}
	}
	return n
}

const clockTick = 100 // USER_HZ

// measurement is one run of one configuration.
type measurement struct {
	name             string
	res              blastResult
	seconds          float64
	procCPU, softirq float64 // seconds: the chain's processes; the machine's softirq
	ksoftirqd        float64
	machine          float64 // seconds: the machine's busy time
	gwCPU            float64
	allocsPerPkt     float64    // the gateways' heap allocations per delivered packet (-1: unknown)
	xdpDrops         string     // the xdp data path's drop counters over the run (non-zero ones)
	superRead        [2]float64 // super-packets each gateway read
	coalesced        [2]float64 // packets each gateway wrote as part of a super-packet
}

func (m measurement) cpuPerPkt() float64 {
	return (m.procCPU + m.softirq) / float64(max(m.res.Packets, 1)) * 1e6
}

// blast sends for d seconds from the sender namespace to the receiver and measures.
func (c *netnsChain) blast(name string, d time.Duration, gws []*nsGateway, senderEnv ...string) measurement {
	t := c.t
	// The receiver takes the sender's settings too: CREM_NETNS_VERIFY=1 is the receiver's.
	recv := c.helper(c.r, "recv", append([]string{"CREM_NETNS_IDLE=1s", fmt.Sprintf("CREM_NETNS_DEADLINE=%s", d+10*time.Second),
		fmt.Sprintf("CREM_NETNS_PSN=%d", c.nextPSN)}, senderEnv...)...)
	recvOut := &syncBuf{}
	recv.Stdout, recv.Stderr = recvOut, recvOut
	if err := recv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { recv.Process.Kill(); recv.Wait() })
	if !waitLog(recvOut, "RECEIVING") {
		t.Fatalf("receiver: %s", recvOut.String())
	}
	var gw0 []int64
	var m0 []map[string]float64
	for _, g := range gws {
		m0 = append(m0, c.metrics(g))
		gw0 = append(gw0, procTicks(g.cmd.Process.Pid))
	}
	busy0, soft0 := cpuTicks(t)
	ks0 := ksoftirqdTicks()
	send := c.helper(c.s, "send", append([]string{fmt.Sprintf("CREM_NETNS_SECONDS=%g", d.Seconds()),
		fmt.Sprintf("CREM_NETNS_PSN=%d", c.nextPSN)}, senderEnv...)...)
	start := time.Now()
	sout, err := send.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("sender: %v: %s%s", err, sout, stderr)
	}
	if err := recv.Wait(); err != nil {
		t.Fatalf("receiver: %v: %s", err, recvOut.String())
	}
	elapsed := time.Since(start)
	busy1, soft1 := cpuTicks(t)
	ks1 := ksoftirqdTicks()
	m := measurement{name: name, seconds: elapsed.Seconds(), allocsPerPkt: -1}
	for _, g := range gws {
		m.gwCPU += float64(procTicks(g.cmd.Process.Pid)-gw0[0]) / clockTick
		gw0 = gw0[1:]
	}
	if err := parseResult(recvOut.String(), &m.res); err != nil {
		t.Fatalf("receiver: %v: %s", err, recvOut.String())
	}
	var sres blastResult
	if err := parseResult(string(sout), &sres); err != nil {
		t.Fatalf("sender: %v: %s", err, sout)
	}
	m.res.Sent = sres.Sent
	c.nextPSN = psn.PSN(sres.Next)
	if len(gws) > 0 {
		var allocs float64
		for i, g := range gws {
			// Two scrapes back to back measure what a scrape itself allocates.
			m1 := c.metrics(g)
			m2 := c.metrics(g)
			scrape := m2["go_memstats_mallocs_total"] - m1["go_memstats_mallocs_total"]
			allocs += m1["go_memstats_mallocs_total"] - m0[i]["go_memstats_mallocs_total"] - scrape
			if i < 2 {
				m.superRead[i] = m1["crem_gateway_tun_gso_packets_total"] - m0[i]["crem_gateway_tun_gso_packets_total"]
				m.coalesced[i] = m1["crem_gateway_tun_coalesced_total"] - m0[i]["crem_gateway_tun_coalesced_total"]
				for _, k := range []string{"kernel_rx_ring_full", "kernel_rx_dropped", "kernel_fill_ring_empty", "tx_ring_full", "fill_empty", "tx_frames", "wakeups"} {
					for _, side := range []string{"lan", "wan"} {
						name := "crem_gateway_xdp_" + k + "_" + side + "_total"
						if v := m1[name] - m0[i][name]; v > 0 {
							m.xdpDrops += fmt.Sprintf(" %s:%s_%s=%.0f", "AB"[i:i+1], k, side, v)
						}
					}
				}
				for _, k := range []string{"crem_gateway_shard_queue_full_total", "crem_gateway_xdp_to_kernel_total"} {
					if v := m1[k] - m0[i][k]; v > 0 {
						m.xdpDrops += fmt.Sprintf(" %s:%s=%.0f", "AB"[i:i+1], strings.TrimSuffix(strings.TrimPrefix(k, "crem_gateway_"), "_total"), v)
					}
				}
			}
		}
		m.allocsPerPkt = allocs / float64(max(m.res.Packets, 1))
	}
	proc := send.ProcessState.UserTime() + send.ProcessState.SystemTime() + recv.ProcessState.UserTime() + recv.ProcessState.SystemTime()
	m.procCPU = proc.Seconds() + m.gwCPU
	m.softirq = float64(soft1-soft0) / clockTick
	m.ksoftirqd = float64(ks1-ks0) / clockTick
	m.machine = float64(busy1-busy0) / clockTick
	return m
}

func parseResult(out string, r *blastResult) error {
	for _, l := range strings.Split(out, "\n") {
		if s, ok := strings.CutPrefix(l, "RESULT "); ok {
			return json.Unmarshal([]byte(s), r)
		}
	}
	return fmt.Errorf("no RESULT line")
}

// TestNetnsForwarding measures the chain's forwarding of 4 KiB RoCEv2 RDMA WRITE packets
// (sender -> gateway A -> WAN -> gateway B -> receiver, one namespace each): first with both
// gateway hosts as plain kernel routers, then as CREM gateways in TUN mode (k = 32, m = 4),
// sending on with the raw socket (crem-raw) and into the device (crem-dev), in turns,
// CREM_NETNS_RUNS times (3), each send CREM_NETNS_SECONDS long (3; the sender's PSNs go on
// from run to run, so the CSF always sees new sources). It reports the packets per second
// delivered (distinct PSNs) and the CPU per delivered packet: the CPU time (user and system)
// of the chain's processes (sender, receiver, gateways) plus the machine's softirq time over
// the run (the forwarding itself runs there), beside the machine's whole busy time.
//
// CREM_NETNS_CREM names the crem binary (default: this test binary as crem),
// CREM_NETNS_BASELINE a second one measured in the same turns (say main's, as "baseline"),
// with the flags CREM_NETNS_BASELINE_FLAGS (say "--tun-datapath xdp"),
// CREM_NETNS_GATEWAY_FLAGS flags for this tree's gateways (e.g. --tun-offload off),
// CREM_NETNS_ONLY the configurations to run beside the kernel (crem-raw, crem-dev, xdp,
// baseline; with xdp among them and no multi-buffer AF_XDP every configuration forwards
// packets of 2 KiB of payload over links of MTU 3000, which one AF_XDP frame holds),
// CREM_NETNS_GRO=1 turns GRO on at the receiving interfaces (with UDP GRO of forwarded
// traffic), CREM_NETNS_XDP_ATTACH = driver or generic the xdp data path's tun.xdp_attach
// (auto, hence driver on veth, when unset). A benchmark, so run only with CREM_NETNS_BENCH=1 (root, iproute2, /dev/net/tun);
// scripts/netns-forwarding.sh runs it. The goal it reports against: CREM delivers at least
// half the kernel's packet rate.
// TestNetnsReceiverCatchesBadICRC: the chain's receiver checks every packet's ICRC when a
// blast asks it to (CREM_NETNS_VERIFY=1, as the gateways' tests do). Through kernel routers, a
// sender that alters one packet in ten after sealing it has a tenth of them counted bad, and a
// clean sender none: the check those tests rely on can fail.
func TestNetnsReceiverCatchesBadICRC(t *testing.T) {
	netnsRoot(t)
	netnslock.Take(t)
	c := newNetnsChain(t)
	m := c.blast("corrupt", time.Second, nil, "CREM_NETNS_VERIFY=1", "CREM_NETNS_CORRUPT=10", "CREM_NETNS_PPS=5000")
	t.Log(m.line())
	if m.res.Packets == 0 || m.res.Bad*20 < m.res.Packets || m.res.Bad*5 > m.res.Packets {
		t.Errorf("%d of %d packets counted bad, one in ten altered", m.res.Bad, m.res.Packets)
	}
	m = c.blast("clean", time.Second, nil, "CREM_NETNS_VERIFY=1", "CREM_NETNS_PPS=5000")
	t.Log(m.line())
	if m.res.Packets == 0 || m.res.Bad != 0 {
		t.Errorf("%d of %d packets counted bad, none altered", m.res.Bad, m.res.Packets)
	}
}

func TestNetnsForwarding(t *testing.T) {
	if os.Getenv("CREM_NETNS_BENCH") != "1" {
		t.Skip("a benchmark: run with CREM_NETNS_BENCH=1 (as root)")
	}
	netnsRoot(t)
	runs := envInt("CREM_NETNS_RUNS", 3)
	d := time.Duration(envInt("CREM_NETNS_SECONDS", 3)) * time.Second
	c := newNetnsChain(t)
	type config struct {
		name, bin string
		flags     []string
	}
	bin, flags := os.Getenv("CREM_NETNS_CREM"), strings.Fields(os.Getenv("CREM_NETNS_GATEWAY_FLAGS"))
	configs := []config{
		{"crem-raw", bin, append([]string{"--tun-write", "raw"}, flags...)},
		{"crem-dev", bin, append([]string{"--tun-write", "device"}, flags...)},
	}
	configs = append(configs, config{"xdp", bin, append([]string{"--tun-datapath", "xdp"}, flags...)})
	if b := os.Getenv("CREM_NETNS_BASELINE"); b != "" {
		configs = append(configs, config{"baseline", b, strings.Fields(os.Getenv("CREM_NETNS_BASELINE_FLAGS"))})
	}
	if only := os.Getenv("CREM_NETNS_ONLY"); only != "" { // say "crem-dev,baseline"
		configs = slices.DeleteFunc(configs, func(c config) bool { return !slices.Contains(strings.Split(only, ","), c.name) })
	}
	var senderEnv []string
	if slices.ContainsFunc(configs, func(c config) bool { return c.name == "xdp" }) {
		// With multi-buffer AF_XDP (Linux 6.6) the xdp data path takes the chain's 4 KiB
		// RoCEv2 packets over MTU 9000, each in two frames; else packets of one frame: every
		// configuration of the run then forwards 2 KiB of payload over links of MTU 3000. The
		// endpoints' checksums are computed (xdpChain).
		c.xdpUsable()
		if ok, why := c.xdpMultiBuffer(); ok {
			c.xdpChain(0, xdpJumboMTU)
		} else {
			t.Logf("no multi-buffer AF_XDP (%s): packets of %s octets over MTU %s", why, xdpPayload, xdpMTU)
			c.xdpChain(0, xdpMTU)
			senderEnv = []string{"CREM_NETNS_PAYLOAD=" + xdpPayload}
		}
	}
	results := map[string][]measurement{}
	for run := range runs {
		m := c.blast("kernel", d, nil, senderEnv...)
		results["kernel"] = append(results["kernel"], m)
		t.Logf("run %d %s", run+1, m.line())
		for _, cf := range configs {
			// The xdp data path needs no TUN device nor policy routing.
			routed := cf.name != "xdp" && !slices.Contains(cf.flags, "xdp")
			c.tunRouting(routed)
			gws := c.startGateways(cf.bin, cf.flags...)
			// Warm: the CSF's session and its blocks, the CRF's window.
			c.blast("warm", time.Second, nil, senderEnv...)
			m := c.blast(cf.name, d, gws[:], senderEnv...)
			for _, g := range gws {
				g.stop(t)
			}
			if routed {
				c.tunRouting(false)
			}
			if !strings.Contains(gws[0].logs.String(), "protecting flow") {
				t.Errorf("%s: gateway A protected no flow: %s", cf.name, gws[0].logs.String())
			}
			results[cf.name] = append(results[cf.name], m)
			t.Logf("run %d %s", run+1, m.line())
			t.Logf("run %d %s: ratio to kernel %.2f", run+1, cf.name, m.res.pps()/results["kernel"][run].res.pps())
		}
	}
	names := []string{"kernel"}
	for _, cf := range configs {
		names = append(names, cf.name)
	}
	for _, n := range names {
		ms := results[n]
		var pps, cpu []float64
		for _, m := range ms {
			pps = append(pps, m.res.pps())
			cpu = append(cpu, m.cpuPerPkt())
		}
		t.Logf("%-8s delivered %s pps, CPU %s µs/packet", n, rng(pps, "%.0f"), rng(cpu, "%.1f"))
	}
	for _, cf := range configs {
		var ratios []float64
		for i, m := range results[cf.name] {
			ratios = append(ratios, m.res.pps()/results["kernel"][i].res.pps())
		}
		t.Logf("%s / kernel packet rate: %s (goal: at least 0.5)", cf.name, rng(ratios, "%.2f"))
	}
	// One line per data path, the means over the runs (the ratio: of each run's, to the
	// kernel's of the same turn).
	for _, cf := range configs {
		mode, ok := map[string]string{"crem-raw": "raw", "crem-dev": "device", "xdp": "xdp"}[cf.name]
		if !ok {
			continue
		}
		var pps, kpps, ratio, cpu float64
		ms := results[cf.name]
		for i, m := range ms {
			k := results["kernel"][i].res.pps()
			pps, kpps, ratio, cpu = pps+m.res.pps(), kpps+k, ratio+m.res.pps()/k, cpu+m.cpuPerPkt()
		}
		n := float64(len(ms))
		fmt.Printf("forwarding mode=%s pps=%.0f kernel_pps=%.0f ratio=%.2f cpu_us_per_pkt=%.1f\n", mode, pps/n, kpps/n, ratio/n, cpu/n)
	}
}

func (m measurement) line() string {
	s := fmt.Sprintf("%-8s sent %d delivered %d (+%d duplicates) (%.0f pps, %.2f Gbit/s) in %.1fs; CPU: chain processes %.2fs (gateways %.2fs) + softirq %.2fs (ksoftirqd %.2fs) = %.1f µs/packet; machine busy %.2fs",
		m.name, m.res.Sent, m.res.Packets, m.res.Dups, m.res.pps(), m.res.pps()*float64(m.res.Bytes)/float64(max(m.res.Packets, 1))*8/1e9,
		m.seconds, m.procCPU, m.gwCPU, m.softirq, m.ksoftirqd, m.cpuPerPkt(), m.machine)
	if m.res.Bad > 0 {
		s += fmt.Sprintf("; %d with a bad ICRC", m.res.Bad)
	}
	if m.res.Stale > 0 {
		s += fmt.Sprintf("; %d packets of an earlier run, not counted", m.res.Stale)
	}
	if m.allocsPerPkt != -1 {
		s += fmt.Sprintf("; gateways' allocations %.4f per packet; super-packets read A %.0f B %.0f; packets written coalesced A %.0f B %.0f",
			m.allocsPerPkt, m.superRead[0], m.superRead[1], m.coalesced[0], m.coalesced[1])
		if m.xdpDrops != "" {
			s += ";" + m.xdpDrops
		}
	}
	return s
}

func rng(v []float64, f string) string {
	if len(v) == 0 {
		return "-"
	}
	lo, hi := slices.Min(v), slices.Max(v)
	return fmt.Sprintf(f+"–"+f, lo, hi)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestTunGSONetns: a sender using UDP segmentation offload (UDP_SEGMENT, 15 RoCEv2 WRITE
// MIDDLE packets of 4 KiB per send) hands the kernel super-packets, which reach gateway A's
// TUN device whole; the gateway cuts them (the device's virtio header and USO), protects the
// flow and sends every packet on; gateway B receives each, and the receiver gets every one,
// with a valid UDP checksum (the kernel drops any other) and ICRC. Gateway A's counters show
// the super-packets it read. With --tun-offload off the kernel cuts them before the device,
// and the same holds without super-packets. With --tun-write device both gateways write what
// they send on back into their device, coalesced into super-packets (counted) with offloads,
// one by one without; a last run drops some packets on the WAN (a token bucket), and B's
// restored packets, written into its device, arrive whole too. No packet arrives twice
// (a REPAIR handed on ahead of the sources before it would have B restore packets on their
// way). Needs root, iproute2, tc,
// /dev/net/tun and USO in the kernel (6.2); skips elsewhere.
func TestTunGSONetns(t *testing.T) {
	netnsRoot(t)
	if testenv.Race {
		// Every process of the chain is the race-instrumented test binary: the gateways fall
		// behind the sender's 40,000 packets a second, their shard queues hold a HELLO for
		// longer than its eight attempts with the test's 1 ms initial RTT last, and the
		// counts checked here depend on the load. The TUN data path, super-packets included,
		// runs under the race detector in TestGatewayTunNetns and TestGatewayTunDeviceWriteNetns.
		t.Skip("a rate test: too slow under the race detector")
	}
	var uname unix.Utsname
	unix.Uname(&uname)
	if !kernelAtLeast(unix.ByteSliceToString(uname.Release[:]), 6, 2) {
		t.Skip("needs Linux 6.2 (USO on TUN devices)")
	}
	c := newNetnsChain(t)
	for _, tc := range []struct {
		offload, write string
		// The WAN's egress is a token bucket a little below the offered rate, with a burst
		// smaller than a super-packet (which it then cuts into its packets first): it drops
		// single packets now and then, and B restores them.
		loss bool
	}{{"on", "raw", false}, {"off", "raw", false}, {"on", "device", false}, {"off", "device", false}, {"on", "device", true}} {
		offload := tc.offload + "/" + tc.write
		if tc.loss {
			offload += "/loss"
			c.sh(c.a, "tc", "qdisc", "add", "dev", "aw", "root", "tbf", "rate", "1550mbit", "burst", "20k", "limit", "100k")
		}
		c.tunRouting(true)
		gws := c.startGateways("", "--tun-offload", tc.offload, "--tun-write", tc.write)
		c.blast("warm", time.Second, nil, "CREM_NETNS_GSO=15", "CREM_NETNS_PPS=40000")
		before, beforeB, devBefore := c.metrics(gws[0]), c.metrics(gws[1]), c.tunDrops()
		m := c.blast("gso-"+offload, time.Second, gws[:], "CREM_NETNS_GSO=15", "CREM_NETNS_VERIFY=1", "CREM_NETNS_PPS=40000")
		after, afterB, devAfter := c.metrics(gws[0]), c.metrics(gws[1]), c.tunDrops()
		for _, k := range []string{`crem_gateway_packets_total{direction="rx",socket="tun"}`, `crem_gateway_packets_total{direction="tx",socket="tun"}`, `crem_gateway_dropped_total{socket="tun"}`,
			`crem_gateway_packets_total{direction="tx",socket="crem"}`, `crem_gateway_packets_total{direction="rx",socket="crem"}`, "crem_csf_repair_sent_total", "crem_csf_retransmissions_total",
			"crem_gateway_shard_queue_full_total", "crem_gateway_write_errors_total", "crem_gateway_tun_gso_refused_total",
			"crem_gateway_buffers_exhausted_total", "crem_gateway_truncated_total"} {
			t.Logf("offload %s: %s A %.0f B %.0f", offload, k, after[k]-before[k], afterB[k]-beforeB[k])
		}
		// (With losses the CSF's breaker may stop the repair for a while. So it may without:
		// on a loaded host gateway A falls behind its device in the warm-up, the kernel drops
		// what the device cannot queue, B's CRF reports the gaps as path loss, and over 10 % of
		// it for a second trips the breaker, which holds m at 0 through the measurement.)
		trips := after["crem_csf_breaker_trips_total"]
		if r := after["crem_csf_repair_sent_total"] - before["crem_csf_repair_sent_total"]; r == 0 && !tc.loss {
			if trips == 0 {
				t.Errorf("offload %s: gateway A sent no repair for %d sources\ngateway A: %s\ngateway B: %s", offload, m.res.Sent,
					gws[0].logs.String(), gws[1].logs.String())
			} else {
				t.Logf("offload %s: gateway A sent no repair: its breaker tripped %.0f times (the device's drops: %s)", offload, trips, c.drops())
			}
		}
		t.Logf("drops: %s", c.drops())
		for _, g := range gws {
			g.stop(t)
		}
		c.tunRouting(false)
		t.Log(m.line())
		gso := after["crem_gateway_tun_gso_packets_total"] - before["crem_gateway_tun_gso_packets_total"]
		segs := after["crem_gateway_tun_gso_segments_total"] - before["crem_gateway_tun_gso_segments_total"]
		t.Logf("offload %s: gateway A read %.0f super-packets (%.0f packets)", offload, gso, segs)
		if m.res.Bad != 0 {
			t.Errorf("offload %s: %d packets arrived with a bad ICRC", offload, m.res.Bad)
		}
		// Gateway B reads its CREM socket and its device in one goroutine, CREM messages
		// handed on after the sources the device held: a REPAIR never overtakes them, so
		// nothing is restored that is on its way. (Read apart, some 3 percent of the packets
		// arrived twice here.) A gateway lagging by more than one drain could still let a
		// REPAIR pass: a thousandth is allowed for a busy machine.
		if m.res.Dups*1000 > m.res.Sent {
			t.Errorf("offload %s: %d of %d packets arrived twice", offload, m.res.Dups, m.res.Sent)
		}
		// On a busy machine a gateway may lag and drop what it cannot hold (counted: a full
		// shard queue, no buffer left), or not read its device in time (the kernel counts
		// those on the device); nothing else may go missing.
		dropped := `crem_gateway_dropped_total{socket="tun"}`
		counted := after[dropped] - before[dropped] + afterB[dropped] - beforeB[dropped] + devAfter - devBefore
		if m.res.Sent == 0 || m.res.Packets > m.res.Sent || !tc.loss && float64(m.res.Packets)+counted < 0.98*float64(m.res.Sent) {
			t.Errorf("offload %s: %d of %d packets delivered, %.0f dropped by the gateways (counted)", offload, m.res.Packets, m.res.Sent, counted)
		}
		coalesced := after["crem_gateway_tun_coalesced_total"] - before["crem_gateway_tun_coalesced_total"]
		coalescedB := afterB["crem_gateway_tun_coalesced_total"] - beforeB["crem_gateway_tun_coalesced_total"]
		t.Logf("offload %s: packets written coalesced: A %.0f, B %.0f", offload, coalesced, coalescedB)
		if tc.offload == "on" && tc.write == "device" && (coalesced == 0 || coalescedB == 0) {
			t.Errorf("offload %s: nothing was written coalesced", offload)
		}
		if (tc.offload == "off" || tc.write == "raw") && coalesced+coalescedB != 0 {
			t.Errorf("offload %s: %.0f packets written coalesced", offload, coalesced+coalescedB)
		}
		if tc.offload == "on" && (gso == 0 || segs < 2*gso) {
			t.Errorf("offload on: gateway A read %.0f super-packets of %.0f packets, want the sender's", gso, segs)
		}
		if tc.loss {
			r := afterB["crem_crf_flows_restored_total"] - beforeB["crem_crf_flows_restored_total"]
			// How much the token bucket drops varies from run to run, and beyond some
			// percent the CSF's breaker stops the repair: what B restored is logged; that
			// every packet arrived whole (ICRC, UDP checksum) is checked above.
			t.Logf("offload %s: the WAN dropped %d packets, B restored %.0f", offload, m.res.Sent-m.res.Packets, r)
		}
		if tc.loss {
			c.sh(c.a, "tc", "qdisc", "del", "dev", "aw", "root")
		}
		if tc.offload == "off" && gso != 0 {
			t.Errorf("offload off: gateway A read %.0f super-packets", gso)
		}
		if !strings.Contains(gws[0].logs.String(), "protecting flow") {
			t.Errorf("offload %s: gateway A protected no flow", offload)
		}
	}
}

func kernelAtLeast(release string, major, minor int) bool {
	var a, b int
	fmt.Sscanf(release, "%d.%d", &a, &b)
	return a > major || a == major && b >= minor
}

// netnsHelper is the sender, the receiver and a metrics reader of the namespace tests, run by
// them in a namespace: TestMain runs it in the test binary when CREM_NETNS_HELPER says which.
func netnsHelper() int {
	var err error
	switch os.Getenv("CREM_NETNS_HELPER") {
	case "send":
		err = netnsSend()
	case "recv":
		err = netnsRecv()
	case "tcp-recv":
		err = netnsTCPRecv()
	case "tcp-send":
		err = netnsTCPSend()
	case "features":
		for _, dev := range strings.Fields(os.Getenv("CREM_NETNS_DEVS")) {
			if err = setFeatures(dev, strings.Fields(os.Getenv("CREM_NETNS_FEATURES"))...); err != nil {
				break
			}
		}
	case "xdpcheck":
		err = xdpCheck()
	case "xdpdrop":
		err = xdpDropper(os.Getenv("CREM_NETNS_DEVS"), envInt("CREM_NETNS_EVERY", 100))
	case "get":
		var resp *http.Response
		// No proxy: the address is inside the namespace.
		cl := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
		if resp, err = cl.Get(os.Getenv("CREM_NETNS_URL")); err == nil {
			_, err = io.Copy(os.Stdout, resp.Body)
			resp.Body.Close()
		}
	default:
		err = fmt.Errorf("CREM_NETNS_HELPER %q: want send, recv or get", os.Getenv("CREM_NETNS_HELPER"))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// netnsTCPRecv accepts one connection on CREM_NETNS_LISTEN, reads it to its end and prints
// how many octets came and whether each was the pattern netnsTCPSend sends.
func netnsTCPRecv() error {
	ln, err := net.Listen("tcp4", os.Getenv("CREM_NETNS_LISTEN"))
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Println("LISTENING")
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 1<<16)
	var n, bad int64
	for {
		m, err := c.Read(buf)
		for i := range m {
			if buf[i] != byte((n+int64(i))*7) {
				bad++
			}
		}
		n += int64(m)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	fmt.Printf("RESULT {\"Bytes\": %d, \"Bad\": %d}\n", n, bad)
	return nil
}

// netnsTCPSend sends CREM_NETNS_BYTES octets of a pattern to CREM_NETNS_DIAL in large writes
// (which the kernel's TSO makes into super-packets).
func netnsTCPSend() error {
	total, _ := strconv.Atoi(os.Getenv("CREM_NETNS_BYTES"))
	c, err := net.DialTimeout("tcp4", os.Getenv("CREM_NETNS_DIAL"), 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 1<<16)
	for off := 0; off < total; {
		n := min(len(buf), total-off)
		for i := range n {
			buf[i] = byte((off + i) * 7)
		}
		if _, err := c.Write(buf[:n]); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// forceBuffer sets a socket buffer beyond the system's maximum (root).
func forceBuffer(c *net.UDPConn, opt, n int) {
	if raw, err := c.SyscallConn(); err == nil {
		raw.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt, n) })
	}
}

func netnsDesc() flow.Descriptor {
	return flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: netip.MustParseAddr(nsSenderAddr), Dst: netip.MustParseAddr(nsReceiverAddr),
		DestQP: nsQP, SrcPort: nsSrcPort}
}

// writeShape builds the packet at index i of a stream of 1 MiB RDMA WRITEs of 4 KiB packets
// (FIRST with its RETH, 254 MIDDLE, LAST), or MIDDLE only (every packet of one length, as
// UDP segmentation needs), with PSN p, ICRC sealed under the flow's logical header.
func writeShape(b []byte, i int, p psn.PSN, middleOnly bool, size int) ([]byte, error) {
	op := roce.OpWriteMiddle
	switch {
	case middleOnly:
	case i%256 == 0:
		op = roce.OpWriteFirst
	case i%256 == 255:
		op = roce.OpWriteLast
	}
	pk := roce.Packet{BTH: roce.BTH{OpCode: op, PKey: 0xffff, DestQP: nsQP, PSN: p, AckReq: op == roce.OpWriteLast}}
	if op == roce.OpWriteFirst {
		pk.RETH = roce.RETH{VA: 0x10000 + uint64(i/256)<<20, RKey: 0x77, DMALength: 1 << 20}
	}
	b, err := pk.BTH.Append(b[:0])
	if err != nil {
		return nil, err
	}
	if op == roce.OpWriteFirst {
		if b, err = pk.RETH.Append(b); err != nil {
			return nil, err
		}
	}
	n := len(b)
	b = b[:n+size+4]
	for j := n; j < n+size; j += 8 {
		binary.BigEndian.PutUint64(b[j:], uint64(p)<<32|uint64(j))
	}
	return b, netnsDesc().LogicalHeader().Seal(b)
}

// netnsSend sends RoCEv2 WRITE packets (CREM_NETNS_PAYLOAD octets of payload, 4096 when
// unset) to the receiver for CREM_NETNS_SECONDS, in sendmmsg
// batches of 64 (or with CREM_NETNS_GSO = n, n packets per UDP_SEGMENT send), at most
// CREM_NETNS_PPS packets a second when set. CREM_NETNS_CORRUPT=N alters one payload octet of
// every N-th packet after its ICRC was computed (without GSO), for the receiver's check to
// catch.
func netnsSend() error {
	secs, _ := strconv.ParseFloat(os.Getenv("CREM_NETNS_SECONDS"), 64)
	gso, _ := strconv.Atoi(os.Getenv("CREM_NETNS_GSO"))
	pps, _ := strconv.Atoi(os.Getenv("CREM_NETNS_PPS"))
	size := envInt("CREM_NETNS_PAYLOAD", 4096) // octets of RDMA payload a packet (a multiple of 8)
	conn, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(nsSenderAddr), Port: nsSrcPort},
		&net.UDPAddr{IP: net.ParseIP(nsReceiverAddr), Port: roce.UDPPort})
	if err != nil {
		return err
	}
	defer conn.Close()
	forceBuffer(conn, unix.SO_SNDBUFFORCE, 8<<20)
	const batch = 64
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, 4200)
	}
	var sent int64
	first, _ := strconv.Atoi(os.Getenv("CREM_NETNS_PSN"))
	next := psn.PSN(first)
	deadline := time.Now().Add(time.Duration(secs * float64(time.Second)))
	start := time.Now()
	if gso > 0 {
		raw, _ := conn.SyscallConn()
		raw.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT, 4096+16) })
		if err != nil {
			return fmt.Errorf("UDP_SEGMENT: %w", err)
		}
		super := make([]byte, 0, gso*(4096+16))
		for time.Now().Before(deadline) {
			super = super[:0]
			for i := range gso {
				b, err := writeShape(bufs[i], 0, next, true, 4096)
				if err != nil {
					return err
				}
				next = next.Add(1)
				super = append(super, b...)
			}
			if _, err := conn.Write(super); err != nil {
				if strings.Contains(err.Error(), "no buffer space") {
					continue // the egress queue is full: those packets are lost, as on a NIC
				}
				return err
			}
			sent += int64(gso)
			if pps > 0 {
				if ahead := time.Duration(float64(sent)/float64(pps)*1e9) - time.Since(start); ahead > 0 {
					time.Sleep(ahead)
				}
			}
		}
	} else {
		pc := ipv4.NewPacketConn(conn)
		msgs := make([]ipv4.Message, batch)
		corrupt := envInt("CREM_NETNS_CORRUPT", 0) // every corrupt-th packet's payload altered after sealing
		i := 0
		for time.Now().Before(deadline) {
			for j := range msgs {
				b, err := writeShape(bufs[j], i, next, false, size)
				if err != nil {
					return err
				}
				if corrupt > 0 && i%corrupt == 0 {
					b[len(b)-roce.ICRCLen-1] ^= 0x10
				}
				i++
				next = next.Add(1)
				msgs[j].Buffers = [][]byte{b}
			}
			ms := msgs
			for len(ms) > 0 {
				n, err := pc.WriteBatch(ms, 0)
				if err != nil {
					if strings.Contains(err.Error(), "no buffer space") {
						ms = ms[1:] // the egress queue is full: that packet is lost, as on a NIC
						continue
					}
					return err
				}
				sent += int64(n)
				ms = ms[n:]
			}
			if pps > 0 {
				if ahead := time.Duration(float64(sent)/float64(pps)*1e9) - time.Since(start); ahead > 0 {
					time.Sleep(ahead)
				}
			}
		}
	}
	out, _ := json.Marshal(blastResult{Sent: sent, Next: uint32(next)})
	fmt.Printf("RESULT %s\n", out)
	return nil
}

// netnsRecv counts the RoCEv2 packets arriving at the receiver until CREM_NETNS_IDLE passes
// without one (after the first) or CREM_NETNS_DEADLINE; with CREM_NETNS_VERIFY=1 it checks
// each one's ICRC. It acknowledges every 256th packet as an RDMA responder would each WRITE
// (the ACKs release the blocks the CSF keeps for coded retransmission, C9).
func netnsRecv() error {
	idle, _ := time.ParseDuration(os.Getenv("CREM_NETNS_IDLE"))
	dl, _ := time.ParseDuration(os.Getenv("CREM_NETNS_DEADLINE"))
	verify := os.Getenv("CREM_NETNS_VERIFY") == "1"
	first := psn.PSN(envInt("CREM_NETNS_PSN", 0)) // the blast's first PSN: those before are stale
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(nsReceiverAddr), Port: roce.UDPPort})
	if err != nil {
		return err
	}
	defer conn.Close()
	// Past net.core.rmem_max (root may): a default buffer holds some 25 packets of 4 KiB.
	forceBuffer(conn, unix.SO_RCVBUFFORCE, 32<<20)
	pc := ipv4.NewPacketConn(conn)
	msgs := make([]ipv4.Message, 64)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 9000)}
	}
	lh := netnsDesc().LogicalHeader()
	rev := flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: netip.MustParseAddr(nsReceiverAddr), Dst: netip.MustParseAddr(nsSenderAddr),
		DestQP: nsReverseQP, SrcPort: roce.UDPPort}
	requester := &net.UDPAddr{IP: net.ParseIP(nsSenderAddr), Port: roce.UDPPort}
	var r blastResult
	seen := make([]uint64, 1<<24/64)
	end := time.Now().Add(dl)
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(w, "RECEIVING")
	w.Flush()
	for {
		wait := end
		if r.Packets > 0 {
			wait = time.Now().Add(idle)
		}
		conn.SetReadDeadline(wait)
		n, err := pc.ReadBatch(msgs, 0)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				break
			}
			return err
		}
		now := time.Now().UnixNano()
		if r.Packets == 0 {
			r.FirstNS = now
		}
		r.LastNS = now
		for _, m := range msgs[:n] {
			b := m.Buffers[0][:m.N]
			if len(b) < roce.BTHLen {
				continue
			}
			p := binary.BigEndian.Uint32(b[8:12]) & 0xffffff
			if first.Forward(psn.PSN(p)) >= 1<<23 {
				r.Stale++
				continue
			}
			if seen[p/64]&(1<<(p%64)) != 0 {
				r.Dups++
				continue
			}
			seen[p/64] |= 1 << (p % 64)
			r.Packets++
			r.Bytes += int64(m.N)
			if verify && lh.Verify(b) != nil {
				r.Bad++
			}
			if r.Packets%256 == 0 {
				ack := roce.Packet{BTH: roce.BTH{OpCode: roce.OpAcknowledge, PKey: 0xffff, DestQP: nsReverseQP,
					PSN: psn.PSN(binary.BigEndian.Uint32(b[8:12]) & 0xffffff)}, AETH: roce.ACK(31, uint32(r.Packets/256))}
				if a, err := ack.Append(nil); err == nil && rev.LogicalHeader().Seal(a) == nil {
					conn.WriteToUDP(a, requester)
				}
			}
		}
		if time.Now().After(end) {
			break
		}
	}
	out, _ := json.Marshal(r)
	fmt.Printf("RESULT %s\n", out)
	return nil
}
