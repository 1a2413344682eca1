package csf

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestZZOne(t *testing.T) {
	b, _ := os.ReadFile("testdata/fuzz/FuzzSender/4b419fac120f7db8")
	lines := strings.Split(string(b), "\n")
	v := strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")")
	s, _ := strconv.Unquote(v)
	u := parseSetup([]byte(s))
	x := newFuzzSender(t, u)
	_ = x
	t.Logf("%+v", u)
	data := []byte(s)[5:]
	for len(data) >= 2 {
		k, n := data[0], int(data[1])
		data = data[2:]
		a := data[:min(n, len(data))]
		data = data[len(a):]
		t.Logf("op %d: % x", k&31%fopCount, a[:min(len(a), 30)])
	}
}
