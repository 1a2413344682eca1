package wire

import (
	"errors"
	"fmt"
)

// ErrDiscard is matched (errors.Is) by every error that asks the caller to drop the datagram
// silently: the draft requires that messages with an unknown Version or Type be discarded.
var ErrDiscard = errors.New("wire: discard silently")

// ErrUnknownVersion and ErrUnknownType tell the two discard cases apart. Both also match
// ErrDiscard.
var (
	ErrUnknownVersion = errors.New("wire: unknown Version")
	ErrUnknownType    = errors.New("wire: unknown Type")
)

// DiscardError reports a datagram whose Version or Type this implementation does not know.
type DiscardError struct {
	Field string // "Version" or "Type"
	Value uint8
}

func (e *DiscardError) Error() string {
	return fmt.Sprintf("wire: unknown %s %d: discard silently", e.Field, e.Value)
}

// Is lets errors.Is match ErrDiscard and the sentinel of the field at fault.
func (e *DiscardError) Is(target error) bool {
	switch target {
	case ErrDiscard:
		return true
	case ErrUnknownVersion:
		return e.Field == "Version"
	case ErrUnknownType:
		return e.Field == "Type"
	}
	return false
}

// FieldError reports a malformed message: which message, which field (named as in the draft's
// figures), and what is wrong with it.
type FieldError struct {
	Message Type // zero when the datagram is too short to say
	Field   string
	Reason  string
}

func (e *FieldError) Error() string {
	msg := "header"
	if e.Message.Known() {
		msg = e.Message.String()
	}
	return "wire: " + msg + ": " + e.Field + ": " + e.Reason
}

func fieldErr(t Type, field, format string, args ...any) error {
	return &FieldError{Message: t, Field: field, Reason: fmt.Sprintf(format, args...)}
}
