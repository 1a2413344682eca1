package fec

import "fmt"

// Scheme is a CREM FEC scheme identifier (RULINGS C1).
type Scheme uint8

const (
	// SchemeSourceCopy: the repair symbol with Repair Index i is source symbol i, unmodified.
	SchemeSourceCopy Scheme = 0
	// SchemeCauchy: Cauchy Reed-Solomon over GF(2^8), with coded retransmission. REQUIRED.
	SchemeCauchy Scheme = 1
	// SchemeXOR: one repair symbol (Repair Index 0), the exclusive-or of the block's sources.
	SchemeXOR Scheme = 2
)

func (s Scheme) String() string {
	switch s {
	case SchemeSourceCopy:
		return "source-copy"
	case SchemeCauchy:
		return "cauchy"
	case SchemeXOR:
		return "xor"
	}
	return fmt.Sprintf("scheme-%d", uint8(s))
}

// CheckScheme reports whether s is one of the schemes this package implements.
func CheckScheme(s Scheme) error {
	if s > SchemeXOR {
		return fmt.Errorf("fec: scheme %d: %w", uint8(s), ErrScheme)
	}
	return nil
}
