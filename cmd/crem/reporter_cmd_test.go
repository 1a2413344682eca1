//go:build linux

package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crem-project/crem/internal/harness/kdroplab"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

func writeReporterConfig(t *testing.T, text string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "reporter.toml")
	if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestReporterCheckConfigRefusesBadFiles: --check-config exits 0 for a good file and 2, with
// the reason, for a file without the CREM port, with an unknown field, a cause that is not
// C1's, or a drop reason the kernel does not have.
func TestReporterCheckConfigRefusesBadFiles(t *testing.T) {
	good := "crem_port = 50000\ndevices = [\"lo\"]\n"
	for _, tc := range []struct {
		name, text, want string
		code             int
	}{
		{"good", good, "is valid", 0},
		{"no port", "devices = [\"lo\"]\n", "crem_port is required", 2},
		{"no device", "crem_port = 50000\n", "devices", 2},
		{"unknown field", good + "ring = 4096\n", `unknown field "ring"`, 2},
		{"cause", good + "[reasons]\nQDISC_DROP = \"queue\"\n", "want congestion, corruption or other", 2},
		{"ring size", good + "ring_size = 5000\n", "ring_size 5000", 2},
	} {
		var out, errb bytes.Buffer
		code := run([]string{"reporter", "--check-config", writeReporterConfig(t, tc.text)}, stdio{in: strings.NewReader(""), out: &out, err: &errb})
		if code != tc.code || !strings.Contains(out.String()+errb.String(), tc.want) {
			t.Errorf("%s: exit %d, want %d with %q: %s%s", tc.name, code, tc.code, tc.want, out.String(), errb.String())
		}
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err == nil {
		var out, errb bytes.Buffer
		code := run([]string{"reporter", "--check-config", writeReporterConfig(t, good+"[reasons]\nNO_SUCH_REASON = \"other\"\n")},
			stdio{in: strings.NewReader(""), out: &out, err: &errb})
		if code != 2 || !strings.Contains(errb.String(), "no drop reason NO_SUCH_REASON") {
			t.Errorf("a reason the kernel lacks: exit %d: %s", code, errb.String())
		}
	}
}

// TestReporterWithoutCapabilitiesExitsTwo: without CAP_BPF and CAP_PERFMON (root with an
// empty capability bounding set) crem reporter exits 2 and says what it needs.
func TestReporterWithoutCapabilitiesExitsTwo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to drop the capabilities with setpriv")
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		t.Skip("needs the kernel's BTF (without it the exit is 2 for that)")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	cfg := writeReporterConfig(t, "crem_port = 50000\ndevices = [\"lo\"]\n")
	cmd := exec.Command(setpriv, "--bounding-set=-all", "--inh-caps=-all", os.Args[0], "reporter", "--config", cfg)
	cmd.Env = append(os.Environ(), "CREM_TEST_AS_CREM=1")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "CAP_BPF and CAP_PERFMON") {
		t.Fatalf("exit %v, want 2 naming the capabilities: %s", err, out)
	}
}

// TestReporterReportsQueueDropsInNetns: crem reporter, watching the router's bottleneck
// device in a namespace of its own, sends the flow's source a PATH_REPORT for every PSN the
// router's tbf dropped (once each, Cause congestion), counts them in /metrics by reason and
// device, and on SIGTERM detaches and exits 0.
func TestReporterReportsQueueDropsInNetns(t *testing.T) {
	kdroplab.Need(t)
	l := kdroplab.New(t, "tbf rate 50mbit burst 16kb limit 24kb")
	metrics := freePort(t)
	cfg := writeReporterConfig(t, fmt.Sprintf(`node_id = 9
crem_port = 50000
netns = "/run/netns/%s"
devices = ["r1"]
udp_ports = [4791]
flow_interval = "100us"
port_rate = 100000
port_burst = 64
metrics_address = %q
`, l.Router, metrics))
	p := startCrem(t, "reporter", "--config", cfg)
	p.waitFor(t, "the reporting line", func() bool { return strings.Contains(p.stderr(), "msg=reporting") })

	// The CSF's CREM port at the flow's source, where reports go by default.
	var csf *net.UDPConn
	kdroplab.InNetns(t, l.Sender, func() {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 71, 1, 1), Port: 50000})
		if err != nil {
			t.Error(err)
		}
		csf = c
	})
	if csf == nil {
		t.FailNow()
	}
	defer csf.Close()
	reported := map[psn.PSN]int{}
	lost := 0
	got := make(chan struct{})
	go func() {
		defer close(got)
		buf := make([]byte, 2048)
		for {
			csf.SetReadDeadline(time.Now().Add(time.Second))
			n, from, err := csf.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			rep, err := wire.ParsePathReport(buf[:n])
			if err != nil || from.Addr().String() != "10.71.1.2" || rep.FlowLabel != 0x33 || rep.Method != wire.MethodNodeDrops {
				t.Errorf("report from %v: %+v %v", from, rep, err)
				continue
			}
			for _, h := range rep.Hops {
				if h.NodeID != 9 || h.Cause != wire.CauseCongestion {
					t.Errorf("hop entry %+v", h)
				}
				lost += int(h.LostCount)
				for _, q := range h.DroppedPSNs {
					reported[q]++
				}
			}
		}
	}()
	const sent = 1200
	kdroplab.InNetns(t, l.Sender, func() {
		// Unconnected: the receiver has no socket, and its port unreachable must not stop the
		// sender.
		c, err := net.ListenUDP("udp4", nil)
		to := netip.MustParseAddrPort("10.71.2.1:4791")
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		for i := 0; i < sent; i++ {
			if _, err := c.WriteToUDPAddrPort(kdroplab.Datagram(1100, 0x33, psn.PSN(i)), to); err != nil {
				t.Errorf("sending: %v", err)
				return
			}
			if i%16 == 15 {
				time.Sleep(50 * time.Microsecond)
			}
		}
	})
	<-got
	dropped := l.Dropped(t)
	twice := 0
	for _, n := range reported {
		if n > 1 {
			twice++
		}
	}
	t.Logf("sent %d, the queue dropped %d, reported %d PSNs (Lost Count %d)", sent, dropped, len(reported), lost)
	if dropped == 0 || len(reported) != dropped || lost != dropped || twice != 0 {
		t.Errorf("queue dropped %d; reported %d PSNs, %d twice, Lost Count %d", dropped, len(reported), twice, lost)
	}
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`crem_reporter_drops_total\{device="r1",reason="QDISC_DROP"\} (\d+)`).FindStringSubmatch(string(body))
	if m == nil || m[1] != strconv.Itoa(dropped) {
		t.Errorf("metrics: want crem_reporter_drops_total{device=\"r1\",reason=\"QDISC_DROP\"} %d:\n%s", dropped, body)
	}
	for _, name := range []string{"crem_reporter_psns_named_total", "crem_reporter_reports_sent_total", "crem_reporter_ring_events_lost_total 0",
		`crem_reporter_program_info{attach="tp_btf`} {
		if !strings.Contains(string(body), name) {
			t.Errorf("metrics: no %s", name)
		}
	}
	if code := p.signal(t, syscall.SIGTERM); code != 0 || !strings.Contains(p.stderr(), "msg=stopped") {
		t.Fatalf("SIGTERM: exit %d: %s", code, p.stderr())
	}
}
