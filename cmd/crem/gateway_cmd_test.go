package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
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
