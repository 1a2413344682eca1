package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestGatewaySignalReload runs `crem gateway` as a process and sends it SIGHUP: a new protect
// rule is taken (one line naming what changed); a file that does not validate, and one that
// moves a socket, are each refused with one line naming the key, and the gateway runs on and
// relays; SIGTERM then stops it with status 0 and its summary line. The addresses are chosen
// as TestGatewayRun chooses them.
func TestGatewaySignalReload(t *testing.T) {
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
	listen := fmt.Sprintf("127.46.72.2:%d", port)
	f := filepath.Join(t.TempDir(), "gw.toml")
	base := fmt.Sprintf(`crem_address = "127.46.72.1:%d"
peer = "%s"
[relay]
listen = "%s"
target = "127.0.0.1:9"
wan_listen = "127.0.0.1:0"
peer_data = "%s"
[[protect]]
src_port = 4791
qp = 66
`, port, peer.LocalAddr(), listen, sink.LocalAddr())
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(base)
	var logs syncBuf
	cmd := exec.Command(os.Args[0], "gateway", "--config", f)
	cmd.Env = append(os.Environ(), "CREM_TEST_AS_CREM=1")
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// waitLines waits for the n-th log line holding s and returns it.
	waitLines := func(s string, n int) string {
		t.Helper()
		for deadline := time.Now().Add(patience); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			var got []string
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, s) {
					got = append(got, l)
				}
			}
			if len(got) >= n {
				return got[n-1]
			}
			select {
			case err := <-exited:
				t.Fatalf("the gateway exited (%v) before %q:\n%s", err, s, logs.String())
			default:
			}
		}
		t.Fatalf("no %q (%d) in the log: %s", s, n, logs.String())
		return ""
	}
	relays := func() {
		t.Helper()
		ep, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		defer ep.Close()
		pkt := append([]byte{0x07, 0, 0xff, 0xff, 0, 0, 0, 0x42, 0, 0, 0, 1}, make([]byte, 64)...)
		ep.WriteToUDP(pkt, mustAddrPort(listen))
		sink.SetReadDeadline(time.Now().Add(patience))
		buf := make([]byte, 2048)
		if n, err := sink.Read(buf); err != nil || n != len(pkt) {
			t.Fatalf("not relayed: %v", err)
		}
	}
	waitLines("gateway running", 1)
	relays()

	write(base + "[[protect]]\nsrc_port = 4791\nqp = 67\n")
	cmd.Process.Signal(syscall.SIGHUP)
	if l := waitLines("configuration reloaded", 1); !strings.Contains(l, "protect[1].qp") {
		t.Errorf("the reload line does not name the new rule: %s", l)
	}

	write(base + "[policy]\nepsilon = 2\n")
	cmd.Process.Signal(syscall.SIGHUP)
	if l := waitLines("configuration not reloaded", 1); !strings.Contains(l, "level=ERROR") ||
		!strings.Contains(l, f+`:12: policy.epsilon = 2: want a value in (0, 1)`) {
		t.Errorf("the refusal does not name the file, line, key and value: %s", l)
	}
	relays()

	write(strings.Replace(base, "wan_listen = \"127.0.0.1:0\"", "wan_listen = \"127.0.0.1:1\"", 1))
	cmd.Process.Signal(syscall.SIGHUP)
	if l := waitLines("configuration not reloaded", 2); !strings.Contains(l, `relay.wan_listen = \"127.0.0.1:1\": cannot change while the gateway runs`) {
		t.Errorf("the refusal does not name relay.wan_listen: %s", l)
	}
	relays()
	if n := strings.Count(logs.String(), "configuration not reloaded"); n != 2 {
		t.Errorf("%d refusal lines for two refused reloads", n)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(patience):
		t.Fatal("no stop on SIGTERM")
	}
	for _, l := range []string{"gateway stopping", "signal=SIGTERM", "gateway stopped"} {
		if !strings.Contains(logs.String(), l) {
			t.Errorf("the log lacks %q: %s", l, logs.String())
		}
	}
}
