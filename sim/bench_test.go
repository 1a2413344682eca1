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
