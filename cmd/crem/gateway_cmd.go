package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/crem-project/crem/gateway"
)

const gatewayDescription = `Runs a CREM gateway: the CSF for the RoCEv2 flows leaving toward the peer gateway and the
CRF for those arriving from it, on real sockets (docs/gateway.md describes every field of the
TOML configuration file). Flags override the file. There is no default CREM port (C14).

A peer that does not answer is not fatal: the flows stay unprotected, the log and the metrics
say so, and HELLO is tried again after the hold-off (C3). SIGTERM and SIGINT close every flow
with CLOSE reason 0, drain and log "gateway stopped". SIGHUP reads the file again (with the
flags over it): the protect rules, the policy, the reporters and the log level change without a
flow dropped; a file that does not check out, or that changes a socket, is refused with one log
line and the gateway runs on (docs/gateway.md, Reloading). /metrics (Prometheus) and /healthz
are served on metrics_address. Exit status: 0 after a clean stop, 1 on a run-time failure, 2
for a bad configuration (one line on standard error naming the file, line, key and value).

--check-config validates the file and the flags given with it as a start does, without
opening a socket or the TUN device, and prints the resolved configuration: every field with
the value the gateway would run with, defaults filled in, as TOML (itself a valid file) or,
with --json, as JSON. It also builds the engines a start and a first flow build, so a policy
value they refuse is an error now. Exit status 0 when valid, 2 (one line) when not. It cannot
tell whether an address is in use or the TUN device may be opened.

Examples:
  crem gateway --config gw.toml --log-level debug
  crem gateway --check-config gw.toml
  crem gateway --config gw.toml --check-config --json`

func runGateway(args []string, s stdio) int {
	fs := newFlagSet("gateway", "crem gateway --config FILE [flags]", gatewayDescription, s)
	file := fs.String("config", "", "TOML configuration `FILE`")
	cremAddr := fs.String("crem-address", "", "address and CREM port to listen on (overrides crem_address)")
	peer := fs.String("peer", "", "peer gateway's CREM address (overrides peer)")
	mode := fs.String("mode", "", "data path: relay or tun (overrides mode)")
	protection := fs.String("domain-protection", "", "ipsec or boundary (overrides domain_protection)")
	metrics := fs.String("metrics-address", "", "serve /metrics and /healthz here (overrides metrics_address)")
	level := fs.String("log-level", "", "debug, info, warn or error (overrides log_level)")
	tunOffload := fs.String("tun-offload", "", "on or off: the TUN device's virtio header with checksum and segmentation offloads (overrides tun.offload)")
	tunWrite := fs.String("tun-write", "", "raw or device: where packets sent on go in tun mode (overrides tun.write)")
	tunDatapath := fs.String("tun-datapath", "", "tun, xdp or auto: how tun mode takes the traffic off the path (overrides tun.datapath)")
	tunVerify := fs.String("tun-verify", "", "template or logical: how restored packets are checked in tun mode (overrides tun.verify; logical for the project's own endpoints, crem perf)")
	pcapFile := fs.String("pcap", "", "record every datagram received and sent to this pcap `FILE` (overrides pcap)")
	noOffload := fs.Bool("no-offload", false, "relay: move datagrams without UDP GSO and GRO (sets relay.offload = false)")
	var check checkFlag
	fs.Var(&check, "check-config", "validate the configuration (`FILE`, or the one of --config) and print it resolved; start nothing")
	asJSON := fs.Bool("json", false, "with --check-config: print the resolved configuration as JSON")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	bad := func(err error) int {
		fmt.Fprintf(s.err, "crem gateway: %v\n", err)
		return 2
	}
	rest := fs.Args()
	if check.set && check.file == "" && len(rest) > 0 {
		// --check-config FILE: the flags after FILE are parsed too.
		check.file = rest[0]
		if code, done := parseFlags(fs, rest[1:]); done {
			return code
		}
		rest = fs.Args()
	}
	if *asJSON && !check.set {
		return bad(errors.New("--json needs --check-config"))
	}
	var err error
	if *file, err = configFileOf(check, *file, rest); err != nil {
		return bad(err)
	}
	overrides := []struct{ flag, key, v string }{{"--crem-address", "crem_address", *cremAddr}, {"--peer", "peer", *peer},
		{"--mode", "mode", *mode}, {"--domain-protection", "domain_protection", *protection},
		{"--metrics-address", "metrics_address", *metrics}, {"--log-level", "log_level", *level}, {"--pcap", "pcap", *pcapFile},
		{"--tun-write", "tun.write", *tunWrite}, {"--tun-verify", "tun.verify", *tunVerify},
		{"--tun-datapath", "tun.datapath", *tunDatapath}}
	switch *tunOffload {
	case "", "on", "off":
	default:
		return bad(fmt.Errorf("--tun-offload %q: want on or off", *tunOffload))
	}
	given := *noOffload || *tunOffload != ""
	for _, o := range overrides {
		given = given || o.v != ""
	}
	if *file == "" && !given {
		return bad(errors.New("no configuration: give --config FILE (docs/gateway.md describes it; --check-config FILE checks one)"))
	}
	// load reads the file and applies the flags over it: at the start, and again on SIGHUP.
	load := gatewaySource{file: *file, overrides: overrides, noOffload: *noOffload, tunOffload: *tunOffload}.load
	cfg, err := load()
	if err != nil {
		return bad(err)
	}
	if check.set {
		return checkConfig(cfg, *file, *asJSON, s)
	}
	if err := cfg.Validate(); err != nil {
		return bad(err)
	}
	levelVar := new(slog.LevelVar)
	levelVar.Set(cfg.LogLevel.Slog())
	log := slog.New(slog.NewTextHandler(s.err, &slog.HandlerOptions{Level: levelVar}))
	opts := gateway.Options{Logger: log, Version: version}
	if cfg.Pcap != "" {
		f, err := os.Create(cfg.Pcap)
		if err != nil {
			return bad(fmt.Errorf("pcap: %w", err))
		}
		defer f.Close()
		opts.Pcap = f
	}
	// From here SIGHUP reloads (a SIGHUP while the sockets open waits for the start), and
	// SIGINT and SIGTERM stop with CLOSE to every peer and the summary line.
	sigs, release := serviceSignals()
	defer release()
	g, err := gateway.New(cfg, opts)
	if err != nil {
		var ce *gateway.ConfigError
		if errors.As(err, &ce) {
			return bad(err)
		}
		fmt.Fprintf(s.err, "crem gateway: %v\n", err)
		return 1
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		for {
			select {
			case sig := <-sigs:
				if sig != syscall.SIGHUP {
					log.Info("gateway stopping", "signal", signalName(sig))
					stop()
					return
				}
				reloadGateway(g, load, levelVar, log)
			case <-ctx.Done():
				return
			}
		}
	}()
	if a := g.MetricsAddress(); a != "" {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return bad(fmt.Errorf("metrics_address %s: %w", a, err))
		}
		go func() {
			if err := g.ServeMetrics(ctx, ln); err != nil {
				log.Error("metrics", "err", err)
			}
		}()
		log.Info("metrics", "address", ln.Addr().String())
	}
	if err := g.Run(ctx); err != nil {
		fmt.Fprintf(s.err, "crem gateway: %v\n", err)
		return 1
	}
	return 0
}

// reloadGateway is SIGHUP: the file read again with the flags over it, and what may change
// without new sockets applied to the running gateway (Gateway.Reload), or nothing applied and
// one line that says why. Either way the gateway runs on.
func reloadGateway(g *gateway.Gateway, load func() (gateway.Config, error), level *slog.LevelVar, log *slog.Logger) {
	cfg, err := load()
	var changed []string
	if err == nil {
		changed, err = g.Reload(cfg)
	}
	if err != nil {
		log.Error("configuration not reloaded: the gateway runs on as before", "err", err)
		return
	}
	level.Set(cfg.LogLevel.Slog())
	if len(changed) == 0 {
		log.Info("configuration reloaded: nothing changed")
		return
	}
	log.Info("configuration reloaded", "changed", strings.Join(changed, " "))
}

// checkFlag is --check-config: alone (the file is --config's, or the next argument), or
// --check-config=FILE.
type checkFlag struct {
	set  bool
	file string
}

func (c *checkFlag) String() string   { return c.file }
func (c *checkFlag) IsBoolFlag() bool { return true }
func (c *checkFlag) Set(v string) error {
	c.set = true
	switch v {
	case "true":
	case "false":
		c.set = false
	default:
		c.file = v
	}
	return nil
}

// checkConfig resolves cfg (read from file, flags applied) and prints it; 2 when it is not
// valid.
func checkConfig(cfg gateway.Config, file string, asJSON bool, s stdio) int {
	r, err := cfg.Resolve()
	if err != nil {
		fmt.Fprintf(s.err, "crem gateway: %v\n", err)
		return 2
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(s.err, "crem gateway: warning: %s\n", w)
	}
	if asJSON {
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			fmt.Fprintf(s.err, "crem gateway: %v\n", err)
			return 1
		}
		fmt.Fprintf(s.out, "%s\n", b)
		return 0
	}
	from := "flags"
	if file != "" {
		from = file
	}
	fmt.Fprintf(s.out, "# crem gateway: the configuration of %s is valid; as it runs, defaults filled in:\n", from)
	if err := r.WriteTOML(s.out); err != nil {
		fmt.Fprintf(s.err, "crem gateway: %v\n", err)
		return 1
	}
	return 0
}

// configFileOf is the configuration file the command line names: --config, or --check-config's
// own (the same if both are given); "" if neither (flags alone may configure a gateway).
func configFileOf(check checkFlag, file string, rest []string) (string, error) {
	switch {
	case len(rest) > 0:
		return "", fmt.Errorf("unexpected argument %q", rest[0])
	case check.file != "" && file != "" && check.file != file:
		return "", fmt.Errorf("--check-config %s and --config %s: name one file", check.file, file)
	case check.file != "":
		return check.file, nil
	}
	return file, nil
}

// gatewaySource is where a gateway's configuration comes from: the file and the flags that
// override it.
type gatewaySource struct {
	file       string
	overrides  []struct{ flag, key, v string }
	noOffload  bool
	tunOffload string // "", "on" or "off"
}

// load reads the file and applies the flags over it.
func (src gatewaySource) load() (gateway.Config, error) {
	var cfg gateway.Config
	if src.file != "" {
		c, err := gateway.LoadConfig(src.file)
		if err != nil {
			return cfg, err
		}
		cfg = c
	}
	for _, o := range src.overrides {
		if o.v != "" {
			if err := cfg.Set(o.flag, o.key, strconv.Quote(o.v)); err != nil {
				return cfg, err
			}
		}
	}
	if src.noOffload {
		if err := cfg.Set("--no-offload", "relay.offload", "false"); err != nil {
			return cfg, err
		}
	}
	if src.tunOffload != "" {
		if err := cfg.Set("--tun-offload", "tun.offload", strconv.FormatBool(src.tunOffload == "on")); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}
