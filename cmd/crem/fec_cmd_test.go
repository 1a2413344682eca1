package main

import (
	"bytes"
	"strings"
	"testing"
)

// runFecCLI runs "crem args..." with the given standard input.
func runFecCLI(t *testing.T, input string, args ...string) (code int, out, errOut string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, stdio{in: strings.NewReader(input), out: &o, err: &e})
	return code, o.String(), e.String()
}

const (
	appendixR0  = "001ef6ccd7c377f0ddfc774c00000000"
	appendixR1  = "001ef6ccd7c377f0ddfc774f00000000"
	appendixR2L = "00354fdf6d4b40b57e5c400000000000"
)

// TestFecEncodeAppendixOrdinary: the draft's Appendix through the CLI, R0 and R1 with m = 2.
func TestFecEncodeAppendixOrdinary(t *testing.T) {
	code, out, errOut := runFecCLI(t, fecAppendixInput+"\n", "fec", "encode", "--scheme", "1", "--T", "16", "--m", "2")
	if code != 0 || out != appendixR0+"\n"+appendixR1+"\n" || errOut != "" {
		t.Fatalf("exit %d, out %q, err %q", code, out, errOut)
	}
}

// TestFecEncodeAppendixCodedRetransmission: the Appendix's R2[L] for L = {0, 1, 2}.
func TestFecEncodeAppendixCodedRetransmission(t *testing.T) {
	code, out, errOut := runFecCLI(t, fecAppendixInput, "fec", "encode", "--scheme", "1", "--T", "16", "--repair", "2", "--over", "0,1,2")
	if code != 0 || out != appendixR2L+"\n" {
		t.Fatalf("exit %d, out %q, err %q", code, out, errOut)
	}
	// The order of --repair is the order of the output, and ranges work.
	code, out, _ = runFecCLI(t, fecAppendixInput, "fec", "encode", "--scheme", "1", "--T", "16", "--repair", "1,0")
	if code != 0 || out != appendixR1+"\n"+appendixR0+"\n" {
		t.Fatalf("--repair 1,0: exit %d, out %q", code, out)
	}
	code, out, _ = runFecCLI(t, fecAppendixInput, "fec", "encode", "--scheme", "1", "--T", "16", "--repair", "0-1")
	if code != 0 || out != appendixR0+"\n"+appendixR1+"\n" {
		t.Fatalf("--repair 0-1: exit %d, out %q", code, out)
	}
}

// TestFecEncodeDefaults: k is the number of lines, T the longest payload + 2, m is 1.
func TestFecEncodeDefaults(t *testing.T) {
	// Payloads "ab", absent, empty: k = 3, T = 4; the XOR of 00026162 and 00000000.
	code, out, errOut := runFecCLI(t, "6162\n-\n\n", "fec", "encode", "--scheme", "2")
	if code != 0 || out != "00026162\n" {
		t.Fatalf("XOR: exit %d, out %q, err %q", code, out, errOut)
	}
	code, out, _ = runFecCLI(t, "6162\n-\n\n", "fec", "encode", "--scheme", "1")
	if code != 0 || len(strings.Fields(out)) != 1 || len(strings.TrimSpace(out)) != 8 {
		t.Fatalf("scheme 1 defaults: exit %d, out %q", code, out)
	}
	code, out, _ = runFecCLI(t, "6162\n-\n\n", "fec", "encode", "--scheme", "1", "--over", "0")
	// C(0, 0) = 0xfd times 00 02 61 62.
	if code != 0 || out != "00"+hexMul(0xfd, 0x02)+hexMul(0xfd, 0x61)+hexMul(0xfd, 0x62)+"\n" {
		t.Fatalf("--over 0: exit %d, out %q", code, out)
	}
}

// hexMul is the GF(2^8) product a*b in hex, by shift and add, for the expected outputs.
func hexMul(a, b byte) string {
	var p byte
	for b != 0 {
		if b&1 != 0 {
			p ^= a
		}
		hi := a & 0x80
		a <<= 1
		if hi != 0 {
			a ^= 0x1d
		}
		b >>= 1
	}
	return string("0123456789abcdef"[p>>4]) + string("0123456789abcdef"[p&15])
}

// TestFecEncodeSourceCopy: scheme 0 prints source symbols i unmodified (RULINGS C1).
func TestFecEncodeSourceCopy(t *testing.T) {
	code, out, errOut := runFecCLI(t, fecAppendixInput, "fec", "encode", "--scheme", "0", "--T", "16", "--repair", "3,1")
	want := "000a52444d412d504b542d3300000000\n000a52444d412d504b542d3100000000\n"
	if code != 0 || out != want {
		t.Fatalf("exit %d, out %q, err %q", code, out, errOut)
	}
}

// TestFecEncodeRefusesBadInput: every bad input exits 1 with exactly one line on standard
// error, the Repair Index limit i + k <= 255 included.
func TestFecEncodeRefusesBadInput(t *testing.T) {
	for _, c := range []struct {
		name, input string
		args        []string
		want        string
	}{
		{"i + k > 255", fecAppendixInput, []string{"--scheme", "1", "--repair", "252"}, "i + k must not exceed 255"},
		{"no scheme", fecAppendixInput, nil, "--scheme is required"},
		{"scheme 3", fecAppendixInput, []string{"--scheme", "3"}, "--scheme 3"},
		{"bad hex", "zz\n", []string{"--scheme", "1"}, "line 1: bad hex"},
		{"payload too long", fecAppendixInput, []string{"--scheme", "1", "--T", "11"}, "longer than T - 2"},
		{"T too small", fecAppendixInput, []string{"--scheme", "1", "--T", "1"}, "T = 1"},
		{"m and repair", fecAppendixInput, []string{"--scheme", "1", "--m", "2", "--repair", "0"}, "--m and --repair"},
		{"over absent", "00\n-\n", []string{"--scheme", "1", "--over", "1"}, "absent"},
		{"over beyond k", "00\n", []string{"--scheme", "1", "--over", "4"}, "k = 1"},
		{"over scheme 2", "00\n", []string{"--scheme", "2", "--over", "0"}, "scheme 1 only"},
		{"xor index 1", "00\n", []string{"--scheme", "2", "--repair", "1"}, "Repair Index 0"},
		{"copy absent", "00\n-\n", []string{"--scheme", "0", "--repair", "1"}, "absent"},
		{"copy beyond k", "00\n", []string{"--scheme", "0", "--repair", "3"}, "k = 1"},
		{"fewer lines than k", "00\n", []string{"--scheme", "1", "--k", "2"}, "1 lines for --k 2"},
		{"more lines than k", "00\n00\n", []string{"--scheme", "1", "--k", "1"}, "more lines"},
		{"k = 0", "00\n", []string{"--scheme", "1", "--k", "0"}, "--k 0"},
		{"no input", "", []string{"--scheme", "1"}, "no input lines"},
		{"bad list", "00\n", []string{"--scheme", "1", "--repair", "x"}, "--repair"},
		{"m = 0", "00\n", []string{"--scheme", "1", "--m", "0"}, "--m 0"},
		{"argument", "00\n", []string{"--scheme", "1", "extra"}, "unexpected argument"},
	} {
		code, out, errOut := runFecCLI(t, c.input, append([]string{"fec", "encode"}, c.args...)...)
		if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, out %q, err %q (want exit 1, one line with %q)", c.name, code, out, errOut, c.want)
		}
	}
	lines := strings.Repeat("00\n", 256)
	if code, _, errOut := runFecCLI(t, lines, "fec", "encode", "--scheme", "1"); code != 1 || !strings.Contains(errOut, "at most 255") {
		t.Errorf("256 lines: exit %d, err %q", code, errOut)
	}
}

// TestFecHelp: "crem fec --help" and "crem fec encode --help" explain the command and exit 0.
func TestFecHelp(t *testing.T) {
	code, out, _ := runFecCLI(t, "", "fec", "--help")
	if code != 0 || !strings.Contains(out, "Cauchy Reed-Solomon") || !strings.Contains(out, "encode") {
		t.Errorf("crem fec --help: exit %d, %q", code, out)
	}
	code, _, errOut := runFecCLI(t, "", "fec", "encode", "--help")
	if code != 0 || !strings.Contains(errOut, "--over") || !strings.Contains(errOut, appendixR2L) {
		t.Errorf("crem fec encode --help: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runFecCLI(t, "", "fec"); code != 2 || !strings.Contains(errOut, "Usage: crem fec") {
		t.Errorf("crem fec: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runFecCLI(t, "", "fec", "decode"); code != 2 || !strings.Contains(errOut, "unknown subcommand") {
		t.Errorf("crem fec decode: exit %d, %q", code, errOut)
	}
}
