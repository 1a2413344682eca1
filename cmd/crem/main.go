// Command crem is the one binary of the project: a subcommand per job.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
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

// version is set at build time with -ldflags "-X main.version=..."; "dev" otherwise, when
// versionLine looks at the build information.
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr}))
}

func run(args []string, s stdio) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || (args[0] == "help" && len(args) == 1) {
		usage(s.out)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		return runVersion(args[1:], s)
	}
	if args[0] == "help" {
		// crem help CMD [SUB] is crem CMD [SUB] -h, as go help does for go's commands.
		for _, c := range commands() {
			if c.name == args[1] {
				return c.run(append(slices.Clone(args[2:]), "-h"), s)
			}
		}
		fmt.Fprintf(s.err, "crem help: unknown command %q\nRun 'crem -h' for usage.\n", args[1])
		return 2
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
	fs := newFlagSet("version", "crem version | crem --version", "Prints the version of crem and the Go version it was built with.", s)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	fmt.Fprintln(s.out, versionLine(version, debug.ReadBuildInfo))
	return 0
}

// versionLine is the one line crem version and crem --version print: "crem VERSION GOVERSION".
// VERSION is the one set at build time (-ldflags -X main.version=...), else the module's version
// from the build information (go install crem@v1.2.3), else "dev"; a build from a git checkout
// adds the revision, with +dirty when the tree had changes.
func versionLine(set string, read func() (*debug.BuildInfo, bool)) string {
	v, goVersion := set, runtime.Version()
	if bi, ok := read(); ok {
		goVersion = bi.GoVersion
		if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		if v == "dev" {
			rev, dirty := "", false
			for _, st := range bi.Settings {
				switch st.Key {
				case "vcs.revision":
					rev = st.Value
				case "vcs.modified":
					dirty = st.Value == "true"
				}
			}
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if rev != "" {
				v += "-" + rev
				if dirty {
					v += "+dirty"
				}
			}
		}
	}
	if v == "" {
		v = "dev"
	}
	return "crem " + v + " " + goVersion
}
