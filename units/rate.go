package units

import (
	"math"
	"strconv"
	"strings"
)

var ratePrefixes = map[string]int64{
	"":  1,
	"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15,
	"ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40,
}

// rateSuffixes are tried in order, longest first, so "bits/s" is not read as "bits" + "/s".
var rateSuffixes = []string{"bits/s", "bit/s", "bits", "bit", "bps", "b/s", "b"}

var formatRateUnits = []unit{
	{"Pbit/s", 1e15}, {"Tbit/s", 1e12}, {"Gbit/s", 1e9}, {"Mbit/s", 1e6}, {"kbit/s", 1e3},
}

// ParseRate parses a rate in bits per second such as 500Mbit, 100Mbps, 1.5Gbit, 10kbit, 400G or
// 1000000 (see the package documentation for every form).
func ParseRate(s string) (int64, error) {
	n, err := parseRate(strings.TrimSpace(s))
	if err != nil {
		return 0, &ParseError{Kind: "rate", Input: s, Err: err}
	}
	return n, nil
}

func parseRate(s string) (int64, error) {
	num, u, err := splitNumber(s)
	if err != nil {
		return 0, err
	}
	if strings.Contains(u, "B") {
		return 0, syntaxf("B means bytes; rates are in bits per second (write bit, as in 100Mbit)")
	}
	lu := strings.ToLower(u)
	for _, suf := range rateSuffixes {
		if p, ok := strings.CutSuffix(lu, suf); ok {
			lu = p
			break
		}
	}
	scale, ok := ratePrefixes[lu]
	if !ok {
		return 0, syntaxf("unknown unit %q (want bit/s with an optional prefix k, M, G, T, P, Ki, Mi, Gi or Ti, as in 500Mbit)", u)
	}
	return num.times(scale, "bits per second")
}

// ParseRates parses a comma-separated list of rates, such as 100Gbit,400Gbit.
func ParseRates(s string) ([]int64, error) { return ParseList(s, ParseRate) }

// FormatRate writes a rate in bits per second exactly, in the shortest decimal-prefixed form
// ParseRate reads back: 500000000 is 500Mbit/s, 1500000000 is 1.5Gbit/s, 10000 is 10kbit/s,
// 1234567 is 1234567bit/s.
func FormatRate(bps int64) string {
	if bps < 0 {
		if bps == -bps {
			return strconv.FormatInt(bps, 10) + "bit/s"
		}
		return "-" + FormatRate(-bps)
	}
	best := strconv.FormatInt(bps, 10)
	name := "bit/s"
	for _, u := range formatRateUnits {
		if bps < u.scale {
			continue
		}
		txt := exactDecimal(uint64(bps), uint64(u.scale))
		if len(txt) < len(best) {
			best, name = txt, u.name
		}
	}
	return best + name
}

// exactDecimal writes n/d in decimal without rounding; d must be a product of 2s and 5s so the
// expansion ends.
func exactDecimal(n, d uint64) string {
	b := strconv.AppendUint(nil, n/d, 10)
	r := n % d
	if r != 0 {
		b = append(b, '.')
		for r != 0 {
			// r < d <= 1e15, so 10r cannot overflow.
			r *= 10
			b = append(b, byte('0'+r/d))
			r %= d
		}
	}
	return string(b)
}

// HumanRate writes a measured rate in bits per second approximately, to four significant digits
// in decimal units, for reports: 487312345.6 is 487.3Mbit/s.
func HumanRate(bps float64) string {
	return human(bps, 1000, []string{"bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Tbit/s", "Pbit/s"})
}

// human scales v by base until it is below base and writes it with four significant digits and
// no exponent.
func human(v float64, base float64, names []string) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'g', -1, 64) + names[0]
	}
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	i := 0
	for i < len(names)-1 && v >= base {
		v /= base
		i++
	}
	txt := sig4(v)
	// Rounding may carry into the next unit (999.97 -> 1000).
	if r, _ := strconv.ParseFloat(txt, 64); r >= base && i < len(names)-1 {
		v /= base
		i++
		txt = sig4(v)
	}
	return sign + txt + names[i]
}

// sig4 writes v >= 0 with four significant digits, trailing zeros removed, never in exponent
// form (values below 1e-4 keep their leading zeros up to 12 decimals).
func sig4(v float64) string {
	if v == 0 {
		return "0"
	}
	decimals := 3 - int(math.Floor(math.Log10(v)))
	decimals = max(0, min(decimals, 12))
	txt := strconv.FormatFloat(v, 'f', decimals, 64)
	if strings.Contains(txt, ".") {
		txt = strings.TrimRight(strings.TrimRight(txt, "0"), ".")
	}
	return txt
}
