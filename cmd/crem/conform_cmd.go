package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/crem-project/crem/internal/harness/conform"
)

const conformDescription = `Tests another CREM implementation, black box, over real UDP sockets (like h2spec for
HTTP/2). "csf" tests its CREM sender function: crem plays the CRF against it, and the RDMA
sender whose packets it protects. "crf" tests its CREM receiver function: crem plays the
CSF, and the path that delivers the RDMA sender's packets (some lost). Each scenario checks one requirement of the draft or one ruling and ends PASS, FAIL
(what was expected, what came, the packets in hex) or SKIP (an OPTIONAL part the target does
not do, or a long scenario without --long). docs/conform.md walks through it in five minutes
with a crem gateway as the target.

What the target must be configured with (relay mode names in brackets):
  csf: its peer is crem's --listen; the RDMA sender's packets arrive at --inject [relay.listen];
       it relays them to --data-listen [relay.peer_data]; its initial RTT is --srtt; its path
       reporters include --reporter and not --stranger; a short HELLO hold-off (1s).
  crf: HELLOs come from --listen; source packets arrive at --inject [relay.wan_listen] as
       the path delivers them; it delivers to --data-listen [relay.target]; its protect rule
       covers --flow-src -> --flow-dst with src_port --flow-src-port [relay.remote_endpoint,
       relay.local_endpoint]; its initial RTT is --srtt.
There is no default CREM port (RULINGS C14): --target and --listen always name one.

Output: a table on standard output (--json: one JSON object instead); --junit FILE also
writes JUnit XML for CI. Progress goes to standard error with --verbose.

Exit status:
  0  nothing required failed (OPTIONAL failures and SKIPs are reported, not counted)
  1  a required scenario failed, or the target does not answer: when a scenario fails before
     anything at all came from the target, crem says so once and runs no more scenarios
  2  bad usage: flags, addresses, --run matching nothing, a socket that cannot be bound, a
     --junit file that cannot be written

Examples:
  crem conform --list
  crem conform csf --target 127.0.0.1:50000 --listen 127.0.0.1:50001 \
      --inject 127.0.0.1:7000 --data-listen 127.0.0.1:7101 --reporter 127.0.0.2 --stranger 127.0.0.3
  crem conform crf --target 127.0.0.1:50010 --listen 127.0.0.1:50011 --inject 127.0.0.1:7011 \
      --data-listen 127.0.0.1:7010 --flow-src 127.0.0.2 --flow-dst 127.0.0.1 --flow-src-port 40000 \
      --junit conform-crf.xml`

// addrPortFlag and addrFlag read netip values from flags.
type addrPortFlag struct{ v *netip.AddrPort }

func (f addrPortFlag) String() string {
	if f.v == nil || !f.v.IsValid() {
		return ""
	}
	return f.v.String()
}

func (f addrPortFlag) Set(s string) error {
	a, err := netip.ParseAddrPort(s)
	if err != nil {
		return fmt.Errorf("want address:port: %w", err)
	}
	*f.v = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
	return nil
}

type addrFlag struct{ v *netip.Addr }

func (f addrFlag) String() string {
	if f.v == nil || !f.v.IsValid() {
		return ""
	}
	return f.v.String()
}

func (f addrFlag) Set(s string) error {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return fmt.Errorf("want an IP address: %w", err)
	}
	*f.v = a.Unmap()
	return nil
}

func runConform(args []string, s stdio) int {
	fs := newFlagSet("conform", "crem conform csf|crf --target ADDR --listen ADDR --inject ADDR --data-listen ADDR [flags]\n       crem conform --list [csf|crf]", conformDescription, s)
	var c conform.Config
	fs.Var(addrPortFlag{&c.Target}, "target", "the target's CREM address and port (required)")
	fs.Var(addrPortFlag{&c.Listen}, "listen", "crem's own CREM address and port: the target's peer (csf), where HELLO is sent from (crf) (required)")
	fs.Var(addrPortFlag{&c.Inject}, "inject", "where crem sends RoCEv2 datagrams into the target: the RDMA sender's (csf), the path's (crf) (required)")
	fs.Var(addrPortFlag{&c.DataListen}, "data-listen", "where crem receives the target's RoCEv2 datagrams: relayed (csf), delivered (crf) (required)")
	fs.Var(addrFlag{&c.FlowSrc}, "flow-src", "crf: the flows' logical source address (HELLO; the ICRC's header)")
	fs.Var(addrFlag{&c.FlowDst}, "flow-dst", "crf: the flows' logical destination address")
	srcPort := fs.Uint("flow-src-port", 0, "crf: the flows' UDP source port (the target's protect rule's src_port)")
	fs.Var(addrFlag{&c.Reporter}, "reporter", "csf: an address among the target's path reporters (crem binds it)")
	fs.Var(addrFlag{&c.Stranger}, "stranger", "csf: an address not among them (crem binds it)")
	fs.DurationVar(&c.SRTT, "srtt", 20*time.Millisecond, "the round trip crem imposes by delaying its answers; give the target the same initial RTT")
	fs.DurationVar(&c.Timeout, "timeout", 2*time.Second, "the longest wait for one expected message")
	fs.DurationVar(&c.BurstGap, "burst-gap", 10*time.Millisecond, "the pause that ends a burst of source packets (above the target's burst gap)")
	fs.BoolVar(&c.Long, "long", false, "run the long scenarios too (the circuit breaker's 10 s and 60 s)")
	fs.Float64Var(&c.ClockScale, "clock-scale", 1, "the target's protocol clock runs this many times faster than real time (a test build); 6 or more runs the long scenarios")
	run := fs.String("run", "", "only the scenarios whose names match this regular expression")
	list := fs.Bool("list", false, "list the scenarios (of the half given, or all) and exit")
	asJSON := fs.Bool("json", false, "print the report as JSON instead of the table")
	junit := fs.String("junit", "", "also write the report as JUnit XML to this file")
	seed := fs.Uint64("seed", 0, "seed of crem's random choices (0: from the system)")
	qpBase := fs.Uint("qp-base", 0, "first destination QP of crem's flows (0: at random)")
	verbose := fs.Bool("verbose", false, "one line per scenario on standard error as it ends")
	pos, code, done := parseInterleaved(fs, args)
	if done {
		return code
	}
	if len(pos) > 1 {
		fmt.Fprintf(s.err, "crem conform: one half (csf or crf), got %q\n", pos)
		return 2
	}
	half := conform.Half("")
	if len(pos) == 1 {
		half = conform.Half(pos[0])
		if half != conform.HalfCSF && half != conform.HalfCRF {
			fmt.Fprintf(s.err, "crem conform: unknown half %q: want csf or crf\n", pos[0])
			return 2
		}
	}
	var re *regexp.Regexp
	if *run != "" {
		var err error
		if re, err = regexp.Compile(*run); err != nil {
			fmt.Fprintf(s.err, "crem conform: --run: %v\n", err)
			return 2
		}
	}
	all := conform.Scenarios()
	if *list {
		return listScenarios(s, all, half, re)
	}
	if half == "" {
		fmt.Fprintln(s.err, "crem conform: name the half to test: csf or crf (see crem conform --help)")
		return 2
	}
	if *srcPort > 65535 || *qpBase >= 1<<24 {
		fmt.Fprintln(s.err, "crem conform: --flow-src-port is a UDP port, --qp-base a 24-bit QP")
		return 2
	}
	c.Half, c.Run, c.Seed, c.FlowSrcPort, c.QPBase = half, re, *seed, uint16(*srcPort), uint32(*qpBase)
	if *verbose {
		c.Progress = s.err
	}
	rep, err := conform.Run(c, all)
	if errors.Is(err, conform.ErrTargetSilent) {
		// Said once, instead of every scenario failing its timeout with a guess at the cause.
		fmt.Fprintf(s.err, "crem conform: target %v does not answer: is crem gateway running there? (%v; if it runs, check that its peer is --listen and that a protect rule covers the flow)\n",
			c.Target, strings.TrimPrefix(err.Error(), conform.ErrTargetSilent.Error()+": "))
		return 1
	}
	if err != nil {
		fmt.Fprintf(s.err, "crem conform: %v\n", err)
		return 2
	}
	if *asJSON {
		b, err := rep.JSON()
		if err != nil {
			fmt.Fprintf(s.err, "crem conform: %v\n", err)
			return 2
		}
		fmt.Fprintf(s.out, "%s\n", b)
	} else if err := rep.WriteTable(s.out); err != nil {
		fmt.Fprintf(s.err, "crem conform: %v\n", err)
		return 2
	}
	if *junit != "" {
		if err := writeJUnit(*junit, rep); err != nil {
			fmt.Fprintf(s.err, "crem conform: --junit: %v\n", err)
			return 2
		}
	}
	if rep.RequiredFailed() {
		return 1
	}
	return 0
}

func writeJUnit(path string, rep *conform.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.WriteJUnit(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func listScenarios(s stdio, all []conform.Scenario, half conform.Half, re *regexp.Regexp) int {
	tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tSECTION\tKIND\tREQUIREMENT")
	n := 0
	for _, h := range []conform.Half{conform.HalfCSF, conform.HalfCRF} {
		if half != "" && h != half {
			continue
		}
		for _, sc := range conform.Select(all, h, re) {
			var kind []string
			if sc.Optional {
				kind = append(kind, "optional")
			}
			if sc.Long {
				kind = append(kind, "long")
			}
			if len(kind) == 0 {
				kind = append(kind, "required")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", sc.Name, sc.Section, strings.Join(kind, ","), sc.Requirement)
			n++
		}
	}
	tw.Flush()
	if n == 0 {
		fmt.Fprintln(s.err, "crem conform: no scenario matches --run")
		return 2
	}
	return 0
}
