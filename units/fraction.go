package units

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// fractionSyntax is a plain decimal: no sign, no hexadecimal, no Inf or NaN, optional percent.
var fractionSyntax = regexp.MustCompile(`^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]+))?(%?)$`)

// ParseFraction parses a fraction in [0, 1] written as a decimal (0.01), in exponent form (1e-4)
// or as a percentage (1%).
func ParseFraction(s string) (float64, error) {
	f, err := parseFraction(strings.TrimSpace(s))
	if err != nil {
		return 0, &ParseError{Kind: "fraction", Input: s, Err: err}
	}
	return f, nil
}

func parseFraction(s string) (float64, error) {
	if s == "" {
		return 0, syntaxf("empty")
	}
	if s[0] == '-' {
		return 0, rangef("negative")
	}
	m := fractionSyntax.FindStringSubmatch(s)
	if m == nil {
		return 0, syntaxf("not a decimal number, exponent form or percentage (as in 0.01, 1e-4, 1%%)")
	}
	num := strings.TrimSuffix(s, "%")
	if m[2] == "%" {
		// Shift the exponent instead of dividing by 100, so 0.1% is exactly the double nearest 0.001.
		mant, exp := num, 0
		if m[1] != "" {
			mant = num[:strings.IndexAny(num, "eE")]
			e, err := strconv.Atoi(m[1])
			if err != nil || e > 1000 || e < -1000 {
				return 0, rangef("exponent out of range")
			}
			exp = e
		}
		num = mant + "e" + strconv.Itoa(exp-2)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f > 1 {
		return 0, rangef("above 1")
	}
	return f, nil
}

// ParseFractions parses a comma-separated list of fractions, such as 1e-4,1e-2.
func ParseFractions(s string) ([]float64, error) { return ParseList(s, ParseFraction) }

// FormatFraction writes f in the shortest form ParseFraction reads back to the same float64,
// with a compact exponent: 0.01, 0.0001, 1e-6.
func FormatFraction(f float64) string {
	txt := strconv.FormatFloat(f, 'g', -1, 64)
	if i := strings.IndexByte(txt, 'e'); i >= 0 {
		mant, exp := txt[:i], txt[i+1:]
		sign := ""
		if exp[0] == '-' {
			sign = "-"
		}
		exp = strings.TrimLeft(exp[1:], "0")
		txt = mant + "e" + sign + exp
	}
	return txt
}

// ParseDuration parses a Go duration such as 25ms, 1.5s or 12us and rejects negative values.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		if _, nerr := strconv.ParseFloat(strings.TrimSpace(s), 64); nerr == nil {
			// A bare number: the unit is what is missing (0 alone is a duration).
			return 0, &ParseError{Kind: "duration", Input: s, Err: syntaxf("a duration needs a unit (ns, us, ms, s, m, h), as in %sms", strings.TrimSpace(s))}
		}
		return 0, &ParseError{Kind: "duration", Input: s, Err: syntaxf("want a Go duration such as 25ms, 1.5s or 12us")}
	}
	if d < 0 {
		return 0, &ParseError{Kind: "duration", Input: s, Err: rangef("negative")}
	}
	return d, nil
}

// ParseDurations parses a comma-separated list of durations, such as 1ms,25ms.
func ParseDurations(s string) ([]time.Duration, error) { return ParseList(s, ParseDuration) }

// FormatDuration writes d approximately, to four significant digits in the largest of ns, us, ms
// and s that keeps the number at least 1, for reports: 12us, 10.01ms, 1.5s, 3600s. The result is
// ASCII (us, not µs), so table columns stay aligned, and time.ParseDuration reads it.
func FormatDuration(d time.Duration) string {
	if d < 0 {
		return "-" + FormatDuration(-d)
	}
	if d < time.Microsecond {
		return strconv.FormatInt(int64(d), 10) + "ns"
	}
	scales := []struct {
		name string
		unit time.Duration
	}{{"us", time.Microsecond}, {"ms", time.Millisecond}, {"s", time.Second}}
	i := 0
	for i < len(scales)-1 && d >= scales[i+1].unit {
		i++
	}
	txt := sig4(float64(d) / float64(scales[i].unit))
	// Rounding may carry into the next unit (999.97us -> 1ms).
	if r, _ := strconv.ParseFloat(txt, 64); r >= 1000 && i < len(scales)-1 {
		i++
		txt = sig4(float64(d) / float64(scales[i].unit))
	}
	return txt + scales[i].name
}

// ParseList splits s at commas, trims spaces around each item and parses each with parse. An
// empty item is an error, and so is an empty list.
func ParseList[T any](s string, parse func(string) (T, error)) ([]T, error) {
	items := strings.Split(s, ",")
	out := make([]T, 0, len(items))
	for i, it := range items {
		it = strings.TrimSpace(it)
		if it == "" {
			return nil, fmt.Errorf("list %q: item %d is empty", s, i+1)
		}
		v, err := parse(it)
		if err != nil {
			return nil, fmt.Errorf("list %q: item %d: %w", s, i+1, err)
		}
		out = append(out, v)
	}
	return out, nil
}
