package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestGatewayTunFlags: --tun-offload and --tun-write override tun.offload and tun.write, the
// resolved configuration shows them, and other values are refused with a usage error.
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
	}{
		{nil, true, "raw"},
		{[]string{"--tun-offload", "off"}, false, "raw"},
		{[]string{"--tun-write", "device"}, true, "device"},
		{[]string{"--tun-offload", "on", "--tun-write", "raw"}, true, "raw"},
	} {
		code, out, errs := runCmd(append([]string{"gateway", "--config", f, "--check-config", "--json"}, c.args...)...)
		var r struct {
			Tun struct {
				Offload bool
				Write   string
			}
		}
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("%v: code %d: %s%s", c.args, code, out, errs)
		}
		if r.Tun.Offload != c.offload || r.Tun.Write != c.write {
			t.Errorf("%v: offload %v write %q, want %v %q", c.args, r.Tun.Offload, r.Tun.Write, c.offload, c.write)
		}
	}
	for _, args := range [][]string{{"--tun-offload", "maybe"}, {"--tun-write", "socket"}} {
		code, _, errs := runCmd(append([]string{"gateway", "--config", f, "--check-config"}, args...)...)
		if code != 2 || !strings.Contains(errs, args[1]) {
			t.Errorf("%v: code %d, %q; want a usage error naming the value", args, code, errs)
		}
	}
}
