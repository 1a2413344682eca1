package perf

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A run whose context is cancelled (SIGINT, SIGTERM in crem perf) ends with ErrInterrupted and
// its partial result: interrupted, not verified, no error, the messages in flight counted as
// cancelled, no bandwidth; with AllSizes, the row cut short is interrupted and the sizes not
// started listed. The run's own timeout is a failure, not an interruption.
func TestCancelledRunIsInterrupted(t *testing.T) {
	for _, all := range []bool{false, true} {
		o := testOpts("write")
		o.Iters, o.Rate, o.RetryCount = 1_000_000, 100e6, 1000
		o.AllSizes = all
		if !all {
			o.Size = 64 << 10
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(300*time.Millisecond, cancel)
		res, err := Loopback(ctx, o)
		cancel()
		if !errors.Is(err, ErrInterrupted) {
			t.Fatalf("all sizes %v: %v, want ErrInterrupted (%+v)", all, err, res.Error)
		}
		if !res.Interrupted || res.Verified || res.Error != "" || res.Gbps != 0 || res.AverageGbps != 0 || res.PeakGbps != 0 ||
			res.Completed >= res.Iterations {
			t.Errorf("all sizes %v: interrupted %v verified %v error %q Gbit/s %v/%v/%v completed %d of %d", all, res.Interrupted,
				res.Verified, res.Error, res.Gbps, res.AverageGbps, res.PeakGbps, res.Completed, res.Iterations)
		}
		if all {
			if len(res.Rows) != 1 || !res.Rows[0].Interrupted || len(res.SizesNotRun) != len(Sizes(DefaultMaxSize))-1 {
				t.Errorf("%d rows, sizes not run %v", len(res.Rows), res.SizesNotRun)
			}
		} else if res.Cancelled < 1 {
			t.Errorf("%d messages in flight cancelled", res.Cancelled)
		}
	}
	o := testOpts("write")
	o.Size, o.Iters, o.Rate, o.RetryCount, o.Timeout = 64<<10, 1_000_000, 100e6, 1000, 300*time.Millisecond
	res, err := Loopback(context.Background(), o)
	if err == nil || errors.Is(err, ErrInterrupted) || res.Interrupted || res.Error == "" || res.Gbps != 0 {
		t.Errorf("timeout: %v, interrupted %v, error %q, Gbit/s %v", err, res.Interrupted, res.Error, res.Gbps)
	}
}
