package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestDemoTellsTheAppendix runs `crem demo` and checks the story's computed bytes against the
// CREM draft's Appendix: R0, R1, R2[L], the 44-octet REPAIR and the three restored payloads.
func TestDemoTellsTheAppendix(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"demo"}, stdio{in: strings.NewReader(""), out: &out, err: &errb}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	got := out.String()
	for _, want := range []string{
		"R0 = 001ef6ccd7c377f0ddfc774c00000000",
		"R1 = 001ef6ccd7c377f0ddfc774f00000000",
		"R2[L] = 00354fdf6d4b40b57e5c400000000000",
		"11 80 00 2c 00 00 be ef 01 01 04 02 00 10 00 00 00 07 00 10 f0 00 00 00 e0 00 00 00 00 35 4f df",
		`restored PSN 0x001000: "RDMA-PKT-0"`,
		`restored PSN 0x001001: "RDMA-PKT-1"`,
		`restored PSN 0x001002: "RDMA-PKT-2"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
}
