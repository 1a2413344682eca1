//go:build linux

package udpproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/crem-project/crem/internal/fuzzcorpus"
	"github.com/crem-project/crem/internal/testenv"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/internal/mmsg"
	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"golang.org/x/sys/unix"
)

// Every socket in these tests is on 127.0.0.1.
var loopback = netip.MustParseAddr("127.0.0.1")

// arrival is a datagram as the echo server saw it.
type arrival struct {
	data   []byte
	tos    uint8
	hasTOS bool
	at     time.Time
	from   netip.AddrPort
}

// echoServer answers every datagram with the same bytes and remembers what it received.
type echoServer struct {
	conn   *net.UDPConn
	count  atomic.Int64
	record bool
	mu     sync.Mutex
	got    []arrival
	done   chan struct{}
}

func startEcho(t *testing.T) *echoServer { return startEchoRecording(t, true) }

// startEchoRecording starts an echo server that records what it receives only when record is
// set (recording allocates).
func startEchoRecording(t *testing.T, record bool) *echoServer {
	t.Helper()
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(loopback, 0)))
	if err != nil {
		t.Fatal(err)
	}
	if err := enableTOS(c, false); err != nil {
		t.Fatal(err)
	}
	e := &echoServer{conn: c, done: make(chan struct{}), record: record}
	go func() {
		defer close(e.done)
		buf := make([]byte, maxDatagram)
		oob := make([]byte, 64)
		for {
			n, oobn, _, from, err := c.ReadMsgUDPAddrPort(buf, oob)
			if err != nil {
				return
			}
			if e.record {
				now := time.Now()
				ctl := mmsg.ParseControl(oob[:oobn])
				e.mu.Lock()
				e.got = append(e.got, arrival{data: bytes.Clone(buf[:n]), tos: ctl.TOS, hasTOS: ctl.HasTOS, at: now, from: from})
				e.mu.Unlock()
			}
			e.count.Add(1)
			c.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	t.Cleanup(func() {
		c.Close()
		<-e.done
	})
	return e
}

func (e *echoServer) addr() netip.AddrPort {
	return e.conn.LocalAddr().(*net.UDPAddr).AddrPort()
}

// patience bounds every wait of these tests for something that must happen: long enough that a
// busy machine never reaches it, so that only a failure does.
const patience = 30 * time.Second

// eventually waits until cond holds, for at most patience; it reports whether it did.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(patience); !cond(); {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// waitFor waits until the server has received n datagrams (at most patience).
func (e *echoServer) waitFor(n int) {
	eventually(func() bool { return e.count.Load() >= int64(n) })
}

func (e *echoServer) arrivals() []arrival {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

// running is a proxy running in the background.
type running struct {
	p    *Proxy
	stop func() Stats
}

func startProxy(t *testing.T, cfg Config) running {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	var once sync.Once
	var final Stats
	stop := func() Stats {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(patience):
				t.Fatalf("the proxy did not stop within %v", patience)
			}
			final = p.Stats()
		})
		return final
	}
	t.Cleanup(func() { stop() })
	return running{p: p, stop: stop}
}

func dialClient(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(loopback, 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// receiver collects, in the background, what a client socket receives.
type receiver struct {
	mu   sync.Mutex
	got  [][]byte
	done chan struct{}
}

func startReceiver(c *net.UDPConn) *receiver {
	r := &receiver{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		buf := make([]byte, maxDatagram)
		for {
			c.SetReadDeadline(time.Now().Add(patience))
			n, _, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			r.mu.Lock()
			r.got = append(r.got, bytes.Clone(buf[:n]))
			r.mu.Unlock()
		}
	}()
	return r
}

// wait returns what arrived once want datagrams have, or when nothing more came for quiet.
func (r *receiver) wait(want int, quiet time.Duration) [][]byte {
	last, lastN := time.Now(), -1
	for {
		r.mu.Lock()
		n := len(r.got)
		r.mu.Unlock()
		if n >= want {
			break
		}
		if n != lastN {
			last, lastN = time.Now(), n
		} else if time.Since(last) > quiet {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// recvUntil reads datagrams until it has want of them or nothing came for quiet.
func recvUntil(t *testing.T, c *net.UDPConn, want int, quiet time.Duration) [][]byte {
	t.Helper()
	var got [][]byte
	buf := make([]byte, maxDatagram)
	for len(got) < want {
		c.SetReadDeadline(time.Now().Add(quiet))
		n, _, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			break
		}
		got = append(got, bytes.Clone(buf[:n]))
	}
	return got
}

// checkSums checks that a direction's counters add up once the proxy has stopped.
func checkSums(t *testing.T, name string, d DirStats) {
	t.Helper()
	out := d.Forwarded + d.DroppedLoss + d.DroppedOverflow + d.WriteErrors + d.Unsent + d.Merged
	if d.Received != out || d.InFlight != 0 {
		t.Errorf("%s: received %d != forwarded %d + lost %d + overflow %d + write errors %d + unsent %d + merged %d (in flight %d)",
			name, d.Received, d.Forwarded, d.DroppedLoss, d.DroppedOverflow, d.WriteErrors, d.Unsent, d.Merged, d.InFlight)
	}
}

func rocePacket(t *testing.T, qp uint32, n psn.PSN, payload []byte) []byte {
	t.Helper()
	p := roce.Packet{BTH: roce.BTH{OpCode: roce.OpWriteMiddle, PKey: 0xffff, DestQP: qp, PSN: n}, Payload: payload}
	b, err := p.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustLoss(t *testing.T, spec string, seed uint64) netem.LossModel {
	t.Helper()
	m, err := netem.ParseLossModel(spec, seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestNetemEchoBothDirections: datagrams reach the server and its answers come back to the
// client that sent them, for two clients at once; nothing is lost on a perfect path and the
// counters add up.
func TestNetemEchoBothDirections(t *testing.T) {
	echo := startEcho(t)
	pr := startProxy(t, Config{Forward: echo.addr().String()})
	const n = 100
	clients := []*net.UDPConn{dialClient(t), dialClient(t)}
	recv := []*receiver{startReceiver(clients[0]), startReceiver(clients[1])}
	for i := range n {
		for ci, c := range clients {
			msg := fmt.Appendf(nil, "client %d datagram %d", ci, i)
			if _, err := c.WriteToUDPAddrPort(msg, pr.p.Addr()); err != nil {
				t.Fatal(err)
			}
		}
		if i%20 == 19 {
			time.Sleep(time.Millisecond) // stay well inside the socket buffers
		}
	}
	for ci := range clients {
		got := recv[ci].wait(n, patience)
		if len(got) != n {
			t.Fatalf("client %d got %d answers, want %d", ci, len(got), n)
		}
		for i, g := range got {
			if want := fmt.Sprintf("client %d datagram %d", ci, i); string(g) != want {
				t.Fatalf("client %d answer %d = %q, want %q", ci, i, g, want)
			}
		}
	}
	st := pr.stop()
	for _, d := range []struct {
		name string
		s    DirStats
	}{{"forward", st.Forward}, {"reverse", st.Reverse}} {
		checkSums(t, d.name, d.s)
		if d.s.Received != 2*n || d.s.Forwarded != 2*n || d.s.Dropped() != 0 {
			t.Errorf("%s: %+v, want %d received and forwarded", d.name, d.s, 2*n)
		}
	}
	if st.ClientsOpened != 2 || st.Clients != 2 {
		t.Errorf("clients: %+v, want 2 opened", st)
	}
}

// TestNetemScriptedLossDropLog: with script loss specs exactly the scripted datagrams vanish,
// in each direction, and the drop log names each one, with its PSN for RoCEv2 datagrams.
func TestNetemScriptedLossDropLog(t *testing.T) {
	echo := startEcho(t)
	var log bytes.Buffer
	dir := t.TempDir()
	pcapPath := filepath.Join(dir, "netem.pcap")
	pf, err := os.Create(pcapPath)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	pr := startProxy(t, Config{
		Forward:     echo.addr().String(),
		ForwardLink: netem.Config{Loss: mustLoss(t, "script:3,17,18", 1)},
		ReverseLink: netem.Config{Loss: mustLoss(t, "script:5", 2)},
		DropLog:     &log,
		Pcap:        pf,
	})
	c := dialClient(t)
	const n = 30
	var sent [][]byte
	for i := range n {
		var msg []byte
		if i == 17 {
			msg = []byte("plain datagram, not RoCEv2")
		} else {
			msg = rocePacket(t, 0x12, psn.PSN(1000+i), fmt.Appendf(nil, "payload %02d", i))
		}
		sent = append(sent, msg)
		if _, err := c.WriteToUDPAddrPort(msg, pr.p.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	// The server sees all but 3, 17 and 18; the client all but the server's sixth answer.
	var wantServer [][]byte
	for i, m := range sent {
		if i != 3 && i != 17 && i != 18 {
			wantServer = append(wantServer, m)
		}
	}
	wantClient := slices.Delete(slices.Clone(wantServer), 5, 6)
	got := recvUntil(t, c, len(wantClient), patience)
	st := pr.stop()
	var atServer [][]byte
	for _, a := range echo.arrivals() {
		atServer = append(atServer, a.data)
	}
	if !slices.EqualFunc(atServer, wantServer, bytes.Equal) {
		t.Errorf("the server got %d datagrams, want %d: the scripted ones missing", len(atServer), len(wantServer))
	}
	if !slices.EqualFunc(got, wantClient, bytes.Equal) {
		t.Errorf("the client got %d answers, want %d: the scripted one missing", len(got), len(wantClient))
	}
	checkSums(t, "forward", st.Forward)
	checkSums(t, "reverse", st.Reverse)
	if st.Forward.DroppedLoss != 3 || st.Reverse.DroppedLoss != 1 {
		t.Errorf("dropped: forward %d, reverse %d, want 3 and 1", st.Forward.DroppedLoss, st.Reverse.DroppedLoss)
	}

	type entry struct {
		Time   time.Time `json:"time"`
		T      float64   `json:"t"`
		Dir    string    `json:"dir"`
		Index  uint64    `json:"index"`
		Reason string    `json:"reason"`
		Len    int       `json:"len"`
		Client string    `json:"client"`
		TOS    *int      `json:"tos"`
		Opcode string    `json:"opcode"`
		QP     *uint32   `json:"qp"`
		PSN    *uint32   `json:"psn"`
	}
	var entries []entry
	sc := bufio.NewScanner(&log)
	for sc.Scan() {
		var e entry
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("drop log line %q: %v", sc.Text(), err)
		}
		entries = append(entries, e)
	}
	if len(entries) != 4 {
		t.Fatalf("drop log has %d lines, want 4:\n%s", len(entries), log.String())
	}
	want := []struct {
		dir   string
		index uint64
		psn   int // -1: not RoCEv2
		len   int
	}{
		{"forward", 3, 1003, len(sent[3])},
		{"forward", 17, -1, len(sent[17])},
		{"forward", 18, 1018, len(sent[18])},
		{"reverse", 5, 1006, len(sent[6])}, // the sixth answer: datagram 6
	}
	slices.SortFunc(entries, func(a, b entry) int {
		if a.Dir != b.Dir {
			return cmpStr(a.Dir, b.Dir)
		}
		return int(a.Index) - int(b.Index)
	})
	for i, w := range want {
		e := entries[i]
		if e.Dir != w.dir || e.Index != w.index || e.Reason != "lost" || e.Len != w.len ||
			e.Client != c.LocalAddr().String() || e.Time.IsZero() || e.T < 0 {
			t.Errorf("drop log entry %d = %+v, want %s index %d lost, len %d, client %v", i, e, w.dir, w.index, w.len, c.LocalAddr())
		}
		switch {
		case w.psn < 0 && (e.PSN != nil || e.QP != nil || e.Opcode != ""):
			t.Errorf("drop log entry %d names a plain datagram as RoCEv2: %+v", i, e)
		case w.psn >= 0 && (e.PSN == nil || *e.PSN != uint32(w.psn) || e.QP == nil || *e.QP != 0x12 || e.Opcode != "RDMA_WRITE_MIDDLE"):
			t.Errorf("drop log entry %d = %+v, want RDMA_WRITE_MIDDLE qp 18 psn %d", i, e, w.psn)
		}
	}

	// The capture holds every forwarded and every dropped datagram; drops have TTL 1.
	pf.Close()
	f, err := os.Open(pcapPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := capture.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	frames, drops := 0, 0
	for {
		fr, err := r.Next()
		if err != nil {
			break
		}
		dg, err := capture.DecodeUDP(fr.LinkType, fr.Data)
		if err != nil {
			t.Fatalf("frame %d: %v", frames+1, err)
		}
		frames++
		if dg.IPHeader[8] == 1 {
			drops++
		}
	}
	if wantFrames := int(st.Forward.Received + st.Reverse.Received); frames != wantFrames || drops != 4 {
		t.Errorf("capture: %d frames, %d drops; want %d and 4", frames, drops, wantFrames)
	}
}

func setTOS(t *testing.T, fd uintptr, tos int) {
	if err := unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tos); err != nil {
		t.Fatal(err)
	}
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestNetemDelay: every datagram takes at least the configured one-way delay to reach the
// server, and its answer at least twice that to come back. (A real clock only runs late: the
// lower bounds hold on any machine; the link's exact times are netem's tests, in virtual time.)
func TestNetemDelay(t *testing.T) {
	const delay = 30 * time.Millisecond
	echo := startEcho(t)
	pr := startProxy(t, Config{
		Forward:     echo.addr().String(),
		ForwardLink: netem.Config{Delay: delay},
		ReverseLink: netem.Config{Delay: delay},
	})
	c := dialClient(t)
	for i := range 5 {
		start := time.Now()
		if _, err := c.WriteToUDPAddrPort([]byte{byte(i)}, pr.p.Addr()); err != nil {
			t.Fatal(err)
		}
		got := recvUntil(t, c, 1, patience)
		rtt := time.Since(start)
		if len(got) != 1 {
			t.Fatalf("ping %d: no answer", i)
		}
		arr := echo.arrivals()
		oneWay := arr[len(arr)-1].at.Sub(start)
		if oneWay < delay || rtt < 2*delay {
			t.Errorf("ping %d: one way %v, round trip %v; want at least %v and %v", i, oneWay, rtt, delay, 2*delay)
		}
	}
	st := pr.stop()
	checkSums(t, "forward", st.Forward)
	checkSums(t, "reverse", st.Reverse)
}

// TestNetemRate: at 8 Mbit/s, 100 datagrams of 1000 octets take about 100 ms to cross: the
// test asks for more than 70 ms (a lower bound, which a late clock cannot break).
func TestNetemRate(t *testing.T) {
	echo := startEcho(t)
	pr := startProxy(t, Config{
		Forward:     echo.addr().String(),
		ForwardLink: netem.Config{Rate: 8_000_000, QueuePackets: 1000},
	})
	c := dialClient(t)
	const n = 100
	msg := make([]byte, 1000)
	start := time.Now()
	for i := range n {
		binary.BigEndian.PutUint32(msg, uint32(i))
		if _, err := c.WriteToUDPAddrPort(msg, pr.p.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	// The server's arrivals are what the rate shapes; the answers come back unshaped, as fast
	// as the server sends them, and a client's socket buffer on a busy machine may drop some.
	echo.waitFor(n)
	arr := echo.arrivals()
	if len(arr) != n {
		t.Fatalf("the server got %d datagrams, want %d", len(arr), n)
	}
	span := arr[len(arr)-1].at.Sub(start)
	if span < 70*time.Millisecond {
		t.Errorf("100 kB at 8 Mbit/s crossed in %v, want about 100 ms", span)
	}
	st := pr.stop()
	checkSums(t, "forward", st.Forward)
	if st.Forward.PeakQueue < 10 {
		t.Errorf("peak queue %d: the burst should have queued", st.Forward.PeakQueue)
	}
}

// TestNetemQueueOverflowAndECN: a burst into a short queue overflows it; ECN-capable datagrams
// that find the threshold reached arrive with CE, and the counters say so and add up. At
// 800 kbit/s a datagram takes 10 ms to leave the queue: only a burst spread over some 300 ms
// would not overflow it.
func TestNetemQueueOverflowAndECN(t *testing.T) {
	echo := startEcho(t)
	var log bytes.Buffer
	pr := startProxy(t, Config{
		Forward:     echo.addr().String(),
		ForwardLink: netem.Config{Rate: 800_000, QueuePackets: 10, ECNThreshold: 3},
		DropLog:     &log,
	})
	c := dialClient(t)
	// ECT(0) on every datagram, DSCP 8 to check that the rest of the TOS passes unchanged.
	rc, _ := c.SyscallConn()
	rc.Control(func(fd uintptr) { setTOS(t, fd, 0x20|0x02) })
	recv := startReceiver(c)
	const n = 40
	msg := make([]byte, 1000)
	for i := range n {
		binary.BigEndian.PutUint32(msg, uint32(i))
		if _, err := c.WriteToUDPAddrPort(msg, pr.p.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	// Every datagram reached the link; stopping drains what it still holds.
	if !eventually(func() bool { return pr.p.Stats().Forward.Received == n }) {
		t.Fatalf("the proxy received %d of %d", pr.p.Stats().Forward.Received, n)
	}
	st := pr.stop()
	checkSums(t, "forward", st.Forward)
	checkSums(t, "reverse", st.Reverse)
	recv.wait(int(st.Reverse.Forwarded), patience)
	f := st.Forward
	if f.DroppedOverflow == 0 || f.CEMarked == 0 || f.ECT != n {
		t.Fatalf("forward: %+v; want overflow drops, CE marks and %d ECT", f, n)
	}
	echo.waitFor(int(f.Forwarded))
	ce := 0
	for i, a := range echo.arrivals() {
		switch {
		case !a.hasTOS || a.tos&0xfc != 0x20:
			t.Errorf("arrival %d: TOS %#x (known %v), want DSCP 0x20 kept", i, a.tos, a.hasTOS)
		case a.tos&3 == 3:
			ce++
		case a.tos&3 != 2:
			t.Errorf("arrival %d: ECN %d, want ECT(0) or CE", i, a.tos&3)
		}
	}
	if uint64(ce) != f.CEMarked {
		t.Errorf("the server saw %d CE, the proxy counted %d", ce, f.CEMarked)
	}
	if lines := bytes.Count(log.Bytes(), []byte(`"reason":"overflow"`)); uint64(lines) != f.DroppedOverflow {
		t.Errorf("drop log has %d overflow lines, the counter %d", lines, f.DroppedOverflow)
	}
}

// TestNetemSurvivesGarbage: empty, tiny, huge and random datagrams, and some that look like a
// BTH, pass through (or are dropped and logged) without stopping the proxy.
func TestNetemSurvivesGarbage(t *testing.T) {
	echo := startEcho(t)
	var log bytes.Buffer
	pr := startProxy(t, Config{
		Forward:     echo.addr().String(),
		ForwardLink: netem.Config{Loss: mustLoss(t, "0.5", 7)},
		DropLog:     &log,
	})
	c := dialClient(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var msgs [][]byte
	msgs = append(msgs, nil, []byte{0}, make([]byte, 65507), []byte{0x11, 0, 0, 0})
	for range 200 {
		b := make([]byte, rng.IntN(100))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		if len(b) > 0 && rng.IntN(2) == 0 {
			b[0] = byte(rng.IntN(0x18)) // a known RC opcode
			if len(b) > 1 {
				b[1] &= 0xf0
			}
		}
		msgs = append(msgs, b)
	}
	for i, m := range msgs {
		if _, err := c.WriteToUDPAddrPort(m, pr.p.Addr()); err != nil {
			t.Fatal(err)
		}
		if i%20 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if !eventually(func() bool { return pr.p.Stats().Forward.Received == uint64(len(msgs)) }) {
		t.Errorf("forward received %d of %d", pr.p.Stats().Forward.Received, len(msgs))
	}
	// Still alive: ordinary datagrams still come back (the seed fixes which half is lost).
	for range 20 {
		c.WriteToUDPAddrPort([]byte("ping"), pr.p.Addr())
	}
	pong := false
	buf := make([]byte, maxDatagram)
	for deadline := time.Now().Add(patience); !pong && time.Now().Before(deadline); {
		c.SetReadDeadline(deadline)
		n, _, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			break
		}
		pong = string(buf[:n]) == "ping"
	}
	if !pong {
		t.Error("no answer after the garbage")
	}
	final := pr.stop()
	checkSums(t, "forward", final.Forward)
	checkSums(t, "reverse", final.Reverse)
	if lines := bytes.Count(log.Bytes(), []byte("\n")); uint64(lines) != final.Forward.DroppedLoss || lines == 0 {
		t.Errorf("drop log has %d lines for %d drops", lines, final.Forward.DroppedLoss)
	}
	sc := bufio.NewScanner(&log)
	for sc.Scan() {
		if !json.Valid(sc.Bytes()) {
			t.Errorf("drop log line is not JSON: %q", sc.Text())
		}
	}
}

// TestNetemClientsEvicted: the client table is bounded: a third client evicts the one idle
// longest. (The idle timeout is far beyond the test, so that only eviction closes a client.)
func TestNetemClientsEvicted(t *testing.T) {
	echo := startEcho(t)
	pr := startProxy(t, Config{Forward: echo.addr().String(), MaxClients: 2, IdleTimeout: time.Hour})
	var clients []*net.UDPConn
	for i := range 3 {
		c := dialClient(t)
		clients = append(clients, c)
		if _, err := c.WriteToUDPAddrPort([]byte{byte(i)}, pr.p.Addr()); err != nil {
			t.Fatal(err)
		}
		if got := recvUntil(t, c, 1, patience); len(got) != 1 {
			t.Fatalf("client %d: no answer", i)
		}
	}
	pr.p.clients.mu.Lock()
	_, first := pr.p.clients.m[clients[0].LocalAddr().(*net.UDPAddr).AddrPort()]
	pr.p.clients.mu.Unlock()
	st := pr.stop()
	if st.ClientsOpened != 3 || st.ClientsEvicted != 1 || st.ClientsExpired != 0 || st.Clients != 2 || first {
		t.Errorf("clients: opened %d, evicted %d, expired %d, now %d (the first among them: %v); want 3, 1, 0, 2 (false)",
			st.ClientsOpened, st.ClientsEvicted, st.ClientsExpired, st.Clients, first)
	}
}

// TestNetemClientsExpired: the janitor forgets idle clients: with a short idle timeout both
// clients are closed once quiet, however late the machine's timers run.
func TestNetemClientsExpired(t *testing.T) {
	echo := startEcho(t)
	pr := startProxy(t, Config{Forward: echo.addr().String(), IdleTimeout: 50 * time.Millisecond})
	for i := range 2 {
		if _, err := dialClient(t).WriteToUDPAddrPort([]byte{byte(i)}, pr.p.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	if !eventually(func() bool { st := pr.p.Stats(); return st.ClientsOpened == 2 && st.Clients == 0 }) {
		t.Fatalf("clients still open: %+v", pr.p.Stats())
	}
	st := pr.stop()
	if st.ClientsOpened != 2 || st.ClientsEvicted != 0 || st.ClientsExpired != 2 || st.Clients != 0 {
		t.Errorf("clients: opened %d, evicted %d, expired %d, now %d; want 2, 0, 2, 0",
			st.ClientsOpened, st.ClientsEvicted, st.ClientsExpired, st.Clients)
	}
}

// TestNetemIdleExpiryVirtualTime: which clients expire and which one is evicted depends only on
// the proxy times of their last datagrams, given here (the janitor is not running): a client
// quiet since before the cut is closed, one heard from at or after it stays, and the client
// idle longest is the one evicted.
func TestNetemIdleExpiryVirtualTime(t *testing.T) {
	echo := startEcho(t)
	p, err := New(Config{Listen: "127.0.0.1:0", Forward: echo.addr().String(), MaxClients: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ms := time.Millisecond
	addr := func(i int) netip.AddrPort { return netip.AddrPortFrom(loopback, uint16(40000+i)) }
	for i, at := range []time.Duration{0, 100 * ms, 150 * ms} {
		if _, err := p.client(addr(i), at); err != nil {
			t.Fatal(err)
		}
	}
	open := func() []netip.AddrPort {
		p.clients.mu.Lock()
		defer p.clients.mu.Unlock()
		var a []netip.AddrPort
		for k := range p.clients.m {
			a = append(a, k)
		}
		slices.SortFunc(a, func(x, y netip.AddrPort) int { return x.Compare(y) })
		return a
	}
	// Client 1 is heard from again at 300 ms; a new client at 310 ms evicts client 0, idle longest.
	p.clients.m[addr(1)].last.Store(int64(300 * ms))
	if _, err := p.client(addr(3), 310*ms); err != nil {
		t.Fatal(err)
	}
	if got, want := open(), []netip.AddrPort{addr(1), addr(2), addr(3)}; !slices.Equal(got, want) {
		t.Fatalf("after the eviction: %v, want %v", got, want)
	}
	// The cut at 300 ms: client 2 (last at 150 ms) goes; 1 (at 300) and 3 (at 310) stay.
	p.expireClients(300 * ms)
	if got, want := open(), []netip.AddrPort{addr(1), addr(3)}; !slices.Equal(got, want) {
		t.Fatalf("after expiring before 300 ms: %v, want %v", got, want)
	}
	p.expireClients(time.Hour)
	st := p.Stats()
	if len(open()) != 0 || st.ClientsOpened != 4 || st.ClientsEvicted != 1 || st.ClientsExpired != 3 {
		t.Fatalf("after expiring all: %v open, %+v", open(), st)
	}
	p.wg.Wait() // every client's reader ended with its socket
}

// TestNetemDrainOnStop: datagrams in flight when the proxy is told to stop are still delivered,
// and the final counters add up with none in flight.
func TestNetemDrainOnStop(t *testing.T) {
	echo := startEcho(t)
	pr := startProxy(t, Config{Forward: echo.addr().String(), ForwardLink: netem.Config{Delay: 100 * time.Millisecond}})
	c := dialClient(t)
	for i := range 10 {
		c.WriteToUDPAddrPort([]byte{byte(i)}, pr.p.Addr())
	}
	eventually(func() bool { return pr.p.Stats().Forward.Received == 10 })
	st := pr.stop()
	if st.Forward.Forwarded != 10 || st.Forward.Unsent != 0 {
		t.Errorf("forward after stop: %+v; want all 10 forwarded", st.Forward)
	}
	// Nothing is left in flight once the drain has delivered everything (the last datagram's
	// delivery used to leave the count of before it).
	checkSums(t, "forward", st.Forward)
	echo.waitFor(10)
	if n := len(echo.arrivals()); n != 10 {
		t.Errorf("the server got %d of 10", n)
	}
}

// TestNetemSteadyStateAllocs: forwarding allocates nothing per datagram once the pools are
// warm (measured over the whole process, so the bound is loose).
func TestNetemSteadyStateAllocs(t *testing.T) {
	if testing.Short() || testenv.Race {
		t.Skip("short mode, or the race detector, which allocates")
	}
	echo := startEchoRecording(t, false)
	pr := startProxy(t, Config{Forward: echo.addr().String(), ForwardLink: netem.Config{Delay: time.Millisecond}})
	c := dialClient(t)
	msg := make([]byte, 1200)
	buf := make([]byte, 2048)
	round := func(n int) {
		for i := range n {
			c.WriteToUDPAddrPort(msg, pr.p.Addr())
			if i%8 == 7 {
				for range 8 {
					c.SetReadDeadline(time.Now().Add(time.Second))
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
}

// TestNetemRoCENamesOnlyCleanPackets: RoCE names built packets and rejects what is not one.
func TestNetemRoCENamesOnlyCleanPackets(t *testing.T) {
	b := rocePacket(t, 0xabcdef, 0x123456, []byte("abc"))
	h, ok := RoCE(b)
	if !ok || h.DestQP != 0xabcdef || h.PSN != 0x123456 || h.OpCode != roce.OpWriteMiddle {
		t.Errorf("RoCE(packet) = %+v, %v", h, ok)
	}
	for _, bad := range [][]byte{nil, b[:15], []byte("hello, world, this is text"), append([]byte{0x0c}, b[1:]...)} {
		if _, ok := RoCE(bad); ok {
			t.Errorf("RoCE(%x) named a non-packet", bad)
		}
	}
	ack := roce.Packet{BTH: roce.BTH{OpCode: roce.OpUDSendOnly}, Payload: []byte{1}}
	ab, _ := ack.Append(nil)
	if got := string(appendOpcode(nil, roce.OpUDSendOnly)); got != roce.OpUDSendOnly.String() {
		t.Errorf("appendOpcode = %q, want %q", got, roce.OpUDSendOnly.String())
	}
	_, _ = RoCE(ab)
}

func FuzzRoCE(f *testing.F) {
	f.Add([]byte("hello"))
	f.Add(make([]byte, 16))
	// The real capture's packets, read in place (never copied into the repository).
	if pkts, err := fuzzcorpus.RealRoCEv2(); err == nil {
		for _, p := range pkts {
			f.Add(p)
		}
	} else {
		f.Logf("real capture not used: %v", err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, ok := RoCE(b); ok {
			if _, err := roce.ParsePacket(b); err != nil || h.TVer != 0 {
				t.Fatalf("RoCE accepted %x", b)
			}
		}
	})
}

// TestNetemNewErrors: bad configurations are refused before anything runs.
func TestNetemNewErrors(t *testing.T) {
	for _, cfg := range []Config{
		{Forward: "127.0.0.1:9"},
		{Listen: "127.0.0.1:0"},
		{Listen: "127.0.0.1:0", Forward: "127.0.0.1:0"},
		{Listen: "127.0.0.1:0", Forward: "nonsense"},
		{Listen: "127.0.0.1:99999", Forward: "127.0.0.1:9"},
		{Listen: "127.0.0.1:0", Forward: "127.0.0.1:9", ForwardLink: netem.Config{Delay: -1}},
		{Listen: "127.0.0.1:0", Forward: "127.0.0.1:9", MaxClients: -1},
	} {
		if p, err := New(cfg); err == nil {
			p.Close()
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

// BenchmarkNetemRelay measures round trips of 1200-octet datagrams through an unimpaired proxy
// on loopback, 32 in flight at a time: two crossings of the proxy per round trip.
func BenchmarkNetemRelay(b *testing.B) {
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
	p, err := New(Config{Listen: "127.0.0.1:0", Forward: echoConn.LocalAddr().String()})
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
	msg := make([]byte, 1200)
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

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, os.ErrClosed }

// TestNetemDropLogWriteError: a drop log that cannot be written does not stop the proxy, and
// Run reports it when it returns.
func TestNetemDropLogWriteError(t *testing.T) {
	echo := startEcho(t)
	p, err := New(Config{Listen: "127.0.0.1:0", Forward: echo.addr().String(),
		ForwardLink: netem.Config{Loss: mustLoss(t, "script:0", 1)}, DropLog: failingWriter{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	c := dialClient(t)
	for i := range 3 {
		c.WriteToUDPAddrPort([]byte{byte(i)}, p.Addr())
	}
	got := recvUntil(t, c, 2, patience)
	cancel()
	if err := <-errc; err == nil || len(got) != 2 {
		t.Errorf("Run = %v with %d answers; want a drop log error and 2 answers", err, len(got))
	}
}
