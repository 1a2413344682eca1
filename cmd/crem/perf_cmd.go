package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/crem-project/crem/internal/harness/perf"
	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/rc"
	"github.com/crem-project/crem/rc/udp"
	"github.com/crem-project/crem/units"
)

const perfDescription = `Measures the project's userspace RoCEv2 RC queue pair, in the manner of perftest's
ib_write_bw, ib_send_bw and ib_read_bw.

  crem perf serve --listen ADDR            accept connections on the setup address ADDR
  crem perf write|send|read --server ADDR  run iterations against a server
  crem perf write|send|read --loopback     run both ends in this process on 127.0.0.1

Every message is random data checked byte for byte where it lands (the server checks WRITE
and SEND, the client READ). The RoCE traffic uses UDP port 4791 (--port; --loopback picks a
free one unless --port is given); the setup exchange uses ADDR's port. --loss and --delay
impair the path in process, each direction independently (both ends apply their own
direction; the server learns them at setup). --pcap FILE records every packet this process
sends, including those the impairment drops.

--qps N (perftest's -q) connects N queue pairs between the client and the server, each
running --iters messages with its own initial PSN, drawn over the whole 24-bit space from
--seed, its own data and its own impairment, each verified on its own. They share the path:
--rate is the total, each QP pacing at rate/N.

perftest's options: -a / --all-sizes runs every size from 2 octets to 8 MiB (powers of two;
--max-size lowers the top), one row each; -D / --duration SECONDS (10, or 1.5s, 500ms) runs
each size for that long instead of --iters messages; -b / --bidirectional makes the server
run the same operation towards the client at the same time (WRITEs into the client's memory,
SENDs to it, READs of it, checked as the client's are), with figures per direction and
summed. -s, -n, -q, -m and -p are perftest's spellings of --size, --iters, --qps, --mtu and
--port.

  crem perf lat write|send|read --server ADDR | --loopback [flags]

is the latency mode (ib_write_lat, ib_send_lat, ib_read_lat): one message in flight. WRITE
and SEND are ping-pong (the server answers each message with one of its own; the client
posts the next when the answer lands) and report half the round trip; READ reports each
READ's whole time. Minimum, median (t_typical), mean, p99, p99.9 and maximum in
microseconds; --size defaults to 2 octets there.

Timers: each QP starts from the round trip of its setup exchange (the request sent to the
accept received, plus 2 x --delay), or from --rtt D where the path's round trip is known. A
measured round trip is an estimate: until the first ACK gives an RTT sample, no timer runs
shorter than the local ACK timeout, --qp-timeout CODE (perftest's -u; a bare CODE to --timeout
means the same), 4.096 us x 2^CODE, default 14 = 67.1 ms. --rtt is taken as a sample. Each
timeout without progress doubles the next, up to 64 times, and progress resets it, so that
--retry-count (default 7) bounds the time without progress (191 timeouts' length), not timer
ticks. No timer runs under 10 ms, after the first sample too: a busy host's stalls of a few
milliseconds are not the path's round trip. The round trip and the timeouts chosen are printed
on standard error (and rtt_ms, local_ack_timeout_ms, min_timeout_ms in the JSON).

Through a relay-mode gateway pair (docs/user-guide.md, "crem perf through a relay pair"):
--via ADDR sends the RoCEv2 datagrams to ADDR, the gateway's relay.listen, instead of to the
peer's data address; the setup exchange still goes straight to --server, and the ICRC stays
sealed under the endpoints' own addresses and ports (the logical header the gateways check).
The client gives --via its gateway A's listen, the server (crem perf serve --via) its gateway
B's. As the setup does not cross the WAN, no round trip is taken from it: the QPs start with
the RTT unknown. --reorder-window (5ms, say) lets a tcaeth or sr sender wait for CREM's
restoration of a lost packet before it retransmits (the default, T_thresh, is far shorter
than a block's span). --bind IP is the client's own address (the gateways' local_endpoint or
remote_endpoint): its setup and RoCE sockets are bound to it. scripts/perf-relay.sh runs the
whole pair on loopback.

The table: perftest's (#bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps],
between dashed lines; BW peak is the best rate of any run of consecutive messages, from the
post of the first to the completion of the last), then crem's own lines as before (--table
crem prints only those, --table perftest only perftest's).

--rate is the preset rate the senders pace at. Without it --loopback takes 200 Mbit/s (with -b
100 Mbit/s each way), which a 2-core host's loopback carries without socket drops beside other
work, and --server 1 Gbit/s; the rate taken is said on standard error and in the JSON
(rate_default). When more than 1 percent of the data packets were lost between the queue
pairs, a warning on standard error (and the JSON's warning) says where, from the kernel's own
count of the drops on each data socket (the server reports its own): dropped by the sockets
(the receiver could not keep up: lower --rate, or raise the socket buffers with the sysctl it
names, or --socket-buffer), or lost on the path (a proxy, a rate limiter or the network: --rate
is above the path's bottleneck). The JSON has the counts: socket_dropped_packets,
path_lost_packets, path_lost_data_packets, and the buffer granted, socket_receive_buffer.

Output: a table, or with --json one JSON object and nothing else on standard output:
bytes, iterations, seconds, verified, data_packets, retransmitted_packets,
timeout_retransmissions, ack_packets, nak_packets, dropped_packets, dropped_data_packets,
mode, qps, rtt_ms, rtt_source (measured, stated, or unknown with --via), ack_timeout_code, local_ack_timeout_ms,
timeouts (timer expiries that retransmitted), first_retransmission_ms, and more; the figures
sum every QP (iterations and bytes too), and per_qp has
one object per QP with the same figures and its QPNs, initial_psn, next_psn and wrapped.
With more than one QP the table has a row per QP above the total. A run that did not verify
prints no bandwidth ("-" in the table; 0 in the JSON, with error). SIGINT or SIGTERM ends a run
with what it did, marked interrupted (the verified column, a closing line; the JSON's
interrupted, cancelled: the messages in flight, neither lost nor failed, sizes_not_run with -a,
signal). Exit status: 0 when every message completed and was verified, 1 when not, 2 for
usage errors, 130 / 143 when SIGINT / SIGTERM cut the run short.

Examples:
  crem perf write --loopback --size 4MiB --iters 4 --mtu 1024 --loss 0.02 --delay 10ms --mode tcaeth
  crem perf write --loopback --qps 8 --size 1MiB --iters 16 --loss 0.01 --delay 5ms
  crem perf write --loopback -a -n 4
  crem perf write --loopback -b -D 5 --size 64KiB
  crem perf lat write --loopback -n 10000
  crem perf write --server 198.51.100.7:18515 --size 4MiB --rtt 20ms --qp-timeout 16`

func runPerf(args []string, s stdio) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintf(s.err, "Usage: crem perf serve|write|send|read|lat [flags]\n\n%s\n", perfDescription)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "serve" {
		return runPerfServe(args[1:], s)
	}
	op, lat, args, msg := perfOperation(args)
	if msg != "" {
		fmt.Fprint(s.err, msg)
		return 2
	}
	name := "perf " + op
	if lat {
		name = "perf lat " + op
	}
	fs := newFlagSet(name, "crem "+name+" --server ADDR | --loopback [flags]", perfDescription, s)
	server := fs.String("server", "", "setup address of a `crem perf serve` (host:port)")
	loopback := fs.Bool("loopback", false, "run both ends in this process over UDP on 127.0.0.1")
	size := units.Size(64 << 10)
	if lat {
		size = 2
	}
	fs.Var(&size, "size", "message size (4096, 64KiB, 4MiB)")
	fs.Var(&size, "s", "message size (perftest's -s; --size)")
	iters := fs.Int("iters", 1000, "iterations")
	fs.IntVar(iters, "n", 1000, "iterations (perftest's -n; --iters)")
	mtu := fs.Int("mtu", 1024, "RDMA MTU: 256, 512, 1024, 2048 or 4096")
	fs.IntVar(mtu, "m", 1024, "RDMA MTU (perftest's -m; --mtu)")
	mode := fs.String("mode", "tcaeth", "reliability mode: gbn, sr or tcaeth")
	srNAK := fs.Bool("sr-nak", true, "sr: the responder NAKs missing PSNs (false: recovery by timers alone)")
	rate := units.Rate(0)
	fs.Var(&rate, "rate", fmt.Sprintf("preset rate the sender paces at (500Mbit, 2Gbit; default %s with --loopback, half each way with -b, %s with --server)",
		units.FormatRate(perf.DefaultLoopbackRate), units.FormatRate(perf.DefaultRate)))
	var loss netem.LossSpec
	fs.Var(&loss, "loss", "in-process loss on each direction: a fraction (0.01) or a netem loss model")
	delay := fs.Duration("delay", 0, "in-process one-way delay (10ms)")
	seed := fs.Uint64("seed", 1, "seed of the data and of the impairment")
	pcapFile := fs.String("pcap", "", "write every packet sent, dropped ones included, to this pcap `FILE`")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	port := fs.Int("port", udp.DefaultPort, "UDP port of the RoCE traffic")
	fs.IntVar(port, "p", udp.DefaultPort, "UDP port of the RoCE traffic (perftest's -p; --port)")
	timeout := timeoutFlag{run: 10 * time.Minute}
	fs.Var(&timeout, "timeout", "give up after this long (a duration, 10m); a bare CODE 1..31 is --qp-timeout's instead")
	ackCode := fs.Int("qp-timeout", rc.DefaultLocalAckTimeoutCode, "IBTA local ACK timeout CODE, 4.096 us x 2^CODE (14: 67.1 ms): no timer is shorter before the first RTT sample (perftest's -u)")
	fs.IntVar(ackCode, "u", rc.DefaultLocalAckTimeoutCode, "local ACK timeout CODE (perftest's -u; --qp-timeout)")
	rttFlag := fs.Duration("rtt", 0, "state the path's round trip (20ms), taken as the QPs' first RTT sample; default: measured on the setup exchange")
	retries := fs.Int("retry-count", 7, "timeouts without progress before the sending QP gives up (IBTA's retry_cnt; each waits twice the last, up to 64x)")
	qps := fs.Int("qps", 1, fmt.Sprintf("queue pairs between client and server, each running --iters messages (perftest's -q; 1 to %d)", perf.MaxQPs))
	fs.IntVar(qps, "q", 1, "queue pairs (perftest's -q; --qps)")
	allSizes := fs.Bool("all-sizes", false, "every size from 2 octets to --max-size (8 MiB), powers of two, a row each (perftest's -a)")
	fs.BoolVar(allSizes, "a", false, "every size from 2 octets to 8 MiB (perftest's -a; --all-sizes)")
	maxSize := units.Size(perf.DefaultMaxSize)
	fs.Var(&maxSize, "max-size", "the largest size of --all-sizes")
	var dur secondsFlag
	fs.Var(&dur, "duration", "run each size for this long (SECONDS, or 1.5s, 500ms) instead of --iters messages (perftest's -D)")
	fs.Var(&dur, "D", "run for SECONDS instead of --iters messages (perftest's -D; --duration)")
	bidir := new(bool)
	if !lat {
		fs.BoolVar(bidir, "bidirectional", false, "the server runs the same operation towards the client at once (perftest's -b)")
		fs.BoolVar(bidir, "b", false, "both directions at once (perftest's -b; --bidirectional)")
	}
	sockBuf := units.Size(0)
	fs.Var(&sockBuf, "socket-buffer", "kernel buffer asked for each direction of the data socket (default 8MiB; the kernel caps it at net.core.rmem_max unless run as root)")
	table := fs.String("table", "both", "the table: perftest (perftest's columns), crem (crem's lines only, as before) or both")
	via := fs.String("via", "", "send the RoCE datagrams to this `ADDR` (host:port: a relay-mode gateway's relay.listen) instead of to the server; the RTT starts unknown")
	reorder := fs.Duration("reorder-window", 0, "tcaeth and sr: how long a gap may wait before its PSNs count as lost (T5; 0: T_thresh); through CREM gateways, a block's span and more (5ms)")
	bind := fs.String("bind", "", "the client's own `IP` (setup and RoCE sockets); default: the address the kernel picks, RoCE on every address")
	if code, done := parseFlags(fs, args[1:]); done {
		return code
	}
	sizeSet, codeSet, portSet, rateSet := false, false, false, false
	fs.Visit(func(f *flag.Flag) {
		sizeSet = sizeSet || f.Name == "size" || f.Name == "s"
		codeSet = codeSet || f.Name == "qp-timeout" || f.Name == "u"
		portSet = portSet || f.Name == "port" || f.Name == "p"
		rateSet = rateSet || f.Name == "rate"
	})
	chk := perfChecks{name: name, op: op, table: *table, allSizes: *allSizes, sizeSet: sizeSet, maxSize: int64(maxSize),
		args: fs.Args(), loopback: *loopback, server: *server, mtu: *mtu, size: int64(size), iters: *iters, rate: int64(rate),
		rateSet: rateSet, retries: *retries, sockBuf: int64(sockBuf), timeoutCode: timeout.code, ackCode: *ackCode,
		codeSet: codeSet, rtt: *rttFlag, qps: *qps, reorder: *reorder}
	if msg := chk.problem(); msg != "" {
		fmt.Fprintln(s.err, msg)
		return 2
	}
	if timeout.code != 0 {
		*ackCode = timeout.code
	}
	m, err := rc.ParseMode(*mode)
	if err != nil {
		fmt.Fprintf(s.err, "crem perf %s: %v\n", op, err)
		return 2
	}
	viaAddr, bindAddr, err := perfViaBind(*via, *bind, *loopback)
	if err != nil {
		fmt.Fprintf(s.err, "crem %s: %v\n", name, err)
		return 2
	}
	if !rateSet {
		perfRateNote(s, name, *loopback, *bidir) // the default, said once: the run's figures depend on it
	}
	perfPlan(name, int64(rate), rateSet, *loopback, *bidir, lat, int64(size), *iters, *qps, *allSizes, int64(maxSize),
		time.Duration(dur), *rttFlag, *delay).warn(s.err)
	opts := perf.Options{Via: viaAddr, Bind: bindAddr, ReorderWindow: *reorder, Op: op, Size: int(size), Iters: *iters, MTU: *mtu, Mode: m, SRNoNAK: !*srNAK,
		Rate: int64(rate), Loss: loss, Delay: *delay, Seed: *seed, Port: *port, Server: *server, Timeout: timeout.run,
		RTT: *rttFlag, AckTimeoutCode: *ackCode, RetryCount: *retries, QPs: *qps, AllSizes: *allSizes, MaxSize: int(maxSize), Duration: time.Duration(dur),
		Bidirectional: *bidir, Latency: lat, SocketBuffer: int(sockBuf)}
	if *loopback && !portSet {
		opts.Port = 0
	}
	var pf *os.File
	if *pcapFile != "" {
		if pf, err = os.Create(*pcapFile); err != nil {
			fmt.Fprintf(s.err, "crem perf %s: %v\n", op, err)
			return 2
		}
		defer pf.Close()
		opts.Pcap = pf
	}
	ctx, sig, stop := signalContext()
	defer stop()
	res, err := perfRun(ctx, opts, *loopback, pf)
	printPerfResult(s, res, *asJSON, *table, lat, sig.name())
	printPerfNotes(s, name, res, *delay)
	return perfExit(s, name, res, err, sig)
}

// perfMaxSize is the largest message crem perf moves.
const perfMaxSize = 1 << 30

// perfPlan is what a crem perf run moves, for the warnings before it starts: every message of
// every size and QP at the rate (the default when --rate is not given), and round trips: one per
// message in the latency test (ping-pong), a couple otherwise. A run for --duration takes as long
// as it says, so only its rate is judged.
func perfPlan(name string, rate int64, rateSet, loopback, bidir, lat bool, size int64, iters, qps int, allSizes bool,
	maxSize int64, dur, rtt, delay time.Duration) runPlan {
	if !rateSet {
		rate = perf.DefaultRateFor(loopback, bidir)
	}
	if rtt == 0 {
		rtt = 2 * delay
	}
	p := runPlan{name: name, rate: rate, rateFlag: "--rate", rtt: rtt, rtts: 2, fix: "--size or --iters"}
	sizes := []int64{size}
	if allSizes {
		sizes = nil
		for n := int64(perf.MinSize); n <= maxSize; n *= 2 {
			sizes = append(sizes, n)
		}
	}
	var total float64
	for _, n := range sizes {
		total += float64(n) * float64(iters) * float64(qps)
	}
	p.bytes = total
	p.what = fmt.Sprintf("%s x %d messages", units.FormatSize(size), iters)
	if allSizes {
		p.what = fmt.Sprintf("every size to %s x %d messages", units.FormatSize(maxSize), iters)
	}
	if qps > 1 {
		p.what += fmt.Sprintf(" on each of %d QPs", qps)
	}
	if lat {
		p.rtts = float64(iters) * float64(len(sizes))
	}
	if dur > 0 {
		p.bytes, p.rtts = 0, 0
	}
	return p
}

// perfOutput is `crem perf --json`'s object: the result, and the signal that interrupted it.
type perfOutput struct {
	perf.Result
	Signal string `json:"signal,omitempty"`
}

// printPerfInterrupted closes the table of a run cut short by a signal: what completed, what
// was cancelled in flight (not lost), and the sizes not run.
func printPerfInterrupted(s stdio, r perf.Result, sig string) {
	if !r.Interrupted {
		return
	}
	by := ""
	if sig != "" {
		by = " by " + sig
	}
	fmt.Fprintf(s.out, "interrupted%s: %d of %d iterations completed and checked, %d in flight cancelled (not lost)",
		by, r.Completed, r.Iterations, r.Cancelled)
	if len(r.SizesNotRun) > 0 {
		fmt.Fprintf(s.out, "; sizes not run: %s", joinInts(r.SizesNotRun))
	}
	fmt.Fprintln(s.out)
}

func joinInts(v []int) string {
	b := make([]byte, 0, 8*len(v))
	for i, x := range v {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendInt(b, int64(x), 10)
	}
	return string(b)
}

// perfVerified is the verified column: interrupted for a run cut short that nothing failed.
func perfVerified(interrupted bool, errText string, verified bool) string {
	if interrupted && errText == "" {
		return "interrupted"
	}
	return strconv.FormatBool(verified)
}

// gbps is a bandwidth figure in the table, "-" for a run that did not verify (it has none).
func gbps(verified bool, v float64, format string) string {
	if !verified {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// perfClient runs the client against a remote server on its own data socket.
func perfClient(ctx context.Context, opts perf.Options) (perf.Result, error) {
	at := fmt.Sprintf(":%d", opts.Port)
	if opts.Bind.IsValid() {
		at = netip.AddrPortFrom(opts.Bind, uint16(opts.Port)).String()
	}
	host, err := udp.Listen(at, udp.Options{Pcap: opts.Pcap, SocketBuffer: opts.SocketBuffer})
	if err != nil {
		return perf.Result{}, err
	}
	res, err := perf.Run(ctx, opts, host)
	if cerr := host.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return res, err
}

// timeoutFlag is --timeout: the run's limit as a duration (10m), or, a bare integer 1..31,
// IBTA's local ACK timeout code (--qp-timeout), as perftest's -u takes it.
type timeoutFlag struct {
	run  time.Duration
	code int
}

func (t *timeoutFlag) String() string { return t.run.String() }

func (t *timeoutFlag) Set(v string) error {
	if n, err := strconv.Atoi(v); err == nil && n != 0 {
		if _, err := rc.LocalAckTimeoutOf(n); err != nil {
			return fmt.Errorf("%q: a bare number is a local ACK timeout CODE 1..31; give the run's limit with a unit (10m)", v)
		}
		t.code = n
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("%q: want a duration (10m) or a local ACK timeout CODE 1..31", v)
	}
	t.run = d
	return nil
}

// perfViaBind checks --via and --bind: an address with a port, an IP; neither with --loopback.
func perfViaBind(via, bind string, loopback bool) (netip.AddrPort, netip.Addr, error) {
	var v netip.AddrPort
	var b netip.Addr
	if loopback && (via != "" || bind != "") {
		return v, b, fmt.Errorf("--via and --bind are for a client of a remote server, not --loopback")
	}
	if via != "" {
		ua, err := net.ResolveUDPAddr("udp", via)
		if err != nil || ua.Port == 0 || ua.IP == nil {
			return v, b, fmt.Errorf("--via %q: want HOST:PORT, the relay.listen of a gateway (%v)", via, err)
		}
		v = ua.AddrPort()
		v = netip.AddrPortFrom(v.Addr().Unmap(), v.Port())
	}
	if bind != "" {
		a, err := netip.ParseAddr(bind)
		if err != nil {
			return v, b, fmt.Errorf("--bind %q: want an IP address: %w", bind, err)
		}
		b = a.Unmap()
	}
	return v, b, nil
}

// secondsFlag is perftest's -D: whole seconds (10), or a duration (1.5s, 500ms).
type secondsFlag time.Duration

func (d *secondsFlag) String() string { return time.Duration(*d).String() }

func (d *secondsFlag) Set(v string) error {
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		if n <= 0 || n > 1e6 {
			return fmt.Errorf("%q: want a positive number of seconds", v)
		}
		*d = secondsFlag(n * float64(time.Second))
		return nil
	}
	t, err := time.ParseDuration(v)
	if err != nil || t <= 0 {
		return fmt.Errorf("%q: want SECONDS (10) or a positive duration (1.5s, 500ms)", v)
	}
	*d = secondsFlag(t)
	return nil
}

const perftestRule = "---------------------------------------------------------------------------------------"

// printPerftestBW prints perftest's bandwidth table: a row per size, and for bidirectional
// runs a row per direction below.
func printPerftestBW(s stdio, r perf.Result) {
	rows := []perf.Result{r}
	if r.AllSizes {
		rows = r.Rows
	}
	fmt.Fprintln(s.out, perftestRule)
	fmt.Fprintf(s.out, " %-10s %-14s %-18s %-20s %s\n", "#bytes", "#iterations", "BW peak[Gb/sec]", "BW average[Gb/sec]", "MsgRate[Mpps]")
	for _, x := range rows {
		fmt.Fprintf(s.out, " %-10d %-14d %-18s %-20s %s\n", x.Size, x.Iterations, gbps(x.Verified, x.PeakGbps, "%.3f"),
			gbps(x.Verified, x.AverageGbps, "%.3f"), gbps(x.Verified, x.MsgRateMpps, "%.6f"))
	}
	fmt.Fprintln(s.out, perftestRule)
	if !r.Bidirectional {
		return
	}
	fmt.Fprintf(s.out, "%-16s %-10s %-14s %-18s %-20s %-14s %s\n", "#direction", "#bytes", "#iterations", "BW peak[Gb/sec]",
		"BW average[Gb/sec]", "MsgRate[Mpps]", "verified")
	for _, x := range rows {
		for _, d := range x.Directions {
			dir := "client->server"
			if d.From == "server" {
				dir = "server->client"
			}
			fmt.Fprintf(s.out, "%-16s %-10d %-14d %-18s %-20s %-14s %s\n", dir, x.Size, d.Iterations, gbps(d.Verified, d.PeakGbps, "%.3f"),
				gbps(d.Verified, d.Gbps, "%.3f"), gbps(d.Verified, d.MsgRateMpps, "%.6f"), perfVerified(x.Interrupted, x.Error, d.Verified))
		}
	}
	fmt.Fprintln(s.out)
}

// printPerftestLat prints perftest's latency table, in microseconds.
func printPerftestLat(s stdio, r perf.Result) {
	fmt.Fprintln(s.out, perftestRule)
	fmt.Fprintf(s.out, " %-8s %-12s %-12s %-12s %-16s %-12s %-14s %-22s %s\n", "#bytes", "#iterations", "t_min[usec]", "t_max[usec]",
		"t_typical[usec]", "t_avg[usec]", "t_stdev[usec]", "99% percentile[usec]", "99.9% percentile[usec]")
	if l := r.Latency; l != nil {
		fmt.Fprintf(s.out, " %-8d %-12d %-12.2f %-12.2f %-16.2f %-12.2f %-14.2f %-22.2f %.2f\n", r.Size, r.Iterations, l.MinUs, l.MaxUs,
			l.MedianUs, l.MeanUs, l.StdevUs, l.P99Us, l.P999Us)
	}
	fmt.Fprintln(s.out, perftestRule)
}

// printPerfRows prints crem's table with a row per size (--all-sizes).
func printPerfRows(s stdio, rows []perf.Result) {
	fmt.Fprintf(s.out, "%-10s %-7s %-6s %-9s %-8s %-10s %-8s %-8s %-8s %-7s %-6s %-8s %s\n",
		"#bytes", "#iters", "mode", "seconds", "Gb/s", "data_pkts", "retx", "timeout", "acks", "naks",
		"drops", "drops_d", "verified")
	for _, r := range rows {
		printPerfRow(s, r)
	}
}

func printPerfRow(s stdio, r perf.Result) {
	fmt.Fprintf(s.out, "%-10d %-7d %-6s %-9.3f %-8s %-10d %-8d %-8d %-8d %-7d %-6d %-8d %s\n",
		r.Bytes, r.Iterations, r.Mode, r.Seconds, gbps(r.Verified, r.Gbps, "%.3f"), r.DataPackets, r.RetransmittedPackets,
		r.TimeoutRetransmissions, r.AckPackets, r.NakPackets, r.DroppedPackets, r.DroppedDataPackets,
		perfVerified(r.Interrupted, r.Error, r.Verified))
}

func printPerfTable(s stdio, r perf.Result) {
	if len(r.PerQP) > 1 {
		// perftest prints each QP's local and remote address; a row per QP here, then the
		// total in the table of one QP.
		fmt.Fprintf(s.out, "%-4s %-9s %-9s %-10s %-7s %-9s %-8s %-10s %-8s %-8s %-8s %-7s %-6s %-8s %-8s %s\n",
			"#qp", "qpn", "psn", "remote_qpn", "#iters", "seconds", "Gb/s", "data_pkts", "retx", "timeout", "acks",
			"naks", "drops", "drops_d", "wrapped", "verified")
		for _, q := range r.PerQP {
			fmt.Fprintf(s.out, "%-4d %#-9x %#-9x %#-10x %-7d %-9.3f %-8s %-10d %-8d %-8d %-8d %-7d %-6d %-8d %-8v %s\n",
				q.QP, q.LocalQPN, q.InitialPSN, q.RemoteQPN, q.Iterations, q.Seconds, gbps(q.Verified, q.Gbps, "%.3f"), q.DataPackets,
				q.RetransmittedPackets, q.TimeoutRetransmissions, q.AckPackets, q.NakPackets, q.DroppedPackets,
				q.DroppedDataPackets, q.Wrapped, perfVerified(r.Interrupted, q.Error, q.Verified))
		}
		fmt.Fprintln(s.out)
	}
	fmt.Fprintf(s.out, "%-10s %-7s %-6s %-9s %-8s %-10s %-8s %-8s %-8s %-7s %-6s %-8s %s\n",
		"#bytes", "#iters", "mode", "seconds", "Gb/s", "data_pkts", "retx", "timeout", "acks", "naks",
		"drops", "drops_d", "verified")
	printPerfRow(s, r)
}

// printPerfVia says, for a run through relays (--via), where the datagrams went and how the
// timers fared with the RTT unknown at the start.
func printPerfVia(s stdio, r perf.Result) {
	if r.Via == "" {
		return
	}
	first := "none"
	if r.FirstRetransmissionMs != nil {
		first = fmt.Sprintf("%.1f ms after the start", *r.FirstRetransmissionMs)
	}
	fmt.Fprintf(s.out, "via %s (RTT unknown at the start): %d timeouts, first retransmission %s\n", r.Via, r.Timeouts, first)
}

// perfOperation reads crem perf's operation: write, send or read, or lat and one of them. It
// returns the flags after it, or what to say (with the usage hint) when there is none.
func perfOperation(args []string) (op string, lat bool, rest []string, msg string) {
	op = args[0]
	switch op {
	case "write", "send", "read":
		return op, false, args, ""
	case "lat":
		if len(args) >= 2 && (args[1] == "-h" || args[1] == "-help" || args[1] == "--help") {
			args = []string{"lat", "write", "--help"} // the help of the latency tests (write, send, read alike)
		}
		if len(args) < 2 || (args[1] != "write" && args[1] != "send" && args[1] != "read") {
			return "", false, nil, "crem perf lat: want write, send or read (crem perf lat write --loopback)\n"
		}
		return args[1], true, args[1:], ""
	}
	msg = fmt.Sprintf("crem perf: unknown subcommand %q (want serve, write, send, read or lat)\n", op)
	if strings.HasPrefix(op, "-") {
		// Flags before the operation: crem perf --loopback write.
		msg += fmt.Sprintf("Run 'crem perf -h' for usage: the operation comes first, as in crem perf write %s\n", strings.Join(args, " "))
	}
	return "", false, nil, msg
}

// perfRun runs the transfers, both ends here (loopback) or against a server, and closes the
// pcap file (if any) so that its error is the run's when nothing else went wrong.
func perfRun(ctx context.Context, opts perf.Options, loopback bool, pf *os.File) (perf.Result, error) {
	var res perf.Result
	var err error
	if loopback {
		res, err = perf.Loopback(ctx, opts)
	} else {
		res, err = perfClient(ctx, opts)
	}
	if pf != nil {
		if cerr := pf.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return res, err
}

// perfRateNote says which rate a run without --rate takes, and why.
func perfRateNote(s stdio, name string, loopback, bidir bool) {
	def, why := perf.DefaultRateFor(loopback, bidir), "the default with --server"
	if loopback {
		why = "the default with --loopback, which a 2-core host's loopback carries without socket drops"
		if bidir {
			why = fmt.Sprintf("each way: the default with --loopback, %s in all, which a 2-core host's loopback carries without socket drops",
				units.FormatRate(perf.DefaultLoopbackRate))
		}
	}
	fmt.Fprintf(s.err, "crem %s: --rate %s (%s; give --rate to change it)\n", name, units.FormatRate(def), why)
}

// perfChecks are the values of crem perf's flags that are checked before anything runs.
type perfChecks struct {
	name, op, table                                string
	allSizes, sizeSet, loopback, rateSet, codeSet  bool
	maxSize, size, rate, sockBuf                   int64
	args                                           []string
	server                                         string
	mtu, iters, retries, timeoutCode, ackCode, qps int
	rtt, reorder                                   time.Duration
}

// problem is the first thing wrong with the flags, as a line for standard error, or "". The
// lines name the command as crem perf's run names it (name) or by its operation (op).
func (c perfChecks) problem() string {
	byName := func(f string, a ...any) string { return fmt.Sprintf("crem %s: ", c.name) + fmt.Sprintf(f, a...) }
	byOp := func(f string, a ...any) string { return fmt.Sprintf("crem perf %s: ", c.op) + fmt.Sprintf(f, a...) }
	switch {
	case c.table != "both" && c.table != "perftest" && c.table != "crem":
		return byName("--table %q: want perftest, crem or both", c.table)
	case c.allSizes && c.sizeSet:
		return byName("give --size or --all-sizes, not both")
	case c.allSizes && (c.maxSize < perf.MinSize || c.maxSize > 1<<30):
		return byName("--max-size %d: want %d octets to 1GiB", c.maxSize, perf.MinSize)
	case len(c.args) > 0:
		return byOp("unexpected argument %q", c.args[0])
	case c.loopback == (c.server != ""):
		return byOp("give exactly one of --server ADDR and --loopback")
	case !rc.ValidMTU(c.mtu) || c.size <= 0 || c.iters <= 0 || c.rate < 0 || c.retries <= 0 || c.sockBuf < 0:
		return byOp("need --mtu 256..4096 (a power of two) and positive --size, --iters, --rate, --retry-count")
	case c.timeoutCode != 0 && c.codeSet && c.ackCode != c.timeoutCode:
		return byOp("--timeout %d and --qp-timeout %d disagree", c.timeoutCode, c.ackCode)
	}
	code := c.ackCode
	if c.timeoutCode != 0 {
		code = c.timeoutCode
	}
	if _, err := rc.LocalAckTimeoutOf(code); err != nil {
		return byOp("--qp-timeout: %v", err)
	}
	switch {
	case c.rtt < 0:
		return byOp("--rtt %v: want a positive round trip", c.rtt)
	case c.qps < 1 || c.qps > perf.MaxQPs:
		return byOp("--qps %d: want 1 to %d", c.qps, perf.MaxQPs)
	case c.rateSet && c.rate <= 0:
		return byOp("--rate %s: want a positive rate", units.FormatRate(c.rate))
	case c.size > perfMaxSize:
		return byName("--size %s: want %d octets to 1GiB", units.FormatSize(c.size), perf.MinSize)
	case c.reorder < 0 || c.reorder > time.Second:
		return byName("--reorder-window %v: want 0 to 1s", c.reorder)
	}
	return ""
}

// printPerfResult writes the run's result: one JSON object, or the tables asked for.
func printPerfResult(s stdio, res perf.Result, asJSON bool, table string, lat bool, signal string) {
	if asJSON {
		b, _ := json.Marshal(perfOutput{Result: res, Signal: signal})
		fmt.Fprintf(s.out, "%s\n", b)
		return
	}
	if table != "crem" {
		if lat {
			printPerftestLat(s, res)
		} else {
			printPerftestBW(s, res)
		}
	}
	if table != "perftest" {
		if res.AllSizes {
			printPerfRows(s, res.Rows)
		} else {
			printPerfTable(s, res)
		}
		printPerfVia(s, res)
	}
	printPerfInterrupted(s, res, signal)
}

// printPerfNotes says on standard error where the QPs' RTT came from, their timers, and the
// run's warning.
func printPerfNotes(s stdio, name string, res perf.Result, delay time.Duration) {
	if res.RTTSource == perf.RTTUnknown {
		fmt.Fprintf(s.err, "crem %s: rtt unknown at start (the setup exchange does not take --via's path), learned from the first ACK; local ACK timeout %.1f ms (code %d); no timer under %.0f ms\n",
			name, res.LocalAckTimeoutMs, res.AckTimeoutCode, res.MinTimeoutMs)
	} else if res.RTTSource != "" && res.RTTMs > 0 {
		how := "measured on the setup exchange"
		if res.RTTSource == perf.RTTStated {
			how = "stated (--rtt)"
		} else if delay > 0 {
			how += " plus 2 x --delay"
		}
		fmt.Fprintf(s.err, "crem %s: rtt %.3f ms, %s; local ACK timeout %.1f ms (code %d); no timer under %.0f ms\n",
			name, res.RTTMs, how, res.LocalAckTimeoutMs, res.AckTimeoutCode, res.MinTimeoutMs)
	}
	if res.Warning != "" {
		fmt.Fprintf(s.err, "crem %s: warning: %s\n", name, res.Warning)
	}
}

// perfExit is the run's exit status: the signal's when one cut it short, 1 for an error or data
// that did not verify, else 0.
func perfExit(s stdio, name string, res perf.Result, err error, sig *stopSignal) int {
	if code := sig.exitCode(); code != 0 && (res.Interrupted || errors.Is(err, perf.ErrInterrupted)) {
		if err != nil && !errors.Is(err, perf.ErrInterrupted) {
			fmt.Fprintf(s.err, "crem %s: %v\n", name, err)
		}
		fmt.Fprintf(s.err, "crem %s: interrupted by %s\n", name, sig.name())
		return code
	}
	if err != nil {
		fmt.Fprintf(s.err, "crem %s: %v\n", name, err)
		return 1
	}
	if !res.Verified {
		return 1
	}
	return 0
}

func runPerfServe(args []string, s stdio) int {
	fs := newFlagSet("perf serve", "crem perf serve --listen ADDR [--port N]", perfDescription, s)
	listen := fs.String("listen", "", "setup address to listen on (host:port; not the RoCE port)")
	port := fs.Int("port", udp.DefaultPort, "UDP port of the RoCE traffic")
	pcapFile := fs.String("pcap", "", "write every packet sent to this pcap `FILE`")
	via := fs.String("via", "", "send the RoCE datagrams to this `ADDR` (host:port: a relay-mode gateway's relay.listen) instead of to each client")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	viaAddr, _, err := perfViaBind(*via, "", false)
	if err != nil {
		fmt.Fprintf(s.err, "crem perf serve: %v\n", err)
		return 2
	}
	if *listen == "" || fs.NArg() > 0 {
		fmt.Fprintln(s.err, "crem perf serve: need --listen ADDR and no arguments")
		return 2
	}
	ua, err := net.ResolveUDPAddr("udp", *listen)
	if err != nil {
		fmt.Fprintf(s.err, "crem perf serve: %v\n", err)
		return 2
	}
	if ua.Port == *port {
		fmt.Fprintf(s.err, "crem perf serve: the setup port must differ from the RoCE port %d\n", *port)
		return 2
	}
	setup, err := net.ListenUDP("udp", ua)
	if err != nil {
		fmt.Fprintf(s.err, "crem perf serve: %v\n", err)
		return 1
	}
	defer setup.Close()
	var opt udp.Options
	if *pcapFile != "" {
		f, err := os.Create(*pcapFile)
		if err != nil {
			fmt.Fprintf(s.err, "crem perf serve: %v\n", err)
			return 2
		}
		defer f.Close()
		opt.Pcap = f
	}
	host, err := udp.Listen(fmt.Sprintf("%s:%d", ua.IP.String(), *port), opt)
	if err != nil {
		fmt.Fprintf(s.err, "crem perf serve: %v\n", err)
		return 1
	}
	defer host.Close()
	ctx, sig, stop := signalContext()
	defer stop()
	if viaAddr.IsValid() {
		fmt.Fprintf(s.err, "crem perf serve: setup on %v, RoCE on %v, sending via %v\n", setup.LocalAddr(), host.LocalAddr(), viaAddr)
	} else {
		fmt.Fprintf(s.err, "crem perf serve: setup on %v, RoCE on %v\n", setup.LocalAddr(), host.LocalAddr())
	}
	if err := perf.ServeWith(ctx, setup, host, perf.ServeOptions{Log: s.err, Via: viaAddr}); err != nil && sig.received() == nil {
		fmt.Fprintf(s.err, "crem perf serve: %v\n", err)
		return 1
	}
	if n := sig.name(); n != "" { // a server's normal end: stopped by SIGINT or SIGTERM
		fmt.Fprintf(s.err, "crem perf serve: stopped by %s\n", n)
	}
	return 0
}
