package testenv

import (
	"runtime"
	"testing"
)

// SteadyState times step in the steady state: fill steps first (an engine's whole window used
// once), then a collection of the setup's garbage and settle more steps, so that caches and
// vector units are as the loop itself leaves them (right after the collector the GFNI path ran
// up to 1.6 times slower for the first few hundred packets), and only then b.N timed steps of
// bytes each. A short -benchtime then gives the figure of a long one.
func SteadyState(b *testing.B, fill, settle int, bytes int64, step func()) {
	b.Helper()
	for range fill {
		step()
	}
	runtime.GC()
	for range settle {
		step()
	}
	b.SetBytes(bytes)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		step()
	}
	b.StopTimer()
}
