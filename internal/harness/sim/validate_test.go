package sim

import (
	"math"
	"testing"
	"time"

	"github.com/crem-project/crem/internal/harness/sim/model"
)

// srModel returns the SDR-RDMA model of sr-rto for a cell of the sdr-casestudy path.
func srModel(rate int64, rtt time.Duration, mtu int, size int64, p float64) model.SR {
	pk, octets := writeShape(size, mtu)
	tinj := time.Duration(float64(octets) / float64(pk) * 8 / float64(rate) * float64(time.Second))
	return model.SR{N: int(pk), TInj: tinj, RTO: 3 * rtt, RTT: rtt, P: p}
}

// The simulator's sr-rto means agree within 10 percent with the analytical model of SDR-RDMA
// wherever the model slows selective repeat by 5 percent or more (400 Gbit/s, 25 ms, MTU 4096).
// Each cell has enough trials for its mean's standard error to be a few percent: cells where
// only some messages meet a loss are a coin toss between 1x and 4x and need hundreds.
func TestSRRTOAgreesWithModel(t *testing.T) {
	cells := []struct {
		size   int64
		p      float64
		trials int
	}{
		{1 * mib, 1e-3, 400},
		{1 * mib, 1e-2, 200},
		{16 * mib, 1e-3, 40},
		{16 * mib, 1e-2, 40},
		{64 * mib, 1e-3, 12},
		{64 * mib, 1e-2, 12},
	}
	s, _ := LookupScheme("sr-rto")
	for _, c := range cells {
		if testing.Short() && c.size > 16*mib {
			continue
		}
		sw := Sweep{Scenario: Scenario{Name: "validate", Rate: 400e9, RTT: 25 * time.Millisecond, MTU: 4096,
			Loss: LossBernoulli, DropRates: []float64{c.p}, Sizes: []int64{c.size}, Trials: c.trials},
			Seed: 11, Schemes: []Scheme{s}}
		res, err := sw.Run()
		if err != nil {
			t.Fatal(err)
		}
		r := res[0]
		m := srModel(400e9, 25*time.Millisecond, 4096, r.MessageBytes, r.DropRate)
		mean, err := m.Mean()
		if err != nil {
			t.Fatal(err)
		}
		slow := mean.Seconds() / m.Ideal().Seconds()
		rel := (r.MeanS - mean.Seconds()) / mean.Seconds()
		t.Logf("%d MiB p=%g, %d trials: sim %.4f s (%.3fx), model %.4f s (%.3fx), %+.1f%%; retx %.0f",
			r.MessageBytes>>20, r.DropRate, r.Trials, r.MeanS, r.MeanS/r.IdealS, mean.Seconds(), slow, rel*100,
			r.RetransmittedPackets)
		if slow < 1.05 {
			t.Errorf("cell %d MiB at %g is not slowed by 5 percent in the model; pick another", c.size>>20, c.p)
			continue
		}
		if math.Abs(rel) > 0.10 {
			t.Errorf("%d MiB at %g: sr-rto mean %.4f s is %+.1f%% from the model's %.4f s",
				r.MessageBytes>>20, r.DropRate, r.MeanS, rel*100, mean.Seconds())
		}
	}
}

// ec agrees with the model of fixed erasure coding where its blocks do not fail: the message
// and its parity (m/k of it, on the same link) are injected, then one RTT.
func TestECAgreesWithModel(t *testing.T) {
	for _, c := range []struct {
		size int64
		p    float64
	}{{16 * mib, 1e-4}, {64 * mib, 1e-3}} {
		x := casestudy(scheme(t, "ec"), c.size, c.p, 5)
		o, err := Run(x)
		if err != nil {
			t.Fatal(err)
		}
		pk, octets := writeShape(c.size, 4096)
		tinj := time.Duration(float64(octets) / float64(pk) * 8 / 400e9 * float64(time.Second))
		m := model.EC{N: int(pk), K: 32, M: 8, TInj: tinj, RTT: x.RTT}
		if f := m.BlockFailure(c.p); f > 1e-6 {
			t.Fatalf("cell where blocks fail (%g): pick another", f)
		}
		want := m.Completion()
		excess := want - o.Ideal
		if d := o.Completion - want; d < -excess/5 || d > excess/5+50*time.Microsecond {
			t.Errorf("%d MiB at %g: ec %v, model %v (ideal %v)", c.size>>20, c.p, o.Completion, want, o.Ideal)
		}
		t.Logf("%d MiB at %g: ec %v (%.4fx), model %v (%.4fx)", c.size>>20, c.p, o.Completion,
			o.Completion.Seconds()/o.Ideal.Seconds(), want, want.Seconds()/o.Ideal.Seconds())
	}
}
