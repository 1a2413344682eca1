package main

import (
	"bytes"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRoundTrips builds every case, which checks crem's repair symbols on each path against
// ISA-L's scalar reference over crem's Cauchy rows, ISA-L's parity on each of its kernel
// families against its reference, and every loss pattern restored by both codecs.
func TestRoundTrips(t *testing.T) {
	var a arena
	defer a.free()
	cases, err := buildCases(&a, cremPaths(), 16)
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) != 2*len(benchMs)*len(benchTs) {
		t.Fatalf("%d cases, want %d", len(cases), 2*len(benchMs)*len(benchTs))
	}
}

// TestTables runs one short round and checks that the tables name every case and variant and
// give a ratio for each crem path.
func TestTables(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, io.Discard, 1, time.Millisecond, 4, false); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"| encode k32m4T1058 |", "| decode k32u8T4130 |", "| isal | isal-avx2 | isal-base | isal-whole |", "/ isal-base", "/ isal-whole", "ISA-L 2."} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	for _, p := range cremPaths() {
		if n := len(regexp.MustCompile(`T\d+ \| crem-`+p.Name()+` \|`).FindAllString(s, -1)); n != 8 {
			t.Errorf("crem-%s has %d ratio rows, want 8", p.Name(), n)
		}
	}
}
