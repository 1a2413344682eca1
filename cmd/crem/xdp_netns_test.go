//go:build linux

package main

import (
	"fmt"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crem-project/crem/internal/harness/netnslock"
	"github.com/crem-project/crem/internal/testenv"
	"github.com/crem-project/crem/xdp"
)

// xdpMTU is the chain's MTU for the xdp data path without multi-buffer AF_XDP: a frame of
// copy mode holds at most 3,840 octets (a 4 KiB UMEM frame less the kernel's headroom), and
// driver XDP on veth takes a frame of one page.
const xdpMTU = "3000"

// xdpPayload is the RDMA payload of the packets the sender sends through the xdp data path
// without multi-buffer AF_XDP (an RDMA MTU of 2048).
const xdpPayload = "2048"

// xdpJumboMTU and xdpJumboPayload are the chain's MTU and the RDMA payload with multi-buffer
// AF_XDP (Linux 6.6): RoCEv2 packets of an RDMA MTU of 4096, each two AF_XDP frames.
const (
	xdpJumboMTU     = "9000"
	xdpJumboPayload = "4096"
)

// xdpChain turns the chain into the xdp data path's: every link at mtu, and, with every
// above zero, the WAN through a bridge in a fifth namespace whose port facing gateway A drops
// every every-th frame longer than 1,000 octets (an XDP program of xdpDropper's, held by a
// helper process): frames sent on an AF_XDP TX ring skip the sending interface's queueing
// discipline, so the loss sits past gateway A's interface.
func (c *netnsChain) xdpChain(every int, mtu string) {
	t := c.t
	for _, l := range []struct{ ns, dev string }{{c.s, "s0"}, {c.a, "a0"}, {c.a, "aw"}, {c.b, "bw"}, {c.b, "b1"}, {c.r, "r0"}} {
		c.sh(l.ns, "ip", "link", "set", l.dev, "mtu", mtu)
	}
	// The endpoints' packets leave with their UDP checksums computed: a veth hands a peer a
	// partial checksum (CHECKSUM_PARTIAL, the sum finished by whoever sends it on), which an
	// AF_XDP socket's copy of the frame does not carry, as a real NIC's peer never sends one.
	for _, x := range []struct{ ns, dev string }{{c.s, "s0"}, {c.r, "r0"}} {
		if out, err := c.helper(x.ns, "features", "CREM_NETNS_DEVS="+x.dev, "CREM_NETNS_FEATURES=-tx-checksum-ip-generic").CombinedOutput(); err != nil {
			t.Fatalf("checksum offload off on %s: %v: %s", x.dev, err, out)
		}
	}
	if every == 0 {
		return
	}
	w := strings.Replace(c.a, "crem-fa-", "crem-fw-", 1)
	if out, err := exec.Command("ip", "netns", "add", w).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", w, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", w).Run() })
	c.sh(c.a, "ip", "link", "del", "aw") // its peer bw with it
	c.sh("", "ip", "link", "add", "aw", "mtu", mtu, "netns", c.a, "type", "veth", "peer", "name", "wa", "mtu", mtu, "netns", w)
	c.sh("", "ip", "link", "add", "bw", "mtu", mtu, "netns", c.b, "type", "veth", "peer", "name", "wb", "mtu", mtu, "netns", w)
	c.sh(w, "ip", "link", "add", "br0", "type", "bridge")
	for _, d := range []string{"wa", "wb"} {
		c.sh(w, "ip", "link", "set", d, "master", "br0")
	}
	for _, d := range []string{"wa", "wb", "br0", "lo"} {
		c.sh(w, "ip", "link", "set", d, "up")
	}
	for _, x := range []struct{ ns, dev, addr, route, via string }{
		{c.a, "aw", "198.18.10.1/24", "198.18.2.0/24", "198.18.10.2"},
		{c.b, "bw", "198.18.10.2/24", "198.18.1.0/24", "198.18.10.1"},
	} {
		c.sh(x.ns, "ip", "addr", "add", x.addr, "dev", x.dev)
		c.sh(x.ns, "ip", "link", "set", x.dev, "up")
		c.sh(x.ns, "sysctl", "-qw", "net.ipv4.conf."+x.dev+".rp_filter=0")
		c.sh(x.ns, "ip", "route", "add", x.route, "via", x.via)
	}
	drop := c.helper(w, "xdpdrop", "CREM_NETNS_DEVS=wa", fmt.Sprintf("CREM_NETNS_EVERY=%d", every))
	out := &syncBuf{}
	drop.Stdout, drop.Stderr = out, out
	if err := drop.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drop.Process.Kill(); drop.Wait() })
	if !waitLog(out, "DROPPING") {
		t.Skipf("the kernel refuses an XDP program here (needs Linux 5.9+, BPF): %s", out.String())
	}
}

// xdpDropper attaches to interface dev an XDP program that drops every every-th frame longer
// than 1,000 octets (the count in an array map), says DROPPING, and holds it until killed.
func xdpDropper(dev string, every int) error {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return err
	}
	defer m.Close()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL", Instructions: asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // data
		asm.LoadMem(asm.R3, asm.R1, 4, asm.Word), // data_end
		asm.Sub.Reg(asm.R3, asm.R2),
		asm.JLT.Imm(asm.R3, 1000, "pass"),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
		asm.Mod.Imm(asm.R1, int32(every)),
		asm.JNE.Imm(asm.R1, 0, "pass"),
		asm.Mov.Imm(asm.R0, 1), // XDP_DROP
		asm.Return(),
		asm.Mov.Imm(asm.R0, 2).WithSymbol("pass"), // XDP_PASS
		asm.Return(),
	}})
	if err != nil {
		return err
	}
	defer p.Close()
	ifc, err := net.InterfaceByName(dev)
	if err != nil {
		return err
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: p, Interface: ifc.Index, Flags: link.XDPGenericMode})
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Println("DROPPING")
	select {}
}

// xdpUsable skips the test where the kernel refuses the XDP program or AF_XDP sockets in a
// namespace of the chain (an old kernel, no BPF, a seccomp profile).
func (c *netnsChain) xdpUsable() {
	out, err := c.helper(c.a, "xdpcheck").CombinedOutput()
	if err != nil {
		c.t.Skipf("the kernel refuses the XDP program or an AF_XDP socket here (needs Linux 5.9+, BPF): %v: %s", err, out)
	}
}

// xdpMultiBuffer reports whether a multi-buffer AF_XDP socket (XDP_USE_SG, Linux 6.6) binds on
// the chain's interface a0, and the error where it does not.
func (c *netnsChain) xdpMultiBuffer() (bool, string) {
	out, err := c.helper(c.a, "xdpcheck", "CREM_NETNS_SG=1").CombinedOutput()
	if err != nil {
		return false, fmt.Sprintf("%v: %s", err, out)
	}
	return true, ""
}

// xdpCheck is the helper that tries the program and a socket on the chain's interface a0
// (multi-buffer with CREM_NETNS_SG=1).
func xdpCheck() error {
	p, err := xdp.LoadProgram(4791)
	if err != nil {
		return err
	}
	defer p.Close()
	ifc, err := net.InterfaceByName("a0")
	if err != nil {
		return err
	}
	if err := p.Attach(ifc.Index, xdp.AttachAuto); err != nil {
		return err
	}
	s, err := xdp.NewSocket(xdp.SocketConfig{Ifindex: ifc.Index, Queue: 0, Frames: 64, MultiBuffer: os.Getenv("CREM_NETNS_SG") == "1"})
	if err != nil {
		return err
	}
	return s.Close()
}

// TestGatewayXDPNetns: both gateways of the four-namespace chain run TUN-style mode on the
// xdp data path (tun.datapath = "xdp": the XDP program and an AF_XDP socket, copy mode on
// veth, on each gateway's LAN and WAN interfaces; no TUN device, no policy routing). The
// WAN drops every 100th long frame toward gateway B (an XDP program on a bridge between the
// gateways). RoCEv2 WRITE packets of 2 KiB cross links of MTU 3000: every one arrives once,
// its ICRC valid (every octet checked), gateway B restores some (its CRF's counter and the
// RoCEv2 frames its sockets took), gateway A's REPAIRs leave, and both gateways' counters show
// the frames their AF_XDP sockets received and their TX rings sent. Needs root, ip(8), tc and
// a kernel that takes the XDP program; skips elsewhere. Under the race detector the sender
// sends 4,000 packets a second instead of 10,000.
func TestGatewayXDPNetns(t *testing.T) {
	testGatewayXDPChain(t, xdpMTU, xdpPayload, false)
}

// TestGatewayXDPJumboNetns is TestGatewayXDPNetns with RoCEv2 packets of an RDMA MTU of 4096
// on links of MTU 9000: each packet is longer than an AF_XDP frame, so both gateways bind their
// sockets multi-buffer (XDP_USE_SG) and join each received packet from two frames (their
// crem_gateway_xdp_joined_total counters), and send each in two; every packet arrives once
// with a valid ICRC and B restores some. Skips where the kernel has no multi-buffer AF_XDP
// (before Linux 6.6).
func TestGatewayXDPJumboNetns(t *testing.T) {
	testGatewayXDPChain(t, xdpJumboMTU, xdpJumboPayload, true)
}

func testGatewayXDPChain(t *testing.T, mtu, payload string, jumbo bool) {
	netnsRoot(t)
	if _, err := exec.LookPath("tc"); err != nil {
		t.Skip("needs tc (iproute2)")
	}
	pps := "CREM_NETNS_PPS=10000"
	if testenv.Race {
		// The gateways are the race-instrumented test binary (a data race fails their exit):
		// slower, so the sender slows too.
		pps = "CREM_NETNS_PPS=4000"
	}
	netnslock.Take(t)
	c := newNetnsChain(t)
	c.xdpChain(100, mtu)
	c.xdpUsable()
	if ok, why := c.xdpMultiBuffer(); jumbo && !ok {
		t.Skipf("the kernel binds no multi-buffer AF_XDP socket here (XDP_USE_SG, Linux 6.6): %s", why)
	}
	gws := c.startGateways("", "--tun-datapath", "xdp")
	for _, g := range gws {
		if !strings.Contains(g.logs.String(), "xdp data path") {
			t.Fatalf("gateway in %s: no xdp data path in its log: %s", g.ns, g.logs.String())
		}
	}
	c.blast("warm", time.Second, nil, "CREM_NETNS_PPS=5000", "CREM_NETNS_PAYLOAD="+payload)
	before, beforeB := c.metrics(gws[0]), c.metrics(gws[1])
	m := c.blast("xdp", 2*time.Second, gws[:], "CREM_NETNS_VERIFY=1", pps, "CREM_NETNS_PAYLOAD="+payload)
	after, afterB := c.metrics(gws[0]), c.metrics(gws[1])
	for _, g := range gws {
		g.stop(t)
	}
	t.Log(m.line())
	d := func(a, b map[string]float64, k string) float64 { return a[k] - b[k] }
	for _, k := range []string{"crem_gateway_xdp_rx_frames_lan_total", "crem_gateway_xdp_rx_frames_wan_total",
		"crem_gateway_xdp_tx_frames_lan_total", "crem_gateway_xdp_tx_frames_wan_total", "crem_gateway_xdp_to_kernel_total",
		"crem_gateway_xdp_tx_ring_full_lan_total", "crem_gateway_xdp_tx_ring_full_wan_total", "crem_gateway_xdp_kernel_rx_dropped_wan_total",
		"crem_gateway_xdp_joined_total", "crem_csf_repair_sent_total", "crem_crf_flows_restored_total", "crem_gateway_shard_queue_full_total"} {
		t.Logf("%s A %.0f B %.0f", k, d(after, before, k), d(afterB, beforeB, k))
	}
	t.Logf("drops: %s", c.drops())
	if m.res.Sent == 0 || m.res.Bad != 0 || m.res.Dups*1000 > m.res.Sent {
		t.Errorf("sent %d, %d with a bad ICRC, %d twice", m.res.Sent, m.res.Bad, m.res.Dups)
	}
	// One frame in 100 lost, k = 32 and m = 4: every block is restored whole.
	if m.res.Packets != m.res.Sent {
		t.Errorf("%d of %d packets delivered", m.res.Packets, m.res.Sent)
	}
	if r := d(afterB, beforeB, "crem_crf_flows_restored_total"); r == 0 {
		t.Errorf("gateway B restored nothing\nA: %s\nB: %s", gws[0].logs.String(), gws[1].logs.String())
	}
	if d(after, before, "crem_csf_repair_sent_total") == 0 {
		t.Error("gateway A sent no REPAIR")
	}
	// Gateway A took the sender's frames on its LAN socket and sent them on its WAN ring;
	// B took them (and the REPAIRs) on its WAN socket and sent them on its LAN ring.
	for _, x := range []struct {
		name string
		m    float64
	}{{"A rx lan", d(after, before, "crem_gateway_xdp_rx_frames_lan_total")}, {"A tx wan", d(after, before, "crem_gateway_xdp_tx_frames_wan_total")},
		{"B rx wan", d(afterB, beforeB, "crem_gateway_xdp_rx_frames_wan_total")}, {"B tx lan", d(afterB, beforeB, "crem_gateway_xdp_tx_frames_lan_total")}} {
		if x.m < 0.9*float64(m.res.Sent) {
			t.Errorf("%s: %.0f frames for %d packets sent", x.name, x.m, m.res.Sent)
		}
	}
	// Each packet longer than a frame was joined on receipt at both gateways; none without.
	joinedA, joinedB := d(after, before, "crem_gateway_xdp_joined_total"), d(afterB, beforeB, "crem_gateway_xdp_joined_total")
	if jumbo && (joinedA < 0.9*float64(m.res.Sent) || joinedB < 0.9*float64(m.res.Sent)) || !jumbo && joinedA+joinedB != 0 {
		t.Errorf("packets joined from several frames: A %.0f, B %.0f, for %d sent of %s octets of payload", joinedA, joinedB, m.res.Sent, payload)
	}
}

// TestGatewayXDPFallbackNetns: where the xdp data path cannot start (here: its LAN interface
// does not exist), tun.datapath = "auto" logs one line naming the cause and runs on the TUN
// device, and "xdp" refuses to start, naming the cause and the way back to the TUN device.
// Needs root, ip(8) and /dev/net/tun.
func TestGatewayXDPFallbackNetns(t *testing.T) {
	netnsRoot(t)
	ns := fmt.Sprintf("crem-fx-%d", os.Getpid()%100000)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("cannot create network namespaces here: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	exec.Command("ip", "-n", ns, "link", "set", "lo", "up").Run()
	conf := func(datapath string) string {
		f := filepath.Join(t.TempDir(), datapath+".toml")
		os.WriteFile(f, []byte(`crem_address = "127.0.0.1:61300"
peer = "127.0.0.1:61301"
mode = "tun"
[tun]
name = "cremX"
local_prefixes = ["198.18.1.0/24"]
datapath = "`+datapath+`"
lan = "nosuch0"
wan = "lo"
`), 0o644)
		return f
	}
	logs := &syncBuf{}
	cmd := startInNetns(t, ns, logs, "gateway", "--config", conf("auto"))
	// The device's reader says "tun device" as it starts, which may come after "gateway running".
	if !waitLog(logs, "gateway running") || !waitLog(logs, "tun device") {
		t.Fatalf("auto: not running on the TUN device: %s", logs.String())
	}
	out := logs.String()
	if !strings.Contains(out, "xdp data path unavailable") || !strings.Contains(out, "nosuch0") || !strings.Contains(out, "tun device") {
		t.Errorf("auto: want the fallback named (cause nosuch0) and the TUN device: %s", out)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()

	refuse := exec.Command("ip", "netns", "exec", ns, os.Args[0], "gateway", "--config", conf("xdp"))
	refuse.Env = append(os.Environ(), "CREM_TEST_AS_CREM=1")
	b, err := refuse.CombinedOutput()
	if err == nil {
		t.Fatalf("xdp: started without its LAN interface: %s", b)
	}
	if s := string(b); !strings.Contains(s, "nosuch0") || !strings.Contains(s, "tun.lan") {
		t.Errorf("xdp: the refusal does not name the cause: %s", s)
	}
}
