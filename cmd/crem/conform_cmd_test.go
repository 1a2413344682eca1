package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/gateway"
)

func udpOn(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// freePort returns an address on loopback no socket holds now (for a flag crem binds itself).
func freePort(t *testing.T) string {
	c := udpOn(t)
	defer c.Close()
	return c.LocalAddr().String()
}

// TestConformCLI runs `crem conform crf` end to end against a gateway in process, as
// docs/conform.md configures it, with --json and --junit: exit 0, the JSON report with every
// selected scenario passed, the JUnit file with its test cases.
func TestConformCLI(t *testing.T) {
	listen, data := freePort(t), freePort(t)
	gCREM, gRelay, gWAN := udpOn(t), udpOn(t), udpOn(t)
	g, err := gateway.New(gateway.Config{Peer: netip.MustParseAddrPort(listen), Shards: 1, Protect: []gateway.ProtectRule{{SrcPort: 40000}},
		Relay:  gateway.RelayConfig{Target: netip.MustParseAddrPort(data), PeerData: netip.MustParseAddrPort("127.0.0.1:9"), LocalEndpoint: netip.MustParseAddr("127.0.0.1"), RemoteEndpoint: netip.MustParseAddr("127.0.0.2")},
		Policy: gateway.PolicyConfig{InitialRTT: gateway.Dur(20 * time.Millisecond), HelloHoldOff: gateway.Dur(time.Second), BurstGap: gateway.Dur(2 * time.Millisecond)}},
		gateway.Options{Sockets: gateway.Sockets{CREM: gCREM, Relay: gRelay, WAN: gWAN}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	defer func() { cancel(); <-done }()

	junit := filepath.Join(t.TempDir(), "conform.xml")
	var out, errb bytes.Buffer
	code := run([]string{"conform", "crf", "--target", g.CREMAddr().String(), "--listen", listen, "--inject", g.WANAddr().String(),
		"--data-listen", data, "--flow-src", "127.0.0.2", "--flow-dst", "127.0.0.1", "--flow-src-port", "40000",
		"--run", "appendix|hello-ack|repair-decode", "--json", "--junit", junit}, stdio{out: &out, err: &errb})
	if code != 0 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out.String(), errb.String())
	}
	var rep struct {
		Half    string
		Results []struct{ Name, Status string }
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	if rep.Half != "crf" || len(rep.Results) != 4 {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.Results {
		if r.Status != "PASS" {
			t.Errorf("%s: %s", r.Name, r.Status)
		}
	}
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var js struct {
		Suites []struct {
			Tests int `xml:"tests,attr"`
			Cases []struct {
				Name string `xml:"name,attr"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &js); err != nil || len(js.Suites) != 1 || js.Suites[0].Tests != 4 || js.Suites[0].Cases[0].Name != "crf/appendix-vectors" {
		t.Fatalf("junit %v %+v\n%s", err, js, b)
	}
}

// Bad usage is exit 2 with one line; --list lists both halves; --help explains.
func TestConformCLIUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"conform", "csf"}, 2, "--target"},
		{[]string{"conform"}, 2, "csf or crf"},
		{[]string{"conform", "xyz"}, 2, "unknown half"},
		{[]string{"conform", "csf", "--target", "127.0.0.1"}, 2, "address:port"},
		{[]string{"conform", "--list", "--run", "nothing-matches-this"}, 2, "no scenario"},
		{[]string{"conform", "--list"}, 0, "crf/appendix-exchange"},
		{[]string{"conform", "--list", "csf"}, 0, "csf/hello-backoff"},
		{[]string{"conform", "--help"}, 0, "Exit status"},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, stdio{out: &out, err: &errb})
		if code != c.code || !strings.Contains(out.String()+errb.String(), c.want) {
			t.Errorf("%q: exit %d, want %d with %q\n%s%s", c.args, code, c.code, c.want, out.String(), errb.String())
		}
	}
}

// Against a target that does not answer, crem conform says so once and stops after the first
// scenario that waited for it, instead of failing every scenario on its timeout.
func TestConformDeadTargetSaysSoOnce(t *testing.T) {
	dead := freePort(t) // nothing listens there
	for _, half := range []string{"crf", "csf"} {
		t.Run(half, func(t *testing.T) {
			start := time.Now()
			var out, errb bytes.Buffer
			code := run([]string{"conform", half, "--target", dead, "--listen", freePort(t), "--inject", freePort(t),
				"--data-listen", freePort(t), "--flow-src", "127.0.0.2", "--flow-dst", "127.0.0.1", "--flow-src-port", "40000",
				"--timeout", "300ms"}, stdio{out: &out, err: &errb})
			want := "crem conform: target " + dead + " does not answer: is crem gateway running there?"
			if code != 1 || out.Len() != 0 || !strings.HasPrefix(errb.String(), want) || strings.Count(errb.String(), "\n") != 1 {
				t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out.String(), errb.String())
			}
			if el := time.Since(start); el > 3*time.Second {
				t.Fatalf("took %v: more than the first scenario's wait", el)
			}
		})
	}
}
