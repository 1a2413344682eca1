package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

func runCmd(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, stdio{in: strings.NewReader(""), out: &out, err: &errb})
	return code, out.String(), errb.String()
}

func TestGatewayBadConfig(t *testing.T) {
	dir := t.TempDir()
	busy, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	relay := "peer = \"127.0.0.1:50001\"\n[relay]\nlisten = \"127.0.0.1:0\"\ntarget = \"127.0.0.1:4791\"\nwan_listen = \"127.0.0.1:0\"\npeer_data = \"127.0.0.1:7000\"\n"
	cases := []struct{ name, file, want string }{
		{"missing CREM port", relay, "crem_address is required"},
		{"unknown field", "crem_adress = \"127.0.0.1:50000\"\n" + relay, "unknown field \"crem_adress\""},
		{"port in use", "crem_address = \"" + busy.LocalAddr().String() + "\"\n" + relay, "address already in use"},
		{"non-loopback", "crem_address = \"192.0.2.1:50000\"\n" + relay, "domain_protection"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".toml")
			os.WriteFile(f, []byte(c.file), 0o644)
			code, out, errs := runCmd("gateway", "--config", f)
			if code != 2 || out != "" || strings.Count(strings.TrimSpace(errs), "\n") != 0 || !strings.Contains(errs, c.want) {
				t.Fatalf("code %d, stdout %q, stderr %q; want 2 and one line with %q", code, out, errs, c.want)
			}
		})
	}
	// A flag overrides the file: the missing port given on the command line gets past it.
	f := filepath.Join(dir, "noport.toml")
	os.WriteFile(f, []byte(relay), 0o644)
	code, _, errs := runCmd("gateway", "--config", f, "--crem-address", "192.0.2.1:50000")
	if code != 2 || !strings.Contains(errs, "domain_protection") {
		t.Fatalf("flag override: code %d, %q", code, errs)
	}
}

// TestGatewayCheckConfig: --check-config prints the resolved configuration (the defaults
// visible) and exits 0 for a valid file, in each of its spellings, with the flags applied;
// --json prints it as JSON; an invalid file exits 2 with one line naming the field. Nothing
// is bound: a CREM address in use checks out.
func TestGatewayCheckConfig(t *testing.T) {
	dir := t.TempDir()
	busy, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	valid := filepath.Join(dir, "valid.toml")
	os.WriteFile(valid, []byte(`crem_address = "`+busy.LocalAddr().String()+`"
peer = "127.0.0.1:50001"
[relay]
listen = "127.0.0.1:7000"
target = "127.0.0.1:4791"
wan_listen = "127.0.0.1:7001"
peer_data = "127.0.0.2:7101"
[[protect]]
src_port = 4791
[policy]
k = 16
`), 0o644)
	for _, args := range [][]string{{"--check-config", valid}, {"--config", valid, "--check-config"}, {"--check-config=" + valid}} {
		code, out, errs := runCmd(append([]string{"gateway", "--log-level", "debug"}, args...)...)
		if code != 0 || errs != "" {
			t.Fatalf("%v: code %d, stderr %q", args, code, errs)
		}
		for _, l := range []string{"is valid", `crem_address      = "` + busy.LocalAddr().String() + `"`, "k                 = 16",
			"m                 = 4", "max_open_blocks   = 64", `initial_rtt       = "10ms"`, `log_level         = "debug"`,
			`local_endpoint    = "127.0.0.1"`, `remote_endpoint   = "127.0.0.2"`, "src_port          = 4791", "ordered           = true"} {
			if !strings.Contains(out, l) {
				t.Errorf("%v: output lacks %q:\n%s", args, l, out)
			}
		}
	}
	code, out, _ := runCmd("gateway", "--check-config", valid, "--json", "--mode", "relay")
	var r struct {
		Mode   string
		Policy struct {
			K, M       int
			Epsilon    float64
			InitialRTT string `json:"initial_rtt"`
		}
		Relay struct {
			LocalEndpoint string `json:"local_endpoint"`
		}
	}
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || r.Mode != "relay" || r.Policy.K != 16 || r.Policy.M != 4 ||
		r.Policy.Epsilon != 1e-4 || r.Policy.InitialRTT != "10ms" || r.Relay.LocalEndpoint != "127.0.0.1" {
		t.Fatalf("--json: code %d, %v, %+v\n%s", code, err, r, out)
	}
	// Without a protect rule the check warns (relay mode refuses HELLOs without src_port).
	noRule := filepath.Join(dir, "norule.toml")
	b, _ := os.ReadFile(valid)
	os.WriteFile(noRule, []byte(strings.Replace(string(b), "[[protect]]\nsrc_port = 4791\n", "", 1)), 0o644)
	if code, out, errs := runCmd("gateway", "--check-config", noRule); code != 0 || !strings.Contains(errs, "warning: no protect rule gives a src_port") ||
		!strings.Contains(out, "# warning:") {
		t.Fatalf("no rule: code %d, stderr %q", code, errs)
	}
	for _, c := range []struct{ name, edit, want string }{
		{"bad m", "m = 300", "policy.m = 300: k 16 and m 300"},
		{"zero RTT", "initial_rtt = \"0s\"", "policy.initial_rtt"},
		{"unknown field", "kk = 3", "unknown field \"policy.kk\""},
		{"bad duration", "idle_timeout = \"soon\"", "policy.idle_timeout"},
	} {
		f := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".toml")
		os.WriteFile(f, append(append([]byte{}, b...), c.edit+"\n"...), 0o644)
		code, out, errs := runCmd("gateway", "--check-config", f)
		if code != 2 || out != "" || strings.Count(strings.TrimSpace(errs), "\n") != 0 || !strings.Contains(errs, c.want) {
			t.Errorf("%s: code %d, stdout %q, stderr %q; want 2 and one line with %q", c.name, code, out, errs, c.want)
		}
	}
	// A flag is checked as a start would take it.
	if code, _, errs := runCmd("gateway", "--check-config", valid, "--crem-address", "192.0.2.1:50000"); code != 2 || !strings.Contains(errs, "domain_protection") {
		t.Fatalf("flag override: code %d, %q", code, errs)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--check-config", valid, "extra"}, "unexpected argument"},
		{[]string{"--config", valid, "--check-config", filepath.Join(dir, "other.toml")}, "name one file"},
		{[]string{"--config", valid, "--json"}, "--json needs --check-config"},
		{[]string{"--check-config", filepath.Join(dir, "absent.toml")}, "absent.toml"},
	} {
		if code, _, errs := runCmd(append([]string{"gateway"}, c.args...)...); code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: code %d, %q; want 2 and %q", c.args, code, errs, c.want)
		}
	}
}

// TestGatewayCheckConfigBroken: `crem gateway --check-config` on each broken configuration of
// testdata/badconfig exits 2 with one line on standard error that names the file, the line of
// the bad key (where there is one), the key, its value as written and what is wanted; nothing
// on standard output.
func TestGatewayCheckConfigBroken(t *testing.T) {
	cases := []struct {
		file string
		line int // 0: a key that is missing, named with the file alone
		want string
	}{
		{"missing-crem-address", 0, `crem_address is required: there is no default CREM port (C14)`},
		{"crem-port-zero", 2, `crem_address = "127.0.0.1:0": the port must not be 0`},
		{"unknown-field", 16, `unknown field "policy.colour"`},
		{"misspelt-key", 2, `unknown field "crem_adress"`},
		{"k-as-string", 15, `policy.k = "32": want an integer`},
		{"epsilon-two", 16, `policy.epsilon = 2: want a value in (0, 1)`},
		{"k-plus-m", 16, `policy.m = 10: k 250 and m 10: want 0 <= m and k + m <= 255`},
		{"negative-m", 16, `policy.m = -1: k 32 and m -1: want 0 <= m`},
		{"max-m-below-m", 17, `policy.max_m = 4: want m (8) to 255`},
		{"max-open-blocks-zero", 16, `policy.max_open_blocks = 0: want 1 to 65535`},
		{"wan-listen-equals-listen", 8, `relay.wan_listen = "127.0.0.1:7000": the UDP socket of relay.listen (127.0.0.1:7000) takes this port too`},
		{"wildcard-overlap", 6, `relay.listen = "0.0.0.0:50000": the UDP socket of crem_address (127.0.0.1:50000) takes this port too`},
		{"listen-without-port", 6, `relay.listen = "127.0.0.1": want an address and port in quotes`},
		{"missing-target", 0, `relay.target is required: in relay mode`},
		{"bad-mode", 4, `mode = "bridge": want relay or tun`},
		{"non-loopback-unprotected", 2, `crem_address = "192.0.2.1:50000": not a loopback address: domain_protection must say`},
		{"bad-protection", 4, `domain_protection = "hope": want ipsec or boundary`},
		{"src-port-range", 12, `protect[0].src_port = 70000: want a UDP port`},
		{"reverse-qp-without-qp", 13, `protect[0].reverse_qp = 5: reverse_qp 5 needs qp`},
		{"bad-prefix", 13, `protect[0].src = "10.1.0.0/33": want an address or prefix`},
		{"bad-duration", 16, `policy.idle_timeout = "30": want a duration`},
		{"zero-initial-rtt", 16, `policy.initial_rtt = "0s": want more than 0`},
		{"bad-rdma-mtu", 16, `policy.rdma_mtu = 1500: want 256, 512, 1024, 2048 or 4096`},
		{"bad-reporter", 4, `reporters = ["192.0.2.7", "reporter-a"]: want an address`},
		{"bad-log-level", 4, `log_level = "loud": want debug, info, warn or error`},
		{"duplicate-key", 16, `k is already defined`},
		{"unterminated-string", 3, `TOML: `},
	}
	files, _ := filepath.Glob("testdata/badconfig/*.toml")
	if len(files) != len(cases) {
		t.Errorf("testdata/badconfig holds %d files, the table %d rows", len(files), len(cases))
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			f := filepath.Join("testdata", "badconfig", c.file+".toml")
			code, out, errs := runCmd("gateway", "--check-config", f)
			where := "configuration: " + f + ": "
			if c.line > 0 {
				where = fmt.Sprintf("configuration: %s:%d: ", f, c.line)
			}
			if code != 2 || out != "" || strings.Count(strings.TrimSpace(errs), "\n") != 0 ||
				!strings.Contains(errs, where) || !strings.Contains(errs, c.want) {
				t.Errorf("code %d, stdout %q, stderr %q; want 2 and one line with %q and %q", code, out, errs, where, c.want)
			}
			if regexp.MustCompile(`gateway\.[A-Z]|netip|struct field|Parse[A-Z]`).MatchString(errs) {
				t.Errorf("the error shows Go's types: %q", errs)
			}
		})
	}
}

// TestGatewayCheckConfigExamples: every example configuration of deploy/examples checks out
// (exit 0, nothing on standard error); TUN mode's on Linux only.
func TestGatewayCheckConfigExamples(t *testing.T) {
	files, _ := filepath.Glob("../../deploy/examples/*.toml")
	if len(files) == 0 {
		t.Fatal("no example configuration")
	}
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), "tun-") && runtime.GOOS != "linux" || filepath.Base(f) == "reporter.toml" {
			continue // crem reporter's: deploy.TestReporterExampleCheckConfig checks it
		}
		if code, out, errs := runCmd("gateway", "--check-config", f); code != 0 || errs != "" || !strings.Contains(out, "is valid") {
			t.Errorf("%s: code %d, stderr %q", f, code, errs)
		}
	}
}

// TestGatewayNeedsConfig: `crem gateway` alone asks for the configuration file, exit 2.
func TestGatewayNeedsConfig(t *testing.T) {
	code, out, errs := runCmd("gateway")
	if code != 2 || out != "" || !strings.Contains(errs, "give --config FILE") {
		t.Fatalf("code %d, stdout %q, stderr %q; want 2 and a request for --config", code, out, errs)
	}
}
