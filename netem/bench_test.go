package netem

import (
	"testing"
	"time"
)

// BenchmarkLink measures one packet's way through a link: Send, then the Deliver that hands it
// on, at the simulator's scale (4096-octet packets at 400 Gbit/s behind 12.5 ms, about 150,000
// packets in flight). The simulator needs 2 million packet events per second per core, 500 ns
// each for everything; a link should take a small part of that and allocate nothing.
func BenchmarkLink(b *testing.B) {
	cases := []struct {
		name string
		cfg  Config
		loss string
	}{
		{"plain", Config{Rate: 400e9, Delay: 12500 * us}, "none"},
		{"bernoulli", Config{Rate: 400e9, Delay: 12500 * us, QueuePackets: 10_000, ECNThreshold: 1000}, "0.01"},
		{"gilbert", Config{Rate: 400e9, Delay: 12500 * us, QueuePackets: 10_000, ECNThreshold: 1000}, "gilbert-burst:rate=0.01,burst=4"},
		{"every", Config{Rate: 400e9, Delay: 12500 * us}, "every:n=1,of=1000"},
		{"jitter+reorder", Config{Rate: 400e9, Delay: 12500 * us, Jitter: 10 * us, JitterDist: JitterNormal,
			QueuePackets: 10_000, ECNThreshold: 1000, ReorderProb: 0.001, ReorderDelay: 20 * us}, "0.01"},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			cfg := c.cfg
			cfg.Loss = mustModel(b, c.loss, 1)
			cfg.Seed = 1
			l := mustLink(b, cfg)
			tag := &struct{}{}
			now := time.Duration(0)
			delivered := 0
			out := func(Packet) { delivered++ }
			step := func(i int) {
				now += 82 // 4096 octets at 400 Gbit/s take 81.92 ns: the line is just full
				l.Send(now, Packet{Size: 4096, ECT: true, ID: uint64(i), Tag: tag})
				l.Deliver(now, out)
			}
			// Warm up past one delay, so the rings have grown to the packets in flight and the
			// loop measures the steady state.
			for i := range 400_000 {
				step(i)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				step(i)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mpkt/s")
			if delivered == 0 {
				b.Fatal("nothing delivered")
			}
		})
	}
}

// BenchmarkLoss measures one loss decision per model.
func BenchmarkLoss(b *testing.B) {
	for _, spec := range []string{"none", "0.01", "gilbert-burst:rate=0.01,burst=4", "every:n=1,of=1000", "script:1,2,3"} {
		b.Run(spec, func(b *testing.B) {
			m := mustModel(b, spec, 1)
			n := 0
			for b.Loop() {
				if m.Drop() {
					n++
				}
			}
			_ = n
		})
	}
}
