package main

import (
	"errors"
	"flag"
	"fmt"
)

// newFlagSet returns a flag set whose --help prints a usage line, a description and the flags.
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
// (0 after --help, 2 after a bad flag).
func parseFlags(fs *flag.FlagSet, args []string) (code int, done bool) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(fs.Output())
		return 0, true
	default:
		return 2, true
	}
}
