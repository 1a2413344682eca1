package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/crem-project/crem/internal/harness/altmark"
	"github.com/crem-project/crem/internal/harness/udpproxy"
	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/reporter"
	"github.com/crem-project/crem/units"
)

const netemDescription = `Runs an impairment proxy for UDP: the path emulator of the project, since this machine's
kernel has no netem qdisc. Clients send their datagrams to --listen; the proxy sends them on to
--forward through an emulated path, and the answers from --forward come back to the client
they answer through a second emulated path, the reverse direction. Each client (source
address) gets its own socket toward --forward, so several clients can share the proxy.
--route CLIENT=ADDR (repeatable) sends the datagrams of the client at CLIENT to ADDR instead,
through the same emulated path (one queue, one delay, one loss model for every client), and
ADDR's answers back to CLIENT: two gateways' CREM messages and relayed data cross one WAN so,
in order (scripts/perf-relay.sh).

A path is a bottleneck queue drained at --rate, then a propagation delay (--delay, one way,
plus --jitter), with losses from a loss model. Both directions get the same impairment by
default, each with its own random generators (the reverse direction's seed is --seed + 1);
every --reverse-* flag overrides its counterpart for the reverse direction alone.

Loss (--loss) is a fraction (0.01, 1%) or a loss model of the simulator:
  bernoulli:0.01                 each datagram lost independently
  gilbert:p=0.001,r=0.25         Gilbert-Elliott bursts (optional h=, k=)
  gilbert-burst:rate=0.01,burst=4
  every:n=1,of=1000              exactly n in every window of N datagrams
  script:3,17,18                 exactly those datagrams (0-based, per direction)
or give the model with --loss-model and the rate with --loss: --loss-model bernoulli,
--loss-model gilbert-burst:burst=4, or --loss-model gilbert:r=0.25 (p is then chosen to
give the mean loss --loss).

The queue (--queue) holds 1000 datagrams by default; give a plain number for a limit in
datagrams or a size (64KiB, 1MB) for a limit in octets. It only fills with a --rate. An
ECN-capable datagram (ECT(0), ECT(1)) that finds --ecn-threshold or more datagrams ahead of
it is forwarded with CE set; datagrams keep their TOS otherwise.

--forge-definitions makes the forward direction an attacker on the path, to test a CRF's
defence of its block definitions: ahead of the first REPAIR of each block it injects one from
the same client with the same Flow ID and Config ID that defines the block another way (a
present position cleared, the next block's with half its k, half its k), with random symbol
octets. A gateway must deliver nothing wrong and restore as before; its metrics
crem_crf_flows_definition* show the forgeries (the user guide's "forged block definitions").

--drop-log FILE writes one JSON object per line for every datagram dropped: direction, index,
reason (lost or overflow), length, client, and for RoCEv2 datagrams the opcode, destination QP
and PSN. --pcap FILE records what is forwarded and dropped (dropped frames have IP TTL 1).

On SIGINT or SIGTERM, or after --duration, the proxy stops reading, delivers what is still in
flight (for up to the one-way delay plus jitter plus one second), and prints a summary table
on standard output (a JSON object with --json). Progress goes to standard error. Exit status:
0 after a clean stop, 1 when a log could not be written, 2 for bad flags or when the sockets
cannot be opened.

With --report-to the proxy is also a CREM Path Reporter for the RoCEv2 datagrams it carries
(the emulated path is the measurement domain) and sends PATH_REPORT messages from a socket of
its own (--report-listen) to the CREM port given first (CREM has no default port), at the
flow's source address or at the CSF routed for the source's prefix (PREFIX=CSFADDR). A flow is
named as the path sees it: client to --forward address, or back, with the destination QP.
--report-method drops (method 3) reports every RoCEv2 datagram a link drops, with its PSN:
Cause congestion for a full queue, corruption for the loss model. --report-method marking
(method 1) measures each direction with Alternate Marking (RFC 9341, single marking) in
periods of --marking-period, counting datagrams where they enter and where they leave the
emulated link; the mark stays in the proxy and is never written into a datagram. Each period
with loss or a mean-delay change of 1ms or more gives a report with two hop entries (Node IDs
--report-node-id and the next one) and the period's Lost Count and Queue Delay Change.
--report-method both does both. Reports are aggregated (for --report-aggregation, 50us by
default, the draft's recommendation), rate-limited per flow (1ms) and per direction (2000/s)
and fit a 1500-octet MTU.

--report-merge makes the reporter merge the PATH_REPORTs of the downstream reporters named by
--report-merge-from (addresses or prefixes, required: a merged entry reaches the CSF from this
reporter's address, which the CSF trusts) that the proxy carries, in either direction (the draft allows it when reverse-path capacity is
scarce): a PATH_REPORT addressed to the CREM port of the CSF this reporter sends the flow's
reports to, for a flow and method of which a report is being gathered (within the
aggregation interval), joins that report if the hop entries fit (16 at most) and is not
forwarded itself; the merged report leaves from the reporter's socket. Every other datagram,
and every PATH_REPORT that does not merge (a malformed one too), goes through the emulated
path unchanged (a report from any other address too, counted untrusted). The summary counts
the reports offered, merged and passed on.

Example: emulate 10 ms each way, 1 percent loss and a 500 Mbit/s bottleneck in front of a
server on port 9001, logging the drops, for one minute:
  crem netem --listen 127.0.0.1:9000 --forward 127.0.0.1:9001 \
      --delay 10ms --loss 0.01 --rate 500Mbit --drop-log drops.jsonl --duration 1m
Report the drops and marking measurements to the CSFs, on CREM port 50000, those of sources
in 10.1.0.0/16 to the CSF at 10.1.0.1:
  crem netem --listen 10.1.0.9:4791 --forward 10.2.0.5:4791 --loss 0.01 \
      --report-to 50000,10.1.0.0/16=10.1.0.1 --report-method both --marking-period 100ms`

// durationFlag is a non-negative Go duration.
type durationFlag time.Duration

func (d durationFlag) String() string { return time.Duration(d).String() }

func (d *durationFlag) Set(v string) error {
	x, err := units.ParseDuration(v)
	if err != nil {
		return err
	}
	*d = durationFlag(x)
	return nil
}

// queueLimit is a queue limit in datagrams (a plain number) or octets (a size with a unit).
type queueLimit struct {
	packets, octets int
}

func (q queueLimit) String() string {
	if q.octets > 0 {
		return units.FormatSize(int64(q.octets))
	}
	return strconv.Itoa(q.packets)
}

func (q *queueLimit) Set(v string) error {
	v = strings.TrimSpace(v)
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return fmt.Errorf("%d datagrams is negative", n)
		}
		*q = queueLimit{packets: n}
		return nil
	}
	n, err := units.ParseSize(v)
	if err != nil {
		return fmt.Errorf("neither a number of datagrams nor a size such as 64KiB: %w", err)
	}
	if n > 1<<40 {
		return fmt.Errorf("%s is too large", v)
	}
	*q = queueLimit{octets: int(n)}
	return nil
}

// routeFlags is --route CLIENT=ADDR, repeatable.
type routeFlags map[netip.AddrPort]netip.AddrPort

func (r routeFlags) String() string {
	var b []string
	for c, to := range r {
		b = append(b, c.String()+"="+to.String())
	}
	return strings.Join(b, ",")
}

func (r routeFlags) Set(v string) error {
	c, to, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("%q: want CLIENT=ADDR (127.0.0.2:61234=127.0.0.5:61234)", v)
	}
	ca, err := netip.ParseAddrPort(strings.TrimSpace(c))
	if err != nil {
		return fmt.Errorf("route %q: the client: %w", v, err)
	}
	ta, err := netip.ParseAddrPort(strings.TrimSpace(to))
	if err != nil {
		return fmt.Errorf("route %q: the address: %w", v, err)
	}
	ca = netip.AddrPortFrom(ca.Addr().Unmap(), ca.Port())
	if _, dup := r[ca]; dup {
		return fmt.Errorf("route %q: client %v has a route already", v, ca)
	}
	r[ca] = netip.AddrPortFrom(ta.Addr().Unmap(), ta.Port())
	return nil
}

// netemLinkFlags are the impairment flags of one direction.
type netemLinkFlags struct {
	delay, jitter durationFlag
	jitterDist    string
	rate          units.Rate
	loss          string
	lossModel     string
	queue         queueLimit
	ecn           int
	reorder       units.Fraction
	reorderDelay  durationFlag
}

func (l *netemLinkFlags) register(fs *flag.FlagSet, prefix string) {
	help := func(name, text string) string {
		if prefix == "" {
			return text
		}
		ph := ""
		if i := strings.IndexByte(text, '`'); i >= 0 {
			if j := strings.IndexByte(text[i+1:], '`'); j >= 0 {
				ph = " `" + text[i+1:i+1+j] + "`"
			}
		}
		return "--" + name + ph + " for the reverse direction (default: as --" + name + ")"
	}
	fs.Var(&l.delay, prefix+"delay", help("delay", "one-way propagation `DURATION`, a Go duration (10ms)"))
	fs.Var(&l.jitter, prefix+"jitter", help("jitter", "spread of the delay, uniform in +-`DURATION`; never reorders"))
	fs.StringVar(&l.jitterDist, prefix+"jitter-dist", l.jitterDist, help("jitter-dist", "jitter distribution `DIST`: uniform or normal"))
	fs.Var(&l.rate, prefix+"rate", help("rate", "bottleneck `RATE` (500Mbit, 1Gbps); 0 is unlimited"))
	fs.StringVar(&l.loss, prefix+"loss", l.loss, help("loss", "`LOSS`: a fraction (0.01, 1%) or a loss model (see above)"))
	fs.StringVar(&l.lossModel, prefix+"loss-model", l.lossModel, help("loss-model", "loss `MODEL` whose mean loss --loss gives: bernoulli, gilbert:r=R, gilbert-burst:burst=B"))
	fs.Var(&l.queue, prefix+"queue", help("queue", "queue `LIMIT`: datagrams (1000) or octets (64KiB); 0 is unbounded"))
	fs.IntVar(&l.ecn, prefix+"ecn-threshold", l.ecn, help("ecn-threshold", "mark CE on ECN-capable datagrams that find `N` or more ahead in the queue; 0 is off"))
	fs.Var(&l.reorder, prefix+"reorder", help("reorder", "`FRACTION` of datagrams held back by --reorder-delay, so later ones overtake them"))
	fs.Var(&l.reorderDelay, prefix+"reorder-delay", help("reorder-delay", "how long a reordered datagram is held back, a `DURATION`"))
}

// config turns the flags into a link configuration with the given seed.
func (l *netemLinkFlags) config(seed uint64) (netem.Config, string, error) {
	spec, err := lossSpec(l.loss, l.lossModel)
	if err != nil {
		return netem.Config{}, "", err
	}
	dist, err := netem.ParseJitterDist(l.jitterDist)
	if err != nil {
		return netem.Config{}, "", err
	}
	if l.ecn < 0 {
		return netem.Config{}, "", fmt.Errorf("ECN threshold %d is negative", l.ecn)
	}
	if l.reorder > 0 && l.reorderDelay == 0 {
		return netem.Config{}, "", errors.New("a reorder fraction needs a positive reorder delay")
	}
	cfg := netem.Config{
		Rate:         int64(l.rate),
		Delay:        time.Duration(l.delay),
		Jitter:       time.Duration(l.jitter),
		JitterDist:   dist,
		QueuePackets: l.queue.packets,
		QueueBytes:   l.queue.octets,
		ECNThreshold: l.ecn,
		Loss:         spec.New(seed),
		ReorderProb:  float64(l.reorder),
		ReorderDelay: time.Duration(l.reorderDelay),
		Seed:         seed,
	}
	var b strings.Builder
	fmt.Fprintf(&b, "delay %v", cfg.Delay)
	if cfg.Jitter > 0 {
		fmt.Fprintf(&b, " jitter %v (%v)", cfg.Jitter, dist)
	}
	if cfg.Rate > 0 {
		fmt.Fprintf(&b, ", rate %s, queue %v", units.FormatRate(cfg.Rate), l.queue)
		if l.queue.octets == 0 && l.queue.packets > 0 {
			b.WriteString(" datagrams")
		}
		if cfg.ECNThreshold > 0 {
			fmt.Fprintf(&b, ", ECN mark at %d", cfg.ECNThreshold)
		}
	} else {
		b.WriteString(", rate unlimited")
	}
	fmt.Fprintf(&b, ", loss %v", spec)
	if cfg.ReorderProb > 0 {
		fmt.Fprintf(&b, ", reorder %s by %v", units.FormatFraction(cfg.ReorderProb), cfg.ReorderDelay)
	}
	fmt.Fprintf(&b, ", seed %d", seed)
	return cfg, b.String(), nil
}

// lossSpec combines --loss and --loss-model into one loss specification. Without a model,
// loss is a fraction or any specification netem reads. With one, loss is the mean loss
// rate for a model that takes one (bernoulli, gilbert-burst:burst=B, gilbert:r=R[,h=H,k=K]
// with p chosen so the mean is the rate); a model complete in itself (gilbert with p, every,
// script) takes no --loss. A loss of "none" or 0 is no loss whatever the model.
func lossSpec(loss, model string) (netem.LossSpec, error) {
	loss, model = strings.TrimSpace(loss), strings.TrimSpace(model)
	if model == "" {
		if loss == "" {
			return netem.LossSpec{}, nil
		}
		return netem.ParseLossSpec(loss)
	}
	if strings.EqualFold(loss, "none") {
		return netem.LossSpec{}, nil
	}
	kind, args, _ := strings.Cut(model, ":")
	kind = strings.ToLower(strings.TrimSpace(kind))
	args = strings.TrimSpace(args)
	var rate float64
	if loss != "" {
		var err error
		if rate, err = units.ParseFraction(loss); err != nil {
			return netem.LossSpec{}, fmt.Errorf("loss %q: with a loss model it must be a fraction: %w", loss, err)
		}
		if rate == 0 {
			return netem.LossSpec{}, nil
		}
	}
	has := func(name string) bool {
		for f := range strings.SplitSeq(args, ",") {
			if k, _, _ := strings.Cut(f, "="); strings.EqualFold(strings.TrimSpace(k), name) {
				return true
			}
		}
		return false
	}
	takes := false // the model takes its rate from --loss
	var spec string
	r := strconv.FormatFloat(rate, 'g', -1, 64)
	switch {
	case kind == "bernoulli" && args == "":
		takes, spec = true, "bernoulli:"+r
	case kind == "gilbert-burst" && !has("rate"):
		takes, spec = true, "gilbert-burst:rate="+r
		if args != "" {
			spec += "," + args
		}
	case (kind == "gilbert" || kind == "gilbert-elliott") && !has("p"):
		takes = true
		// Check r, h and k first, then choose p so that (h p + k r)/(p + r) = rate.
		probe := "gilbert:p=0"
		if args != "" {
			probe += "," + args
		}
		if _, err := netem.ParseLossSpec(probe); err != nil {
			return netem.LossSpec{}, fmt.Errorf("loss model %q: %w", model, err)
		}
		g := map[string]float64{"h": 1, "k": 0}
		for f := range strings.SplitSeq(args, ",") {
			k, v, _ := strings.Cut(f, "=")
			x, _ := units.ParseFraction(strings.TrimSpace(v))
			g[strings.ToLower(strings.TrimSpace(k))] = x
		}
		if loss != "" {
			h, k, rr := g["h"], g["k"], g["r"]
			if !(rate > k && rate < h) || rr == 0 {
				return netem.LossSpec{}, fmt.Errorf("loss model %q cannot have mean loss %v (it must lie between k=%v and h=%v, with r > 0)", model, rate, k, h)
			}
			p := rr * (rate - k) / (h - rate)
			if p > 1 {
				return netem.LossSpec{}, fmt.Errorf("loss model %q cannot have mean loss %v: it would need p=%v > 1", model, rate, p)
			}
			spec = "gilbert:p=" + strconv.FormatFloat(p, 'g', -1, 64) + "," + args
		}
	}
	switch {
	case takes && loss == "":
		return netem.LossSpec{}, fmt.Errorf("loss model %q takes its mean loss from --loss, which is missing", model)
	case !takes && loss != "":
		return netem.LossSpec{}, fmt.Errorf("loss model %q fixes its own loss; drop --loss %s or give the model without its rate", model, loss)
	case takes:
		return netem.ParseLossSpec(spec)
	}
	return netem.ParseLossSpec(model)
}

// netemSummary is what --json prints.
type netemSummary struct {
	Listen     string          `json:"listen_addr"`
	Forward    string          `json:"forward_addr"`
	ElapsedS   float64         `json:"elapsed_s"`
	ForwardImp string          `json:"forward_impairment"`
	ReverseImp string          `json:"reverse_impairment"`
	Stats      udpproxy.Stats  `json:"stats"`
	Reporter   *reporterReport `json:"reporter,omitempty"`
}

// reporterReport is the path reporter's part of --json.
type reporterReport struct {
	Addr     string `json:"report_addr"`
	CREMPort uint16 `json:"crem_port"`
	Method   string `json:"method"`
	// Drops fed to the engine (method 3), PATH_REPORTs sent by the engine, of which carry
	// drops and marking measurements.
	DropsReported  uint64 `json:"drops_reported"`
	Reports        uint64 `json:"reports"`
	DropReports    uint64 `json:"drop_reports"`
	MarkingReports uint64 `json:"marking_reports"`
	Truncated      uint64 `json:"truncated"`
	PSNsCut        uint64 `json:"psns_cut"`
	DeferredFlow   uint64 `json:"deferred_flow"`
	DeferredPort   uint64 `json:"deferred_port"`
	FlowsOverflow  uint64 `json:"flows_overflow"`
	HopsOverflow   uint64 `json:"hops_overflow"`
	EncodeErrors   uint64 `json:"encode_errors"`
	Sent           uint64 `json:"sent"`
	SendErrors     uint64 `json:"send_errors"`
	EventsLost     uint64 `json:"events_lost"`
	NotRoCE        uint64 `json:"not_roce"`
	Unsent         uint64 `json:"unsent"`
	// AggregationS is the aggregation interval in seconds. With --report-merge (Merge):
	// carried datagrams that looked like a PATH_REPORT (merge_offered) = merged +
	// merge_passed_on; of those passed on, merge_malformed were not a valid PATH_REPORT and
	// merge_other_csf were addressed to another CSF than this reporter's for the flow.
	AggregationS  float64 `json:"aggregation_s"`
	Merge         bool    `json:"merge"`
	MergeOffered  uint64  `json:"merge_offered"`
	Merged        uint64  `json:"merged"`
	MergePassedOn uint64  `json:"merge_passed_on"`
	MergeMalform  uint64  `json:"merge_malformed"`
	MergeOtherCSF uint64  `json:"merge_other_csf"`
	// MergeUntrusted counts the PATH_REPORTs passed on because they came from outside
	// --report-merge-from.
	MergeUntrusted uint64 `json:"merge_untrusted"`
	// Marking is the Alternate Marking counters (both directions), with marking on.
	Marking *altmark.Stats `json:"marking,omitempty"`
}

// reportTo is --report-to: the CREM port, then source prefix = CSF address routes.
type reportTo struct {
	port   uint16
	routes []reporter.Route
}

func (r *reportTo) String() string {
	if r == nil || r.port == 0 {
		return ""
	}
	b := strconv.Itoa(int(r.port))
	for _, rt := range r.routes {
		b += "," + rt.Prefix.String() + "=" + rt.CSF.String()
	}
	return b
}

func (r *reportTo) Set(v string) error {
	fields := strings.Split(v, ",")
	n, err := strconv.ParseUint(strings.TrimSpace(fields[0]), 10, 16)
	if err != nil || n == 0 {
		return fmt.Errorf("%q: want the CREM port (1-65535) first, then PREFIX=CSFADDR routes", v)
	}
	rt := reportTo{port: uint16(n)}
	for _, f := range fields[1:] {
		pre, csf, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok {
			return fmt.Errorf("route %q: want PREFIX=CSFADDR (10.1.0.0/16=10.1.0.1)", f)
		}
		p, err := netip.ParsePrefix(strings.TrimSpace(pre))
		if err != nil {
			return fmt.Errorf("route %q: %w", f, err)
		}
		a, err := netip.ParseAddr(strings.TrimSpace(csf))
		if err != nil {
			return fmt.Errorf("route %q: %w", f, err)
		}
		rt.routes = append(rt.routes, reporter.Route{Prefix: p.Masked(), CSF: a.Unmap()})
	}
	*r = rt
	return nil
}

func runNetem(args []string, s stdio) int {
	fs := newFlagSet("netem", "crem netem --listen ADDR --forward ADDR [flags]", netemDescription, s)
	var (
		listen, forward   string
		fwdF              = netemLinkFlags{jitterDist: "uniform", queue: queueLimit{packets: 1000}}
		revF              netemLinkFlags
		seed, revSeed     uint64
		dropLog, pcapFile string
		statsInterval     durationFlag
		duration          durationFlag
		idle              = durationFlag(udpproxy.DefaultIdleTimeout)
		maxClients        = udpproxy.DefaultMaxClients
		asJSON            bool
		repTo             reportTo
		repNode           uint64 = 1
		repMethod                = "drops"
		markPeriod               = durationFlag(100 * time.Millisecond)
		repListen         string
		repMerge          bool
		repMergeFrom      string
		repAggregation    = durationFlag(50 * time.Microsecond)
		forge             bool
		routes            = routeFlags{}
	)
	fs.StringVar(&listen, "listen", "", "`ADDR` (host:port) clients send to (required)")
	fs.StringVar(&forward, "forward", "", "`ADDR` (host:port) datagrams are forwarded to (required)")
	fs.Var(routes, "route", "datagrams from the client at `CLIENT=ADDR` (host:port each) go to ADDR instead of --forward, through the same path; repeatable")
	fwdF.register(fs, "")
	revF.register(fs, "reverse-") // zero defaults: what is not given is inherited below
	fs.Uint64Var(&seed, "seed", 1, "`SEED` of the forward direction's loss, jitter and reordering draws")
	fs.Uint64Var(&revSeed, "reverse-seed", 0, "`SEED` of the reverse direction's draws (default: --seed + 1)")
	fs.StringVar(&dropLog, "drop-log", "", "write one JSON line per dropped datagram to `FILE`")
	fs.StringVar(&pcapFile, "pcap", "", "record forwarded and dropped datagrams to `FILE` (classic pcap, Ethernet)")
	fs.Var(&statsInterval, "stats-interval", "print counters to standard error every `DURATION` (0: never)")
	fs.Var(&duration, "duration", "stop after `DURATION` (0: run until SIGINT or SIGTERM)")
	fs.Var(&idle, "idle-timeout", "close a client's socket after `DURATION` without traffic")
	fs.IntVar(&maxClients, "max-clients", maxClients, "clients served at once; a new one evicts the one idle longest")
	fs.BoolVar(&asJSON, "json", false, "print the final summary as a JSON object")
	fs.BoolVar(&forge, "forge-definitions", false, "be an on-path attacker: ahead of each block's first REPAIR forwarded, inject one from the same client that defines the block another way, with random symbols (a CRF must restore on and deliver nothing wrong)")
	fs.Var(&repTo, "report-to", "be a path reporter: send PATH_REPORT to `PORT[,PREFIX=CSFADDR...]`, the CREM port at the flow's source or the CSF routed for its prefix")
	fs.Uint64Var(&repNode, "report-node-id", repNode, "the reporter's Node `ID` (marking: this and the next one, for the link's entry and exit)")
	fs.StringVar(&repMethod, "report-method", repMethod, "what to report: `METHOD` drops (3), marking (1) or both")
	fs.Var(&markPeriod, "marking-period", "Alternate Marking period, a `DURATION`")
	fs.StringVar(&repListen, "report-listen", "", "the reporter's own socket `ADDR` (default: any address of the forward address's family, any port)")
	fs.BoolVar(&repMerge, "report-merge", false, "merge the PATH_REPORTs of downstream reporters the proxy carries into the reporter's own (up to 16 entries)")
	fs.StringVar(&repMergeFrom, "report-merge-from", "", "with --report-merge: the downstream reporters whose reports may merge, `PREFIXES` (addresses or prefixes, comma-separated)")
	fs.Var(&repAggregation, "report-aggregation", "how long drops and merged reports gather before a report goes out, a `DURATION`")

	fail := func(err error) int {
		fmt.Fprintf(s.err, "crem netem: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		return 2
	}
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(s.out)
			fs.Usage()
			return 0
		}
		reportFlagError(s.err, fs, err)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return fail(fmt.Errorf("unexpected argument %q (see crem netem --help)", fs.Arg(0)))
	case listen == "":
		return fail(errors.New("--listen is required (see crem netem --help)"))
	case forward == "":
		return fail(errors.New("--forward is required (see crem netem --help)"))
	case maxClients <= 0:
		return fail(fmt.Errorf("--max-clients %d: must be at least 1", maxClients))
	}
	report, err := netemReportConfig(fs, repTo, repNode, repMethod, time.Duration(markPeriod), repListen,
		repMerge, repMergeFrom, time.Duration(repAggregation))
	if err != nil {
		return fail(err)
	}

	// Every reverse flag not given takes its forward counterpart's value.
	if inheritReverse(fs, &fwdF, &revF) {
		revSeed = seed + 1
	}

	fwdCfg, fwdDesc, err := fwdF.config(seed)
	if err != nil {
		return fail(err)
	}
	revCfg, revDesc, err := revF.config(revSeed)
	if err != nil {
		return fail(fmt.Errorf("reverse direction: %w", err))
	}

	var closers []func() error
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	cfg := udpproxy.Config{
		Listen:      listen,
		Forward:     forward,
		Routes:      routes,
		ForwardLink: fwdCfg,
		ReverseLink: revCfg,
		MaxClients:  maxClients,
		IdleTimeout: time.Duration(idle),
		Logger:      slog.New(slog.NewTextHandler(s.err, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Report:      report,

		ForgeDefinitions: forge,
	}
	if dropLog != "" {
		f, err := os.Create(dropLog)
		if err != nil {
			return fail(fmt.Errorf("drop log: %w", err))
		}
		closers = append(closers, f.Close)
		cfg.DropLog = f
	}
	if pcapFile != "" {
		f, err := os.Create(pcapFile)
		if err != nil {
			return fail(fmt.Errorf("pcap: %w", err))
		}
		closers = append(closers, f.Close)
		cfg.Pcap = f
	}
	p, err := udpproxy.New(cfg)
	if err != nil {
		return fail(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(duration))
		defer cancel()
	}
	fmt.Fprintf(s.err, "crem netem: listening on %v, forwarding to %v\n", p.Addr(), p.ForwardAddr())
	for c, to := range routes {
		fmt.Fprintf(s.err, "crem netem: route: %v to %v\n", c, to)
	}
	fmt.Fprintf(s.err, "crem netem: forward: %s\n", fwdDesc)
	fmt.Fprintf(s.err, "crem netem: reverse: %s\n", revDesc)
	if report != nil {
		merging := ""
		if report.Merge {
			merging = ", merging downstream reports"
		}
		fmt.Fprintf(s.err, "crem netem: path reporter on %v: %s to CREM port %s%s\n", p.ReportAddr(),
			netemMethodDesc(report), repTo.String(), merging)
	}

	statsDone := make(chan struct{})
	go func() { defer close(statsDone); netemStatsLines(ctx, time.Duration(statsInterval), p, s.err) }()
	runErr := p.Run(ctx)
	<-statsDone
	st := p.Stats()
	code := 0
	if runErr != nil {
		fmt.Fprintf(s.err, "crem netem: %v\n", runErr)
		code = 1
	}
	if asJSON {
		sum := netemSummary{
			Listen: p.Addr().String(), Forward: p.ForwardAddr().String(),
			ElapsedS: st.Elapsed.Seconds(), ForwardImp: fwdDesc, ReverseImp: revDesc, Stats: st,
		}
		if report != nil && st.Report != nil {
			sum.Reporter = netemReporterJSON(p, report, st.Report)
		}
		b, _ := json.MarshalIndent(sum, "", "  ")
		fmt.Fprintf(s.out, "%s\n", b)
		return code
	}
	writeNetemTable(s.out, p, st, report != nil && report.Merge)
	return code
}

// inheritReverse gives every reverse flag not given its forward counterpart's value, and says
// whether --reverse-seed was left to follow --seed.
func inheritReverse(fs *flag.FlagSet, fwdF, revF *netemLinkFlags) (seedFollows bool) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	inherit := func(name string, dst, src any) {
		if set["reverse-"+name] {
			return
		}
		switch d := dst.(type) {
		case *durationFlag:
			*d = *src.(*durationFlag)
		case *string:
			*d = *src.(*string)
		case *units.Rate:
			*d = *src.(*units.Rate)
		case *queueLimit:
			*d = *src.(*queueLimit)
		case *int:
			*d = *src.(*int)
		case *units.Fraction:
			*d = *src.(*units.Fraction)
		}
	}
	inherit("delay", &revF.delay, &fwdF.delay)
	inherit("jitter", &revF.jitter, &fwdF.jitter)
	inherit("jitter-dist", &revF.jitterDist, &fwdF.jitterDist)
	inherit("rate", &revF.rate, &fwdF.rate)
	inherit("queue", &revF.queue, &fwdF.queue)
	inherit("ecn-threshold", &revF.ecn, &fwdF.ecn)
	inherit("reorder", &revF.reorder, &fwdF.reorder)
	inherit("reorder-delay", &revF.reorderDelay, &fwdF.reorderDelay)
	if !set["reverse-loss"] && !set["reverse-loss-model"] {
		revF.loss, revF.lossModel = fwdF.loss, fwdF.lossModel
	} else {
		inherit("loss", &revF.loss, &fwdF.loss)
		inherit("loss-model", &revF.lossModel, &fwdF.lossModel)
	}
	return !set["reverse-seed"]
}

// netemStatsLines writes the proxy's counters to w every interval (none for 0) until ctx ends.
func netemStatsLines(ctx context.Context, interval time.Duration, p *udpproxy.Proxy, w io.Writer) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fmt.Fprintln(w, netemStatsLine(p.Stats()))
		}
	}
}

func netemStatsLine(st udpproxy.Stats) string {
	d := func(x udpproxy.DirStats) string {
		return fmt.Sprintf("rx %d fwd %d lost %d overflow %d ce %d in-flight %d",
			x.Received, x.Forwarded, x.DroppedLoss, x.DroppedOverflow, x.CEMarked, x.InFlight)
	}
	line := fmt.Sprintf("crem netem: %s forward: %s | reverse: %s | clients %d",
		units.FormatDuration(st.Elapsed), d(st.Forward), d(st.Reverse), st.Clients)
	if st.Forward.Forged > 0 {
		line += fmt.Sprintf(" | forged %d", st.Forward.Forged)
	}
	if r := st.Report; r != nil {
		line += fmt.Sprintf(" | reports %d send-errors %d", r.Reporter.Reports, r.SendErrors)
		if r.Offered > 0 {
			line += fmt.Sprintf(" merged %d of %d", r.Merged, r.Offered)
		}
	}
	return line
}

// netemReportConfig turns the reporter flags into the proxy's ReportConfig (nil without
// --report-to).
func netemReportConfig(fs *flag.FlagSet, to reportTo, node uint64, method string, period time.Duration, listen string,
	merge bool, mergeFrom string, aggregation time.Duration) (*udpproxy.ReportConfig, error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if to.port == 0 {
		for _, f := range []string{"report-node-id", "report-method", "marking-period", "report-listen", "report-merge", "report-merge-from", "report-aggregation"} {
			if set[f] {
				return nil, fmt.Errorf("--%s needs --report-to (the CREM port: there is no default)", f)
			}
		}
		return nil, nil
	}
	if node > math.MaxUint32-1 {
		return nil, fmt.Errorf("--report-node-id %d: must fit 32 bits (and leave room for the next one)", node)
	}
	if aggregation <= 0 {
		return nil, fmt.Errorf("--report-aggregation %v: must be positive", aggregation)
	}
	rc := &udpproxy.ReportConfig{Reporter: reporter.Config{NodeID: uint32(node), Port: to.port, Routes: to.routes,
		Aggregation: aggregation}, Merge: merge}
	switch {
	case merge && strings.TrimSpace(mergeFrom) == "":
		return nil, errors.New("--report-merge needs --report-merge-from: a merged entry reaches the CSF from this reporter's address, which the CSF trusts (C14), so name the downstream reporters")
	case !merge && mergeFrom != "":
		return nil, errors.New("--report-merge-from needs --report-merge")
	}
	for _, f := range strings.Split(mergeFrom, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		pf, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return nil, fmt.Errorf("--report-merge-from %q: neither a prefix nor an address", f)
			}
			pf = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		rc.MergeFrom = append(rc.MergeFrom, pf.Masked())
	}
	marking := false
	switch strings.ToLower(strings.TrimSpace(method)) {
	case "drops":
		rc.Drops = true
	case "marking":
		marking = true
	case "both":
		rc.Drops, marking = true, true
	default:
		return nil, fmt.Errorf("--report-method %q: want drops, marking or both", method)
	}
	switch {
	case marking && period <= 0:
		return nil, fmt.Errorf("--marking-period %v: must be positive", period)
	case marking:
		rc.Marking = period
	case set["marking-period"]:
		return nil, errors.New("--marking-period is for --report-method marking or both")
	}
	if listen != "" {
		a, err := netip.ParseAddrPort(listen)
		if err != nil {
			return nil, fmt.Errorf("--report-listen %q: want ADDR:PORT (127.0.0.1:0, [::]:50001): %w", listen, err)
		}
		rc.Listen = a
	}
	return rc, nil
}

func netemMethodDesc(rc *udpproxy.ReportConfig) string {
	switch {
	case rc.Drops && rc.Marking > 0:
		return fmt.Sprintf("drops (method 3) and marking every %v (method 1)", rc.Marking)
	case rc.Drops:
		return "drops (method 3)"
	}
	return fmt.Sprintf("marking every %v (method 1)", rc.Marking)
}

func netemReporterJSON(p *udpproxy.Proxy, rc *udpproxy.ReportConfig, r *udpproxy.ReportStats) *reporterReport {
	method := "drops"
	switch {
	case rc.Drops && rc.Marking > 0:
		method = "both"
	case rc.Marking > 0:
		method = "marking"
	}
	e := r.Reporter
	out := &reporterReport{
		Addr: p.ReportAddr().String(), CREMPort: rc.Reporter.Port, Method: method,
		DropsReported: e.Drops, Reports: e.Reports, DropReports: e.Reports - e.MeasurementReports,
		MarkingReports: e.MeasurementReports, Truncated: e.Truncated, PSNsCut: e.PSNsCut,
		DeferredFlow: e.DeferredFlow, DeferredPort: e.DeferredPort, FlowsOverflow: e.FlowsOverflow,
		HopsOverflow: e.HopsOverflow, EncodeErrors: e.EncodeErrors, Sent: r.Sent,
		SendErrors: r.SendErrors, EventsLost: r.EventsLost, NotRoCE: r.NotRoCE, Unsent: r.Unsent,
		AggregationS: rc.Reporter.Aggregation.Seconds(), Merge: rc.Merge, MergeOffered: r.Offered,
		Merged: r.Merged, MergePassedOn: r.PassedOn, MergeMalform: r.Malformed, MergeOtherCSF: r.OtherCSF,
		MergeUntrusted: r.Untrusted,
	}
	if rc.Marking > 0 {
		m := r.Marking
		out.Marking = &m
	}
	return out
}

func writeNetemTable(w io.Writer, p *udpproxy.Proxy, st udpproxy.Stats, merge bool) {
	fmt.Fprintf(w, "crem netem: %v -> %v, %s, clients: %d (%d evicted, %d closed idle)\n",
		p.Addr(), p.ForwardAddr(), units.FormatDuration(st.Elapsed), st.ClientsOpened,
		st.ClientsEvicted, st.ClientsExpired)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "direction\treceived\tforwarded\tlost\toverflow\tce-marked\twrite-errors\tunsent\tbytes-in\tbytes-out\t")
	for _, r := range []struct {
		name string
		d    udpproxy.DirStats
	}{{"forward", st.Forward}, {"reverse", st.Reverse}} {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", r.name, r.d.Received, r.d.Forwarded,
			r.d.DroppedLoss, r.d.DroppedOverflow, r.d.CEMarked, r.d.WriteErrors, r.d.Unsent,
			r.d.ReceivedBytes, r.d.ForwardedBytes)
	}
	tw.Flush()
	if n := st.Forward.Forged; n > 0 {
		fmt.Fprintf(w, "forger: %d forged REPAIRs injected ahead of blocks' first REPAIRs (counted as received)\n", n)
	}
	if r := st.Report; r != nil {
		e := r.Reporter
		fmt.Fprintf(w, "path reporter %v: %d reports (%d of drops, %d of marking), %d drops reported, "+
			"%d truncated, deferred %d per flow and %d per direction, %d sent, %d send errors, %d events lost\n",
			p.ReportAddr(), e.Reports, e.Reports-e.MeasurementReports, e.MeasurementReports, e.Drops,
			e.Truncated, e.DeferredFlow, e.DeferredPort, r.Sent, r.SendErrors, r.EventsLost)
		if merge {
			fmt.Fprintf(w, "merging: %d downstream PATH_REPORTs offered, %d merged, %d passed on (%d malformed, %d for another CSF)\n",
				r.Offered, r.Merged, r.PassedOn, r.Malformed, r.OtherCSF)
		}
		if m := r.Marking; m.Entered > 0 || m.Periods > 0 {
			fmt.Fprintf(w, "alternate marking: %d periods read (%d with loss, %d reported), %d lost, %d late, %d datagrams not measured\n",
				m.Periods, m.PeriodsWithLoss, m.Reported, m.Lost, m.Late, m.FlowsOverflow)
		}
	}
}
