package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/crem-project/crem/internal/harness/lab"
	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/units"
)

const labDescription = `Runs the whole story on one machine over real UDP sockets on loopback: an RDMA RC
requester and responder, the impaired path between them (delay, rate, loss), and for the CREM
configurations two CREM gateways in relay mode at the ends of the path. Each configuration,
gbn, tcaeth, crem+gbn and crem+tcaeth, moves the same messages over the same path with the same
seed, and every byte delivered is checked.

The messages of a run go over --qps N queue pairs (default 4) between the requester's and
the responder's host (message i over QP i mod N), each with its own initial PSNs drawn over the whole 24-bit
space from --seed and its share of the RDMA rate, as NCCL and storage clients open several
between the same two hosts; in the CREM runs one protect rule per direction covers them all.

With --duration D the lab soaks instead: each configuration (by default crem+tcaeth only)
keeps its gateways, path and queue pairs for D, and its QPs post messages one after another
until D ends (--messages is then ignored); the run ends when the messages in flight have
completed (--timeout bounds that wait). Every --stats-interval (default 1m, or a sixth of a
duration under 2m) it prints a line: messages verified and their octets, bad ones, the live
heap after a collection and its objects, goroutines, open flows at both gateways and the
flows the CRFs opened, CLOSEs, the path's losses, CREM's restorations and RDMA's
retransmissions so far, and the longest stall of the process in the interval (how late a 10 ms
ticker ran: a machine too busy for the lab shows there, and a QP gives up after seven timeouts
without progress, some 0.45 s at 20 ms). At the end it judges the soak: it fails if any byte was lost or
corrupted, if a CLOSE came before the end, if it ended before D, or if the last interval's heap
(or heap objects) exceeds 1.5x the first interval's, its goroutines the first's + 8, or its open
flows the first's. The first interval is the baseline: it must come after the gateways' block
stores have filled once (some 4,096 packets per flow), which the default interval does. For
bursty loss use a Gilbert-Elliott model: --loss 0.02 --loss-model gilbert-burst:burst=4 (or
--loss gilbert-burst:rate=2%,burst=4).

With --reporter the lab adds the run crem+tcaeth+reporter after the others: crem+tcaeth with a
path reporter in the path. The impaired path becomes an on-path node (each direction one of its
ports) that reports every RoCEv2 datagram it drops, Cause corruption for the loss model and
congestion for queue overflow, with node-local drop accounting (PATH_REPORT method 3), to the
CREM port of the flow's source address: the flow is the datagram's addresses as the path sees
them (the gateways', the flows' logical endpoints) and its destination QP, and the node's
queueing delay gives Queue Delay Change. The reports go out from the reporter's own socket on
127.0.0.5, the only address the gateways accept PATH_REPORT from; a CSF answers the dropped PSNs
with the ordinary repair its block's m does not cover (and one more for a burst of two or more)
at once, before the receiver asks. CREM messages
are not reported. The node reports each drop at once (the reporter's 50 us aggregation
only; a CSF gives the drops named while their block is open its close's repair), or
--report-hold later (auto: one block's span, --k packets at a QP's rate, so that the block has
closed at its CSF). "+reporter" may follow crem+gbn too, and --runs selects
these runs by name with or without --reporter. --k and --m set the gateways' block size and
first repair count (32 and 4); a small --m makes blocks lose more than m under bursty loss, which
is where a path report saves a round trip (--m 1 is XOR parity, for which no extra repair is
sent).

The lab binds a CREM port free on 127.0.0.1-127.0.0.4, holds it for every run, and prints it.

Output: a table (completion time mean and max per message, goodput, packets lost on the path,
restored by CREM, coded retransmission symbols sent, packets retransmitted by RDMA, wire
overhead: all UDP payload octets the path carried, both directions, divided by the message
octets, and report repair: the ordinary repair symbols the gateways sent because a path report
named dropped PSNs, 0 without a reporter), with a progress bar when standard error is a
terminal, and otherwise a line on standard error as each configuration completes its messages.
With --json, one JSON object and nothing else on standard output: crem_port and runs,
an array of {name, verified, messages, bytes, mean_s, max_s, goodput_bps, lost, restored,
coded_retx, rdma_retx, overhead, repair_requests, requests_unknown_block, rdma_timeouts,
path_reports, report_repair, qps, per_qp}; path_reports counts the PATH_REPORTs the CSFs of both
gateways accepted and report_repair the repair symbols they sent for them (both 0 in a run
without a reporter), and a run with a reporter adds reporter: {address, drops, corruption,
congestion, reports, sent, send_errors, truncated, deferred_flow, deferred_port,
flows_overflow, hold_s, held_overflow, rejected, psns, unclaimed}: the RoCEv2 drops it was told
of (by cause), the reports it made, sent and failed to send, its limits at work, the hold, the
reports the CSFs rejected, the dropped PSNs the accepted ones named, and the reports no CSF took
(for flows no CSF protects, as the ACK direction of a WRITE); requests_unknown_block
counts the REPAIR_REQUESTs naming a block the sending gateway no longer held, rdma_timeouts the
QPs' timer expiries that retransmitted (a few tail losses' worth, unless the machine starved the
lab of CPU); per_qp has one object per queue pair: {qp, requester_qpn, responder_qpn,
initial_psn, messages, verified, mean_s, max_s, lost, restored_only, rdma_retx}, where lost
counts its datagrams the path dropped and restored_only its packets the path lost every time
they were sent, which arrived only because CREM restored them. A soak's run adds duration_s,
intervals (one object per line printed: elapsed_s, messages, bytes, bad, posted, heap_bytes,
heap_objects, goroutines, flows, flows_opened, closes, lost, restored, rdma_retx, max_stall_ms)
and soak
({pass, failures, closes}); with --json the interval lines go to standard error.

The table ends with the verdict line, the JSON's verdict ({verified, not_verified,
interrupted, not_run, speedup, accounts, line}): every byte verified, or which runs did not;
crem+tcaeth N x faster (or slower) than gbn and than the best other run, in mean and max; and
per run, the data packets the path lost (data_lost) = restored + RDMA retx, or the difference
named: retransmissions of packets the path had delivered (resent_delivered), losses made good
twice, or by neither. A run that did not verify has no goodput (goodput_bps 0, "-" in the table);
messages_verified counts its messages completed and checked.

SIGINT or SIGTERM cuts the lab short: the run in progress is marked interrupted (its messages
in flight counted as cancelled, not lost), the others not run (not_run), a soak is not judged
(soak.interrupted), and the JSON adds interrupted and signal.
Exit status: 0 when every configuration verified (and every soak passed), 1 when one did not,
2 for usage errors, 130 / 143 when SIGINT / SIGTERM cut it short.

Examples:
  crem lab --rtt 20ms --loss 0.01 --rate 500Mbit --messages 16 --size 4MiB
  crem lab --duration 10m --loss 0.02 --loss-model gilbert-burst:burst=4
  crem lab --reporter --loss 0.02 --loss-model gilbert-burst:burst=4`

func runLab(args []string, s stdio) int {
	fs := newFlagSet("lab", "crem lab [flags]", labDescription, s)
	rtt := fs.Duration("rtt", 20*time.Millisecond, "round-trip time of the path (a Go duration)")
	loss := fs.String("loss", "0.01", "loss on each direction: a fraction (0.01), or any loss specification without --loss-model")
	model := fs.String("loss-model", "", "loss model: bernoulli, gilbert-burst:burst=B, gilbert:p=P,r=R, every:n=N,of=M, script:I,J")
	rate := units.Rate(500e6)
	fs.Var(&rate, "rate", "rate of the path's bottleneck (500Mbit)")
	seed := fs.Uint64("seed", 1, "seed of the data, the loss models and the engines")
	messages := fs.Int("messages", 16, "messages per configuration")
	size := units.Size(4 << 20)
	fs.Var(&size, "size", "message size (4MiB)")
	op := fs.String("op", "write", "RDMA operation: write, send or read")
	mtu := fs.Int("mtu", 4096, "RDMA MTU")
	runs := fs.String("runs", "", "comma-separated configurations to run (default: gbn,tcaeth,crem+gbn,crem+tcaeth, and crem+tcaeth+reporter with --reporter)")
	withReporter := fs.Bool("reporter", false, "add the run crem+tcaeth+reporter: a path reporter in the path tells the CSFs of the RoCEv2 packets it drops")
	reportHold := fs.String("report-hold", "0", "how long after a drop the path's reporter hears of it: a Go `DURATION` (0: at once), or auto (one block's span at a QP's rate)")
	k := fs.Int("k", 0, "the gateways' block size, 1 to 64 (default 32)")
	m := fs.Int("m", 0, "the gateways' first repair count per block, 1 to 16 (default 4; 1 is XOR parity, which extra repair does not use)")
	rule := fs.String("policy", "cost", "the gateways' policy rule: cost (the least expected completion time) or draft (the draft's\nbinomial target alone, the gateway's default)")
	pcapFile := fs.String("pcap", "", "capture the impaired path of every run to this classic pcap `FILE` (Ethernet)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up a configuration after this long (with --duration: this long after it ends)")
	qps := fs.Int("qps", lab.DefaultQPs, fmt.Sprintf("queue pairs carrying each run's messages (1 to %d; by default no more than --messages)", lab.MaxQPs))
	duration := fs.Duration("duration", 0, "soak: repeat transfers for this long and judge heap, goroutines, flows and CLOSEs (0: move --messages once)")
	retries := fs.Int("retry-count", 7, "timeouts without progress before a QP gives up (IBTA's retry_cnt)")
	statsInterval := fs.Duration("stats-interval", 0, "soak: print a line every `DURATION` (default 1m, or a sixth of a --duration under 2m)")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(s.err, "crem lab: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	ls, err := lossSpec(*loss, *model)
	if err != nil {
		fmt.Fprintf(s.err, "crem lab: %v\n", err)
		return 2
	}
	o := lab.Options{RTT: *rtt, Loss: ls, Rate: int64(rate), Seed: *seed, Messages: *messages, Size: int(size),
		Op: *op, MTU: *mtu, Timeout: *timeout, QPs: *qps, Duration: *duration, StatsInterval: *statsInterval, RetryCount: *retries,
		Reporter: *withReporter, K: *k, M: *m, Rule: *rule}
	hold, msg := labFlagsProblem(*reportHold, *rule, *k, *m, *retries, *duration, *statsInterval)
	if msg != "" {
		fmt.Fprintf(s.err, "crem lab: %s\n", msg)
		return 2
	}
	o.ReportHold = hold
	qpsSet := false
	fs.Visit(func(f *flag.Flag) { qpsSet = qpsSet || f.Name == "qps" })
	if o.QPs, o.Runs, msg = labQPsAndRuns(*qps, qpsSet, *messages, *runs, *duration, *withReporter); msg != "" {
		fmt.Fprintf(s.err, "crem lab: %s\n", msg)
		return 2
	}
	if size < 0 || size > 1<<30 || *messages < 0 {
		fmt.Fprintf(s.err, "crem lab: --size %s, --messages %d: want 1 octet to 1GiB and at least one message\n", size, *messages)
		return 2
	}
	labPlan(int64(rate), int64(size), *messages, len(o.Runs), *withReporter, *duration, *rtt).warn(s.err)
	if *pcapFile != "" {
		f, err := os.Create(*pcapFile)
		if err != nil {
			fmt.Fprintf(s.err, "crem lab: %v\n", err)
			return 2
		}
		defer f.Close()
		o.Pcap = f
	}
	term := isTerminal(s.err)
	if term {
		o.Progress = progressBar(s.err)
	} else if *duration == 0 {
		o.Progress = finishedLines(s.err, time.Now())
	}
	ctx, sig, stop := signalContext()
	defer stop()
	ports, err := lab.ReservePorts(0)
	if err != nil {
		fmt.Fprintf(s.err, "crem lab: %v\n", err)
		return 1
	}
	defer ports.Close()
	o.Ports = ports
	port := ports.Port()
	if !*asJSON {
		what := fmt.Sprintf("%d x %v", *messages, size)
		if *duration > 0 {
			what = fmt.Sprintf("soak of %v, messages of %v", *duration, size)
		}
		fmt.Fprintf(s.out, "CREM port %d (127.0.0.1-127.0.0.4); path: RTT %v, loss %v, rate %v; %s %s over %d QPs, MTU %d\n",
			port, *rtt, ls, rate, what, *op, o.QPs, *mtu)
	}
	if *duration > 0 {
		// Each interval's line as it is taken: on standard output with the table, on standard
		// error with --json (whose standard output is one JSON object).
		lines := s.out
		if *asJSON {
			lines = s.err
		}
		o.Report = func(run string, iv lab.Interval) {
			if term {
				fmt.Fprint(s.err, "\r\033[K")
			}
			fmt.Fprintf(lines, "%s %s\n", run, iv.Line())
		}
	}
	res, err := lab.Lab(ctx, o)
	if term {
		fmt.Fprint(s.err, "\r\033[K")
	}
	if err != nil {
		fmt.Fprintf(s.err, "crem lab: %v\n", err)
		if len(res.Runs) == 0 {
			if code := sig.exitCode(); code != 0 {
				return code
			}
			if ctx.Err() == nil && res.CREMPort == 0 {
				return 2
			}
			return 1
		}
	}
	if res.Interrupted {
		res.Signal = sig.name()
	}
	if *asJSON {
		b, _ := json.Marshal(res)
		fmt.Fprintln(s.out, string(b))
	} else {
		writeLabTable(s.out, res)
	}
	return labExit(res, sig, s)
}

// labExit says on standard error what did not verify or pass, and returns the exit status: the
// signal's if a signal cut a run short, 1 if anything failed, else 0.
func labExit(res lab.Result, sig *stopSignal, s stdio) int {
	for _, r := range res.Runs {
		if !r.Verified && r.Error != "" {
			fmt.Fprintf(s.err, "crem lab: %s did not verify: %s\n", r.Name, r.Error)
		}
		if r.Soak != nil && !r.Soak.Pass {
			fmt.Fprintf(s.err, "crem lab: %s soak: %s\n", r.Name, r.Soak)
		}
	}
	if code := sig.exitCode(); code != 0 && res.Interrupted {
		return code // a signal after the last run ended changes nothing
	}
	if !res.Passed() {
		return 1
	}
	return 0
}

// labQPsAndRuns resolves --qps (when not given, its default but no more than the messages) and
// --runs (a soak runs crem+tcaeth, with --reporter its reporter run too), or says what is wrong.
func labQPsAndRuns(qps int, qpsSet bool, messages int, runs string, duration time.Duration, withReporter bool) (int, []string, string) {
	msgs := messages
	if msgs == 0 {
		msgs = 16 // the lab's default
	}
	if duration > 0 {
		msgs = lab.MaxQPs // a soak's messages never run out
	}
	if !qpsSet {
		qps = min(qps, max(msgs, 1))
	}
	if qps < 1 || qps > lab.MaxQPs || qps > msgs {
		return 0, nil, fmt.Sprintf("--qps %d: want 1 to %d, and no more than --messages (%d)", qps, lab.MaxQPs, msgs)
	}
	var out []string
	if runs != "" {
		out = splitList(runs)
	} else if duration > 0 {
		out = []string{"crem+tcaeth"}
		if withReporter {
			out = append(out, lab.ReporterConfiguration)
		}
	}
	return qps, out, ""
}

// labFlagsProblem checks the lab's flags that stand alone and returns --report-hold (-1: auto,
// one block's span) or what is wrong, as a line for standard error.
func labFlagsProblem(reportHold, rule string, k, m, retries int, duration, statsInterval time.Duration) (time.Duration, string) {
	hold := time.Duration(-1)
	if reportHold != "auto" {
		d, err := time.ParseDuration(reportHold)
		if err != nil || d < 0 {
			return 0, fmt.Sprintf("--report-hold %q: want auto or a duration of 0 or more", reportHold)
		}
		hold = d
	}
	if _, err := policy.ParseRule(rule); err != nil {
		return 0, fmt.Sprintf("--policy: %v", err)
	}
	switch {
	case k < 0 || k > 64 || m < 0 || m > 16:
		return 0, fmt.Sprintf("--k %d, --m %d: want k 1 to 64 and m 1 to 16 (0: the defaults, 32 and 4)", k, m)
	case retries <= 0:
		return 0, fmt.Sprintf("--retry-count %d: want at least 1", retries)
	case duration < 0 || statsInterval < 0 || statsInterval > 0 && duration == 0:
		return 0, fmt.Sprintf("--duration %v, --stats-interval %v: want a positive --duration for a soak, and its interval no longer", duration, statsInterval)
	case duration > 0 && statsInterval > duration/2:
		return 0, fmt.Sprintf("--stats-interval %v: at most half of --duration %v, so that the soak has two intervals to compare", statsInterval, duration)
	}
	return hold, ""
}

// labPlan is what crem lab moves, for the warnings before it starts: --messages of --size in
// each configuration (runs of them, 0 for the default four, five with the reporter), one after
// the other, at --rate, and a few round trips each. A soak (--duration) lasts as long as it
// says, so only its rate is judged.
func labPlan(rate, size int64, messages, runs int, reporter bool, duration, rtt time.Duration) runPlan {
	if runs == 0 {
		runs = 4
		if reporter {
			runs++
		}
	}
	p := runPlan{name: "lab", rate: rate, rateFlag: "--rate", rtt: rtt, rtts: float64(4 * runs),
		bytes: float64(size) * float64(messages) * float64(runs), fix: "--size or --messages",
		what: fmt.Sprintf("%d configurations of %d x %s", runs, messages, units.FormatSize(size))}
	if duration > 0 {
		p.bytes, p.rtts = 0, 0
	}
	return p
}

func splitList(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

func writeLabTable(w io.Writer, res lab.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tverified\tmean s\tmax s\tgoodput Mbit/s\tlost\trestored\tcoded retx\tRDMA retx\toverhead\treport repair\t")
	for _, r := range res.Runs {
		// A run that did not verify has no goodput: "-", not the figure of messages it did not
		// deliver; an interrupted run says so in place of false.
		verified, goodput := fmt.Sprint(r.Verified), "-"
		if r.Interrupted && r.Error == "" {
			verified = "interrupted"
		}
		if r.Verified {
			goodput = fmt.Sprintf("%.1f", r.GoodputBps/1e6)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.3f\t%s\t%d\t%d\t%d\t%d\t%.3f\t%d\t\n", r.Name, verified, r.MeanS, r.MaxS,
			goodput, r.Lost, r.Restored, r.CodedRetx, r.RDMARetx, r.Overhead, r.ReportRepair)
	}
	for _, n := range res.NotRun {
		fmt.Fprintf(tw, "%s\tnot run\t-\t-\t-\t-\t-\t-\t-\t-\t-\t\n", n)
	}
	tw.Flush()
	if res.Interrupted {
		by := ""
		if res.Signal != "" {
			by = " by " + res.Signal
		}
		var cut []string
		for _, r := range res.Runs {
			if r.Interrupted {
				cut = append(cut, fmt.Sprintf("%s cut short: %d of %d messages verified, %d in flight cancelled (not lost)",
					r.Name, r.MessagesVerified, r.Messages, r.Cancelled))
			}
		}
		if len(res.NotRun) > 0 {
			cut = append(cut, "not run: "+strings.Join(res.NotRun, ", "))
		}
		fmt.Fprintf(w, "interrupted%s: %s\n", by, strings.Join(cut, "; "))
	}
	for _, r := range res.Runs {
		if r.Soak == nil {
			continue
		}
		if r.Soak.Interrupted {
			fmt.Fprintf(w, "soak %s: %s: %d messages verified (%.1f MiB) over %.0f s, %d in flight cancelled, %d CLOSE before the end\n",
				r.Name, r.Soak, r.MessagesVerified, float64(int64(r.MessagesVerified)*int64(r.Bytes/max(int64(r.Messages), 1)))/(1<<20),
				r.DurationS, r.Cancelled, r.Soak.Closes)
			continue
		}
		if len(r.Intervals) == 0 {
			fmt.Fprintf(w, "soak %s: %s: %d messages (%.1f MiB) over %.0f s, no interval taken\n",
				r.Name, r.Soak, r.Messages, float64(r.Bytes)/(1<<20), r.DurationS)
			continue
		}
		first, last := r.Intervals[0], r.Intervals[len(r.Intervals)-1]
		fmt.Fprintf(w, "soak %s: %s: %d messages (%.1f MiB) over %.0f s; heap %.1f -> %.1f MiB (bound %.1fx), objects %d -> %d, goroutines %d -> %d (bound +%d), flows %d -> %d (bound: no growth), %d CLOSE before the end\n",
			r.Name, r.Soak, r.Messages, float64(r.Bytes)/(1<<20), r.DurationS,
			float64(first.HeapBytes)/(1<<20), float64(last.HeapBytes)/(1<<20), lab.SoakHeapGrowth, first.HeapObjects, last.HeapObjects,
			first.Goroutines, last.Goroutines, lab.SoakGoroutineSlack, first.Flows, last.Flows, r.Soak.Closes)
	}
	if res.Verdict != nil {
		fmt.Fprintln(w, res.Verdict.Line)
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// finishedLines writes one line when a configuration has completed its messages, for a standard
// error that is not a terminal (a log, a CI job): the lab is not silent for the whole run.
func finishedLines(w io.Writer, start time.Time) func(run string, done, total int) {
	said := map[string]bool{}
	return func(run string, done, total int) {
		if total == 0 || done < total || said[run] {
			return
		}
		said[run] = true
		fmt.Fprintf(w, "crem lab: %s: %d of %d messages done, %.1f s since the start\n", run, done, total, time.Since(start).Seconds())
	}
}

// progressBar draws one line on the terminal per update.
func progressBar(w io.Writer) func(run string, done, total int) {
	return func(run string, done, total int) {
		const width = 30
		n := done * width / max(total, 1)
		bar := make([]byte, width)
		for i := range bar {
			bar[i] = '.'
			if i < n {
				bar[i] = '#'
			}
		}
		if total == 0 { // a soak: no end known but its duration
			fmt.Fprintf(w, "\r%-12s %d messages", run, done)
			return
		}
		fmt.Fprintf(w, "\r%-12s [%s] %d/%d", run, bar, done, total)
	}
}
