package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestGatewayTunFlags: --tun-offload, --tun-write and --tun-verify override tun.offload,
// tun.write and tun.verify, the resolved configuration shows them, and other values are refused
// with a usage error.
func TestGatewayTunFlags(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("tun mode exists on Linux only")
	}
	f := filepath.Join(t.TempDir(), "tun.toml")
	os.WriteFile(f, []byte("crem_address = \"127.0.0.1:50000\"\npeer = \"127.0.0.1:50001\"\nmode = \"tun\"\n[tun]\nlocal_prefixes = [\"10.1.0.0/16\"]\n"), 0o644)
	for _, c := range []struct {
		args    []string
		offload bool
		write   string
		verify  string
	}{
		{nil, true, "raw", "template"},
		{[]string{"--tun-offload", "off"}, false, "raw", "template"},
		{[]string{"--tun-write", "device"}, true, "device", "template"},
		{[]string{"--tun-offload", "on", "--tun-write", "raw"}, true, "raw", "template"},
		{[]string{"--tun-verify", "logical"}, true, "raw", "logical"},
		{[]string{"--tun-verify", "template"}, true, "raw", "template"},
	} {
		code, out, errs := runCmd(append([]string{"gateway", "--config", f, "--check-config", "--json"}, c.args...)...)
		var r struct {
			Tun struct {
				Offload bool
				Write   string
				Verify  string
			}
		}
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("%v: code %d: %s%s", c.args, code, out, errs)
		}
		if r.Tun.Offload != c.offload || r.Tun.Write != c.write || r.Tun.Verify != c.verify {
			t.Errorf("%v: offload %v write %q verify %q, want %v %q %q", c.args, r.Tun.Offload, r.Tun.Write, r.Tun.Verify, c.offload, c.write, c.verify)
		}
	}
	for _, args := range [][]string{{"--tun-offload", "maybe"}, {"--tun-write", "socket"}, {"--tun-verify", "icrc"}} {
		code, _, errs := runCmd(append([]string{"gateway", "--config", f, "--check-config"}, args...)...)
		if code != 2 || !strings.Contains(errs, args[1]) {
			t.Errorf("%v: code %d, %q; want a usage error naming the value", args, code, errs)
		}
	}
}
