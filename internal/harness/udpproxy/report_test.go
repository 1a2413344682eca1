//go:build linux

package udpproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/crem-project/crem/internal/testenv"

	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/reporter"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// fakeCSF is a UDP socket on 127.0.0.1 standing for the CSF: its port is the domain's CREM
// port, and it keeps every PATH_REPORT it receives with where it came from.
type fakeCSF struct {
	conn *net.UDPConn
	mu   sync.Mutex
	got  []gotReport
	bad  int
	// badGot keeps the datagrams that were not a PATH_REPORT.
	badGot []gotReport
	done   chan struct{}
}

type gotReport struct {
	from netip.AddrPort
	rep  wire.PathReport
	size int
	raw  []byte
}

func startCSF(t *testing.T) *fakeCSF {
	t.Helper()
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(loopback, 0)))
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeCSF{conn: c, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		buf := make([]byte, maxDatagram)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			rep, err := wire.ParsePathReport(buf[:n])
			g := gotReport{from: from, rep: rep, size: n, raw: bytes.Clone(buf[:n])}
			f.mu.Lock()
			if err != nil {
				f.bad++
				f.badGot = append(f.badGot, g)
			} else {
				f.got = append(f.got, g)
			}
			f.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		c.Close()
		<-f.done
	})
	return f
}

func (f *fakeCSF) port() uint16 { return f.conn.LocalAddr().(*net.UDPAddr).AddrPort().Port() }

func (f *fakeCSF) reports() []gotReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.got)
}

// dropped returns the PSNs the method 3 reports named, by flow, and checks every entry's cause.
func (f *fakeCSF) dropped(t *testing.T, cause wire.Cause) map[reporter.FlowKey][]psn.PSN {
	t.Helper()
	m := map[reporter.FlowKey][]psn.PSN{}
	for _, g := range f.reports() {
		if g.rep.Method != wire.MethodNodeDrops {
			continue
		}
		k := reporter.FlowKey{Src: g.rep.Source, Dst: g.rep.Destination, FlowLabel: g.rep.FlowLabel}
		for _, h := range g.rep.Hops {
			if h.Cause != cause {
				t.Errorf("hop entry cause %v, want %v", h.Cause, cause)
			}
			m[k] = append(m[k], h.DroppedPSNs...)
		}
	}
	for k := range m {
		slices.Sort(m[k])
	}
	return m
}

// otherClient is a client socket on another loopback address, 127.0.0.3, so that the flow
// from it to the server (on 127.0.0.1) and the flow back have different source addresses.
var otherLoopback = netip.MustParseAddr("127.0.0.3")

func dialOtherClient(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(otherLoopback, 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestReportDropsMethod3PathReports: with script loss, the scripted RoCEv2 datagrams of each
// direction, exactly those, arrive at the CSF in PATH_REPORTs of method 3: at the CREM port of
// the CSF routed for the flow's source prefix (forward: the client 127.0.0.3 routed to the
// CSF on 127.0.0.1) or of the flow's source address (reverse: the server on 127.0.0.1). They that name the flow as the path sees it (forward: client to server;
// reverse: server to client; Flow Label the destination QP), with Cause corruption, from the
// reporter's own socket. A dropped datagram that is not RoCEv2 is counted, not reported.
func TestReportDropsMethod3PathReports(t *testing.T) {
	echo := startEcho(t)
	csf := startCSF(t)
	pr := startProxy(t, Config{
		Forward:     echo.addr().String(),
		ForwardLink: netem.Config{Loss: mustLoss(t, "script:3,17,18", 1)},
		ReverseLink: netem.Config{Loss: mustLoss(t, "script:5", 2)},
		Report: &ReportConfig{Reporter: reporter.Config{NodeID: 5, Port: csf.port(),
			Routes: []reporter.Route{{Prefix: netip.PrefixFrom(otherLoopback, 32), CSF: loopback}}},
			Listen: netip.AddrPortFrom(loopback, 0), Drops: true},
	})
	if ra := pr.p.ReportAddr(); ra.Port() == 0 || ra == pr.p.Addr() {
		t.Fatalf("ReportAddr %v: want a socket of its own", ra)
	}
	c := dialOtherClient(t)
	for i := range 30 {
		msg := rocePacket(t, 0x12, psn.PSN(1000+i), fmt.Appendf(nil, "payload %02d", i))
		if i == 17 {
			msg = []byte("plain datagram, not RoCEv2")
		}
		if _, err := c.WriteToUDPAddrPort(msg, pr.p.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	fwd := reporter.FlowKey{Src: otherLoopback, Dst: echo.addr().Addr(), FlowLabel: 0x12}
	rev := reporter.FlowKey{Src: echo.addr().Addr(), Dst: otherLoopback, FlowLabel: 0x12}
	want := map[reporter.FlowKey][]psn.PSN{fwd: {1003, 1018}, rev: {1006}}
	ok := eventually(func() bool {
		got := map[reporter.FlowKey][]psn.PSN{}
		for _, g := range csf.reports() {
			for _, h := range g.rep.Hops {
				k := reporter.FlowKey{Src: g.rep.Source, Dst: g.rep.Destination, FlowLabel: g.rep.FlowLabel}
				got[k] = append(got[k], h.DroppedPSNs...)
			}
		}
		return len(got[fwd]) >= 2 && len(got[rev]) >= 1
	})
	st := pr.stop()
	if !ok {
		t.Fatalf("reports did not arrive: %+v, stats %+v", csf.reports(), st.Report)
	}
	if got := csf.dropped(t, wire.CauseCorruption); len(got) != 2 || !slices.Equal(got[fwd], want[fwd]) || !slices.Equal(got[rev], want[rev]) {
		t.Errorf("reported drops %v, want %v", got, want)
	}
	for _, g := range csf.reports() {
		if g.from != pr.p.ReportAddr() {
			t.Errorf("a report came from %v, want the reporter's socket %v", g.from, pr.p.ReportAddr())
		}
		for _, h := range g.rep.Hops {
			if h.NodeID != 5 || h.LostCount != uint32(len(h.DroppedPSNs)) {
				t.Errorf("hop entry %+v", h)
			}
		}
	}
	rs := st.Report
	if rs == nil || rs.Reporter.Drops != 3 || rs.NotRoCE != 1 || rs.Sent != rs.Reporter.Reports || rs.Sent != uint64(len(csf.reports())) ||
		rs.SendErrors != 0 || rs.EventsLost != 0 {
		t.Errorf("report stats %+v (%d reports arrived)", rs, len(csf.reports()))
	}
}

// TestReportOverflowCauseCongestion: datagrams that find the queue full are reported with
// Cause congestion (RULINGS C1), every one of them, with the PSNs the drop log names, and the
// report carries the growth of the queueing delay (C10).
func TestReportOverflowCauseCongestion(t *testing.T) {
	echo := startEcho(t)
	csf := startCSF(t)
	var log bytes.Buffer
	pr := startProxy(t, Config{
		Forward:     echo.addr().String(),
		ForwardLink: netem.Config{Rate: 1_000_000, QueuePackets: 2},
		DropLog:     &log,
		Report: &ReportConfig{Reporter: reporter.Config{NodeID: 9, Port: csf.port()},
			Listen: netip.AddrPortFrom(loopback, 0), Drops: true},
	})
	c := dialClient(t)
	const n = 40
	for i := range n {
		msg := rocePacket(t, 0x77, psn.PSN(i), make([]byte, 1000))
		if _, err := c.WriteToUDPAddrPort(msg, pr.p.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	if !eventually(func() bool {
		f := pr.p.Stats().Forward
		return f.Forwarded+f.DroppedOverflow == n
	}) {
		t.Fatalf("forward %+v", pr.p.Stats().Forward)
	}
	over := pr.p.Stats().Forward.DroppedOverflow
	if over == 0 {
		t.Fatal("nothing overflowed a 2-datagram queue at 1 Mbit/s")
	}
	count := func() int {
		k := 0
		for _, g := range csf.reports() {
			for _, h := range g.rep.Hops {
				k += len(h.DroppedPSNs)
			}
		}
		return k
	}
	ok := eventually(func() bool { return count() >= int(over) })
	st := pr.stop()
	if !ok {
		t.Fatalf("%d PSNs reported of %d overflows", count(), over)
	}
	var fromLog []psn.PSN
	sc := bufio.NewScanner(&log)
	for sc.Scan() {
		var e struct {
			Reason string `json:"reason"`
			PSN    psn.PSN
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		if e.Reason != "overflow" {
			t.Fatalf("drop log line %s", sc.Text())
		}
		fromLog = append(fromLog, e.PSN)
	}
	k := reporter.FlowKey{Src: loopback, Dst: echo.addr().Addr(), FlowLabel: 0x77}
	got := csf.dropped(t, wire.CauseCongestion)
	if !slices.Equal(got[k], fromLog) || len(got) != 1 {
		t.Errorf("reported %v, the drop log %v", got, fromLog)
	}
	if st.Report.Reporter.Drops != over {
		t.Errorf("engine fed %d drops, want %d", st.Report.Reporter.Drops, over)
	}
	// The flow's first report compares the queueing delay at the drops (a full queue) with the
	// least the link showed (its first datagram alone in the queue): it grew.
	for _, g := range csf.reports() {
		if h := g.rep.Hops[0]; h.MarkingPeriodNumber == 1 && h.QueueDelayChangeUS <= 0 {
			t.Errorf("first report's Queue Delay Change %d us, want the growth of a full queue", h.QueueDelayChangeUS)
		}
	}
}

// busySettle is the marking's Settle in tests that count every datagram in its period: on a
// busy machine the proxy's own loop can hold a datagram for tens of ms beyond the emulated
// link's delay, which the default Settle (the link's longest delay, at least T/2) does not
// cover; such a datagram would be counted late, and lost for its period.
const busySettle = 500 * time.Millisecond

// TestReportMarkingMethod1LostCountPerPeriod: with Alternate Marking, each marking period in
// which scripted losses fell gives a PATH_REPORT of method 1 whose MP2 entry has exactly the
// period's losses as Lost Count (the drop log's time gives each drop's period), MP1 Lost
// Count 0, no PSNs; without Drops no method 3 report is sent; and the datagrams reach the
// server unmodified: CREM never marks packets (draft, Path Reports).
func TestReportMarkingMethod1LostCountPerPeriod(t *testing.T) {
	echo := startEcho(t)
	csf := startCSF(t)
	var log bytes.Buffer
	const period = 40 * time.Millisecond
	pr := startProxy(t, Config{
		Forward:     echo.addr().String(),
		ForwardLink: netem.Config{Loss: mustLoss(t, "script:3,17,18,40,41,55", 1), Delay: time.Millisecond},
		DropLog:     &log,
		Report: &ReportConfig{Reporter: reporter.Config{NodeID: 20, Port: csf.port()},
			Listen: netip.AddrPortFrom(loopback, 0), Marking: period, MarkingSettle: busySettle, MarkingDelayThreshold: -1},
	})
	c := dialClient(t)
	const n = 60
	var sent [][]byte
	for i := range n {
		msg := rocePacket(t, 0x33, psn.PSN(500+i), fmt.Appendf(nil, "marked? %02d", i))
		sent = append(sent, msg)
		if _, err := c.WriteToUDPAddrPort(msg, pr.p.Addr()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // spread over a few periods
	}
	lost := func() uint32 {
		var k uint32
		for _, g := range csf.reports() {
			if g.rep.Method == wire.MethodAltMark && len(g.rep.Hops) >= 2 {
				for i := 1; i < len(g.rep.Hops); i += 2 {
					k += g.rep.Hops[i].LostCount
				}
			}
		}
		return k
	}
	ok := eventually(func() bool { return lost() >= 6 })
	echo.waitFor(n - 6)
	st := pr.stop()
	if !ok {
		t.Fatalf("method 1 reports name %d losses, want 6: %+v", lost(), csf.reports())
	}
	// The period of each drop, from the drop log's time (the instant the datagram entered the
	// link, when it was also marked).
	want := map[uint32]uint32{}
	sc := bufio.NewScanner(&log)
	for sc.Scan() {
		var e struct {
			T float64 `json:"t"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		want[uint32(time.Duration(e.T*1e9+0.5)/period)]++
	}
	got := map[uint32]uint32{}
	fwd := reporter.FlowKey{Src: loopback, Dst: echo.addr().Addr(), FlowLabel: 0x33}
	for _, g := range csf.reports() {
		if g.rep.Method != wire.MethodAltMark {
			t.Fatalf("a method %v report without Drops", g.rep.Method)
		}
		if k := (reporter.FlowKey{Src: g.rep.Source, Dst: g.rep.Destination, FlowLabel: g.rep.FlowLabel}); k != fwd || g.from != pr.p.ReportAddr() {
			t.Errorf("report for %+v from %v", k, g.from)
		}
		if len(g.rep.Hops)%2 != 0 {
			t.Fatalf("%d hop entries", len(g.rep.Hops))
		}
		for i := 0; i < len(g.rep.Hops); i += 2 {
			mp1, mp2 := g.rep.Hops[i], g.rep.Hops[i+1]
			if mp1.NodeID != 20 || mp2.NodeID != 21 || mp1.LostCount != 0 || mp1.MarkingPeriodNumber != mp2.MarkingPeriodNumber ||
				len(mp1.DroppedPSNs)+len(mp2.DroppedPSNs) != 0 {
				t.Errorf("hop entries %+v %+v", mp1, mp2)
			}
			got[mp2.MarkingPeriodNumber] += mp2.LostCount
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Lost Count per period %v, the drop log's %v", got, want)
	}
	var atServer [][]byte
	for _, a := range echo.arrivals() {
		atServer = append(atServer, a.data)
	}
	var wantServer [][]byte
	for i, m := range sent {
		if !slices.Contains([]int{3, 17, 18, 40, 41, 55}, i) {
			wantServer = append(wantServer, m)
		}
	}
	if !slices.EqualFunc(atServer, wantServer, bytes.Equal) {
		t.Errorf("the server got %d datagrams, not the %d sent unmodified", len(atServer), len(wantServer))
	}
	m := st.Report.Marking
	if m.Entered != 2*n-6 || m.Left != 2*n-6-6 || m.Lost != 6 || m.Late != 0 || m.Reported == 0 || st.Report.Reporter.Drops != 0 {
		// Both directions: n datagrams forward, n-6 answers back.
		t.Errorf("marking stats %+v, reporter %+v", m, st.Report.Reporter)
	}
}

// TestReportSendErrorsCounted: a report the socket refuses (to an IPv6 CSF from the IPv4
// socket) is counted as a send error; the proxy goes on.
func TestReportSendErrorsCounted(t *testing.T) {
	echo := startEcho(t)
	pr := startProxy(t, Config{
		Forward:     echo.addr().String(),
		ForwardLink: netem.Config{Loss: mustLoss(t, "script:0", 1)},
		Report: &ReportConfig{Reporter: reporter.Config{Port: 50999, Routes: []reporter.Route{
			{Prefix: netip.MustParsePrefix("127.0.0.0/8"), CSF: netip.MustParseAddr("::1")}}},
			Drops: true},
	})
	c := dialClient(t)
	c.WriteToUDPAddrPort(rocePacket(t, 1, 1, []byte("x")), pr.p.Addr())
	c.WriteToUDPAddrPort(rocePacket(t, 1, 2, []byte("y")), pr.p.Addr())
	ok := eventually(func() bool { r := pr.p.Stats().Report; return r.SendErrors > 0 })
	echo.waitFor(1)
	st := pr.stop()
	if !ok || st.Report.Sent != 0 || st.Report.Reporter.Reports != 1 || echo.count.Load() != 1 {
		t.Errorf("stats %+v, echo got %d", st.Report, echo.count.Load())
	}
}

// TestReportConfigErrorsC14: a reporter needs the CREM port (no default) and a method.
func TestReportConfigErrorsC14(t *testing.T) {
	for _, rc := range []ReportConfig{
		{Reporter: reporter.Config{Port: 50000}},
		{Drops: true},
		{Reporter: reporter.Config{Port: 50000}, Marking: -time.Second},
		{Reporter: reporter.Config{Port: 50000}, Drops: true, Listen: netip.MustParseAddrPort("192.0.2.1:1")},
	} {
		p, err := New(Config{Listen: "127.0.0.1:0", Forward: "127.0.0.1:9", Report: &rc})
		if err == nil {
			p.Close()
			t.Errorf("New accepted %+v", rc)
		}
	}
	p, err := New(Config{Listen: "127.0.0.1:0", Forward: "127.0.0.1:9"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.ReportAddr().IsValid() {
		t.Error("ReportAddr without a reporter")
	}
}

// TestReportSteadyStateAllocs: with both methods on, forwarding RoCEv2 datagrams without loss
// still allocates next to nothing per datagram (marking counts in place; only reports
// allocate).
func TestReportSteadyStateAllocs(t *testing.T) {
	if testing.Short() || testenv.Race {
		t.Skip("short mode, or the race detector, which allocates")
	}
	echo := startEchoRecording(t, false)
	csf := startCSF(t)
	pr := startProxy(t, Config{Forward: echo.addr().String(), ForwardLink: netem.Config{Delay: time.Millisecond},
		Report: &ReportConfig{Reporter: reporter.Config{Port: csf.port()}, Drops: true, Marking: 20 * time.Millisecond,
			MarkingSettle: busySettle, MarkingDelayThreshold: -1}})
	c := dialClient(t)
	msg := rocePacket(t, 7, 1, make([]byte, 1100))
	buf := make([]byte, 2048)
	round := func(n int) {
		for i := range n {
			c.WriteToUDPAddrPort(msg, pr.p.Addr())
			if i%8 == 7 {
				for range 8 {
					c.SetReadDeadline(time.Now().Add(patience))
					if _, _, err := c.ReadFromUDPAddrPort(buf); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	round(400)
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 2000
	round(n)
	runtime.ReadMemStats(&after)
	perPacket := float64(after.Mallocs-before.Mallocs) / n
	t.Logf("%.3f allocations per round trip (whole process)", perPacket)
	if perPacket > 0.5 {
		t.Errorf("%.2f allocations per round trip; want next to none", perPacket)
	}
	st := pr.stop()
	if m := st.Report.Marking; m.Entered != 2*(n+400) || m.Left != m.Entered || m.Lost != 0 || m.Periods == 0 {
		t.Errorf("marking %+v", m)
	}
}

// BenchmarkNetemRelayReporting is BenchmarkNetemRelay with RoCEv2 datagrams and the reporter
// on, both methods (marking every 10ms): what the measurement costs per crossing.
func BenchmarkNetemRelayReporting(b *testing.B) {
	echoConn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(loopback, 0)))
	if err != nil {
		b.Fatal(err)
	}
	defer echoConn.Close()
	go func() {
		buf := make([]byte, maxDatagram)
		for {
			n, from, err := echoConn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			echoConn.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	p, err := New(Config{Listen: "127.0.0.1:0", Forward: echoConn.LocalAddr().String(),
		Report: &ReportConfig{Reporter: reporter.Config{Port: 9}, Drops: true, Marking: 10 * time.Millisecond}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(loopback, 0)))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	pk := roce.Packet{BTH: roce.BTH{OpCode: roce.OpWriteMiddle, PKey: 0xffff, DestQP: 3, PSN: 1}, Payload: make([]byte, 1150)}
	msg, err := pk.Append(nil)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 2048)
	const window = 32
	b.SetBytes(int64(len(msg)))
	b.ResetTimer()
	for i := 0; i < b.N; i += window {
		n := min(window, b.N-i)
		for range n {
			c.WriteToUDPAddrPort(msg, p.Addr())
		}
		for range n {
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, _, err := c.ReadFromUDPAddrPort(buf); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// TestReportTruncatedToPathMTU: on real sockets too, a PATH_REPORT fits the path MTU: with
// every datagram lost and a 576-octet MTU, reports come cut, with the Truncated flag, while
// their Lost Counts still add up to every drop.
func TestReportTruncatedToPathMTU(t *testing.T) {
	echo := startEcho(t)
	csf := startCSF(t)
	pr := startProxy(t, Config{
		Forward:     echo.addr().String(),
		ForwardLink: netem.Config{Loss: mustLoss(t, "1", 1)},
		// Drops gather for half a second, so that (on any machine) far more than fit in 576
		// octets wait for one report.
		Report: &ReportConfig{Reporter: reporter.Config{Port: csf.port(), PathMTU: 576, Aggregation: 500 * time.Millisecond},
			Listen: netip.AddrPortFrom(loopback, 0), Drops: true},
	})
	c := dialClient(t)
	const n = 400
	for i := range n {
		c.WriteToUDPAddrPort(rocePacket(t, 9, psn.PSN(i), []byte("x")), pr.p.Addr())
		if i%50 == 49 {
			time.Sleep(time.Millisecond) // stay inside the socket buffers
		}
	}
	lost := func() (k uint64, listed int, trunc bool) {
		for _, g := range csf.reports() {
			trunc = trunc || g.rep.Truncated
			if g.size > 576-28 {
				t.Errorf("a report of %d octets", g.size)
			}
			for _, h := range g.rep.Hops {
				k += uint64(h.LostCount)
				listed += len(h.DroppedPSNs)
			}
		}
		return
	}
	ok := eventually(func() bool { k, _, _ := lost(); return k >= n })
	st := pr.stop()
	k, listed, trunc := lost()
	if !ok || k != n || !trunc || listed >= n || st.Report.Reporter.Truncated == 0 ||
		st.Report.Reporter.PSNsCut != uint64(n-listed) {
		t.Errorf("lost %d (listed %d, truncated %v) of %d; stats %+v", k, listed, trunc, n, st.Report.Reporter)
	}
}

// TestReportUnsentCounted: a report the per-port limit still holds back a second after the
// links stopped is not sent, and is counted as unsent.
func TestReportUnsentCounted(t *testing.T) {
	echo := startEcho(t)
	csf := startCSF(t)
	pr := startProxy(t, Config{
		Forward:     echo.addr().String(),
		ForwardLink: netem.Config{Loss: mustLoss(t, "script:0,1", 1)},
		Report: &ReportConfig{Reporter: reporter.Config{Port: csf.port(), PortRate: 0.01, PortBurst: 1},
			Listen: netip.AddrPortFrom(loopback, 0), Drops: true},
	})
	c := dialClient(t)
	c.WriteToUDPAddrPort(rocePacket(t, 1, 1, []byte("a")), pr.p.Addr())
	c.WriteToUDPAddrPort(rocePacket(t, 2, 1, []byte("b")), pr.p.Addr())
	ok := eventually(func() bool { r := pr.p.Stats().Report; return r.Sent == 1 && r.Reporter.DeferredPort > 0 })
	st := pr.stop()
	if !ok || st.Report.Sent != 1 || st.Report.Unsent != 1 || len(csf.reports()) != 1 {
		t.Errorf("stats %+v, %d reports arrived", st.Report, len(csf.reports()))
	}
}

// TestReportSurvivesGarbage: random datagrams, some shaped like a BTH, through a lossy link
// with both methods on: nothing stops the proxy, every drop is either reported (RoCEv2) or
// counted as not RoCEv2, and the marking counts exactly the RoCEv2 datagrams.
func TestReportSurvivesGarbage(t *testing.T) {
	echo := startEcho(t)
	csf := startCSF(t)
	pr := startProxy(t, Config{
		Forward:     echo.addr().String(),
		ForwardLink: netem.Config{Loss: mustLoss(t, "0.5", 7)},
		Report: &ReportConfig{Reporter: reporter.Config{Port: csf.port()}, Listen: netip.AddrPortFrom(loopback, 0),
			Drops: true, Marking: 20 * time.Millisecond, MarkingSettle: busySettle},
	})
	c := dialClient(t)
	rng := rand.New(rand.NewPCG(3, 4))
	var msgs [][]byte
	for i := range 300 {
		var b []byte
		switch i % 3 {
		case 0:
			b = rocePacket(t, uint32(rng.IntN(4)), psn.PSN(i), []byte("ok"))
		case 1:
			b = make([]byte, rng.IntN(80))
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
			if len(b) > 1 {
				b[0], b[1] = byte(rng.IntN(0x18)), b[1]&0xf0
			}
		default:
			b = rocePacket(t, 5, psn.PSN(i), []byte("cut"))
			b = b[:rng.IntN(len(b))]
		}
		msgs = append(msgs, b)
	}
	roceN := 0
	for i, m := range msgs {
		if _, ok := RoCE(m); ok {
			roceN++
		}
		c.WriteToUDPAddrPort(m, pr.p.Addr())
		if i%20 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if !eventually(func() bool { return pr.p.Stats().Forward.Received == uint64(len(msgs)) }) {
		t.Fatalf("forward received %d of %d", pr.p.Stats().Forward.Received, len(msgs))
	}
	echo.waitFor(int(pr.p.Stats().Forward.Forwarded))
	st := pr.stop()
	r := st.Report
	if r.Reporter.Drops+r.NotRoCE != st.Forward.Dropped() || r.Reporter.Drops == 0 || r.NotRoCE == 0 {
		t.Errorf("%d drops reported + %d not RoCEv2, the link dropped %d", r.Reporter.Drops, r.NotRoCE, st.Forward.Dropped())
	}
	// Forward: every RoCEv2 datagram entered; reverse: those the server answered.
	if m := r.Marking; m.Entered < uint64(roceN) || m.Lost != r.Reporter.Drops || m.Late != 0 || r.EventsLost != 0 || r.SendErrors != 0 {
		t.Errorf("marking %+v with %d RoCEv2 datagrams sent; reporter %+v", m, roceN, r)
	}
}
