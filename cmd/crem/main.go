// Command crem is the one binary of the project: a subcommand per job.
package main

import (
	"fmt"
	"io"
	"os"
)

// stdio carries the streams a subcommand reads and writes, so tests can run it in process.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// command is one subcommand: its name, a one-line summary for `crem --help`, and its entry.
type command struct {
	name, summary string
	run           func(args []string, s stdio) int
}

func commands() []command {
	return []command{
		{"demo", "tell the Appendix example as a story: four packets, three lost, one coded retransmission", runDemo},
		{"fec", "compute CREM repair symbols (Cauchy Reed-Solomon, XOR, Source Copy) from the shell", runFec},
		{"wire", "decode a CREM message from hex into JSON", runWire},
		{"pcap", "read captures: check RoCEv2 ICRCs (verify), summarise CREM and RoCEv2 traffic (stats)", runPcap},
		{"netem", "impair UDP between clients and a server: loss, delay, jitter, rate, queue, ECN", runNetem},
		{"perf", "measure the RoCEv2 RC queue pair (gbn, sr, tcaeth), perftest style", runPerf},
		{"sim", "simulate the engines at 400 Gbit/s and 25 ms: completion time per scheme, drop rate and size", runSim},
		{"gateway", "run a CREM gateway: protect the RoCEv2 flows crossing it toward a peer gateway", runGateway},
		{"conform", "test another CREM implementation's CSF or CRF, black box, scenario by scenario", runConform},
		{"lab", "the whole story on loopback: RDMA over an impaired path, with and without CREM gateways", runLab},
		{"reporter", "report this Linux router's own queue drops of RoCEv2 flows to their CSFs (eBPF, PATH_REPORT)", runReporter},
		{"version", "print the version of crem", runVersion},
	}
}

// version is set at build time with -ldflags "-X main.version=..."; "dev" otherwise.
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr}))
}

func run(args []string, s stdio) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(s.out)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(args[1:], s)
		}
	}
	fmt.Fprintf(s.err, "crem: unknown command %q (see crem --help)\n", args[0])
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, `crem: CREM (coded repair for RDMA over lossy long-distance paths) and T/C AETH tools.

Usage: crem <command> [flags] [arguments]

Commands:`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, `
Run "crem <command> --help" for the flags of a command.`)
}

func runVersion(args []string, s stdio) int {
	fs := newFlagSet("version", "crem version", "Prints the version of crem.", s)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	fmt.Fprintf(s.out, "crem %s\n", version)
	return 0
}
