package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/crem-project/crem/units"
)

// newFlagSet returns a flag set whose --help prints a usage line, a description and the flags.
// A bad flag prints one line naming it and a hint to -h (parseFlags), not the whole usage.
func newFlagSet(name, usageLine, description string, s stdio) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(s.err)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "Usage: %s\n\n%s\n", usageLine, description)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(out, "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseFlags parses args; done is true when the caller must return code at once
// (0 after --help, 2 after a bad flag). The flag package's own report of a bad flag (the error
// and the whole usage) is captured and replaced by one line and a hint:
//
//	crem lab: invalid value "20" for flag --rtt: a duration needs a unit, e.g. --rtt 20ms
//	Run 'crem lab -h' for usage.
func parseFlags(fs *flag.FlagSet, args []string) (code int, done bool) {
	out := fs.Output()
	var captured bytes.Buffer
	fs.SetOutput(&captured)
	err := fs.Parse(args)
	fs.SetOutput(out)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		io.Copy(out, &captured) // the usage, asked for
		return 0, true
	default:
		reportFlagError(out, fs, err)
		return 2, true
	}
}

// reportFlagError writes the one line about a bad flag and the hint to the command's help.
func reportFlagError(w io.Writer, fs *flag.FlagSet, err error) {
	fmt.Fprintf(w, "crem %s: %s\nRun 'crem %s -h' for usage.\n", fs.Name(), describeFlagError(fs, err), fs.Name())
}

// invalidValue matches the flag package's "invalid value" errors (flag.FlagSet.Parse).
var invalidValue = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-([^:]+): (.*)$`)

// describeFlagError rewrites the flag package's error about a value so that it names the flag as
// users type it (--rtt), says why in words (not "parse error") and gives an example.
func describeFlagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	m := invalidValue.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	value, uerr := strconv.Unquote(m[1])
	if uerr != nil {
		return msg
	}
	name, why := m[2], m[3]
	f := fs.Lookup(name)
	if f == nil {
		return msg
	}
	reason, example := flagValueReason(f, value, reparse(f.Value, value), why)
	line := fmt.Sprintf("invalid value %q for flag %s: %s", value, flagName(name), reason)
	if example != "" {
		line += fmt.Sprintf(", e.g. %s %s", flagName(name), example)
	}
	return line
}

// reparse parses value again as f's Set does, for the error the flag package keeps only as text.
func reparse(v flag.Value, value string) error {
	var err error
	switch v.(type) {
	case *units.Size:
		_, err = units.ParseSize(value)
	case *units.Rate:
		_, err = units.ParseRate(value)
	case *units.Fraction:
		_, err = units.ParseFraction(value)
	case *units.Sizes:
		_, err = units.ParseSizes(value)
	case *units.Rates:
		_, err = units.ParseRates(value)
	case *units.Fractions:
		_, err = units.ParseFractions(value)
	case *units.Durations:
		_, err = units.ParseDurations(value)
	case *durationFlag:
		_, err = units.ParseDuration(value)
	}
	return err
}

// flagName writes a flag as the help shows it: -s, --size.
func flagName(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// flagValueReason says why value is not a value of f, and gives an example value: cause is the
// error of f's Set when there is one, why the flag package's text of it.
func flagValueReason(f *flag.Flag, value string, cause error, why string) (reason, example string) {
	var pe *units.ParseError
	if errors.As(cause, &pe) {
		reason = pe.Err.Error()
		switch pe.Kind {
		case "size":
			example = "4MiB"
		case "rate":
			example = "500Mbit"
		case "fraction":
			example = "0.01"
		case "duration":
			return durationReason(value)
		}
		if d := f.DefValue; d != "" && d != "0" && d != "0B" && d != "0bit/s" {
			example = d
		}
		return reason, example
	}
	var g any
	if getter, ok := f.Value.(flag.Getter); ok {
		g = getter.Get()
	}
	switch g.(type) {
	case time.Duration:
		return durationReason(value)
	case int, int64, uint, uint64:
		if why == "value out of range" {
			return "out of range", ""
		}
		return "want a whole number", nonZero(f.DefValue, "1")
	case float64:
		if why == "value out of range" {
			return "out of range", ""
		}
		return "want a number", nonZero(f.DefValue, "1.5")
	case bool:
		// A boolean flag takes its value after "=" only: --json=false.
		return "want true or false, as in " + flagName(f.Name) + "=false", ""
	}
	if why == "parse error" {
		why = "not a valid value"
	}
	return why, ""
}

// durationReason explains a bad duration; a bare number lacks its unit, which the example adds.
func durationReason(value string) (reason, example string) {
	v := strings.TrimSpace(value)
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return "a duration needs a unit", v + "ms"
	}
	if strings.HasPrefix(v, "-") {
		return "a duration must not be negative", "20ms"
	}
	return "want a duration with a unit (ns, us, ms, s, m, h)", "20ms"
}

func nonZero(v, otherwise string) string {
	if v == "" || v == "0" {
		return otherwise
	}
	return v
}
