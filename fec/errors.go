package fec

import "errors"

// Sentinel errors, for errors.Is. The returned errors wrap them with the values at fault.
var (
	ErrK            = errors.New("k must be 1 to 255")
	ErrIndex        = errors.New("index out of range")
	ErrSymbolLength = errors.New("bad symbol length")
	ErrPayloadLong  = errors.New("payload longer than T - 2")
	ErrLengthPrefix = errors.New("length prefix beyond the symbol")
	ErrPadding      = errors.New("non-zero padding after the payload")
	ErrSet          = errors.New("bad set of positions")
	ErrScheme       = errors.New("unsupported FEC scheme")
	ErrDuplicate    = errors.New("duplicate symbol ignored")
	ErrNotSolvable  = errors.New("not enough repair symbols")
	ErrArgs         = errors.New("mismatched arguments")
)
