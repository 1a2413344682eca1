package wire

import (
	"math"
	"testing"
	"time"
)

// TestQueueDelayChangeC10: Queue Delay Change is signed microseconds in 32 bits (C10); a change
// beyond them is clamped, never wrapped to the other sign.
func TestQueueDelayChangeC10(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int32
	}{
		{0, 0}, {1500 * time.Nanosecond, 1}, {-300 * time.Microsecond, -300}, {2 * time.Second, 2_000_000},
		{time.Duration(math.MaxInt32+1) * time.Microsecond, math.MaxInt32},
		{-time.Duration(math.MaxInt32+2) * time.Microsecond, math.MinInt32},
		{math.MaxInt64, math.MaxInt32}, {math.MinInt64, math.MinInt32},
	} {
		if got := QueueDelayChange(tc.d); got != tc.want {
			t.Errorf("QueueDelayChange(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}
