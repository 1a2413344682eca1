package units

import (
	"math"
	"math/big"
	"strings"
)

// number is a non-negative decimal as typed: digits[.digits], kept exact.
type number struct {
	mant *big.Int // all digits, the point removed
	frac int      // digits after the point
}

// splitNumber reads the leading decimal of s and returns it with the rest of s (the unit),
// spaces between them removed.
func splitNumber(s string) (number, string, error) {
	if s == "" {
		return number{}, "", syntaxf("empty")
	}
	if s[0] == '-' {
		return number{}, "", rangef("negative")
	}
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	if i == 0 {
		return number{}, "", syntaxf("does not start with a digit")
	}
	intPart := s[:i]
	fracPart := ""
	if i < len(s) && s[i] == '.' {
		j := i + 1
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		if j == i+1 {
			return number{}, "", syntaxf("no digit after the decimal point")
		}
		fracPart = s[i+1 : j]
		i = j
	}
	mant, ok := new(big.Int).SetString(intPart+fracPart, 10)
	if !ok {
		return number{}, "", syntaxf("malformed number")
	}
	return number{mant: mant, frac: len(fracPart)}, strings.TrimLeft(s[i:], " "), nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// times returns n*unit if it is a whole number that fits an int64; what names the whole unit
// ("octets", "bits per second") for the error.
func (n number) times(unit int64, what string) (int64, error) {
	v := new(big.Int).Mul(n.mant, big.NewInt(unit))
	if n.frac > 0 {
		div := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n.frac)), nil)
		var rem big.Int
		v.QuoRem(v, div, &rem)
		if rem.Sign() != 0 {
			return 0, rangef("not a whole number of %s", what)
		}
	}
	if !v.IsInt64() {
		return 0, rangef("too large (at most %d %s)", int64(math.MaxInt64), what)
	}
	return v.Int64(), nil
}
