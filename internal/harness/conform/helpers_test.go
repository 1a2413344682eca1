package conform_test

import (
	"regexp"
	"testing"
)

func mustRegexp(t testing.TB, s string) *regexp.Regexp {
	t.Helper()
	re, err := regexp.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	return re
}
