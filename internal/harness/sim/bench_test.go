package sim

import (
	"testing"
	"time"
)

// BenchmarkEvents measures the simulator's speed with the real rc engines: packet events (a
// packet put on a link, or delivered from it) per second of wall time on one core, for a 16 MiB
// message at 400 Gbit/s, 25 ms RTT, MTU 4096, and for a 1 GiB one.
func BenchmarkEvents(b *testing.B) {
	for _, name := range []string{"sr-nack", "tcaeth"} {
		for _, p := range []float64{0, 1e-3} {
			b.Run(name+"/"+map[bool]string{true: "lossless", false: "1e-3"}[p == 0], func(b *testing.B) {
				s := scheme(b, name)
				var events uint64
				rs := &Regions{Seed: 1} // as a sweep's worker keeps them
				defer rs.Free()
				st := time.Now()
				for i := 0; b.Loop(); i++ {
					x := casestudy(s, 16<<20, p, uint64(i))
					x.Regions = rs
					o, err := Run(x)
					if err != nil {
						b.Fatal(err)
					}
					events += o.Events
				}
				b.ReportMetric(float64(events)/time.Since(st).Seconds(), "events/s")
			})
		}
	}
}

func BenchmarkOneGiB(b *testing.B) {
	s := scheme(b, "tcaeth")
	var events uint64
	rs := &Regions{Seed: 1} // as a sweep's worker keeps them
	defer rs.Free()
	st := time.Now()
	for i := 0; b.Loop(); i++ {
		x := casestudy(s, 1<<30, 1e-4, uint64(i))
		x.Regions = rs
		o, err := Run(x)
		if err != nil {
			b.Fatal(err)
		}
		events += o.Events
	}
	b.ReportMetric(float64(events)/time.Since(st).Seconds(), "events/s")
}

// BenchmarkEightGiB runs the first trial of the case study's 8 GiB cell (1e-6, sweep seed 1) per
// scheme, the same trial every iteration: the largest trial of the sweep. Under gbn and sr-rto a
// loss leaves hundreds of thousands of PSNs outstanding behind it for an RTO.
func BenchmarkEightGiB(b *testing.B) {
	for _, s := range Schemes() {
		b.Run(s.Name, func(b *testing.B) { benchTrial(b, s, 8<<30, 1e-6, TrialSeed(1, 1e-6, 8<<30, 0)) })
	}
}

// benchTrial runs the trial of scheme s at the case study's path with seed, again and again,
// and reports packet events per second and the peak heap in use.
func benchTrial(b *testing.B, s Scheme, size int64, drop float64, seed uint64) {
	rs := &Regions{Seed: 1}
	defer rs.Free()
	x := casestudy(s, size, drop, seed)
	x.Regions = rs
	if _, err := Run(x); err != nil { // warm-up: the regions and the runtime's heap
		b.Fatal(err)
	}
	var events uint64
	stop := heapPeak()
	st := time.Now()
	for b.Loop() {
		o, err := Run(x)
		if err != nil {
			b.Fatal(err)
		}
		if o.Incomplete {
			b.Fatalf("%s: incomplete: %+v", s.Name, o)
		}
		events += o.Events
	}
	b.ReportMetric(float64(events)/time.Since(st).Seconds(), "events/s")
	b.ReportMetric(float64(stop())/(1<<20), "peak-heap-MiB")
}
