//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package kdrop_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/crem-project/crem/internal/harness/kdroplab"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/reporter"
	"github.com/crem-project/crem/reporter/kdrop"
	"github.com/crem-project/crem/wire"
)

// queueReasons are the drop reasons of a qdisc that overflowed, by name.
var queueReasons = []string{"QDISC_DROP", "QDISC_OVERLIMIT", "QDISC_CONGESTED"}

type flowID struct {
	family int
	qp     uint32
}

// outcome is what a run through the lab gave: per flow the PSNs the receiver missed and those
// the reports named, and the totals.
type outcome struct {
	sent, qdisc          int
	missing, reported    map[flowID][]psn.PSN
	lostCount, truncated int
	// qdc are the reports' Queue Delay Changes in microseconds (PR19); maxDelay the longest
	// queueing delay the driver estimated.
	qdc      []int32
	maxDelay time.Duration
	stats    kdrop.DriverStats
	attach   string
}

// runLab sends perFlow datagrams of an IPv4 and an IPv6 flow through the lab's router, with
// the program watching its bottleneck and a reporter engine behind it. With late, the driver
// starts reading only after the traffic (the ring buffer fills meanwhile).
// labMode is how a run loads the program and sends: mode "" (the best the kernel offers),
// "linear" or "tracepoint"; gso > 1 sends that many datagrams in one UDP_SEGMENT write.
type labMode struct {
	ring  int
	late  bool
	mode  string
	gso   int
	size  int    // datagram size (default 1100)
	qdisc string // the router's bottleneck (default tbf rate 100mbit burst 16kb limit 24kb)
	// offered is the sender's rate in bit/s (default 800 Mbit/s, eight times the default
	// bottleneck: most datagrams drop, some cross, and a sender a loaded host starves, as
	// under the race detector, still offers more than the bottleneck carries).
	offered float64
}

func runLab(t *testing.T, m labMode) outcome {
	t.Helper()
	kdroplab.Need(t)
	if m.size == 0 {
		m.size = 1100
	}
	if m.qdisc == "" {
		m.qdisc = "tbf rate 100mbit burst 16kb limit 24kb"
	}
	l := kdroplab.New(t, m.qdisc)
	byName, err := kdrop.Reasons()
	if err != nil {
		t.Fatal(err)
	}
	var reasons []uint32
	for _, n := range queueReasons {
		reasons = append(reasons, byName[n])
	}
	dev := l.Dev
	cfg := kdrop.Config{Devices: []kdrop.Device{dev}, Ports: []uint16{4791}, Reasons: reasons, RingSize: m.ring,
		Tracepoint: m.mode == "tracepoint", Linear: m.mode == "linear"}
	var src *kdrop.Source
	if m.mode == "tracepoint" {
		src, err = openWithTracefs(t, cfg)
	} else {
		src, err = kdrop.Open(cfg)
	}
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer src.Close()
	t.Logf("attached at %s", src.Attach())

	// A short per-flow interval keeps every list under 255 PSNs (beyond, the engine cuts it and
	// says Truncated, PR3), so that the PSNs can be compared one by one.
	eng, err := reporter.New(reporter.Config{NodeID: 7, Port: 50000, FlowInterval: 100 * time.Microsecond, PortRate: 1e6, PortBurst: 64})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	reported := map[flowID][]psn.PSN{}
	lostCount, truncated := 0, 0
	var qdc []int32
	d := &kdrop.Driver{Src: src, Eng: eng, Send: func(dg reporter.Datagram) error {
		rep, err := wire.ParsePathReport(dg.Payload)
		if err != nil {
			t.Errorf("malformed report: %v", err)
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		fam := 6
		if rep.Source.Is4() {
			fam = 4
		}
		if rep.Truncated {
			truncated++
		}
		for _, h := range rep.Hops {
			if h.Cause != wire.CauseCongestion || h.NodeID != 7 {
				t.Errorf("hop entry %+v: want node 7, cause congestion", h)
			}
			lostCount += int(h.LostCount)
			qdc = append(qdc, h.QueueDelayChangeUS)
			id := flowID{fam, rep.FlowLabel}
			reported[id] = append(reported[id], h.DroppedPSNs...)
		}
		return nil
	}}
	// The router's queue discipline is read from its namespace (PR19).
	kdroplab.InNetns(t, l.Router, func() {
		q, err := kdrop.OpenQueueReader()
		if err != nil {
			t.Errorf("queue reader: %v", err)
			return
		}
		d.Queues, d.QueueDevices = q, []int{dev.Ifindex}
	})
	if d.Queues == nil {
		t.FailNow()
	}
	defer d.Queues.Close()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	var maxDelay time.Duration
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for ctx.Err() == nil {
			maxDelay = max(maxDelay, d.Stats().QueueDelay[0])
			time.Sleep(time.Millisecond)
		}
	}()
	if !m.late {
		go func() { ran <- d.Run(ctx) }()
	}

	const perFlow = 1500
	const start = psn.PSN(0xffff00) // the PSNs wrap in the middle
	flows := map[flowID]netip.AddrPort{
		{4, 0x11}: netip.MustParseAddrPort("10.71.2.1:4791"),
		{6, 0x22}: netip.MustParseAddrPort("[fd71:2::1]:4791"),
	}
	received := map[flowID]map[psn.PSN]bool{}
	var conn *net.UDPConn
	kdroplab.InNetns(t, l.Receiver, func() {
		c, err := net.ListenUDP("udp", &net.UDPAddr{Port: 4791})
		if err != nil {
			t.Error(err)
			return
		}
		c.SetReadBuffer(8 << 20)
		conn = c
	})
	if conn == nil {
		t.FailNow()
	}
	defer conn.Close()
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		buf := make([]byte, 2048)
		for {
			conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			n, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			fam := 6
			if from.Addr().Unmap().Is4() {
				fam = 4
			}
			if n < 12 {
				continue
			}
			id := flowID{fam, binary.BigEndian.Uint32(buf[4:]) & 0xffffff}
			if received[id] == nil {
				received[id] = map[psn.PSN]bool{}
			}
			received[id][psn.PSN(binary.BigEndian.Uint32(buf[8:])&0xffffff)] = true
		}
	}()
	kdroplab.InNetns(t, l.Sender, func() {
		socks := map[flowID]*net.UDPConn{}
		for id, to := range flows {
			c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			socks[id] = c
			if m.gso > 1 {
				rc, _ := c.SyscallConn()
				var serr error
				rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT, m.size) })
				if serr != nil {
					t.Skipf("UDP_SEGMENT: %v", serr)
				}
			}
		}
		step := max(m.gso, 1)
		buf := make([]byte, 0, step*m.size)
		offeredRate := m.offered
		if offeredRate == 0 {
			offeredRate = 800e6
		}
		began, sent := time.Now(), 0
		for i := 0; i < perFlow; i += step {
			for id, c := range socks {
				buf = buf[:0]
				for j := i; j < i+step && j < perFlow; j++ {
					buf = append(buf, kdroplab.Datagram(m.size, id.qp, start.Add(j))...)
				}
				if _, err := c.Write(buf); err != nil {
					t.Errorf("sending flow %v: %v", id, err)
					return
				}
			}
			// Paced by the clock, not by a count of sleeps: a loaded host's sleeps last a
			// millisecond or more, and a sender that sleeps 50 us per batch then offers less
			// than the bottleneck carries and nothing drops.
			sent += len(socks) * min(step, perFlow-i) * m.size
			// Behind by more than a millisecond (a stall), the debt is forgiven rather than
			// sent in one burst: a burst would drop more PSNs of a flow within one report
			// interval than a report names.
			switch ahead := time.Until(began.Add(time.Duration(float64(sent*8) / offeredRate * float64(time.Second)))); {
			case ahead > 200*time.Microsecond:
				time.Sleep(ahead)
			case ahead < -time.Millisecond:
				began = began.Add(-ahead - time.Millisecond)
			}
		}
	})
	<-recvDone
	if m.late {
		go func() { ran <- d.Run(ctx) }()
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("driver: %v", err)
	}
	<-polled

	o := outcome{sent: 2 * perFlow, qdisc: l.Dropped(t), attach: src.Attach(), missing: map[flowID][]psn.PSN{}, reported: map[flowID][]psn.PSN{},
		lostCount: lostCount, truncated: truncated, qdc: qdc, maxDelay: maxDelay, stats: d.Stats()}
	for id := range flows {
		for i := 0; i < perFlow; i++ {
			if p := start.Add(i); !received[id][p] {
				o.missing[id] = append(o.missing[id], p)
			}
		}
		slices.Sort(o.missing[id])
		got := slices.Clone(reported[id])
		slices.Sort(got)
		o.reported[id] = got
	}
	if o.qdisc == 0 || o.qdisc == o.sent {
		t.Fatalf("the bottleneck dropped %d of %d: the test needs some drops and some deliveries", o.qdisc, o.sent)
	}
	return o
}

// TestQueueDropsReportedExactlyThroughTbf: RoCEv2-shaped datagrams of an IPv4 and an IPv6
// flow cross a router whose egress tbf cannot carry them; every PSN the queue dropped is
// reported once, and only those: the receiver's gaps, the qdisc's drop counter and the PSNs
// of the PATH_REPORTs agree.
func TestQueueDropsReportedExactlyThroughTbf(t *testing.T) {
	checkExact(t, runLab(t, labMode{ring: 1 << 20}))
}

// TestQueueDelayChangeUnderTbfPR19: the driver reads the router's token bucket over rtnetlink
// while it drops; the queueing delay it estimates is the bucket's queue (24 KiB) over its rate
// (100 Mbit/s), about 2 ms, and the reports carry Queue Delay Change: the first report of a
// flow against the least delay the device showed (a queue filling from empty: positive), the
// later ones against the flow's previous report; none beyond what a full queue holds.
func TestQueueDelayChangeUnderTbfPR19(t *testing.T) {
	o := runLab(t, labMode{ring: 1 << 20})
	full := time.Duration(24 * 1024 * 8 * float64(time.Second) / 100e6) // 1966 us
	st := o.stats
	delay, ok := st.QueueDelay[0]
	delay = o.maxDelay
	pos, maxAbs := 0, int32(0)
	for _, c := range o.qdc {
		if c > 0 {
			pos++
		}
		maxAbs = max(maxAbs, c, -c)
	}
	t.Logf("queue readings %d (errors %d), longest delay %v (a full queue: %v); %d hop entries, %d with a positive Queue Delay Change, largest |change| %d us",
		st.QueueReads, st.QueueReadErrors, delay, full, len(o.qdc), pos, maxAbs)
	if st.QueueReads == 0 || st.QueueReadErrors != 0 || !ok {
		t.Fatalf("%d readings, %d failed, delay known %v", st.QueueReads, st.QueueReadErrors, ok)
	}
	if delay <= 0 || delay > full*3/2 {
		t.Errorf("longest delay %v: want (0, %v]", delay, full*3/2)
	}
	if pos == 0 || time.Duration(maxAbs)*time.Microsecond > full*3/2 {
		t.Errorf("%d positive changes, largest %d us: want some, none beyond %v", pos, maxAbs, full*3/2)
	}
}

// TestTracepointFallbackReportsExactly: the classic tracepoint skb:kfree_skb, where tp_btf is
// refused, reports the same: every PSN the queue dropped, once.
func TestTracepointFallbackReportsExactly(t *testing.T) {
	checkExact(t, runLab(t, labMode{ring: 1 << 20, mode: "tracepoint"}))
}

// TestLinearProgramReportsExactly: the program for kernels without the skb's dynptr in
// tracing programs, which reads the linear part of the buffer, reports the same for datagrams
// that lie there whole.
func TestLinearProgramReportsExactly(t *testing.T) {
	checkExact(t, runLab(t, labMode{ring: 1 << 20, mode: "linear"}))
}

// TestGSOPacketsReportEveryPSN: UDP_SEGMENT writes of 8 datagrams cross the router as GSO
// packets, which its tbf drops whole; each dropped packet counts its 8 datagrams, and every PSN
// they carry is reported once (the program reads them through the skb's dynptr, page fragments
// included), so the reports name exactly the receiver's gaps.
func TestGSOPacketsReportEveryPSN(t *testing.T) {
	// Twice the bottleneck: a GSO packet dropped is 8 PSNs at once, and a report names at most
	// 255 of a flow (beyond, it says Truncated), so the drops must not come denser.
	o := runLab(t, labMode{ring: 1 << 20, gso: 8, offered: 200e6})
	if o.attach != "tp_btf+dynptr" {
		t.Skipf("the kernel gives tracing programs no skb dynptr (attached at %s): GSO datagrams in page fragments are counted unreadable", o.attach)
	}
	k := o.stats.Kernel
	if k.GSO == 0 {
		t.Fatalf("no GSO packet dropped (%+v): the kernel segmented them before the queue", k)
	}
	if k.Matched != uint64(o.qdisc) {
		t.Errorf("the queue dropped %d packets, the program matched %d", o.qdisc, k.Matched)
	}
	checkPSNs(t, o, o.stats.PSNs)
}

// TestGSOBeyondMaxPSNsCountedTruncated: a GSO packet of 100 datagrams names the first 64
// (MaxPSNs) and counts the other 36 in Lost Count, the report saying Truncated: Lost Count still
// equals the receiver's gaps, and every PSN named was dropped.
func TestGSOBeyondMaxPSNsCountedTruncated(t *testing.T) {
	o := runLab(t, labMode{ring: 1 << 20, gso: 100, size: 600, qdisc: "tbf rate 100mbit burst 128kb limit 128kb"})
	if o.attach != "tp_btf+dynptr" {
		t.Skipf("attached at %s: GSO datagrams in page fragments are counted unreadable", o.attach)
	}
	k := o.stats.Kernel
	gaps := 0
	for id, got := range o.reported {
		for _, p := range got {
			if _, ok := slices.BinarySearch(o.missing[id], p); !ok {
				t.Errorf("flow %v: PSN %v reported but received", id, p)
			}
		}
	}
	for _, m := range o.missing {
		gaps += len(m)
	}
	t.Logf("%s: the queue dropped %d packets (kernel %+v), gaps %d, Lost Count %d, named %d, unnamed %d, truncated reports %d",
		o.attach, o.qdisc, k, gaps, o.lostCount, o.stats.PSNs, o.stats.Unnamed, o.truncated)
	if k.GSO == 0 || o.stats.Unnamed == 0 {
		t.Fatalf("no GSO packet beyond %d datagrams dropped whole (kernel %+v)", kdrop.MaxPSNs, k)
	}
	if o.lostCount != gaps || int(o.stats.PSNs+o.stats.Unnamed) != gaps || o.truncated == 0 {
		t.Fatalf("gaps %d: Lost Count %d, named %d + unnamed %d, truncated reports %d", gaps, o.lostCount, o.stats.PSNs, o.stats.Unnamed, o.truncated)
	}
}

// TestGSOWithoutDynptrCountedUnreadable: where the program reads only the linear part of the
// buffer, a GSO packet whose datagrams lie in page fragments names no flow: every such drop is
// counted unreadable, none is reported, none is guessed at.
func TestGSOWithoutDynptrCountedUnreadable(t *testing.T) {
	o := runLab(t, labMode{ring: 1 << 20, gso: 8, mode: "linear"})
	k := o.stats.Kernel
	t.Logf("%s: the queue dropped %d packets; kernel %+v; PSNs reported %d", o.attach, o.qdisc, k, o.stats.PSNs)
	if k.Matched != uint64(o.qdisc) || k.NotLinear+k.Events != k.Matched || o.lostCount != int(o.stats.PSNs)+int(o.stats.Unnamed) {
		t.Fatalf("queue %d, kernel %+v, Lost Count %d: every matched drop is an event or unreadable", o.qdisc, k, o.lostCount)
	}
	for id, got := range o.reported {
		for _, p := range got {
			if _, ok := slices.BinarySearch(o.missing[id], p); !ok {
				t.Errorf("flow %v: PSN %v reported but received", id, p)
			}
		}
	}
}

func checkExact(t *testing.T, o outcome) {
	t.Helper()
	if o.stats.Kernel.GSO != 0 {
		t.Fatalf("%d GSO packets: the queue's counter would count packets, not datagrams", o.stats.Kernel.GSO)
	}
	if o.stats.PSNs != uint64(o.qdisc) {
		t.Errorf("the queue dropped %d datagrams, the program named %d", o.qdisc, o.stats.PSNs)
	}
	checkPSNs(t, o, uint64(o.qdisc))
}

// checkPSNs: the reports name exactly the PSNs the receiver missed, dropped says how many the
// queue dropped, nothing is truncated, lost or unreadable.
func checkPSNs(t *testing.T, o outcome, dropped uint64) {
	t.Helper()
	gaps, reportedN := 0, 0
	for id, missing := range o.missing {
		got := o.reported[id]
		if dup := len(got) - len(slices.Compact(slices.Clone(got))); dup != 0 {
			t.Errorf("flow %v: %d PSNs reported twice", id, dup)
		}
		gaps += len(missing)
		reportedN += len(got)
		if !slices.Equal(got, missing) {
			t.Errorf("flow %v: reported %d PSNs, the receiver missed %d; first reported %v, first missed %v",
				id, len(got), len(missing), head(got), head(missing))
		}
	}
	st := o.stats
	t.Logf("%s: sent %d datagrams, the queue dropped %d packets (%d datagrams), receiver's gaps %d, PSNs reported %d (Lost Count %d, truncated reports %d), reports %d; kernel %+v",
		o.attach, o.sent, o.qdisc, dropped, gaps, reportedN, o.lostCount, o.truncated, st.Engine.Reports, st.Kernel)
	if uint64(reportedN) != dropped || uint64(gaps) != dropped || uint64(o.lostCount) != dropped || o.truncated != 0 {
		t.Fatalf("dropped %d, receiver missed %d, reported %d PSNs, Lost Count %d, %d truncated reports",
			dropped, gaps, reportedN, o.lostCount, o.truncated)
	}
	if st.Kernel.EventsLost != 0 || st.Kernel.NotLinear != 0 || st.Unnamed != 0 {
		t.Fatalf("kernel counters %+v, unnamed %d: nothing should be lost, unreadable or unnamed here", st.Kernel, st.Unnamed)
	}
}

// TestRingOverrunReportedAsLostCount: with a ring buffer of one page and nobody reading it
// while the queue drops, most events find it full; their drops are counted per flow in the
// kernel and reach the reports in Lost Count without PSNs (Truncated), so Lost Count still
// equals the queue's drops, and every PSN that is named was dropped.
func TestRingOverrunReportedAsLostCount(t *testing.T) {
	o := runLab(t, labMode{ring: os.Getpagesize(), late: true})
	named := 0
	for id, got := range o.reported {
		named += len(got)
		for _, p := range got {
			if _, ok := slices.BinarySearch(o.missing[id], p); !ok {
				t.Errorf("flow %v: PSN %v reported but received", id, p)
			}
		}
	}
	k := o.stats.Kernel
	t.Logf("sent %d, dropped by the queue %d, Lost Count %d, PSNs named %d, events lost %d (%d datagrams), truncated reports %d",
		o.sent, o.qdisc, o.lostCount, named, k.EventsLost, k.SegmentsLost, o.truncated)
	if k.EventsLost == 0 || o.truncated == 0 {
		t.Fatalf("the ring buffer never overflowed (%+v) or no report says Truncated (%d)", k, o.truncated)
	}
	if o.lostCount != o.qdisc || uint64(named)+k.SegmentsLost != uint64(o.qdisc) || o.stats.Unnamed != k.SegmentsLost {
		t.Fatalf("queue dropped %d: Lost Count %d, named %d + lost to the ring %d, unnamed given to the engine %d",
			o.qdisc, o.lostCount, named, k.SegmentsLost, o.stats.Unnamed)
	}
}

func head(p []psn.PSN) string {
	if len(p) > 5 {
		return fmt.Sprint(p[:5], "...")
	}
	return fmt.Sprint(p)
}

// openWithTracefs opens the source on the classic tracepoint, from a thread with a mount
// namespace of its own where tracefs is mounted if the host has not mounted it (the
// tracepoint's id is read there); the host's mounts are left alone.
func openWithTracefs(t *testing.T, cfg kdrop.Config) (*kdrop.Source, error) {
	t.Helper()
	var src *kdrop.Source
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if _, e := os.Stat("/sys/kernel/tracing/events/skb/kfree_skb"); e != nil {
			if e := unix.Unshare(unix.CLONE_NEWNS); e != nil {
				err = fmt.Errorf("unshare: %w", e)
				return
			}
			if e := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); e != nil {
				err = fmt.Errorf("private mounts: %w", e)
				return
			}
			if e := unix.Mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, ""); e != nil {
				err = fmt.Errorf("%w: mounting tracefs: %v", errNoTracefs, e)
				return
			}
		}
		src, err = kdrop.Open(cfg)
	}()
	<-done
	if errors.Is(err, errNoTracefs) {
		t.Skipf("the classic tracepoint needs tracefs: %v", err)
	}
	return src, err
}

var errNoTracefs = errors.New("no tracefs")

// BenchmarkProgramPerCall measures the kernel program's own cost per call (the kernel's
// run-time statistics, ebpf.EnableStats): "not-matching" for drops it turns away at the first
// lookup (UDP to a closed port: reason NO_SOCKET), "matching" for queue drops of a protected
// flow that it parses and passes on through the ring buffer (a reader keeps it empty).
func BenchmarkProgramPerCall(b *testing.B) {
	kdroplab.Need(b)
	l := kdroplab.New(b, "tbf rate 10mbit burst 4kb limit 4kb")
	byName, err := kdrop.Reasons()
	if err != nil {
		b.Fatal(err)
	}
	var reasons []uint32
	for _, n := range queueReasons {
		reasons = append(reasons, byName[n])
	}
	src, err := kdrop.Open(kdrop.Config{Devices: []kdrop.Device{l.Dev}, Ports: []uint16{4791}, Reasons: reasons})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Skipf("run-time statistics: %v", err)
	}
	defer stats.Close()
	eng, _ := reporter.New(reporter.Config{Port: 50000})
	d := &kdrop.Driver{Src: src, Eng: eng, Send: func(reporter.Datagram) error { return nil }}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	defer func() { cancel(); <-ran }()

	measure := func(b *testing.B, to netip.AddrPort) {
		var c *net.UDPConn
		kdroplab.InNetns(b, l.Sender, func() { c, _ = net.ListenUDP("udp", nil) })
		defer c.Close()
		pkt := kdroplab.Datagram(1100, 0x44, 0)
		before, err := src.Program().Stats()
		if err != nil {
			b.Fatal(err)
		}
		k0, _ := src.Counters()
		start := time.Now()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			c.WriteToUDPAddrPort(pkt, to)
		}
		b.StopTimer()
		elapsed := time.Since(start)
		time.Sleep(20 * time.Millisecond) // the queue's last drops
		after, _ := src.Program().Stats()
		k1, _ := src.Counters()
		// The drop rate the program and the reader took, and the events the ring refused.
		b.ReportMetric(float64(k1.Events-k0.Events)/elapsed.Seconds(), "events/s")
		b.ReportMetric(float64(k1.EventsLost-k0.EventsLost), "events-lost")
		calls := after.RunCount - before.RunCount
		if calls > 0 {
			b.ReportMetric(float64(after.Runtime-before.Runtime)/float64(calls), "ns/call")
			b.ReportMetric(float64(calls)/float64(b.N), "calls/op")
		}
	}
	// The receiver listens on no port 9: each datagram is dropped there (NO_SOCKET).
	b.Run("not-matching", func(b *testing.B) { measure(b, netip.MustParseAddrPort("10.71.2.1:9")) })
	// 10 Mbit/s with a 4 KiB queue: nearly every datagram is a queue drop of a protected flow.
	b.Run("matching", func(b *testing.B) { measure(b, netip.MustParseAddrPort("10.71.2.1:4791")) })
}
