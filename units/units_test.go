package units

import (
	"errors"
	"flag"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestParseSize(t *testing.T) {
	cases := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1500", 1500},
		{"1500B", 1500},
		{"128KiB", 128 << 10},
		{"4MiB", 4 << 20},
		{"1GiB", 1 << 30},
		{"8GiB", 8 << 30},
		{"64KB", 64000},
		{"64kB", 64000},
		{"64kb", 64000},
		{"1K", 1024},
		{"1k", 1024},
		{"1Ki", 1024},
		{"16M", 16 << 20},
		{"2G", 2 << 30},
		{"1TB", 1e12},
		{"1PiB", 1 << 50},
		{"7EiB", 7 << 60},
		{"1EB", 1e18},
		{"1.5KiB", 1536},
		{"0.5GB", 5e8},
		{"4 MiB", 4 << 20},
		{" 4MiB ", 4 << 20},
		{"4mib", 4 << 20},
		{"9223372036854775807", math.MaxInt64},
		{"007", 7},
	}
	for _, c := range cases {
		got, err := ParseSize(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func TestParseSizeRejects(t *testing.T) {
	cases := []struct {
		in   string
		kind error
	}{
		{"", ErrSyntax},
		{"-1", ErrRange},
		{"-4MiB", ErrRange},
		{"MiB", ErrSyntax},
		{"4XB", ErrSyntax},
		{"4MiBs", ErrSyntax},
		{"4 M iB", ErrSyntax},
		{"1.", ErrSyntax},
		{".5K", ErrSyntax},
		{"+4", ErrSyntax},
		{"1e6", ErrSyntax},
		{"0x10", ErrSyntax},
		{"1_000", ErrSyntax},
		{"0.3KiB", ErrRange},
		{"0.5", ErrRange},
		{"8EiB", ErrRange},
		{"9223372036854775808", ErrRange},
		{"99999999999999999999999PiB", ErrRange},
		{"4MiB,1GiB", ErrSyntax},
	}
	for _, c := range cases {
		_, err := ParseSize(c.in)
		if !errors.Is(err, c.kind) {
			t.Errorf("ParseSize(%q) error = %v; want %v", c.in, err, c.kind)
			continue
		}
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Input != c.in || pe.Kind != "size" {
			t.Errorf("ParseSize(%q) error %v does not name the input", c.in, err)
		}
		if !strings.Contains(err.Error(), `"`+c.in+`"`) {
			t.Errorf("ParseSize(%q) message %q does not quote the input", c.in, err)
		}
	}
}

func TestFormatSize(t *testing.T) {
	cases := []struct {
		n    int64
		want string
	}{
		{0, "0B"},
		{1, "1B"},
		{1500, "1500B"},
		{1000, "1KB"},
		{1024, "1KiB"},
		{1536, "1536B"},
		{3 << 29, "1536MiB"},
		{1500000, "1500KB"},
		{64000, "64KB"},
		{4194304, "4MiB"},
		{128 << 10, "128KiB"},
		{1 << 30, "1GiB"},
		{8 << 30, "8GiB"},
		{1e9, "1GB"},
		{1234567, "1234567B"},
		{math.MaxInt64, "9223372036854775807B"},
		{-4096, "-4KiB"},
	}
	for _, c := range cases {
		if got := FormatSize(c.n); got != c.want {
			t.Errorf("FormatSize(%d) = %q; want %q", c.n, got, c.want)
		}
	}
}

func TestParseRate(t *testing.T) {
	cases := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1000000", 1e6},
		{"500Mbit", 5e8},
		{"2Gbit", 2e9},
		{"400Gbit", 4e11},
		{"100Mbps", 1e8},
		{"1.5Gbit", 15e8},
		{"10kbit", 1e4},
		{"10Kbit", 1e4},
		{"400G", 4e11},
		{"500M", 5e8},
		{"1Gbit/s", 1e9},
		{"1Gbits/s", 1e9},
		{"1Gbits", 1e9},
		{"1Gb/s", 1e9},
		{"1Gb", 1e9},
		{"1gbps", 1e9},
		{"1bit", 1},
		{"12bps", 12},
		{"1Kibit", 1024},
		{"1Mibit", 1 << 20},
		{"1Tbit", 1e12},
		{"1Pbit", 1e15},
		{" 400 Gbit ", 4e11},
	}
	for _, c := range cases {
		got, err := ParseRate(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func TestParseRateRejects(t *testing.T) {
	cases := []struct {
		in   string
		kind error
	}{
		{"", ErrSyntax},
		{"-1Gbit", ErrRange},
		{"100MBps", ErrSyntax},
		{"100MB/s", ErrSyntax},
		{"1Xbit", ErrSyntax},
		{"Gbit", ErrSyntax},
		{"1Gbit/h", ErrSyntax},
		{"0.5bit", ErrRange},
		{"1.0000000001kbit", ErrRange},
		{"10000000Pbit", ErrRange},
		{"1e9", ErrSyntax},
	}
	for _, c := range cases {
		_, err := ParseRate(c.in)
		if !errors.Is(err, c.kind) {
			t.Errorf("ParseRate(%q) error = %v; want %v", c.in, err, c.kind)
			continue
		}
		if !strings.Contains(err.Error(), `rate "`+c.in+`"`) {
			t.Errorf("ParseRate(%q) message %q does not name the input", c.in, err)
		}
	}
}

func TestFormatRate(t *testing.T) {
	cases := []struct {
		bps  int64
		want string
	}{
		{0, "0bit/s"},
		{999, "999bit/s"},
		{1e4, "10kbit/s"},
		{5e8, "500Mbit/s"},
		{15e8, "1.5Gbit/s"},
		{4e11, "400Gbit/s"},
		{1e8, "100Mbit/s"},
		{1234567, "1234567bit/s"},
		{1234500, "1.2345Mbit/s"},
		{1024, "1024bit/s"},
	}
	for _, c := range cases {
		if got := FormatRate(c.bps); got != c.want {
			t.Errorf("FormatRate(%d) = %q; want %q", c.bps, got, c.want)
		}
	}
}

func TestParseFraction(t *testing.T) {
	cases := []struct {
		in   string
		want float64
	}{
		{"0", 0},
		{"1", 1},
		{"0.01", 0.01},
		{"1e-4", 1e-4},
		{"1E-4", 1e-4},
		{"1%", 0.01},
		{"0.1%", 0.001},
		{"100%", 1},
		{"1e-2%", 1e-4},
		{".5", 0.5},
		{"1.", 1},
		{"1e-400", 0},
		{" 0.25 ", 0.25},
	}
	for _, c := range cases {
		got, err := ParseFraction(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseFraction(%q) = %g, %v; want %g", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "-0.01", "1.5", "101%", "inf", "NaN", "0x1p-3", "1e400", "0.01x", "%", "1%%", "1e", "1_0"} {
		if _, err := ParseFraction(bad); err == nil || !strings.Contains(err.Error(), `fraction "`+bad+`"`) {
			t.Errorf("ParseFraction(%q) error = %v; want an error naming the input", bad, err)
		}
	}
}

func TestFormatFraction(t *testing.T) {
	cases := []struct {
		f    float64
		want string
	}{
		{0, "0"}, {1, "1"}, {0.01, "0.01"}, {1e-4, "0.0001"}, {1e-6, "1e-6"}, {2.5e-7, "2.5e-7"},
	}
	for _, c := range cases {
		if got := FormatFraction(c.f); got != c.want {
			t.Errorf("FormatFraction(%g) = %q; want %q", c.f, got, c.want)
		}
	}
}

func TestDurations(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
	}{{"25ms", 25 * time.Millisecond}, {"1.5s", 1500 * time.Millisecond}, {"12us", 12 * time.Microsecond}, {"0", 0}} {
		got, err := ParseDuration(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "-1ms", "25", "1 parsec"} {
		if _, err := ParseDuration(bad); err == nil || !strings.Contains(err.Error(), `duration "`+bad+`"`) {
			t.Errorf("ParseDuration(%q) error = %v; want an error naming the input", bad, err)
		}
	}
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0ns"},
		{999, "999ns"},
		{12 * time.Microsecond, "12us"},
		{10*time.Millisecond + 12*time.Microsecond, "10.01ms"},
		{25 * time.Millisecond, "25ms"},
		{1500 * time.Millisecond, "1.5s"},
		{time.Hour, "3600s"},
		{999999, "1ms"},
		{1234567, "1.235ms"},
		{-2 * time.Millisecond, "-2ms"},
	} {
		if got := FormatDuration(c.d); got != c.want {
			t.Errorf("FormatDuration(%d) = %q; want %q", c.d, got, c.want)
		}
	}
}

func TestHuman(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{HumanSize(1234567), "1.177MiB"},
		{HumanSize(512), "512B"},
		{HumanSize(1023.99), "1KiB"},
		{HumanSize(8 << 30), "8GiB"},
		{HumanRate(487312345.6), "487.3Mbit/s"},
		{HumanRate(4e11), "400Gbit/s"},
		{HumanRate(999999), "1Mbit/s"},
		{HumanRate(0.5), "0.5bit/s"},
		{HumanRate(-2e9), "-2Gbit/s"},
		{HumanRate(math.Inf(1)), "+Infbit/s"},
	} {
		if c.got != c.want {
			t.Errorf("got %q; want %q", c.got, c.want)
		}
	}
}

func TestLists(t *testing.T) {
	sizes, err := ParseSizes("1MiB, 16MiB,8GiB")
	if err != nil || !slices.Equal(sizes, []int64{1 << 20, 16 << 20, 8 << 30}) {
		t.Errorf("ParseSizes = %v, %v", sizes, err)
	}
	rates, err := ParseRates("100Gbit,400Gbit")
	if err != nil || !slices.Equal(rates, []int64{1e11, 4e11}) {
		t.Errorf("ParseRates = %v, %v", rates, err)
	}
	fr, err := ParseFractions("1e-4,1e-2,1%")
	if err != nil || !slices.Equal(fr, []float64{1e-4, 1e-2, 0.01}) {
		t.Errorf("ParseFractions = %v, %v", fr, err)
	}
	ds, err := ParseDurations("1ms,25ms")
	if err != nil || !slices.Equal(ds, []time.Duration{time.Millisecond, 25 * time.Millisecond}) {
		t.Errorf("ParseDurations = %v, %v", ds, err)
	}
	for _, bad := range []string{"", "1MiB,", ",1MiB", "1MiB,,2MiB", "1MiB,x"} {
		_, err := ParseSizes(bad)
		if err == nil || !strings.Contains(err.Error(), `"`+bad+`"`) {
			t.Errorf("ParseSizes(%q) error = %v; want an error naming the list", bad, err)
		}
	}
	_, err = ParseSizes("1MiB,-2MiB")
	if !errors.Is(err, ErrRange) || !strings.Contains(err.Error(), "item 2") || !strings.Contains(err.Error(), `"-2MiB"`) {
		t.Errorf("ParseSizes with a negative item: %v", err)
	}
}

func TestFlagValues(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	size := Size(4 << 20)
	rate := Rate(5e8)
	loss := Fraction(0.01)
	var sizes Sizes
	var rates Rates
	var fracs Fractions
	var durs Durations
	fs.Var(&size, "size", "")
	fs.Var(&rate, "rate", "")
	fs.Var(&loss, "loss", "")
	fs.Var(&sizes, "sizes", "")
	fs.Var(&rates, "rates", "")
	fs.Var(&fracs, "drop-rates", "")
	fs.Var(&durs, "rtts", "")
	if size.String() != "4MiB" || rate.String() != "500Mbit/s" || loss.String() != "0.01" {
		t.Errorf("defaults print as %v %v %v", size, rate, loss)
	}
	err := fs.Parse([]string{"--size", "1GiB", "--rate", "400Gbit", "--loss", "1e-4",
		"--sizes", "1MiB,8GiB", "--rates", "1Gbit", "--drop-rates", "1e-6,1%", "--rtts", "1ms,25ms"})
	if err != nil {
		t.Fatal(err)
	}
	if size != 1<<30 || rate != 4e11 || loss != 1e-4 {
		t.Errorf("parsed %d %d %g", size, rate, loss)
	}
	if sizes.String() != "1MiB,8GiB" || rates.String() != "1Gbit/s" || fracs.String() != "1e-6,0.01" || durs.String() != "1ms,25ms" {
		t.Errorf("lists print as %v %v %v %v", sizes, rates, fracs, durs)
	}
	if err := fs.Parse([]string{"--size", "lots"}); err == nil {
		t.Error("bad size accepted")
	}
	var fromText Size
	if err := fromText.UnmarshalText([]byte("64KB")); err != nil || fromText != 64000 {
		t.Errorf("UnmarshalText = %d, %v", fromText, err)
	}
	if b, _ := Rate(1e10).MarshalText(); string(b) != "10Gbit/s" {
		t.Errorf("MarshalText = %s", b)
	}
}

// Every non-negative int64 formats to text that parses back to itself.
func TestSizeRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.OneOf(
			rapid.Int64Range(0, math.MaxInt64),
			rapid.Custom(func(t *rapid.T) int64 {
				// Multiples of units, where the short forms are chosen.
				base := rapid.SampledFrom([]int64{1, 1 << 10, 1e3, 1 << 20, 1e6, 1 << 30, 1e9, 1 << 40}).Draw(t, "base")
				return rapid.Int64Range(0, 1<<20).Draw(t, "k") * base
			}),
		).Draw(t, "n")
		txt := FormatSize(n)
		got, err := ParseSize(txt)
		if err != nil || got != n {
			t.Fatalf("ParseSize(FormatSize(%d) = %q) = %d, %v", n, txt, got, err)
		}
	})
}

func TestRateRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.OneOf(
			rapid.Int64Range(0, math.MaxInt64),
			rapid.Custom(func(t *rapid.T) int64 {
				return rapid.Int64Range(0, 1e6).Draw(t, "k") * rapid.SampledFrom([]int64{1e3, 1e6, 1e8, 1e9}).Draw(t, "base")
			}),
		).Draw(t, "n")
		txt := FormatRate(n)
		got, err := ParseRate(txt)
		if err != nil || got != n {
			t.Fatalf("ParseRate(FormatRate(%d) = %q) = %d, %v", n, txt, got, err)
		}
	})
}

func TestFractionRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := rapid.Float64Range(0, 1).Draw(t, "f")
		txt := FormatFraction(f)
		got, err := ParseFraction(txt)
		if err != nil || got != f {
			t.Fatalf("ParseFraction(FormatFraction(%g) = %q) = %g, %v", f, txt, got, err)
		}
	})
}

// A bare number is not a duration: the error says the unit is missing and shows it added.
func TestParseDurationBareNumberNeedsUnit(t *testing.T) {
	_, err := ParseDuration("20")
	if err == nil || !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), "needs a unit") || !strings.Contains(err.Error(), "20ms") {
		t.Fatalf("ParseDuration(20) error = %v", err)
	}
	_, err = ParseDuration("20 parsecs")
	if err == nil || strings.Contains(err.Error(), "needs a unit") {
		t.Fatalf("ParseDuration(20 parsecs) error = %v", err)
	}
}
