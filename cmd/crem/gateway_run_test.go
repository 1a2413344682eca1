package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// logValue waits for a log line holding key=VALUE after prefix and returns VALUE (at most
// patience).
func logValue(t *testing.T, logs *syncBuf, prefix, key string) string {
	t.Helper()
	re := regexp.MustCompile(regexp.QuoteMeta(prefix) + `.*\b` + regexp.QuoteMeta(key) + `=(\S+)`)
	for deadline := time.Now().Add(patience); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if m := re.FindStringSubmatch(logs.String()); m != nil {
			return m[1]
		}
	}
	t.Fatalf("no %s ... %s= in the log within %v: %s", prefix, key, patience, logs.String())
	return ""
}

// patience bounds the waits for what must happen: far beyond a busy machine's delays.
const patience = 30 * time.Second

// TestGatewayRun runs `crem gateway` as a process in relay mode with a peer that never
// answers: it relays, serves /metrics and /healthz, and on SIGTERM stops with status 0 after
// logging its counters. No port is picked and let go for the gateway to bind: the metrics
// listener binds port 0 and the log says which it got; the test holds the peer's port P on
// 127.0.0.1 for the whole test, which keeps every wildcard socket off P, and the gateway binds
// P on addresses of 127.0.0.0/8 that nothing else uses (its CREM port, which must not be 0, and
// its relay socket).
func TestGatewayRun(t *testing.T) {
	sink, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	peer, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	port := peer.LocalAddr().(*net.UDPAddr).Port
	listen := fmt.Sprintf("127.46.71.2:%d", port)
	f := filepath.Join(t.TempDir(), "gw.toml")
	os.WriteFile(f, []byte(fmt.Sprintf(`crem_address = "127.46.71.1:%d"
peer = "%s"
metrics_address = "127.0.0.1:0"
[relay]
listen = "%s"
target = "127.0.0.1:9"
wan_listen = "127.0.0.1:0"
peer_data = "%s"
`, port, peer.LocalAddr(), listen, sink.LocalAddr())), 0o644)
	var logs syncBuf
	cmd := exec.Command(os.Args[0], "gateway", "--config", f, "--log-level", "debug")
	cmd.Env = append(os.Environ(), "CREM_TEST_AS_CREM=1")
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	url := "http://" + logValue(t, &logs, "msg=metrics", "address")
	deadline := time.Now().Add(patience)
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
	ep.WriteToUDP(pkt, mustAddrPort(listen))
	sink.SetReadDeadline(time.Now().Add(patience))
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
	if !strings.Contains(b.String(), `crem_gateway_packets_total{direction="rx",socket="local"} 1`) {
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
	case <-time.After(patience):
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
