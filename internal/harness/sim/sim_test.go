package sim

import (
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

func scheme(t testing.TB, name string) Scheme {
	t.Helper()
	s, err := LookupScheme(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func casestudy(s Scheme, size int64, p float64, seed uint64) Params {
	return Params{Scheme: s, Rate: 400e9, RTT: 25 * time.Millisecond, MTU: 4096, Size: size, DropRate: p, Seed: seed}
}

var rcSchemes = []string{"gbn", "sr-rto", "sr-nack", "tcaeth"}

// A synthetic region longer than its period costs the period: offsets a period apart are the
// same memory, and Check sees the pattern once every offset of one period was written.
func TestRegionAliased(t *testing.T) {
	src, err := NewSource(1<<30, 1<<20, 42)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Free()
	dst, err := NewSink(1<<30, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Free()
	if src.Len() != 1<<30 || src.Resident() != 1<<20 {
		t.Fatalf("len %d resident %d", src.Len(), src.Resident())
	}
	if runtime.GOOS == "linux" && src.Bytes()[5] != src.Bytes()[5+3<<20] {
		t.Fatal("source not periodic")
	}
	if dst.Check(42) == nil {
		t.Fatal("an empty sink passes its check")
	}
	copy(dst.Bytes()[700<<20:], src.Bytes()[700<<20:701<<20]) // one whole period, far out
	if err := dst.Check(42); err != nil {
		t.Fatal(err)
	}
	if dst.Check(43) == nil {
		t.Fatal("the check passes for another seed")
	}
}

// The sink checks every octet the responder places against the source at its place, and that
// every slot of its region was placed: one wrong octet anywhere, even one a later placement at
// the same place would make right, or one slot never placed, fails the check.
func TestSinkChecksEveryPlacement(t *testing.T) {
	rs := &Regions{Seed: 9}
	const n, mtu = 1 << 20, 4096
	src, snk, err := rs.get(n, 64<<10, mtu)
	if err != nil {
		t.Fatal(err)
	}
	at := func(off int) []byte { // the source at offset off of the region, one slot
		b := make([]byte, mtu)
		for i := range b {
			b[i] = src[(off+i)%len(src)]
		}
		return b
	}
	placeAll := func(bad, skip int) {
		snk.reset(n, mtu)
		for off := 0; off < n; off += mtu {
			p := at(off)
			switch off {
			case bad:
				p[17] ^= 0x40
			case skip:
				p = at(off - mtu) // a duplicate of the slot before, in place of this one
				off -= mtu
				snk.Place(off, p)
				off += mtu
				continue
			}
			snk.Place(off, p)
		}
	}
	placeAll(-1, -1)
	if err := snk.check(n); err != nil {
		t.Fatal(err)
	}
	placeAll(3*mtu, -1)
	if err := snk.check(n); err == nil || !strings.Contains(err.Error(), "octet 12305 ") {
		t.Fatalf("a wrong octet at 12305: %v", err)
	}
	placeAll(-1, 100*mtu)
	if err := snk.check(n); err == nil || !strings.Contains(err.Error(), "never placed") {
		t.Fatalf("a slot never placed: %v", err)
	}
	snk.reset(n, mtu)
	snk.Place(0, at(0))
	if err := snk.check(n); err == nil {
		t.Fatal("one slot of a message passes")
	}
}

// A trial fails when a placed octet differs from the source: the sink of a worker's regions
// made to expect one other octet of the period (placed 256 times in a 16 MiB message of a
// 64 KiB period, over rc alone and behind CREM's receiver, which restores lost packets).
func TestTrialFailsOnWrongOctet(t *testing.T) {
	for _, name := range []string{"tcaeth", "crem+tcaeth"} {
		p := casestudy(scheme(t, name), 16<<20, 1e-3, 1)
		p.Period = 64 << 10
		rs := &Regions{Seed: 3}
		p.Regions = rs
		if _, err := Run(p); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		src, snk, err := rs.get(int(p.Size), p.Period, p.MTU)
		if err != nil {
			t.Fatal(err)
		}
		want := append([]byte(nil), src...)
		want[5000] ^= 1
		snk.want = want
		if _, err := Run(p); err == nil || !strings.Contains(err.Error(), "octet 5000 of the responder's region differs") {
			t.Fatalf("%s: a wrong octet: %v", name, err)
		}
	}
}

// Without loss every rc scheme completes within a microsecond of the ideal: injection of the
// message alone plus one RTT.
func TestLosslessIsIdeal(t *testing.T) {
	for _, name := range rcSchemes {
		o, err := Run(casestudy(scheme(t, name), 4<<20, 0, 1))
		if err != nil {
			t.Fatal(err)
		}
		if d := o.Completion - o.Ideal; d < 0 || d > time.Microsecond || o.SecondRound || o.Retransmitted != 0 {
			t.Errorf("%s: completion %v, ideal %v, retransmitted %d", name, o.Completion, o.Ideal, o.Retransmitted)
		}
		if o.RepairOctets != 0 || o.WireOctets < uint64(o.MessageOctets) {
			t.Errorf("%s: repair %d wire %d", name, o.RepairOctets, o.WireOctets)
		}
	}
}

// The real rc engines at 400 Gbit/s and 25 ms RTT, MTU 4096, carry 64 MiB messages at a drop rate
// of 1e-3 in both directions; the data lands byte for byte (Run checks it).
func TestScaleRCSchemes(t *testing.T) {
	if testing.Short() {
		t.Skip("64 MiB per scheme")
	}
	for _, name := range rcSchemes {
		st := time.Now()
		o, err := Run(casestudy(scheme(t, name), 64<<20, 1e-3, 3))
		if err != nil {
			t.Fatal(err)
		}
		if o.Incomplete || o.Completion < o.Ideal {
			t.Errorf("%s: %+v", name, o)
		}
		t.Logf("%s: %.3fx ideal, %d retransmitted, %d reverse, %d events in %v", name,
			o.Completion.Seconds()/o.Ideal.Seconds(), o.Retransmitted, o.Reverse, o.Events, time.Since(st))
	}
}

// A 1 GiB message at 400 Gbit/s (262,144 packets of 4 KiB) with the real engines.
func TestOneGiB(t *testing.T) {
	if testing.Short() {
		t.Skip("1 GiB")
	}
	st := time.Now()
	o, err := Run(casestudy(scheme(t, "sr-nack"), 1<<30, 1e-4, 5))
	if err != nil {
		t.Fatal(err)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("1 GiB sr-nack at 1e-4: %.3fx ideal, %d events in %v; Go runtime holds %d MiB",
		o.Completion.Seconds()/o.Ideal.Seconds(), o.Events, time.Since(st), ms.Sys>>20)
	if o.Incomplete || o.Events < 2*262144 {
		t.Fatalf("%+v", o)
	}
}

// A run is a function of its parameters: the same seed gives the same outcome, and a sweep gives
// the same results on one worker as on many.
func TestDeterministic(t *testing.T) {
	for _, name := range rcSchemes {
		p := casestudy(scheme(t, name), 2<<20, 1e-2, 9)
		a, err := Run(p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Run(p)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: two runs differ:\n%+v\n%+v", name, a, b)
		}
	}
	sw := smallSweep()
	sw.Workers = 1
	one, err := sw.Run()
	if err != nil {
		t.Fatal(err)
	}
	sw.Workers = 4
	many, err := sw.Run()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(one, many) {
		t.Fatal("sweep results depend on the number of workers")
	}
}

func smallSweep() Sweep {
	sc, _ := LookupScenario("sdr-casestudy")
	sc.Sizes, sc.DropRates, sc.Extra, sc.Trials = []int64{256 << 10, 1 << 20}, []float64{1e-3, 1e-2}, nil, 5
	s, _ := ParseSchemes("sr-rto,sr-nack,tcaeth")
	return Sweep{Scenario: sc, Schemes: s, Seed: 4}
}

// Shards cover the cells exactly once, and merging their files gives the whole sweep.
func TestShardsMerge(t *testing.T) {
	sw := smallSweep()
	all, err := sw.Run()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var files []string
	for i := range 3 {
		s := sw
		s.Shard, s.Shards = i, 3
		res, err := s.Run()
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, ShardFileName(i, 3))
		if err := WriteShard(f, &s, res); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	merged, err := Merge(files)
	if err != nil {
		t.Fatal(err)
	}
	if len(merged) != len(all) {
		t.Fatalf("merged %d cells, want %d", len(merged), len(all))
	}
	for i := range all {
		a, m := all[i], merged[i]
		a.KM, m.KM = nil, nil
		if !reflect.DeepEqual(a, m) {
			t.Fatalf("cell %d differs:\n%+v\n%+v", i, a, m)
		}
	}
	if _, err := Merge(files[:2]); err == nil {
		t.Fatal("merge without shard 2 succeeded")
	}
	if _, err := Merge(append(files, files[0])); err == nil {
		t.Fatal("merge with a shard twice succeeded")
	}
	// A slice of the same scenario name and seed run over another path is refused.
	other := sw
	other.Scenario.RTT *= 2
	other.Shard, other.Shards = 2, 3
	res, err := other.Run()
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), ShardFileName(2, 3))
	if err := WriteShard(f, &other, res); err != nil {
		t.Fatal(err)
	}
	if _, err := Merge([]string{files[0], files[1], f}); err == nil || !strings.Contains(err.Error(), "ran on") {
		t.Fatalf("merge of slices over different paths: %v", err)
	}
}

// Every scheme meets the same loss draws: a trial's seed depends on the sweep seed, the drop
// rate, the size and the trial, never on the scheme, and the cells of one (drop, size) carry the
// same seeds.
func TestSameDrawsAcrossSchemes(t *testing.T) {
	sw := smallSweep()
	cells := sw.Cells()
	for _, c := range cells {
		for _, d := range cells {
			if c.DropRate == d.DropRate && c.Size == d.Size && sw.params(c, 3).Seed != sw.params(d, 3).Seed {
				t.Fatalf("%s and %s get different seeds", c.Scheme.Name, d.Scheme.Name)
			}
		}
	}
	if TrialSeed(1, 1e-3, 1<<20, 0) == TrialSeed(1, 1e-3, 1<<20, 1) {
		t.Fatal("trials share a seed")
	}
}

// A trial that would run past its event budget is reported incomplete, with its time a lower
// bound, rather than failing the sweep.
func TestIncompleteIsCensored(t *testing.T) {
	p := casestudy(scheme(t, "gbn"), 4<<20, 1e-2, 1)
	p.MaxEvents = 3000
	o, err := Run(p)
	if err != nil {
		t.Fatal(err)
	}
	if !o.Incomplete || !o.SecondRound || o.Completion <= 0 {
		t.Fatalf("%+v", o)
	}
	r := Summarize("x", Cell{Scheme: p.Scheme, DropRate: p.DropRate, Size: p.Size}, []Outcome{o})
	if r.Incomplete != 1 {
		t.Fatalf("%+v", r)
	}
}

// Congestion loss comes from the bottleneck queue's overflow, after CE marks.
func TestCongestedQueue(t *testing.T) {
	p := casestudy(scheme(t, "tcaeth"), 64<<20, 1e-2, 1)
	p.Loss = LossQueue
	ab, _, err := p.linkConfigs()
	if err != nil {
		t.Fatal(err)
	}
	if ab.Loss != nil || ab.QueuePackets == 0 || ab.ECNThreshold == 0 || ab.Rate >= p.Rate {
		t.Fatalf("congested link %+v", ab)
	}
	o, err := Run(p)
	if err != nil {
		t.Fatal(err)
	}
	if o.Retransmitted == 0 {
		t.Fatalf("no congestion loss: %+v", o)
	}
}

// Quantiles are nearest-rank and the summary's ratios are per message octet.
func TestSummarize(t *testing.T) {
	var outs []Outcome
	for i := 1; i <= 1000; i++ {
		outs = append(outs, Outcome{Completion: time.Duration(i) * time.Millisecond, Ideal: time.Millisecond,
			WireOctets: 2000, RepairOctets: 100, Retransmitted: 2, Reverse: 3, SecondRound: i > 900})
	}
	r := Summarize("s", Cell{Scheme: Scheme{Name: "x"}, DropRate: 0.1, Size: 1000}, outs)
	if r.P50S != 0.5 || r.P99S != 0.99 || r.P999S != 0.999 || r.MeanS != 0.5005 {
		t.Fatalf("times %+v", r)
	}
	if r.Overhead != 2 || r.RepairOverhead != 0.1 || r.SecondRoundShare != 0.1 || r.RetransmittedPackets != 2 || r.ReversePackets != 3 {
		t.Fatalf("ratios %+v", r)
	}
}

func TestParse(t *testing.T) {
	if s, err := ParseSchemes("all"); err != nil || len(s) != 9 {
		t.Fatal(s, err)
	}
	if _, err := ParseSchemes("sr-rto,bogus"); err == nil {
		t.Fatal("bogus scheme accepted")
	}
	if _, err := ParseSchemes("gbn,gbn"); err == nil {
		t.Fatal("repeated scheme accepted")
	}
	for _, n := range []string{"sdr-casestudy", "metro", "bursty", "congested", "reporter"} {
		if _, err := LookupScenario(n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Run(Params{}); err == nil {
		t.Fatal("empty params accepted")
	}
}

// A sweep whose trials would need more memory than the limit is refused before it starts; the
// default limit admits every cell of the case study, 8 GiB under CREM included.
func TestMemoryLimit(t *testing.T) {
	sc, _ := LookupScenario("sdr-casestudy")
	sc.Sizes, sc.DropRates, sc.Extra = []int64{8 << 30}, []float64{1e-6}, nil
	s, _ := ParseSchemes("crem+tcaeth")
	sw := Sweep{Scenario: sc, Schemes: s, MemoryLimit: 256 << 20}
	if _, err := sw.Run(); err == nil || !strings.Contains(err.Error(), "above the limit") {
		t.Fatalf("CREM at 8 GiB under a 256 MiB limit: %v", err)
	}
	for _, name := range []string{"tcaeth", "crem+tcaeth", "ec", "gbn"} {
		need := memEstimate(sw.params(Cell{Scheme: scheme(t, name), DropRate: 1e-6, Size: 8 << 30}, 0))
		if need > 2<<30 || need < 64<<20 {
			t.Errorf("%s at 8 GiB estimated at %d MiB, want 64 MiB to 2 GiB (measured peak heap 0.1 to 0.65 GiB)", name, need>>20)
		}
	}
}

// Figure axes over drop rates read as the rates were given, not as the floats nearest to them.
func TestLogTickLabels(t *testing.T) {
	var labels []string
	for _, tk := range (roundedLogTicks{}).Ticks(1e-6, 1e-2) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got, want := strings.Join(labels, " "), "1e-06 1e-05 0.0001 0.001 0.01"; got != want {
		t.Fatalf("labels %q, want %q", got, want)
	}
}

// trimZeros cuts exactly the trailing zero octets, whatever their number and alignment.
func TestTrimZeros(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 255, 256, 257, 600, 4096 + 60} {
		for _, nz := range []int{0, 1, 7, 8, 255, 256, 257, 513, 4000} {
			if nz > n {
				continue
			}
			b := make([]byte, n)
			for i := range n - nz {
				b[i] = byte(i%200 + 1)
			}
			if n-nz > 3 {
				b[n-nz-2] = 0 // a zero inside the data stays
			}
			if got := len(trimZeros(b)); got != n-nz {
				t.Errorf("%d octets ending in %d zeros: %d kept", n, nz, got)
			}
		}
	}
}
