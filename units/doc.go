// Package units parses and formats the quantities users type on crem's command lines and in its
// configuration files: sizes in octets, rates in bits per second, fractions, durations, and
// comma-separated lists of each. Every parser rejects negative values, overflow and junk with an
// error that names the input (a *ParseError wrapping ErrSyntax or ErrRange). FormatSize,
// FormatRate and FormatFraction write text their parser reads back to the same value; HumanSize,
// HumanRate and FormatDuration round to four significant digits, for reports. The Size, Rate and
// Fraction types and their list forms plug these into the flag package and into text-based
// configuration files.
//
// Sizes (ParseSize) are whole octets. A bare number is octets; a suffix names a unit, in any
// letter case:
//
//	B                 1
//	K  Ki  KiB        1024            (binary, as dd, truncate and iperf read 1K)
//	KB                1000            (decimal: a B after the prefix letter means SI)
//	M  Mi  MiB / MB   1024^2 / 1000^2
//	G  Gi  GiB / GB   1024^3 / 1000^3
//	T, P, E           likewise up to 1024^6 and 1000^6
//
// so 4MiB = 4194304, 64KB = 64000 and 1K = 1024. A decimal point is allowed when the result is a
// whole number of octets (1.5KiB = 1536; 0.3KiB is rejected). Because sizes are never bits, the
// letter case carries no meaning: 64kb is 64000 octets.
//
// Rates (ParseRate) are whole bits per second. A bare number is bit/s; the prefixes k, M, G, T
// and P are decimal (1000) and Ki, Mi, Gi and Ti binary (1024), in any letter case, each
// optionally followed by bit, bits, bit/s, bits/s, b/s, b or bps: 500Mbit, 100Mbps, 1.5Gbit,
// 10kbit, 400G. As in common speech (and unlike tc, where bps means bytes per second) Mbps is
// megabits per second. An upper-case B in a rate means bytes and is rejected, so 100MBps cannot
// be misread as 100Mbps.
//
// Fractions (ParseFraction) lie in [0, 1] and are written as decimals, in exponent form or as
// percentages: 0.01, 1e-4, 1%.
//
// Durations (ParseDuration) are Go durations (25ms, 1.5s, 12us) and must not be negative.
package units
