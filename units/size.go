package units

import (
	"strconv"
	"strings"
)

type unit struct {
	name  string
	scale int64
}

// sizeUnits lists every size suffix in lower case with its value.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "ki": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mi": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gi": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "ti": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	"p": 1 << 50, "pi": 1 << 50, "pib": 1 << 50, "pb": 1e15,
	"e": 1 << 60, "ei": 1 << 60, "eib": 1 << 60, "eb": 1e18,
}

// formatSizeUnits are the units FormatSize may choose from, binary first so that ties go to them.
var formatSizeUnits = []unit{
	{"EiB", 1 << 60}, {"PiB", 1 << 50}, {"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"EB", 1e18}, {"PB", 1e15}, {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
	{"B", 1},
}

// ParseSize parses a size in octets such as 4MiB, 64KB, 1K or 1500 (see the package
// documentation for every suffix).
func ParseSize(s string) (int64, error) {
	n, err := parseSize(strings.TrimSpace(s))
	if err != nil {
		return 0, &ParseError{Kind: "size", Input: s, Err: err}
	}
	return n, nil
}

func parseSize(s string) (int64, error) {
	num, u, err := splitNumber(s)
	if err != nil {
		return 0, err
	}
	scale, ok := sizeUnits[strings.ToLower(u)]
	if !ok {
		return 0, syntaxf("unknown unit %q (want B, K, KiB, KB, M, MiB, MB, G, GiB, GB, T, TiB, TB, P, PiB, PB, E, EiB or EB)", u)
	}
	return num.times(scale, "octets")
}

// ParseSizes parses a comma-separated list of sizes, such as 1MiB,16MiB,8GiB.
func ParseSizes(s string) ([]int64, error) { return ParseList(s, ParseSize) }

// FormatSize writes n octets exactly, as a whole number of the unit that gives the shortest text
// (ties go to binary units), which ParseSize reads back to n: 4194304 is 4MiB, 64000 is 64KB,
// 1536 is 1536B, 1.5GiB is 1536MiB. Negative n is written as a negative size, which ParseSize
// rejects.
func FormatSize(n int64) string {
	if n < 0 {
		if n == -n { // math.MinInt64
			return strconv.FormatInt(n, 10) + "B"
		}
		return "-" + FormatSize(-n)
	}
	best := strconv.FormatInt(n, 10) + "B"
	for _, u := range formatSizeUnits {
		if n == 0 || n%u.scale != 0 {
			continue
		}
		if cand := strconv.FormatInt(n/u.scale, 10) + u.name; len(cand) < len(best) {
			best = cand
		}
	}
	return best
}

// HumanSize writes n octets approximately, to four significant digits in binary units, for
// reports: 1234567 is 1.177MiB.
func HumanSize(n float64) string {
	return human(n, 1024, []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"})
}
