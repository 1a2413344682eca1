package perf

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/internal/testenv"
	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/rc"
	"github.com/crem-project/crem/rc/udp"
)

// opts are the tests' options: a rate this machine's loopback carries, patient client QPs.
func testOpts(op string) Options {
	return Options{Op: op, Mode: rc.ModeTCAETH, Rate: 400e6, Seed: 7, Timeout: 2 * time.Minute, RetryCount: stallRetries}
}

// perftest's -a: a row per power of two from 2 octets to 8 MiB, each its own verified run of
// its size, the total the sum of the rows.
func TestLoopbackAllSizesR28(t *testing.T) {
	o := testOpts("write")
	o.AllSizes, o.Iters = true, 1
	res, err := Loopback(context.Background(), o)
	if err != nil {
		t.Fatalf("%v (%+v)", err, res.Error)
	}
	if len(res.Rows) != 23 || !res.AllSizes || !res.Verified || res.Size != 8<<20 {
		t.Fatalf("%d rows, all_sizes %v, verified %v, size %d", len(res.Rows), res.AllSizes, res.Verified, res.Size)
	}
	var bytes int64
	for i, r := range res.Rows {
		if r.Size != 2<<i || r.Iterations != 1 || r.Bytes != int64(r.Size) || !r.Verified || r.AverageGbps <= 0 ||
			r.PeakGbps < r.AverageGbps || r.MsgRateMpps <= 0 || len(r.PerQP) != 1 {
			t.Errorf("row %d: %+v", i, r)
		}
		bytes += r.Bytes
	}
	if bytes != res.Bytes || res.Iterations != 23 || res.Completed != 23 {
		t.Errorf("total %d bytes, %d iterations; the rows' %d", res.Bytes, res.Iterations, bytes)
	}
	if got := Sizes(64 << 10); len(got) != 16 || got[0] != 2 || got[15] != 65536 {
		t.Errorf("Sizes(64KiB) = %v", got)
	}
	bad := testOpts("write")
	bad.AllSizes, bad.MaxSize = true, 1
	if _, err := Loopback(context.Background(), bad); err == nil {
		t.Error("a largest size of 1 octet accepted")
	}
}

// perftest's -D: a run of a duration posts until it is over and then stops, every message it
// sent completed and verified (the server checks as many as the client says it sent), against
// a server on its own sockets too.
func TestDurationR28(t *testing.T) {
	for _, op := range []string{"write", "send", "read"} {
		o := testOpts(op)
		o.Size, o.Duration, o.Iters = 16<<10, 300*time.Millisecond, 3 // Iters only sizes the slots
		res, err := Loopback(context.Background(), o)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		if !res.Verified || res.Iterations <= 3 || res.Completed != res.Iterations || res.Bytes != int64(res.Iterations)*16<<10 ||
			res.Seconds < 0.3 || res.DurationSeconds != 0.3 || res.PerQP[0].Iterations != res.Iterations {
			t.Errorf("%s: %d iterations in %.3f s, verified %v, duration %v", op, res.Iterations, res.Seconds, res.Verified, res.DurationSeconds)
		}
	}
	srv := startServer(t)
	o := testOpts("write")
	o.Size, o.Duration, o.QPs, o.Server = 8<<10, 200*time.Millisecond, 2, srv
	host := listen(t)
	res, err := Run(context.Background(), o, host)
	if err != nil || !res.Verified || res.PerQP[0].Iterations < 2 || res.PerQP[1].Iterations < 2 {
		t.Fatalf("client and server, 2 QPs: %v %+v", err, res)
	}
}

// perftest's -b: the server runs the same operation towards the client at once; both
// directions move all their messages, each verified where it lands (READ data where it is
// read), with figures per direction and their sums.
func TestBidirectionalR28(t *testing.T) {
	loss, _ := netem.ParseLossSpec("0.01")
	for _, op := range []string{"write", "send", "read"} {
		o := testOpts(op)
		o.Size, o.Iters, o.Bidirectional, o.Loss, o.Delay = 32<<10, 8, true, loss, time.Millisecond
		res, err := Loopback(context.Background(), o)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		if !res.Verified || !res.Bidirectional || len(res.Directions) != 2 {
			t.Fatalf("%s: %+v", op, res)
		}
		c, s := res.Directions[0], res.Directions[1]
		if c.From != "client" || s.From != "server" || !c.Verified || !s.Verified || c.Iterations != 8 || s.Iterations != 8 ||
			c.Bytes != 8*32<<10 || s.Bytes != 8*32<<10 || c.Gbps <= 0 || s.Gbps <= 0 {
			t.Errorf("%s: directions %+v", op, res.Directions)
		}
		if res.Iterations != 16 || res.Bytes != 16*32<<10 || res.Completed != 16 ||
			res.AverageGbps != c.Gbps+s.Gbps || res.PeakGbps != c.PeakGbps+s.PeakGbps {
			t.Errorf("%s: totals %d iterations, %d bytes, %v Gbit/s, not the directions' sums", op, res.Iterations, res.Bytes, res.AverageGbps)
		}
	}
}

// The latency mode: one message at a time, one sample per iteration, its percentiles in
// order; WRITE and SEND are ping-pong (half the round trip), READ its whole time.
func TestLatencyR28(t *testing.T) {
	for _, op := range []string{"write", "send", "read"} {
		o := testOpts(op)
		o.Latency, o.Iters = true, 60
		res, err := Loopback(context.Background(), o)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		l := res.Latency
		if l == nil || !res.Verified || res.Size != 2 || res.Iterations != 60 || l.Samples != 60 {
			t.Fatalf("%s: %+v latency %+v", op, res, l)
		}
		if !(0 < l.MinUs && l.MinUs <= l.MedianUs && l.MedianUs <= l.P99Us && l.P99Us <= l.P999Us && l.P999Us <= l.MaxUs &&
			l.MinUs <= l.MeanUs && l.MeanUs <= l.MaxUs) {
			t.Errorf("%s: percentiles out of order: %+v", op, l)
		}
		want := "half_round_trip"
		if op == "read" {
			want = "round_trip"
		}
		if l.Method != want {
			t.Errorf("%s: method %q, want %q", op, l.Method, want)
		}
	}
	bad := testOpts("write")
	bad.Latency, bad.Bidirectional = true, true
	if _, err := Loopback(context.Background(), bad); err == nil {
		t.Error("latency and bidirectional at once accepted")
	}
}

// The figures of latencyOf: nearest-rank percentiles of known samples, halved for ping-pong.
func TestLatencyOfPercentiles(t *testing.T) {
	var s []time.Duration
	for i := 1000; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Microsecond)
	}
	l := latencyOf(s, false)
	if l.MinUs != 1 || l.MedianUs != 500 || l.P99Us != 990 || l.P999Us != 999 || l.MaxUs != 1000 || l.MeanUs != 500.5 || l.Samples != 1000 {
		t.Errorf("%+v", l)
	}
	if h := latencyOf(s, true); h.MedianUs != 250 || h.MaxUs != 500 || h.Method != "half_round_trip" {
		t.Errorf("halved: %+v", h)
	}
	if e := latencyOf(nil, false); e.Samples != 0 || e.MaxUs != 0 {
		t.Errorf("no samples: %+v", e)
	}
}

// Peak is perftest's BW peak: the best rate of any run of consecutive messages. Four messages
// of 1000 octets, the first posted 10 µs before the others: the best run is the last three,
// 3000 octets from the second's post at 10 µs to the last completion at 23 µs (the four take
// 23 µs, 5.75 each; the last alone 11 µs).
func TestPeak(t *testing.T) {
	us := time.Microsecond
	posted := []time.Duration{0, 10 * us, 11 * us, 12 * us}
	completed := []time.Duration{20 * us, 21 * us, 22 * us, 23 * us}
	want := 3 * 1000 * 8 / 13e3 // Gbit/s: bits per nanosecond
	if got := Peak(posted, completed, 1000); got < want-1e-9 || got > want+1e-9 {
		t.Errorf("peak %v Gbit/s, want %v", got, want)
	}
	// Past peakSamples messages the search samples; a steady run's peak is its rate.
	var p, c []time.Duration
	for i := range 10000 {
		p, c = append(p, time.Duration(i)*us), append(c, time.Duration(i+5)*us)
	}
	if got := Peak(p, c, 1000); got < 7.99 || got > 8.01 { // 1000 octets a microsecond, less the start
		t.Errorf("steady peak %v Gbit/s, want about 8", got)
	}
	if Peak(nil, nil, 1000) != 0 {
		t.Error("peak of no messages")
	}
}

// The warning's words and threshold: more than 1 percent of the data packets lost between
// the queue pairs, and more than two; the kernels' count places them in the sockets (with the
// fix: a lower rate, or the sysctl that lets the buffers grow, and the buffer now) or on the
// path (a proxy, a rate limiter or the network, with the rate above its bottleneck); without a
// count for both sockets, neither is blamed.
func TestSocketWarningText(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	r := Result{Rate: 1e9, SocketDataPackets: 1000, SocketLostDataPackets: 500, SocketDroppedPackets: n(520),
		PathLostDataPackets: n(0), PathLostPackets: n(0), RmemMax: 4194304, SocketReceiveBuffer: 8388608}
	r.socketWarning(true)
	want := "500 of 1000 data packets (50.0%) were dropped by this host's sockets: --rate 1Gbit/s is more than this path carries; " +
		"the retransmissions below are the kernel's drops, not a transport fault; lower --rate, or raise the socket buffers: " +
		"sysctl -w net.core.rmem_max=8388608 net.core.wmem_max=8388608 (now 4194304 here; this host's socket has 8388608)"
	if r.Warning != want || r.SocketLossFraction != 0.5 {
		t.Errorf("warning %q (fraction %v), want %q", r.Warning, r.SocketLossFraction, want)
	}
	r.SocketBufferForced = true // past rmem_max already: ask for more
	if r.socketWarning(true); !strings.HasSuffix(r.Warning, "lower --rate, or ask for larger socket buffers: --socket-buffer 16MiB (this host's socket has 8388608)") {
		t.Errorf("forced buffer: %q", r.Warning)
	}
	b := Result{Rate: 4e8, SocketDataPackets: 100, SocketLostDataPackets: 10, Bidirectional: true, SocketDroppedPackets: n(10),
		ServerSocketDroppedPackets: n(7), PathLostDataPackets: n(0), PathLostPackets: n(0), RmemMax: 212992,
		SocketReceiveBuffer: 425984, ServerSocketReceiveBuffer: 8388608}
	if b.socketWarning(false); !strings.Contains(b.Warning, "10 of 100 data packets (10.0%) were dropped by the sockets (this host's 3, the server's 7): --rate 400Mbit/s each way is more") ||
		!strings.Contains(b.Warning, "the server's 8388608") || strings.Contains(b.Warning, "on the path") {
		t.Errorf("bidirectional, client and server: %q", b.Warning)
	}
	// A proxy dropped them: the path, never the sockets.
	p := Result{Rate: 2e8, SocketDataPackets: 1000, SocketLostDataPackets: 40, SocketDroppedPackets: n(0),
		ServerSocketDroppedPackets: n(0), PathLostDataPackets: n(40), PathLostPackets: n(41)}
	want = "40 of 1000 data packets (4.0%) were lost on the path between the sockets, not in them (the kernels dropped 0 packets): " +
		"a proxy, a rate limiter or the network dropped them; --rate 200Mbit/s above the path's bottleneck causes this: lower it to the path's rate"
	if p.socketWarning(false); p.Warning != want {
		t.Errorf("path: %q, want %q", p.Warning, want)
	}
	// No count from the server (one that predates it): the loss is not placed.
	u := Result{Rate: 1e9, SocketDataPackets: 1000, SocketLostDataPackets: 40}
	if u.socketWarning(false); !strings.HasPrefix(u.Warning, "40 of 1000 data packets (4.0%) were lost between the queue pairs, in the sockets or on the path") ||
		strings.Contains(u.Warning, "dropped by") || !strings.Contains(u.Warning, "the server's: it does not report it") {
		t.Errorf("no count: %q", u.Warning)
	}
	for _, lost := range []int64{0, 2, 10} {
		r := Result{Rate: 1e9, SocketDataPackets: 1000, SocketLostDataPackets: lost, SocketDroppedPackets: n(lost),
			PathLostDataPackets: n(0), PathLostPackets: n(0)}
		if r.socketWarning(true); r.Warning != "" {
			t.Errorf("%d of 1000 lost: warning %q", lost, r.Warning)
		}
	}
}

// The warning from a run: a receive buffer of a few packets at 5 Gbit/s makes the sockets drop
// (the run may then fail: what is judged is the warning, in the JSON and its counts); a low
// rate with the default buffer makes none.
func TestSocketLossWarningR28(t *testing.T) {
	o := testOpts("write")
	o.Size, o.Iters, o.Rate, o.SocketBuffer, o.Timeout = 256<<10, 4, 5e9, 4096, 30*time.Second
	res, _ := Loopback(context.Background(), o)
	if !strings.Contains(res.Warning, "data packets") || !strings.Contains(res.Warning, "were dropped by this host's sockets: --rate 5Gbit/s is more than this path carries") ||
		res.SocketLossFraction <= SocketLossWarnFraction || res.SocketLostDataPackets <= 0 || res.SocketDataPackets <= 0 {
		t.Fatalf("tiny buffer at 5 Gbit/s: warning %q, %d of %d lost", res.Warning, res.SocketLostDataPackets, res.SocketDataPackets)
	}
	if _, ok := kernelDrops(1); ok || res.KernelSocketDrops != nil {
		// Where /proc/net/udp exists, the kernel counted the drops too.
		if res.KernelSocketDrops == nil || *res.KernelSocketDrops == 0 {
			t.Errorf("kernel drops %v with %d lost in the sockets", res.KernelSocketDrops, res.SocketLostDataPackets)
		}
	}
	t.Logf("%s (kernel: %v)", res.Warning, res.KernelSocketDrops)
	if testenv.Race {
		t.Skip("a run without socket loss is not the race detector's to promise")
	}
	o = testOpts("write")
	o.Size, o.Iters, o.Rate = 16<<10, 16, 20e6
	res, err := Loopback(context.Background(), o)
	if err != nil || res.Warning != "" || res.SocketLossFraction > SocketLossWarnFraction {
		t.Errorf("20 Mbit/s: %v, warning %q", err, res.Warning)
	}
}

func startServer(t *testing.T) string {
	t.Helper()
	host := listen(t)
	setup, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); Serve(ctx, setup, host, discard{}) }()
	t.Cleanup(func() { stop(); <-served; setup.Close() })
	return setup.LocalAddr().String()
}

func listen(t *testing.T) *udp.Host {
	t.Helper()
	h, err := udp.Listen("127.0.0.1:0", udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// A bidirectional run's initial RTT covers the other direction's slots, which each QP's ACKs
// wait behind in its paced queue (R28): 64 x 64 KiB at 400 Mbit/s is 83.9 ms. One direction
// keeps 2 x delay + 1 ms; a given RTT is kept.
func TestBidirectionalRTTR28(t *testing.T) {
	o := Options{Op: "write", Size: 64 << 10, Iters: 1000, Rate: 400e6, QPs: 1, Delay: time.Millisecond, Bidirectional: true}
	want := 3*time.Millisecond + time.Duration(64*65536*8/400e6*float64(time.Second))
	if got := o.rtt(); got != want {
		t.Errorf("bidirectional: %v, want %v", got, want)
	}
	o.Bidirectional = false
	if got := o.rtt(); got != 3*time.Millisecond {
		t.Errorf("one direction: %v", got)
	}
	o.RTT = 7 * time.Millisecond
	if got := o.rtt(); got != 7*time.Millisecond {
		t.Errorf("given: %v", got)
	}
}
