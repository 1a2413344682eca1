package netem

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

const (
	us = time.Microsecond
	ms = time.Millisecond
)

// fataler is what both *testing.T and *rapid.T offer.
type fataler interface {
	Helper()
	Fatal(args ...any)
}

func mustLink(t fataler, cfg Config) *Link {
	t.Helper()
	l, err := NewLink(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

type arrival struct {
	at time.Duration
	p  Packet
}

// advance delivers, deadline by deadline, everything due by now, as an event loop would before
// it moves its clock to now.
func advance(l *Link, now time.Duration, out *[]arrival) {
	for {
		at, ok := l.NextDeadline()
		if !ok || at > now {
			return
		}
		l.Deliver(at, func(p Packet) { *out = append(*out, arrival{at, p}) })
	}
}

// drain delivers everything in flight, stepping from deadline to deadline.
func drain(l *Link) []arrival {
	var out []arrival
	advance(l, math.MaxInt64, &out)
	return out
}

func ids(as []arrival) []uint64 {
	out := make([]uint64, len(as))
	for i, a := range as {
		out[i] = a.p.ID
	}
	return out
}

// TestSerializationAndPropagationExact: 1500-octet packets at 1 Gbit/s leave 12 us apart, and
// with 10 ms of delay packet i sent at 0 arrives at (i+1)*12us + 10ms exactly.
func TestSerializationAndPropagationExact(t *testing.T) {
	l := mustLink(t, Config{Rate: 1e9, Delay: 10 * ms})
	for i := range 10 {
		if v := l.Send(0, Packet{Size: 1500, ID: uint64(i)}); v != Queued {
			t.Fatalf("packet %d: %v", i, v)
		}
	}
	if d := l.QueueDelay(0); d != 120*us {
		t.Errorf("queue delay at 0 = %v, want 120us", d)
	}
	if d := l.QueueDelay(60 * us); d != 60*us {
		t.Errorf("queue delay at 60us = %v, want 60us", d)
	}
	if n, b := l.QueueLen(30 * us); n != 8 || b != 8*1500 {
		t.Errorf("queue at 30us = %d packets %d octets, want 8 and 12000", n, b)
	}
	got := drain(l)
	for i, a := range got {
		if want := time.Duration(i+1)*12*us + 10*ms; a.at != want || a.p.ID != uint64(i) {
			t.Errorf("packet %d (id %d) delivered at %v, want %v", i, a.p.ID, a.at, want)
		}
	}
	// An idle link starts serializing at the send time.
	l.Send(time.Second, Packet{Size: 1500})
	if at, _ := l.NextDeadline(); at != time.Second+12*us+10*ms {
		t.Errorf("after idle: deadline %v", at)
	}
}

// TestSerializationFractionalNanoseconds: 4096 octets at 400 Gbit/s take 81.92 ns; a burst keeps
// the fractions, so the 100th packet ends at exactly 8192 ns, not 100 x 82.
func TestSerializationFractionalNanoseconds(t *testing.T) {
	l := mustLink(t, Config{Rate: 400e9})
	for range 100 {
		l.Send(0, Packet{Size: 4096})
	}
	got := drain(l)
	if last := got[len(got)-1].at; last != 8192 {
		t.Errorf("100th packet at %v, want 8.192us", last)
	}
	if got[0].at != 82 { // 81.92 rounded up: a packet is not out before its last bit
		t.Errorf("first packet at %v, want 82ns", got[0].at)
	}
}

func TestInfiniteRate(t *testing.T) {
	l := mustLink(t, Config{Delay: 5 * ms, QueuePackets: 1, ECNThreshold: 1})
	for i := range 100 {
		if v := l.Send(time.Duration(i), Packet{Size: 9000, ECT: true, ID: uint64(i)}); v != Queued {
			t.Fatalf("packet %d: %v with an infinite rate", i, v)
		}
	}
	got := drain(l)
	for i, a := range got {
		if a.at != time.Duration(i)+5*ms || a.p.CE {
			t.Errorf("packet %d at %v CE %v", i, a.at, a.p.CE)
		}
	}
	if l.QueueDelay(0) != 0 {
		t.Error("queue delay with infinite rate")
	}
}

// TestSizeFromData: Size 0 means len(Data), and Data comes out as the same slice, unmodified.
func TestSizeFromData(t *testing.T) {
	l := mustLink(t, Config{Rate: 8e9}) // 1 ns per octet
	data := []byte("hello, responder")
	l.Send(0, Packet{Data: data})
	got := drain(l)
	if len(got) != 1 || got[0].at != time.Duration(len(data)) {
		t.Fatalf("got %+v", got)
	}
	if &got[0].p.Data[0] != &data[0] || string(got[0].p.Data) != "hello, responder" || got[0].p.Size != 0 {
		t.Error("packet data copied or modified")
	}
	if s := l.Stats(); s.SentBytes != uint64(len(data)) || s.DeliveredBytes != uint64(len(data)) {
		t.Errorf("bytes %+v", s)
	}
}

func TestQueueOverflow(t *testing.T) {
	var dropped []uint64
	l := mustLink(t, Config{Rate: 1e9, QueuePackets: 5,
		OnDrop: func(_ time.Duration, p Packet, v Verdict) {
			if v != DroppedOverflow {
				t.Errorf("drop hook: %v", v)
			}
			dropped = append(dropped, p.ID)
		}})
	var verdicts []Verdict
	for i := range 10 {
		verdicts = append(verdicts, l.Send(0, Packet{Size: 1500, ID: uint64(i)}))
	}
	want := []Verdict{Queued, Queued, Queued, Queued, Queued, DroppedOverflow, DroppedOverflow,
		DroppedOverflow, DroppedOverflow, DroppedOverflow}
	if !slices.Equal(verdicts, want) {
		t.Errorf("verdicts %v", verdicts)
	}
	if !slices.Equal(dropped, []uint64{5, 6, 7, 8, 9}) {
		t.Errorf("drop hook saw %v", dropped)
	}
	// After two serializations there is room for two more, not three.
	for i := range 3 {
		verdicts[i] = l.Send(24*us, Packet{Size: 1500, ID: uint64(10 + i)})
	}
	if !slices.Equal(verdicts[:3], []Verdict{Queued, Queued, DroppedOverflow}) {
		t.Errorf("after 24us: %v", verdicts[:3])
	}
	s := l.Stats()
	if s.DroppedOverflow != 6 || s.PeakQueue != 5 || s.DroppedOverflowBytes != 6*1500 {
		t.Errorf("stats %+v", s)
	}

	// An octet limit: 4000 octets hold two 1500-octet packets and a 1000-octet one.
	l = mustLink(t, Config{Rate: 1e9, QueueBytes: 4000})
	got := []Verdict{
		l.Send(0, Packet{Size: 1500}), l.Send(0, Packet{Size: 1500}),
		l.Send(0, Packet{Size: 1500}), l.Send(0, Packet{Size: 1000}), l.Send(0, Packet{Size: 1}),
	}
	if !slices.Equal(got, []Verdict{Queued, Queued, DroppedOverflow, Queued, DroppedOverflow}) {
		t.Errorf("octet limit: %v", got)
	}
}

// TestECNMarking: with threshold 3, an ECT packet finding 3 or more ahead of it is marked; a
// non-ECT one is not, and is not dropped either.
func TestECNMarking(t *testing.T) {
	l := mustLink(t, Config{Rate: 1e9, ECNThreshold: 3})
	for i := range 8 {
		l.Send(0, Packet{Size: 1500, ID: uint64(i), ECT: i != 5})
	}
	var marked []uint64
	for _, a := range drain(l) {
		if a.p.CE {
			marked = append(marked, a.p.ID)
		}
	}
	if !slices.Equal(marked, []uint64{3, 4, 6, 7}) {
		t.Errorf("marked %v, want [3 4 6 7]", marked)
	}
	if s := l.Stats(); s.Marked != 4 || s.DroppedOverflow != 0 {
		t.Errorf("stats %+v", s)
	}
	// Once the queue has drained below the threshold, no more marks; an already-CE packet is not
	// counted again.
	l.Send(time.Second, Packet{Size: 1500, ECT: true, ID: 100})
	l.Send(time.Second, Packet{Size: 1500, ECT: true, CE: true})
	if got := drain(l); got[0].p.CE || !got[1].p.CE || l.Stats().Marked != 4 {
		t.Errorf("after drain: %+v, marked %d", got, l.Stats().Marked)
	}
}

// TestLossPoint: lost on the wire, a packet still takes its queue place and its serialization
// time; lost at the input, it takes neither.
func TestLossPoint(t *testing.T) {
	for _, c := range []struct {
		at          LossPoint
		firstArrive time.Duration
		overflow    uint64
	}{
		{LossOnWire, 24 * us, 1},
		{LossAtInput, 12 * us, 0},
	} {
		loss, _ := NewScript([]int{0})
		l := mustLink(t, Config{Rate: 1e9, QueuePackets: 2, Loss: loss, LossAt: c.at})
		v0 := l.Send(0, Packet{Size: 1500, ID: 0})
		l.Send(0, Packet{Size: 1500, ID: 1})
		l.Send(0, Packet{Size: 1500, ID: 2})
		got := drain(l)
		if v0 != DroppedLoss || got[0].p.ID != 1 || got[0].at != c.firstArrive {
			t.Errorf("%v: verdict %v, first delivery %+v", c.at, v0, got[0])
		}
		if s := l.Stats(); s.DroppedOverflow != c.overflow || s.DroppedLoss != 1 {
			t.Errorf("%v: %+v", c.at, s)
		}
	}
}

// TestDropHookNamesEveryDrop: the hook sees exactly the packets Send reported as dropped.
func TestDropHookNamesEveryDrop(t *testing.T) {
	var hooked, reported []uint64
	l := mustLink(t, Config{Rate: 1e9, QueuePackets: 20, Loss: mustModel(t, "0.05", 3),
		OnDrop: func(_ time.Duration, p Packet, _ Verdict) { hooked = append(hooked, p.ID) }})
	for i := range 10_000 {
		if l.Send(time.Duration(i)*10*us, Packet{Size: 1500, ID: uint64(i)}) != Queued {
			reported = append(reported, uint64(i))
		}
	}
	if len(reported) == 0 || !slices.Equal(hooked, reported) {
		t.Errorf("hook saw %d drops, Send reported %d", len(hooked), len(reported))
	}
}

// TestFIFOWithoutReordering: with jitter of either kind and no reordering, packets arrive in the
// order they were sent, never earlier than their serialization plus delay minus jitter. Sparse
// traffic shows the jitter's spread around the delay; dense traffic (packets closer than the
// jitter) must still stay in order.
func TestFIFOWithoutReordering(t *testing.T) {
	for _, dist := range []JitterDist{JitterUniform, JitterNormal} {
		for _, spacing := range []time.Duration{2 * us, ms} {
			l := mustLink(t, Config{Rate: 10e9, Delay: ms, Jitter: 200 * us, JitterDist: dist, Seed: 9})
			sent := map[uint64]time.Duration{}
			late := 0
			var got []arrival
			const n = 20_000
			for i := range n {
				now := time.Duration(i) * spacing
				advance(l, now, &got)
				sent[uint64(i)] = now
				l.Send(now, Packet{Size: 1500, ID: uint64(i)})
			}
			got = append(got, drain(l)...)
			for i, a := range got {
				if a.p.ID != uint64(i) {
					t.Fatalf("%v jitter, spacing %v: delivery %d is packet %d", dist, spacing, i, a.p.ID)
				}
				if i > 0 && a.at < got[i-1].at {
					t.Fatalf("%v jitter, spacing %v: delivery times go back at %d", dist, spacing, i)
				}
				earliest := sent[a.p.ID] + 1200*time.Nanosecond
				if dist == JitterUniform {
					earliest += ms - 200*us
				}
				if a.at < earliest {
					t.Fatalf("%v jitter, spacing %v: packet %d at %v, before %v", dist, spacing, i, a.at, earliest)
				}
				if a.at > sent[a.p.ID]+1200*time.Nanosecond+ms {
					late++
				}
			}
			if spacing == ms && (late < n*45/100 || late > n*55/100) {
				t.Errorf("%v jitter: %d of %d sparse packets later than the mean delay, want about half", dist, late, n)
			}
			if l.Stats().Reordered != 0 {
				t.Errorf("%v jitter counted reordering", dist)
			}
		}
	}
}

// TestReordering: with a reorder probability, about that share of packets is held back and later
// packets overtake them.
func TestReordering(t *testing.T) {
	l := mustLink(t, Config{Rate: 1e9, Delay: ms, ReorderProb: 0.1, ReorderDelay: 50 * us, Seed: 4})
	const n = 100_000
	var got []arrival
	for i := range n {
		now := time.Duration(i) * 12 * us
		advance(l, now, &got)
		l.Send(now, Packet{Size: 1500, ID: uint64(i)})
	}
	got = append(got, drain(l)...)
	overtaken := 0
	maxID := uint64(0)
	for i, a := range got {
		if i > 0 && a.at < got[i-1].at {
			t.Fatalf("deliveries not in time order at %d", i)
		}
		if a.p.ID < maxID {
			overtaken++
		}
		maxID = max(maxID, a.p.ID)
	}
	s := l.Stats()
	sd := math.Sqrt(n * 0.1 * 0.9)
	if math.Abs(float64(s.Reordered)-0.1*n) > 5*sd {
		t.Errorf("%d reordered of %d, want about 10%%", s.Reordered, n)
	}
	// A held packet is overtaken unless the next packet is held too.
	if overtaken < int(s.Reordered)*8/10 || overtaken > int(s.Reordered) {
		t.Errorf("%d packets overtaken, %d held back", overtaken, s.Reordered)
	}
	if len(got) != n {
		t.Errorf("delivered %d of %d", len(got), n)
	}
}

// TestLinkDeterminism: the same seeds give the same delivery times, other seeds other times.
func TestLinkDeterminism(t *testing.T) {
	type outcome struct {
		at time.Duration
		id uint64
		ce bool
	}
	run := func(seed uint64) []outcome {
		l := mustLink(t, Config{Rate: 1e9, Delay: ms, Jitter: 100 * us, ReorderProb: 0.05,
			ReorderDelay: 30 * us, QueuePackets: 50, ECNThreshold: 10, Seed: seed,
			Loss: mustModel(t, "gilbert-burst:rate=0.01,burst=4", seed)})
		var got []arrival
		for i := range 20_000 {
			now := time.Duration(i) * 11 * us
			advance(l, now, &got)
			l.Send(now, Packet{Size: 1500, ID: uint64(i), ECT: true})
		}
		var out []outcome
		for _, a := range append(got, drain(l)...) {
			out = append(out, outcome{a.at, a.p.ID, a.p.CE})
		}
		return out
	}
	a, b, c := run(1), run(1), run(2)
	if !slices.Equal(a, b) {
		t.Error("seed 1 gave two different runs")
	}
	if slices.Equal(a, c) {
		t.Error("seeds 1 and 2 gave the same run")
	}
}

// TestJitterDoesNotChangeLosses: the loss draws are independent of jitter and reordering.
func TestJitterDoesNotChangeLosses(t *testing.T) {
	lost := func(cfg Config) []uint64 {
		var out []uint64
		cfg.Loss = mustModel(t, "0.02", 8)
		cfg.OnDrop = func(_ time.Duration, p Packet, _ Verdict) { out = append(out, p.ID) }
		l := mustLink(t, cfg)
		for i := range 10_000 {
			l.Send(time.Duration(i)*us, Packet{Size: 100, ID: uint64(i)})
		}
		return out
	}
	plain := lost(Config{Delay: ms})
	jittered := lost(Config{Delay: ms, Jitter: 300 * us, ReorderProb: 0.3, ReorderDelay: us, Seed: 77})
	if !slices.Equal(plain, jittered) {
		t.Error("turning on jitter and reordering changed which packets were lost")
	}
}

func TestPathDirectionsIndependent(t *testing.T) {
	p, err := NewPath(Config{Delay: 10 * ms, Loss: mustModel(t, "script:0", 0)}, Config{Delay: 3 * ms})
	if err != nil {
		t.Fatal(err)
	}
	if v := p.AB.Send(0, Packet{ID: 1}); v != DroppedLoss {
		t.Errorf("A to B packet 0: %v", v)
	}
	p.AB.Send(0, Packet{ID: 2})
	p.BA.Send(0, Packet{ID: 3})
	var toA, toB []uint64
	for {
		at, ok := p.NextDeadline()
		if !ok {
			break
		}
		p.Deliver(at, func(pk Packet) { toB = append(toB, pk.ID) }, func(pk Packet) { toA = append(toA, pk.ID) })
		if at != 3*ms && at != 10*ms {
			t.Errorf("deadline %v", at)
		}
	}
	if !slices.Equal(toB, []uint64{2}) || !slices.Equal(toA, []uint64{3}) {
		t.Errorf("to B %v, to A %v", toB, toA)
	}
	if _, err := NewPath(Config{}, Config{Rate: -1}); err == nil || !strings.Contains(err.Error(), "B to A") {
		t.Errorf("bad reverse direction: %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	_, err := NewLink(Config{Rate: -1, Delay: -1, Jitter: -1, QueuePackets: -1, QueueBytes: -1,
		ECNThreshold: -1, ReorderProb: 2, ReorderDelay: -1, JitterDist: 9, LossAt: 9})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"rate -1", "delay -1ns", "jitter -1ns", "-1 packets", "-1 octets",
		"ECN threshold", "reorder probability 2", "reorder delay", "jitter distribution", "loss point"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if _, err := NewLink(Config{ReorderProb: 0.1}); err == nil {
		t.Error("reordering without a delay accepted")
	}
	if _, err := NewLink(Config{ReorderProb: math.NaN(), ReorderDelay: 1}); err == nil {
		t.Error("NaN reorder probability accepted")
	}
	for in, want := range map[string]JitterDist{"uniform": JitterUniform, "Normal": JitterNormal} {
		if d, err := ParseJitterDist(in); err != nil || d != want {
			t.Errorf("ParseJitterDist(%q) = %v, %v", in, d, err)
		}
	}
	if _, err := ParseJitterDist("pareto"); err == nil || !strings.Contains(err.Error(), `"pareto"`) {
		t.Errorf("ParseJitterDist(pareto): %v", err)
	}
}

// TestNoAllocationsInSteadyState: once the rings have grown to the bandwidth-delay product,
// sending and delivering allocate nothing.
func TestNoAllocationsInSteadyState(t *testing.T) {
	l := mustLink(t, Config{Rate: 100e9, Delay: ms, Jitter: 10 * us, JitterDist: JitterNormal,
		QueuePackets: 1000, ECNThreshold: 100, ReorderProb: 0.01, ReorderDelay: 20 * us,
		Loss: mustModel(t, "gilbert-burst:rate=0.01,burst=4", 1), Seed: 1})
	tag := &struct{ psn uint32 }{7}
	now := time.Duration(0)
	step := func() {
		now += 300 // ns: faster than the bottleneck (328 ns), so the queue fills, marks and drops
		l.Send(now, Packet{Size: 4096, ECT: true, ID: uint64(now), Tag: tag})
		l.Deliver(now, func(Packet) {})
	}
	for range 100_000 {
		step()
	}
	if a := testing.AllocsPerRun(10_000, step); a != 0 {
		t.Errorf("%v allocations per packet in steady state", a)
	}
}

// TestCountersAddUp (property): whatever the configuration and the traffic, every packet sent is
// delivered, dropped or in flight, in packets and in octets; the queue never exceeds its limits;
// only ECT packets get CE; without reordering, delivery follows send order.
func TestCountersAddUp(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		spec := rapid.SampledFrom([]string{"none", "0.1", "gilbert:p=0.05,r=0.3", "every:n=2,of=9", "script:0,3,4"}).Draw(rt, "loss")
		cfg := Config{
			Rate:         rapid.SampledFrom([]int64{0, 1e6, 1e9, 400e9}).Draw(rt, "rate"),
			Delay:        time.Duration(rapid.Int64Range(0, int64(ms)).Draw(rt, "delay")),
			Jitter:       time.Duration(rapid.Int64Range(0, int64(100*us)).Draw(rt, "jitter")),
			JitterDist:   JitterDist(rapid.IntRange(0, 1).Draw(rt, "dist")),
			QueuePackets: rapid.IntRange(0, 20).Draw(rt, "qpkts"),
			QueueBytes:   rapid.IntRange(0, 30000).Draw(rt, "qbytes"),
			ECNThreshold: rapid.IntRange(0, 10).Draw(rt, "ecn"),
			LossAt:       LossPoint(rapid.IntRange(0, 1).Draw(rt, "lossAt")),
			Seed:         rapid.Uint64().Draw(rt, "seed"),
			Loss:         mustModel(rt, spec, 1),
		}
		reorder := rapid.Bool().Draw(rt, "reorder")
		if reorder {
			cfg.ReorderProb = rapid.Float64Range(0, 1).Draw(rt, "rprob")
			cfg.ReorderDelay = time.Duration(rapid.Int64Range(1, int64(ms)).Draw(rt, "rdelay"))
		}
		l := mustLink(rt, cfg)
		now := time.Duration(0)
		var out []Packet
		check := func() {
			s := l.Stats()
			if s.Sent != s.Delivered+s.DroppedLoss+s.DroppedOverflow+uint64(s.InFlight) {
				rt.Fatalf("packets do not add up: %+v", s)
			}
			inFlightBytes := s.SentBytes - s.DeliveredBytes - s.DroppedLossBytes - s.DroppedOverflowBytes
			if s.InFlight == 0 && inFlightBytes != 0 {
				rt.Fatalf("octets do not add up: %+v", s)
			}
			n, b := l.QueueLen(now)
			if cfg.QueuePackets > 0 && n > cfg.QueuePackets || cfg.QueueBytes > 0 && b > cfg.QueueBytes {
				rt.Fatalf("queue holds %d packets, %d octets", n, b)
			}
		}
		ops := rapid.IntRange(1, 300).Draw(rt, "ops")
		id := uint64(0)
		for range ops {
			now += time.Duration(rapid.Int64Range(0, int64(50*us)).Draw(rt, "gap"))
			if rapid.IntRange(0, 3).Draw(rt, "op") > 0 {
				l.Send(now, Packet{Size: rapid.IntRange(0, 9000).Draw(rt, "size"), ECT: rapid.Bool().Draw(rt, "ect"), ID: id})
				id++
			} else {
				l.Deliver(now, func(p Packet) { out = append(out, p) })
			}
			check()
		}
		l.Deliver(now, func(p Packet) { out = append(out, p) })
		for {
			at, ok := l.NextDeadline()
			if !ok {
				break
			}
			if at <= now {
				rt.Fatalf("deadline %v before the last delivery time %v", at, now)
			}
			now = at
			l.Deliver(now, func(p Packet) { out = append(out, p) })
			check()
		}
		if l.InFlight() != 0 {
			rt.Fatal("packets left in flight")
		}
		for i, p := range out {
			if p.CE && !p.ECT {
				rt.Fatalf("non-ECT packet %d marked", p.ID)
			}
			if !reorder && i > 0 && p.ID < out[i-1].ID {
				rt.Fatalf("packet %d delivered after %d without reordering", p.ID, out[i-1].ID)
			}
		}
	})
}
