package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func freePort(t *testing.T, network string) int {
	t.Helper()
	if network == "tcp" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// TestGatewayRun runs `crem gateway` as a process in relay mode with a peer that never
// answers: it relays, serves /metrics and /healthz, and on SIGTERM stops with status 0 after
// logging its counters.
func TestGatewayRun(t *testing.T) {
	sink, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	listen, metrics := freePort(t, "udp"), freePort(t, "tcp")
	f := filepath.Join(t.TempDir(), "gw.toml")
	os.WriteFile(f, []byte(fmt.Sprintf(`crem_address = "127.0.0.1:%d"
peer = "127.0.0.1:%d"
metrics_address = "127.0.0.1:%d"
[relay]
listen = "127.0.0.1:%d"
target = "127.0.0.1:9"
wan_listen = "127.0.0.1:0"
peer_data = "%s"
`, freePort(t, "udp"), freePort(t, "udp"), metrics, listen, sink.LocalAddr())), 0o644)
	var logs syncBuf
	cmd := exec.Command(os.Args[0], "gateway", "--config", f, "--log-level", "debug")
	cmd.Env = append(os.Environ(), "CREM_TEST_AS_CREM=1")
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	url := fmt.Sprintf("http://127.0.0.1:%d", metrics)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if r, err := http.Get(url + "/healthz"); err == nil && r.StatusCode == 200 {
			r.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no /healthz: %s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	ep, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	defer ep.Close()
	// An RDMA WRITE MIDDLE: BTH with opcode 0x07, destination QP 0x42, PSN 1, then payload.
	pkt := append([]byte{0x07, 0, 0xff, 0xff, 0, 0, 0, 0x42, 0, 0, 0, 1}, make([]byte, 64)...)
	ep.WriteToUDP(pkt, mustAddrPort(fmt.Sprintf("127.0.0.1:%d", listen)))
	sink.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 2048)
	if n, err := sink.Read(buf); err != nil || n != len(pkt) {
		t.Fatalf("not relayed: %v", err)
	}
	r, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	buf2 := make([]byte, 1<<16)
	for {
		n, err := r.Body.Read(buf2)
		b.Write(buf2[:n])
		if err != nil {
			break
		}
	}
	r.Body.Close()
	if !strings.Contains(b.String(), "crem_gateway_rx_packets_local_total 1") {
		t.Errorf("/metrics: %s", b.String())
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no stop on SIGTERM")
	}
	if !strings.Contains(logs.String(), "gateway stopped") {
		t.Fatalf("log: %s", logs.String())
	}
}

func mustAddrPort(s string) *net.UDPAddr {
	a, err := net.ResolveUDPAddr("udp", s)
	if err != nil {
		panic(err)
	}
	return a
}
