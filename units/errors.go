package units

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrSyntax is wrapped by every error about text that is not a quantity of the expected kind.
var ErrSyntax = errors.New("invalid syntax")

// ErrRange is wrapped by every error about a well-formed quantity outside the allowed range
// (negative, too large, not whole).
var ErrRange = errors.New("value out of range")

// ParseError records a failed parse: which kind of quantity, the input as given, and why.
// errors.Is(err, ErrSyntax) and errors.Is(err, ErrRange) tell the two families apart.
type ParseError struct {
	Kind  string // "size", "rate", "fraction", "duration"
	Input string
	Err   error
}

func (e *ParseError) Error() string {
	return "invalid " + e.Kind + " " + strconv.Quote(e.Input) + ": " + e.Err.Error()
}

func (e *ParseError) Unwrap() error { return e.Err }

// reason is a human explanation that still matches ErrSyntax or ErrRange.
type reason struct {
	msg  string
	kind error
}

func (r *reason) Error() string { return r.msg }
func (r *reason) Unwrap() error { return r.kind }

func syntaxf(format string, a ...any) error {
	return &reason{msg: fmt.Sprintf(format, a...), kind: ErrSyntax}
}

func rangef(format string, a ...any) error {
	return &reason{msg: fmt.Sprintf(format, a...), kind: ErrRange}
}
