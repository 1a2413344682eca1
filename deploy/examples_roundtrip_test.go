package deploy

import (
	"bytes"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/crem-project/crem/gateway"
)

// TestExamplesRoundTrip: what `crem gateway --check-config` prints of each example
// configuration is itself a configuration file, and it reads back to the same values.
func TestExamplesRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("examples/*.toml")
	if len(files) == 0 {
		t.Fatal("no example configuration")
	}
	for _, f := range files {
		if filepath.Base(f) == "reporter.toml" {
			continue // crem reporter's, not a gateway's: TestReporterExampleCheckConfig reads it
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			if strings.HasPrefix(filepath.Base(f), "tun-") && runtime.GOOS != "linux" {
				t.Skipf("TUN mode resolves on Linux only (%s)", runtime.GOOS)
			}
			c, err := gateway.LoadConfig(f)
			if err != nil {
				t.Fatal(err)
			}
			r, err := c.Resolve()
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := r.WriteTOML(&b); err != nil {
				t.Fatal(err)
			}
			again, err := gateway.ParseConfig(b.Bytes())
			if err != nil {
				t.Fatalf("the printed configuration does not parse: %v\n%s", err, b.String())
			}
			r2, err := again.Resolve()
			if err != nil {
				t.Fatalf("the printed configuration does not validate: %v\n%s", err, b.String())
			}
			// The printed file writes out what the example leaves to the defaults: the shards
			// (one per core) and the catch-all rule.
			r2.ShardsPerCore, r2.ProtectAll = r.ShardsPerCore, r.ProtectAll
			if !reflect.DeepEqual(r, r2) {
				t.Fatalf("read back:\n%+v\nwant\n%+v\nfrom\n%s", r2, r, b.String())
			}
		})
	}
}
