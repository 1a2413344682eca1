package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/crem-project/crem/reporter"
	"github.com/crem-project/crem/reporter/kdrop"
)

const reporterDescription = `Runs a path reporter on a Linux router: the router's own queue drops of protected RoCEv2
datagrams are seen in the kernel (an eBPF program on the skb:kfree_skb tracepoint, filtered
there by device, UDP destination port and drop reason) and reported, PSN by PSN, to the
flow's CSF in PATH_REPORT method 3 (node-local drops), through the reporter's aggregation,
rate limits per flow and per device, routing by source prefix and path MTU rule.

It only observes: nothing is changed in the packet path. It needs Linux with BTF
(/sys/kernel/btf/vmlinux) and CAP_BPF and CAP_PERFMON (or root); without them it exits 2
saying which. /metrics (Prometheus) and /healthz are served on metrics_address. SIGINT and
SIGTERM detach the program, send the reports pending and exit 0. Exit status: 1 on a run-time
failure, 2 for a bad configuration or a node that cannot run the program.

--check-config validates the file (and, where the kernel can be asked, its drop reasons and
devices) without loading anything.

Examples:
  crem reporter --config /etc/crem/reporter.toml
  crem reporter --check-config /etc/crem/reporter.toml`

func runReporter(args []string, s stdio) int {
	fs := newFlagSet("reporter", "crem reporter --config FILE [flags]", reporterDescription, s)
	file := fs.String("config", "", "TOML configuration `FILE`")
	metrics := fs.String("metrics-address", "", "serve /metrics and /healthz here (overrides metrics_address)")
	level := fs.String("log-level", "", "debug, info, warn or error (overrides log_level)")
	var check checkFlag
	fs.Var(&check, "check-config", "validate the configuration (`FILE`, or the one of --config) and print a summary; start nothing")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	bad := func(err error) int {
		fmt.Fprintf(s.err, "crem reporter: %v\n", err)
		return 2
	}
	rest := fs.Args()
	var err error
	if check.set && check.file == "" && len(rest) > 0 {
		check.file = rest[0]
		if code, done := parseFlags(fs, rest[1:]); done {
			return code
		}
		rest = fs.Args()
	}
	if *file, err = configFileOf(check, *file, rest); err != nil {
		return bad(err)
	}
	if *file == "" {
		return bad(errors.New("--config FILE is required"))
	}
	fc, err := kdrop.LoadConfig(*file)
	if err != nil {
		return bad(err)
	}
	if *metrics != "" {
		fc.MetricsAddress = *metrics
	}
	if *level != "" {
		fc.LogLevel = *level
	}
	cfg, err := fc.Resolve()
	if err != nil {
		return bad(fmt.Errorf("%s: %w", *file, err))
	}
	if check.set {
		return reporterCheck(cfg, *file, s)
	}
	lv := slog.LevelInfo
	_ = lv.UnmarshalText([]byte(cfg.Log))
	log := slog.New(slog.NewTextHandler(s.err, &slog.HandlerOptions{Level: lv}))

	kernelReasons, err := kdrop.Reasons()
	if err != nil {
		return bad(err)
	}
	nums, causes, err := cfg.ReasonNumbers(kernelReasons)
	if err != nil {
		return bad(err)
	}
	devs, err := reporterDevices(cfg)
	if err != nil {
		// A device not there yet is a run-time failure (a restart may find it), not the file's.
		fmt.Fprintf(s.err, "crem reporter: %v\n", err)
		return 1
	}
	conn, queues, err := reporterSockets(cfg, log)
	if err != nil {
		return bad(fmt.Errorf("the reports' socket: %w", err))
	}
	defer conn.Close()
	src, err := kdrop.Open(kdrop.Config{Devices: devs, Ports: cfg.Ports, Reasons: nums, RingSize: cfg.Ring})
	if err != nil {
		if errors.Is(err, kdrop.ErrNoBTF) || errors.Is(err, kdrop.ErrPermission) || errors.Is(err, kdrop.ErrNoTracepoint) || errors.Is(err, kdrop.ErrNotSupported) {
			return bad(err)
		}
		fmt.Fprintf(s.err, "crem reporter: %v\n", err)
		return 1
	}
	defer src.Close()
	eng, err := reporter.New(cfg.Engine)
	if err != nil {
		return bad(err)
	}
	d := &kdrop.Driver{Src: src, Eng: eng, Causes: causes, Send: func(dg reporter.Datagram) error {
		_, err := conn.WriteToUDPAddrPort(dg.Payload, netip.AddrPortFrom(dg.To.Addr().Unmap(), dg.To.Port()))
		return err
	}}
	if queues != nil {
		defer queues.Close()
		d.Queues, d.QueueDevices = queues, ifindexes(devs)
	}
	byNum := map[uint32]string{}
	for name, n := range kernelReasons {
		byNum[n] = name
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.Metrics != "" {
		srv, at, err := serveReporterMetrics(cfg.Metrics, kdrop.NewCollector(d, cfg.Devices, byNum, src.Attach()))
		if err != nil {
			return bad(err)
		}
		defer srv.Close()
		log.Info("metrics", "address", at)
	}
	names := make([]string, 0, len(nums))
	for _, n := range nums {
		names = append(names, byNum[n])
	}
	log.Info("reporting", "attach", src.Attach(), "devices", strings.Join(cfg.Devices, ","), "udp_ports", fmt.Sprint(cfg.Ports),
		"reasons", strings.Join(names, ","), "from", conn.LocalAddr().String(), "crem_port", cfg.Engine.Port)
	if err := d.Run(ctx); err != nil {
		fmt.Fprintf(s.err, "crem reporter: %v\n", err)
		return 1
	}
	st := d.Stats()
	var drops uint64
	for _, v := range st.Drops {
		drops += v
	}
	log.Info("stopped", "drops", drops, "psns_named", st.PSNs, "unnamed", st.Unnamed, "reports", st.Engine.Reports,
		"send_errors", st.SendErrors, "ring_events_lost", st.Kernel.EventsLost)
	return 0
}

// reporterSockets opens, in the router's namespace, the reports' socket and the reader of the
// devices' queue disciplines (PR19); a node that cannot read them reports Queue Delay Change 0
// (queues nil, logged).
func reporterSockets(cfg kdrop.Resolved, log *slog.Logger) (*net.UDPConn, *kdrop.QueueReader, error) {
	var conn *net.UDPConn
	var queues *kdrop.QueueReader
	err := kdrop.InNetns(cfg.Netns, func() error {
		if q, err := kdrop.OpenQueueReader(); err == nil {
			queues = q
		} else {
			log.Warn("queue delay not measured", "err", err)
		}
		la := &net.UDPAddr{}
		if cfg.Source.IsValid() {
			la.IP = cfg.Source.AsSlice()
		}
		c, err := net.ListenUDP("udp", la)
		conn = c
		return err
	})
	if err != nil && queues != nil {
		queues.Close()
		queues = nil
	}
	return conn, queues, err
}

// ifindexes are the devices' interface indexes, by engine port.
func ifindexes(devs []kdrop.Device) []int {
	out := make([]int, len(devs))
	for i, d := range devs {
		out[i] = d.Ifindex
	}
	return out
}

// reporterDevices names the configured devices in the router's namespace: index and the
// namespace's cookie; engine port i is device i.
func reporterDevices(cfg kdrop.Resolved) ([]kdrop.Device, error) {
	var devs []kdrop.Device
	err := kdrop.InNetns(cfg.Netns, func() error {
		cookie, err := kdrop.NetnsCookie()
		if err != nil {
			return err
		}
		for i, name := range cfg.Devices {
			ifi, err := net.InterfaceByName(name)
			if err != nil {
				return fmt.Errorf("device %s: %w", name, err)
			}
			devs = append(devs, kdrop.Device{Ifindex: ifi.Index, Netns: cookie, Port: i})
		}
		return nil
	})
	return devs, err
}

// reporterCheck prints what the configuration resolves to; the kernel's reasons and the
// devices are checked where they can be read.
func reporterCheck(cfg kdrop.Resolved, file string, s stdio) int {
	fmt.Fprintf(s.out, "# crem reporter: the configuration of %s is valid\n", file)
	e := cfg.Engine
	fmt.Fprintf(s.out, "node_id %d, crem_port %d, udp_ports %v, devices %s", e.NodeID, e.Port, cfg.Ports, strings.Join(cfg.Devices, ","))
	if cfg.Netns != "" {
		fmt.Fprintf(s.out, " (in %s)", cfg.Netns)
	}
	fmt.Fprintln(s.out)
	names := make([]string, 0, len(cfg.Reasons))
	for n, c := range cfg.Reasons {
		names = append(names, n+"="+strings.ToLower(c.String()))
	}
	slices.Sort(names)
	fmt.Fprintf(s.out, "reasons %s\n", strings.Join(names, " "))
	for _, r := range e.Routes {
		fmt.Fprintf(s.out, "route %v -> %v\n", r.Prefix, r.CSF)
	}
	if kr, err := kdrop.Reasons(); err != nil {
		fmt.Fprintf(s.out, "drop reasons not checked against the kernel: %v\n", err)
	} else if _, _, err := cfg.ReasonNumbers(kr); err != nil {
		fmt.Fprintf(s.err, "crem reporter: %v\n", err)
		return 2
	}
	// A device missing now may come later (it is not a fault of the file): a warning.
	if _, err := reporterDevices(cfg); err != nil {
		fmt.Fprintf(s.err, "crem reporter: warning: %v\n", err)
	}
	return 0
}

// serveReporterMetrics serves /metrics (the collector's) and /healthz at addr, and says where
// (the port the system chose for port 0).
func serveReporterMetrics(addr string, c prometheus.Collector) (*http.Server, string, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("metrics_address %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return srv, ln.Addr().String(), nil
}
