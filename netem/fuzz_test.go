package netem

import (
	"strings"
	"testing"
)

// FuzzParseLossSpec: the parser never panics, every error names the input, and an accepted
// specification's canonical form parses back to itself with the same mean.
func FuzzParseLossSpec(f *testing.F) {
	for _, s := range []string{"none", "0.01", "1%", "bernoulli:0.01", "bernoulli:p=1e-4",
		"gilbert:p=0.001,r=0.25", "gilbert:p=0.01,r=0.5,h=0.5,k=0.001", "gilbert-burst:rate=0.01,burst=4",
		"every:n=1,of=1000", "script:3,17,18", "script:", "gilbert:p=0,r=0", "every:n=5,of=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseLossSpec(in)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "loss model ") {
				t.Fatalf("error does not name the input: %v", err)
			}
			return
		}
		back, err := ParseLossSpec(s.String())
		if err != nil {
			t.Fatalf("%q -> %q does not parse: %v", in, s.String(), err)
		}
		if back.String() != s.String() || back.MeanLoss() != s.MeanLoss() {
			t.Fatalf("%q -> %q (mean %v) -> %q (mean %v)", in, s, s.MeanLoss(), back, back.MeanLoss())
		}
		if m := s.MeanLoss(); !(m >= 0 && m <= 1) {
			t.Fatalf("%q: mean loss %v", in, m)
		}
		model := s.New(1)
		for range 100 {
			model.Drop()
		}
	})
}
