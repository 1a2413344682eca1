package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"time"

	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/rc"
	"github.com/crem-project/crem/rc/perf"
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

Output: a table, or with --json one JSON object and nothing else on standard output:
bytes, iterations, seconds, verified, data_packets, retransmitted_packets,
timeout_retransmissions, ack_packets, nak_packets, dropped_packets, dropped_data_packets,
mode, qps, and more; the figures sum every QP (iterations and bytes too), and per_qp has
one object per QP with the same figures and its QPNs, initial_psn, next_psn and wrapped.
With more than one QP the table has a row per QP above the total. Exit status: 0 when every
message completed and was verified, 1 when not, 2 for usage errors.

Examples:
  crem perf write --loopback --size 4MiB --iters 4 --mtu 1024 --rate 1Gbit --loss 0.02 --delay 10ms --mode tcaeth
  crem perf write --loopback --qps 8 --size 1MiB --iters 16 --rate 400Mbit --loss 0.01 --delay 5ms`

func runPerf(args []string, s stdio) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintf(s.err, "Usage: crem perf serve|write|send|read [flags]\n\n%s\n", perfDescription)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	op := args[0]
	switch op {
	case "serve":
		return runPerfServe(args[1:], s)
	case "write", "send", "read":
	default:
		fmt.Fprintf(s.err, "crem perf: unknown subcommand %q (want serve, write, send or read)\n", op)
		return 2
	}
	fs := newFlagSet("perf "+op, "crem perf "+op+" --server ADDR | --loopback [flags]", perfDescription, s)
	server := fs.String("server", "", "setup address of a `crem perf serve` (host:port)")
	loopback := fs.Bool("loopback", false, "run both ends in this process over UDP on 127.0.0.1")
	size := units.Size(64 << 10)
	fs.Var(&size, "size", "message size (4096, 64KiB, 4MiB)")
	iters := fs.Int("iters", 1000, "iterations")
	mtu := fs.Int("mtu", 1024, "RDMA MTU: 256, 512, 1024, 2048 or 4096")
	mode := fs.String("mode", "tcaeth", "reliability mode: gbn, sr or tcaeth")
	srNAK := fs.Bool("sr-nak", true, "sr: the responder NAKs missing PSNs (false: recovery by timers alone)")
	rate := units.Rate(1e9)
	fs.Var(&rate, "rate", "preset rate the sender paces at (500Mbit, 2Gbit)")
	var loss netem.LossSpec
	fs.Var(&loss, "loss", "in-process loss on each direction: a fraction (0.01) or a netem loss model")
	delay := fs.Duration("delay", 0, "in-process one-way delay (10ms)")
	seed := fs.Uint64("seed", 1, "seed of the data and of the impairment")
	pcapFile := fs.String("pcap", "", "write every packet sent, dropped ones included, to this pcap `FILE`")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	port := fs.Int("port", udp.DefaultPort, "UDP port of the RoCE traffic")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long")
	retries := fs.Int("retry-count", 7, "timeouts without progress before the sending QP gives up (IBTA's retry_cnt)")
	qps := fs.Int("qps", 1, fmt.Sprintf("queue pairs between client and server, each running --iters messages (perftest's -q; 1 to %d)", perf.MaxQPs))
	if code, done := parseFlags(fs, args[1:]); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(s.err, "crem perf %s: unexpected argument %q\n", op, fs.Arg(0))
		return 2
	}
	m, err := rc.ParseMode(*mode)
	if err != nil {
		fmt.Fprintf(s.err, "crem perf %s: %v\n", op, err)
		return 2
	}
	if *loopback == (*server != "") {
		fmt.Fprintf(s.err, "crem perf %s: give exactly one of --server ADDR and --loopback\n", op)
		return 2
	}
	if !rc.ValidMTU(*mtu) || size <= 0 || *iters <= 0 || rate <= 0 || *retries <= 0 {
		fmt.Fprintf(s.err, "crem perf %s: need --mtu 256..4096 (a power of two) and positive --size, --iters, --rate, --retry-count\n", op)
		return 2
	}
	if *qps < 1 || *qps > perf.MaxQPs {
		fmt.Fprintf(s.err, "crem perf %s: --qps %d: want 1 to %d\n", op, *qps, perf.MaxQPs)
		return 2
	}
	portSet := false
	fs.Visit(func(f *flag.Flag) { portSet = portSet || f.Name == "port" })
	opts := perf.Options{Op: op, Size: int(size), Iters: *iters, MTU: *mtu, Mode: m, SRNoNAK: !*srNAK,
		Rate: int64(rate), Loss: loss, Delay: *delay, Seed: *seed, Port: *port, Server: *server, Timeout: *timeout,
		RetryCount: *retries, QPs: *qps}
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var res perf.Result
	if *loopback {
		res, err = perf.Loopback(ctx, opts)
	} else {
		res, err = perfClient(ctx, opts)
	}
	if pf != nil {
		if cerr := pf.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if *asJSON {
		b, _ := json.Marshal(res)
		fmt.Fprintf(s.out, "%s\n", b)
	} else {
		printPerfTable(s, res)
	}
	if err != nil {
		fmt.Fprintf(s.err, "crem perf %s: %v\n", op, err)
		return 1
	}
	if !res.Verified {
		return 1
	}
	return 0
}

// perfClient runs the client against a remote server on its own data socket.
func perfClient(ctx context.Context, opts perf.Options) (perf.Result, error) {
	host, err := udp.Listen(fmt.Sprintf(":%d", opts.Port), udp.Options{Pcap: opts.Pcap})
	if err != nil {
		return perf.Result{}, err
	}
	res, err := perf.Run(ctx, opts, host)
	if cerr := host.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return res, err
}

func printPerfTable(s stdio, r perf.Result) {
	if len(r.PerQP) > 1 {
		// perftest prints each QP's local and remote address; a row per QP here, then the
		// total in the table of one QP.
		fmt.Fprintf(s.out, "%-4s %-9s %-9s %-10s %-7s %-9s %-8s %-10s %-8s %-8s %-8s %-7s %-6s %-8s %-8s %s\n",
			"#qp", "qpn", "psn", "remote_qpn", "#iters", "seconds", "Gb/s", "data_pkts", "retx", "timeout", "acks",
			"naks", "drops", "drops_d", "wrapped", "verified")
		for _, q := range r.PerQP {
			fmt.Fprintf(s.out, "%-4d %#-9x %#-9x %#-10x %-7d %-9.3f %-8.3f %-10d %-8d %-8d %-8d %-7d %-6d %-8d %-8v %v\n",
				q.QP, q.LocalQPN, q.InitialPSN, q.RemoteQPN, q.Iterations, q.Seconds, q.Gbps, q.DataPackets,
				q.RetransmittedPackets, q.TimeoutRetransmissions, q.AckPackets, q.NakPackets, q.DroppedPackets,
				q.DroppedDataPackets, q.Wrapped, q.Verified)
		}
		fmt.Fprintln(s.out)
	}
	fmt.Fprintf(s.out, "%-10s %-7s %-6s %-9s %-8s %-10s %-8s %-8s %-8s %-7s %-6s %-8s %s\n",
		"#bytes", "#iters", "mode", "seconds", "Gb/s", "data_pkts", "retx", "timeout", "acks", "naks",
		"drops", "drops_d", "verified")
	fmt.Fprintf(s.out, "%-10d %-7d %-6s %-9.3f %-8.3f %-10d %-8d %-8d %-8d %-7d %-6d %-8d %v\n",
		r.Bytes, r.Iterations, r.Mode, r.Seconds, r.Gbps, r.DataPackets, r.RetransmittedPackets,
		r.TimeoutRetransmissions, r.AckPackets, r.NakPackets, r.DroppedPackets, r.DroppedDataPackets, r.Verified)
}

func runPerfServe(args []string, s stdio) int {
	fs := newFlagSet("perf serve", "crem perf serve --listen ADDR [--port N]", perfDescription, s)
	listen := fs.String("listen", "", "setup address to listen on (host:port; not the RoCE port)")
	port := fs.Int("port", udp.DefaultPort, "UDP port of the RoCE traffic")
	pcapFile := fs.String("pcap", "", "write every packet sent to this pcap `FILE`")
	if code, done := parseFlags(fs, args); done {
		return code
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Fprintf(s.err, "crem perf serve: setup on %v, RoCE on %v\n", setup.LocalAddr(), host.LocalAddr())
	if err := perf.Serve(ctx, setup, host, s.err); err != nil {
		fmt.Fprintf(s.err, "crem perf serve: %v\n", err)
		return 1
	}
	return 0
}
