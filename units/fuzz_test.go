package units

import (
	"errors"
	"strings"
	"testing"
)

// Each fuzz target checks that a parser never panics, that every error names its input and is
// either ErrSyntax or ErrRange, and that an accepted value formats back to itself.

func checkErr(t *testing.T, in string, err error) {
	t.Helper()
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Input != in {
		t.Fatalf("error for %q does not name the input: %v", in, err)
	}
	if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrRange) {
		t.Fatalf("error for %q is neither ErrSyntax nor ErrRange: %v", in, err)
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"4MiB", "1GiB", "8GiB", "128KiB", "1500", "64KB", "1K", "1.5KiB", "-1", "8EiB", "0.3KiB", "4 mib", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			checkErr(t, s, err)
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d < 0", s, n)
		}
		if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
			t.Fatalf("%q -> %d -> %q -> %d, %v", s, n, FormatSize(n), back, err)
		}
	})
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"500Mbit", "2Gbit", "400Gbit", "100Mbps", "1.5Gbit", "10kbit", "1000", "100MBps", "0.5bit", "1Kibit", "1Gb/s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseRate(s)
		if err != nil {
			checkErr(t, s, err)
			return
		}
		if n < 0 {
			t.Fatalf("ParseRate(%q) = %d < 0", s, n)
		}
		if back, err := ParseRate(FormatRate(n)); err != nil || back != n {
			t.Fatalf("%q -> %d -> %q -> %d, %v", s, n, FormatRate(n), back, err)
		}
	})
}

func FuzzParseFraction(f *testing.F) {
	for _, s := range []string{"0.01", "1e-4", "1%", "0.1%", "1", "0", "1.5", "-0", "NaN", "1e-9999%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		x, err := ParseFraction(s)
		if err != nil {
			checkErr(t, s, err)
			return
		}
		if !(x >= 0 && x <= 1) {
			t.Fatalf("ParseFraction(%q) = %g outside [0, 1]", s, x)
		}
		if back, err := ParseFraction(FormatFraction(x)); err != nil || back != x {
			t.Fatalf("%q -> %g -> %q -> %g, %v", s, x, FormatFraction(x), back, err)
		}
	})
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"25ms", "1.5s", "12us", "-1ms", "1h2m", "0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			checkErr(t, s, err)
			return
		}
		if d < 0 {
			t.Fatalf("ParseDuration(%q) = %v < 0", s, d)
		}
	})
}

func FuzzParseSizes(f *testing.F) {
	for _, s := range []string{"1MiB,16MiB", "1MiB,,2", "8GiB", ","} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseSizes(s)
		if err != nil {
			if !strings.Contains(err.Error(), "list ") {
				t.Fatalf("list error does not name the list: %v", err)
			}
			return
		}
		items := strings.Split(s, ",")
		if len(items) != len(l) {
			t.Fatalf("ParseSizes(%q) has %d items, want %d", s, len(l), len(items))
		}
		for i, it := range items {
			if n, err := ParseSize(it); err != nil || n != l[i] {
				t.Fatalf("item %d of %q: list says %d, ParseSize says %d, %v", i, s, l[i], n, err)
			}
		}
	})
}
