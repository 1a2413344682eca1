//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestGatewayTunDeviceWriteNetns is TestGatewayTunNetns's setup (three namespaces, endpoints on
// the gateway hosts, a token bucket on the WAN that drops some packets) with tun.write =
// device: the gateways write what they send on back into their TUN device, and two more policy
// rules per site take what arrives on the device onward instead of into it again (for this
// site's endpoints the main table, after local delivery; anything else the WAN's table).
// `crem perf write` moves data across, byte-verified, gateway B restores what the WAN dropped,
// every restored packet passing its ICRC check, and the gateways' writes were coalesced. A TCP
// transfer (32 MiB) between the endpoints then crosses the gateways whole, gateway A cutting
// the sender's TSO super-packets.
// Needs root, ip(8), tc and /dev/net/tun; skips elsewhere.
func TestGatewayTunDeviceWriteNetns(t *testing.T) {
	netnsRoot(t)
	sfx := fmt.Sprintf("%d", os.Getpid()%100000)
	nsA, nsW, nsB := "crem-da-"+sfx, "crem-dw-"+sfx, "crem-db-"+sfx
	sh := func(ns string, args ...string) {
		t.Helper()
		if ns != "" {
			args = append([]string{"ip", "netns", "exec", ns}, args...)
		}
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, ns := range []string{nsA, nsW, nsB} {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Skipf("cannot create network namespaces here: %v: %s", err, out)
		}
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	sh("", "ip", "link", "add", "va", "mtu", "9000", "netns", nsA, "type", "veth", "peer", "name", "wa", "mtu", "9000", "netns", nsW)
	sh("", "ip", "link", "add", "vb", "mtu", "9000", "netns", nsB, "type", "veth", "peer", "name", "wb", "mtu", "9000", "netns", nsW)
	for _, ns := range []string{nsA, nsW, nsB} {
		sh(ns, "ip", "link", "set", "lo", "up")
		sh(ns, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0", "net.ipv4.ip_forward=1")
	}
	sh(nsW, "ip", "addr", "add", "198.18.10.2/24", "dev", "wa")
	sh(nsW, "ip", "addr", "add", "198.18.20.2/24", "dev", "wb")
	sh(nsW, "ip", "link", "set", "wa", "up")
	sh(nsW, "ip", "link", "set", "wb", "up")
	sh(nsW, "ip", "route", "add", "198.18.1.0/24", "via", "198.18.10.1")
	sh(nsW, "ip", "route", "add", "198.18.2.0/24", "via", "198.18.20.1")
	site := func(ns, dev, wanAddr, wanGw, endpoint, localNet, remoteNet, remoteWAN, tun string) {
		sh(ns, "sysctl", "-qw", "net.ipv4.conf."+dev+".rp_filter=0")
		sh(ns, "ip", "addr", "add", wanAddr+"/24", "dev", dev)
		sh(ns, "ip", "link", "set", dev, "up")
		sh(ns, "ip", "addr", "add", endpoint+"/32", "dev", "lo")
		sh(ns, "ip", "tuntap", "add", "dev", tun, "mode", "tun")
		sh(ns, "ip", "link", "set", tun, "mtu", "9000", "txqueuelen", "10000", "up")
		sh(ns, "sysctl", "-qw", "net.ipv4.ip_early_demux=0", "net.ipv4.udp_early_demux=0", "net.ipv4.conf."+tun+".rp_filter=0")
		sh(ns, "ip", "route", "add", remoteWAN, "via", wanGw)
		sh(ns, "ip", "route", "add", remoteNet, "dev", tun, "src", endpoint)
		sh(ns, "ip", "route", "add", "default", "dev", tun, "table", "100")
		sh(ns, "ip", "route", "add", "default", "via", wanGw, "table", "200")
		sh(ns, "ip", "rule", "add", "pref", "100", "iif", dev, "to", localNet, "lookup", "100")
		sh(ns, "ip", "rule", "add", "pref", "1000", "lookup", "local")
		sh(ns, "ip", "rule", "del", "pref", "0")
		sh(ns, "ip", "rule", "add", "pref", "1001", "fwmark", "0x43", "lookup", "200")
		// What the gateway writes into the device: for this site, the main table (after
		// local delivery at 1000); anything else to the WAN, never back into the device.
		sh(ns, "ip", "rule", "add", "pref", "1002", "iif", tun, "to", localNet, "lookup", "main")
		sh(ns, "ip", "rule", "add", "pref", "1003", "iif", tun, "lookup", "200")
	}
	site(nsA, "va", "198.18.10.1", "198.18.10.2", "198.18.1.1", "198.18.1.0/24", "198.18.2.0/24", "198.18.20.0/24", "cremA")
	sh(nsW, "tc", "qdisc", "add", "dev", "wb", "root", "tbf", "rate", "350mbit", "burst", "20k", "limit", "100k")
	site(nsB, "vb", "198.18.20.1", "198.18.20.2", "198.18.2.1", "198.18.2.0/24", "198.18.1.0/24", "198.18.10.0/24", "cremB")

	dir := t.TempDir()
	const port = 61235
	conf := func(name, self, peer, tun, local string) string {
		f := filepath.Join(dir, name+".toml")
		os.WriteFile(f, []byte(fmt.Sprintf(`crem_address = "%s:%d"
domain_protection = "boundary"
peer = "%s:%d"
mode = "tun"
metrics_address = "%s:9465"
shards = 2
[tun]
name = "%s"
local_prefixes = ["%s"]
verify = "logical"
write = "device"
[[protect]]
ordered = false
src_port = 4791
[policy]
initial_rtt = "2ms"
burst_gap = "1ms"
# m fixed, as in TestGatewayTunNetns: the token bucket's bursts of drops would have the
# adaptation choose m 0 and leave restoration to requests that the RDMA retransmission beats.
adapt = false
k = 32
m = 4
`, self, port, peer, port, self, tun, local)), 0o644)
		return f
	}
	var logA, logB, logS syncBuf
	gwB := startInNetns(t, nsB, &logB, "gateway", "--config", conf("b", "198.18.20.1", "198.18.10.1", "cremB", "198.18.2.0/24"))
	gwA := startInNetns(t, nsA, &logA, "gateway", "--config", conf("a", "198.18.10.1", "198.18.20.1", "cremA", "198.18.1.0/24"))
	startInNetns(t, nsB, &logS, "perf", "serve", "--listen", "198.18.2.1:18515")
	waitPairReady(t, &logA, &logB, &logS)
	c := &netnsChain{t: t}
	// The endpoints add 5 ms each way in process (--delay): the RDMA transport's recovery
	// takes that round trip, while the gateways' coded retransmission crosses only the
	// namespaces' WAN, as on a long path whose losses lie between the gateways. (The token
	// bucket drops bursts, beyond m; without the delay the RDMA retransmission came first and
	// B restored nothing.)
	for run := 0; run < 3; run++ {
		cmd := exec.Command("ip", "netns", "exec", nsA, os.Args[0], "perf", "write", "--server", "198.18.2.1:18515",
			"--size", "1MiB", "--iters", "16", "--mtu", "4096", "--rate", "300Mbit", "--delay", "5ms", "--mode", "tcaeth", "--json", "--timeout", "40s",
			"--retry-count", "1000")
		cmd.Env = append(os.Environ(), "CREM_TEST_AS_CREM=1")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("perf write (run %d): %v\n%s\ngateway A: %s\ngateway B: %s", run, err, out, logA.String(), logB.String())
		}
		var res struct{ Verified bool }
		if json.Unmarshal(out, &res) != nil || !res.Verified {
			t.Fatalf("perf write (run %d): %s", run, out)
		}
	}
	// TCP through the gateways too: the sender's TSO super-packets reach gateway A's device
	// whole, and it cuts them (sequence numbers, flags, checksums) before sending them on.
	gwMetrics := []*nsGateway{{ns: nsA, metrics: "198.18.10.1:9465", logs: &logA}, {ns: nsB, metrics: "198.18.20.1:9465", logs: &logB}}
	tso0 := c.metrics(gwMetrics[0])["crem_gateway_tun_gso_packets_total"]
	recv := c.helper(nsB, "tcp-recv", "CREM_NETNS_LISTEN=198.18.2.1:18600")
	var recvOut syncBuf
	recv.Stdout, recv.Stderr = &recvOut, &recvOut
	if err := recv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { recv.Process.Kill(); recv.Wait() })
	if !waitLog(&recvOut, "LISTENING") {
		t.Fatalf("TCP receiver: %s", recvOut.String())
	}
	const tcpBytes = 32 << 20
	if out, err := c.helper(nsA, "tcp-send", "CREM_NETNS_DIAL=198.18.2.1:18600", fmt.Sprintf("CREM_NETNS_BYTES=%d", tcpBytes)).CombinedOutput(); err != nil {
		t.Fatalf("TCP sender: %v: %s", err, out)
	}
	if err := recv.Wait(); err != nil {
		t.Fatalf("TCP receiver: %v: %s", err, recvOut.String())
	}
	var tcp blastResult
	if err := parseResult(recvOut.String(), &tcp); err != nil || tcp.Bytes != tcpBytes || tcp.Bad != 0 {
		t.Fatalf("TCP through the gateways: %+v (%v), want %d octets, none wrong", tcp, err, tcpBytes)
	}
	tso := c.metrics(gwMetrics[0])["crem_gateway_tun_gso_packets_total"] - tso0
	t.Logf("TCP: %d octets through the gateways, gateway A cut %.0f super-packets", tcp.Bytes, tso)
	if tso == 0 {
		t.Errorf("gateway A read no TSO super-packet")
	}
	var coalesced [2]float64
	for i, g := range gwMetrics {
		coalesced[i] = c.metrics(g)["crem_gateway_tun_coalesced_total"]
	}
	for _, cmd := range []*exec.Cmd{gwA, gwB} {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("gateway exit: %v", err)
			}
		case <-time.After(patience):
			t.Error("gateway did not stop on SIGTERM")
		}
	}
	a, b := logA.String(), logB.String()
	t.Logf("packets written coalesced: A %.0f, B %.0f", coalesced[0], coalesced[1])
	if coalesced[0] == 0 {
		t.Errorf("gateway A wrote nothing coalesced into its device")
	}
	if !strings.Contains(a, "protecting flow") || strings.Contains(a, "csf_sources=0 ") || strings.Contains(a, "csf_repair_sent=0 ") {
		t.Errorf("gateway A did not protect the flow: %s", a)
	}
	if strings.Contains(b, "crf_sources=0 ") || strings.Contains(b, "crf_repairs=0 ") || !strings.Contains(b, "crf_icrc_mismatch=0 ") {
		t.Errorf("gateway B's CRF did not serve the flow: %s", b)
	}
	if strings.Contains(b, "crf_restored=0 ") {
		t.Errorf("gateway B restored nothing although the WAN dropped packets: %s", b)
	}
	if i := strings.Index(b, "crf_sources="); i >= 0 {
		t.Logf("gateway B: %s", strings.SplitN(b[i:], "\n", 2)[0])
	}
}
