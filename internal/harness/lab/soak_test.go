package lab

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/psn"
)

// TestSoakVerdict: a soak fails on each of its bounds alone (bytes lost or corrupted, an
// early end, a CLOSE before the end, the last interval's heap or heap objects beyond 1.5x the
// first's, its goroutines beyond the first's + 8, more open flows than at the first, fewer
// than two intervals) and passes within all of them.
func TestSoakVerdict(t *testing.T) {
	first := Interval{HeapBytes: 100 << 20, HeapObjects: 50000, Goroutines: 20, Flows: 4}
	ok := Run{Verified: true}
	within := first
	within.HeapBytes, within.HeapObjects, within.Goroutines = 150<<20, 75000, 28
	cases := []struct {
		name   string
		run    Run
		last   Interval
		closes uint64
		early  string
		want   string // in the one failure; "" passes
	}{
		{"within every bound", ok, within, 0, "", ""},
		{"bytes", Run{Error: "1 of 9 messages completed"}, first, 0, "", "bytes lost or corrupted"},
		{"early end", ok, first, 0, "context canceled", "ended before its duration"},
		{"CLOSE", ok, first, 1, "", "1 CLOSE before the end"},
		{"heap", ok, Interval{HeapBytes: 151 << 20, HeapObjects: 50000, Goroutines: 20, Flows: 4}, 0, "", "heap grew"},
		{"heap objects", ok, Interval{HeapBytes: 100 << 20, HeapObjects: 75001, Goroutines: 20, Flows: 4}, 0, "", "heap objects grew"},
		{"goroutines", ok, Interval{HeapBytes: 100 << 20, HeapObjects: 50000, Goroutines: 29, Flows: 4}, 0, "", "goroutines grew"},
		{"flows", ok, Interval{HeapBytes: 100 << 20, HeapObjects: 50000, Goroutines: 20, Flows: 5}, 0, "", "open flows grew"},
	}
	for _, c := range cases {
		v := judgeSoak(&c.run, []Interval{first, c.last}, c.closes, c.early)
		switch {
		case c.want == "" && (!v.Pass || len(v.Failures) != 0):
			t.Errorf("%s: %v, want a pass", c.name, v)
		case c.want != "" && (v.Pass || len(v.Failures) != 1 || !strings.Contains(v.Failures[0], c.want)):
			t.Errorf("%s: %v, want the one failure %q", c.name, v, c.want)
		}
	}
	if v := judgeSoak(&ok, []Interval{first}, 0, ""); v.Pass || !strings.Contains(v.String(), "at least two") {
		t.Errorf("one interval: %v, want a failure", v)
	}
}

// TestSoak soaks crem+tcaeth for six seconds at 2 percent bursty loss over four QPs:
// the transfers repeat until the duration ends, every byte of every one is verified, an interval
// is reported every 2 s and at the end, the open flows stay those of the four QPs, the
// goroutines within their bound, and no CLOSE comes before the end. The heap bounds are the
// soak command's to judge, over a minute or ten (docs: the soak): in a few seconds on a busy
// machine a stall can make the gateways' buffer pool grow, and they keep what it grew, so the
// test logs them.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("a soak of six seconds")
	}
	loss, err := netem.ParseLossSpec("gilbert-burst:rate=0.02,burst=4")
	if err != nil {
		t.Fatal(err)
	}
	var reported []Interval
	// Blocks of 8 packets of 1 KiB: the gateways' block stores, which fill up once and are then
	// reused (a CSF keeps 2 x 64 blocks per flow, a CRF 64 of up to 64 packets), fill within
	// some 1.5 s, before the first interval: what grows after it is what the bounds are for.
	// A QP that meets seven timeouts in a row (3 SRTT each: some 0.45 s in all) gives up; a busy
	// machine's stalls can be that long (stallRetries).
	o := Options{Loss: loss, Rate: 200e6, Size: 64 << 10, MTU: 1024, K: 8, M: 2, Seed: 11, RetryCount: stallRetries,
		Runs: []string{"crem+tcaeth"}, Duration: 6 * time.Second, StatsInterval: 2 * time.Second, Timeout: 30 * time.Second,
		Report: func(run string, iv Interval) { reported = append(reported, iv) }}
	res, err := Lab(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Runs[0]
	t.Logf("%+v", r.Soak)
	for _, iv := range r.Intervals {
		t.Log(iv.Line())
	}
	pass := r.Soak != nil
	for _, f := range r.Soak.Failures {
		if pass = pass && strings.HasPrefix(f, "heap"); pass {
			t.Logf("not judged here: %s", f)
		}
	}
	if !r.Verified || !pass || r.QPs != DefaultQPs || len(r.PerQP) != DefaultQPs {
		t.Fatalf("verified %v (%s), soak %v, %d QPs", r.Verified, r.Error, r.Soak, r.QPs)
	}
	if len(r.Intervals) != 3 || len(reported) != 3 || r.DurationS < 6 {
		t.Fatalf("%d intervals, %d reported, over %.2f s: want 3 over at least 6 s", len(r.Intervals), len(reported), r.DurationS)
	}
	for i, iv := range r.Intervals {
		if iv != reported[i] {
			t.Errorf("interval %d reported as %+v, kept as %+v", i, reported[i], iv)
		}
		if i > 0 && (iv.Messages <= r.Intervals[i-1].Messages || iv.ElapsedS <= r.Intervals[i-1].ElapsedS) {
			t.Errorf("interval %d: %d messages at %.2f s, not past the last one's", i, iv.Messages, iv.ElapsedS)
		}
		if iv.Bad != 0 || iv.Closes != 0 || iv.Flows != DefaultQPs || iv.HeapBytes == 0 || iv.Goroutines == 0 {
			t.Errorf("interval %d: %+v", i, iv)
		}
	}
	last := r.Intervals[len(r.Intervals)-1]
	if r.Messages < last.Messages || r.Bytes != int64(r.Messages)*int64(o.Size) || last.Lost == 0 || last.Restored == 0 {
		t.Errorf("%d messages (%d bytes) in all, %d at the last interval, which lost %d and restored %d",
			r.Messages, r.Bytes, last.Messages, last.Lost, last.Restored)
	}
	for _, q := range r.PerQP {
		if !q.Verified || q.Messages == 0 {
			t.Errorf("QP %d: %+v", q.QP, q)
		}
	}
}

// TestSoakFailsOnDeadPath: a soak over a path that loses everything ends early with its
// messages lost, and its verdict fails (the command then exits 1).
func TestSoakFailsOnDeadPath(t *testing.T) {
	loss, _ := netem.ParseLossSpec("1")
	res, err := Lab(context.Background(), Options{RTT: 2 * time.Millisecond, Loss: loss, Size: 64 << 10, Runs: []string{"tcaeth"},
		QPs: 1, Duration: 20 * time.Second, StatsInterval: 5 * time.Second, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Runs[0]
	if r.Verified || r.Soak == nil || r.Soak.Pass || res.Passed() || !strings.Contains(r.Soak.String(), "bytes lost") {
		t.Fatalf("verified %v, soak %v", r.Verified, r.Soak)
	}
}

// TestPortsHeld: the CREM port is bound on the lab's four addresses from its choice to
// the end (a port taken on one of them is another port, or refused when asked for), and runs
// one after another on the same Ports each find their path's sockets empty of what the last
// one left.
func TestPortsHeld(t *testing.T) {
	ps, err := ReservePorts(0)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	if ps.Port() < 49152 {
		t.Fatalf("port %d: not of the Dynamic Ports range", ps.Port())
	}
	for _, a := range []netip.Addr{addrA, addrB, addrPathA, addrPathB} {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, uint16(ps.Port()))))
		if err == nil {
			c.Close()
			t.Errorf("%v:%d is free while the lab holds it", a, ps.Port())
		} else if !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("%v:%d: %v", a, ps.Port(), err)
		}
	}
	if _, err := ReservePorts(ps.Port()); err == nil {
		t.Error("a held port reserved twice")
	}
	// Stale datagrams on a path end (a late retransmission of the last run) are not carried
	// into the next run.
	junk, err := net.DialUDP("udp", nil, ps.path[0].LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		junk.Write([]byte("stale datagram of an earlier run"))
	}
	junk.Close()
	loss, _ := netem.ParseLossSpec("0.01")
	for i := range 2 {
		res, err := Lab(context.Background(), Options{RTT: 2 * time.Millisecond, Loss: loss, Rate: 100e6, Messages: 2, Size: 64 << 10,
			Seed: uint64(i + 1), Runs: []string{"crem+tcaeth"}, Ports: ps, Timeout: 20 * time.Second, RetryCount: stallRetries})
		if err != nil || !res.Verified() || res.CREMPort != ps.Port() {
			t.Fatalf("lab %d on port %d: %v %+v", i, ps.Port(), err, res)
		}
	}
	if ps.gw[0] == nil || ps.gw[1] == nil {
		t.Error("the gateways' addresses are not held again after the runs")
	}
	if err := ps.Close(); err != nil {
		t.Fatal(err)
	}
	ps2, err := ReservePorts(ps.Port())
	if err != nil {
		t.Fatalf("port %d not free after Close: %v", ps.Port(), err)
	}
	ps2.Close()
}

// TestTallyPruned: a soak's path remembers the PSNs of a QP within the window in flight
// only, and counts the PSNs lost every time they were sent exactly as without pruning, across
// the wrap of the PSN space.
func TestTallyPruned(t *testing.T) {
	const window = 100
	pruned := &qpTally{psns: map[uint32][2]uint32{}}
	whole := &qpTally{psns: map[uint32][2]uint32{}}
	start := psn.Of(psn.Mask - 5000)
	var most int
	for i := range 20000 {
		p := start.Add(i)
		// Every 7th PSN is lost once and sent again 50 PSNs later; every 13th lost for good
		// (restored by the CRF).
		for _, tl := range []*qpTally{pruned, whole} {
			tl.count(p, i%7 == 0 || i%13 == 0)
			if i >= 50 && (i-50)%7 == 0 && (i-50)%13 != 0 {
				tl.count(start.Add(i-50), false)
			}
		}
		if len(pruned.psns) > 2*window {
			pruned.prune(window)
		}
		most = max(most, len(pruned.psns))
	}
	only := func(tl *qpTally) uint64 {
		n := tl.onlyDone
		for _, c := range tl.psns {
			if c[1] == c[0] {
				n++
			}
		}
		return n
	}
	if only(pruned) != only(whole) || only(whole) == 0 || most > 2*window+1 {
		t.Fatalf("lost every time: %d pruned, %d whole; the pruned tally held up to %d PSNs", only(pruned), only(whole), most)
	}
}

// TestStallMeter: a soak's interval names the longest stall of the process, what a tick
// of 10 ms came late by, and starts afresh after each interval.
func TestStallMeter(t *testing.T) {
	var m stallMeter
	ms := time.Millisecond
	for _, gap := range []time.Duration{10 * ms, 11 * ms, 250 * ms, 40 * ms} {
		m.tick(gap)
	}
	if got := m.take(); got != 240*ms {
		t.Fatalf("longest stall %v, want 240ms", got)
	}
	m.tick(10 * ms)
	if got := m.take(); got != 0 {
		t.Fatalf("after a take: %v, want 0", got)
	}
	m.run()() // its goroutine starts and stops (what the soak tests see of it runs for seconds)
}
