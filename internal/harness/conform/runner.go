package conform

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"regexp"
	"sort"
	"time"
)

// Config is a run: which half of the target is tested, where it is, and the runner's own
// addresses. docs/conform.md tells what the target must be configured with for each field.
type Config struct {
	Half Half
	// Target is the target's CREM address (address and CREM port; no default port, C14).
	Target netip.AddrPort
	// Listen is the runner's own CREM address: against a CSF, the address the target is
	// configured to send HELLO to (its peer); against a CRF, the address HELLO is sent from.
	Listen netip.AddrPort
	// Inject is where the runner sends RoCEv2 datagrams into the target: against a CSF, the
	// RDMA sender's source packets (a relay-mode gateway's relay.listen); against a CRF, the
	// source packets as they arrive from the path (a relay-mode gateway's relay.wan_listen).
	Inject netip.AddrPort
	// DataListen is where the runner receives the RoCEv2 datagrams the target emits: against a
	// CSF, the source packets it relays on (its relay.peer_data); against a CRF, the packets it
	// delivers to the RDMA receiver, restored ones included (its relay.target).
	DataListen netip.AddrPort
	// FlowSrc, FlowDst and FlowSrcPort (CRF) are the logical source and destination of the
	// flows the runner opens (HELLO's descriptor) and the UDP source port of the header their
	// ICRC is sealed under (RULINGS C12): a relay-mode gateway's relay.remote_endpoint,
	// relay.local_endpoint and the protect rule's src_port.
	FlowSrc, FlowDst netip.Addr
	FlowSrcPort      uint16
	// Reporter (CSF) is an address in the target's configured path reporters and Stranger one
	// that is not; the runner binds a socket on each (loopback: 127.0.0.2, 127.0.0.3). Without
	// them the PATH_REPORT scenario is skipped.
	Reporter, Stranger netip.Addr
	// SRTT is the round trip the runner imposes on the target by the delay of its answers
	// (configure the target's initial RTT to it). Default 20 ms.
	SRTT time.Duration
	// Timeout is the longest wait for one expected message. Default 2 s.
	Timeout time.Duration
	// BurstGap is the pause that ends a burst of source packets, longer than the target's own
	// burst gap (C5). Default 10 ms.
	BurstGap time.Duration
	// Long runs the long scenarios (the circuit breaker's ten seconds and one minute).
	Long bool
	// ClockScale: the target's protocol clock runs this many times faster than real time (a
	// test build with a compressed clock); the breaker scenarios divide the draft's durations
	// by it and run without Long when it is 6 or more. Default 1.
	ClockScale float64
	// Run selects scenarios by a regular expression on their names (nil: all).
	Run *regexp.Regexp
	// QPBase is the first destination QP of the runner's flows (0: chosen at random); each
	// scenario's flows take new QPs, so that they never meet an earlier run's.
	QPBase uint32
	// Seed seeds the runner's random choices (0: from the system).
	Seed uint64
	// CREMConn and DataConn, if set, are sockets bound beforehand for Listen and DataListen
	// (a test binds its ports before it configures the target). Run closes them.
	CREMConn, DataConn *net.UDPConn
	// Progress, if set, gets one line per scenario as it ends.
	Progress io.Writer
}

// ErrConfig marks a configuration the runner cannot run with.
var ErrConfig = errors.New("conform: configuration")

// ErrTargetSilent marks a run stopped because the target sent nothing at all: a scenario that
// waited for it failed before any datagram came from it. The other scenarios would each wait
// their timeout for nothing; Run returns the report of those that ran.
var ErrTargetSilent = errors.New("conform: the target does not answer")

func cfgErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...))
}

func (c *Config) fill() error {
	if c.Half != HalfCSF && c.Half != HalfCRF {
		return cfgErr("half %q: want csf or crf", c.Half)
	}
	if c.CREMConn != nil {
		c.Listen = c.CREMConn.LocalAddr().(*net.UDPAddr).AddrPort()
	}
	if c.DataConn != nil {
		c.DataListen = c.DataConn.LocalAddr().(*net.UDPAddr).AddrPort()
	}
	switch {
	case !c.Target.IsValid() || c.Target.Port() == 0:
		return cfgErr("--target: the target's CREM address and port are required (there is no default CREM port)")
	case !c.Listen.IsValid():
		return cfgErr("--listen: the runner's own CREM address is required")
	case !c.Inject.IsValid() || c.Inject.Port() == 0:
		return cfgErr("--inject: where the runner sends RoCEv2 datagrams into the target is required")
	case !c.DataListen.IsValid():
		return cfgErr("--data-listen: where the runner receives the target's RoCEv2 datagrams is required")
	}
	if c.Half == HalfCRF {
		if !c.FlowSrc.IsValid() || !c.FlowDst.IsValid() || c.FlowSrc.Is4() != c.FlowDst.Is4() {
			return cfgErr("--flow-src and --flow-dst: the logical endpoints of the flows (one address family) are required against a CRF")
		}
		if c.FlowSrcPort == 0 {
			return cfgErr("--flow-src-port: the flows' UDP source port (the target's protect rule's src_port) is required against a CRF")
		}
	}
	if c.Reporter.IsValid() != c.Stranger.IsValid() || c.Reporter.IsValid() && c.Reporter == c.Stranger {
		return cfgErr("--reporter and --stranger go together and must differ")
	}
	if c.SRTT <= 0 {
		c.SRTT = 20 * time.Millisecond
	}
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Second
	}
	if c.BurstGap <= 0 {
		c.BurstGap = 10 * time.Millisecond
	}
	if c.ClockScale <= 0 {
		c.ClockScale = 1
	}
	return nil
}

// Run runs the scenarios of cfg.Half that cfg.Run selects from all, one after another, and
// returns the report. An error is a configuration it cannot run with (ErrConfig) or a socket
// it cannot bind; the scenarios' verdicts are in the report.
func Run(cfg Config, all []Scenario) (*Report, error) {
	closeGiven := func() {
		for _, c := range []*net.UDPConn{cfg.CREMConn, cfg.DataConn} {
			if c != nil {
				c.Close()
			}
		}
	}
	if err := cfg.fill(); err != nil {
		closeGiven()
		return nil, err
	}
	sel := Select(all, cfg.Half, cfg.Run)
	if len(sel) == 0 {
		closeGiven()
		return nil, cfgErr("no scenario of %s matches --run", cfg.Half)
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(seed, 0xc0f0))
	socks := map[string]*sock{}
	defer func() {
		for _, s := range socks {
			s.close()
		}
	}()
	bind := func(name string, given *net.UDPConn, addr netip.AddrPort) error {
		c := given
		if c == nil {
			var err error
			if c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr)); err != nil {
				return fmt.Errorf("conform: binding %s %v: %w", name, addr, err)
			}
		}
		socks[name] = newSock(name, c)
		return nil
	}
	if err := bind("crem", cfg.CREMConn, cfg.Listen); err != nil {
		closeGiven()
		return nil, err
	}
	if err := bind("data", cfg.DataConn, cfg.DataListen); err != nil {
		return nil, err
	}
	// The socket the RDMA packets go out of: the same address as the CREM socket, any port.
	if err := bind("rdma", nil, netip.AddrPortFrom(cfg.Listen.Addr(), 0)); err != nil {
		return nil, err
	}
	qp := cfg.QPBase
	if qp == 0 {
		qp = 0x1000 + rng.Uint32N(0xe00000)
	}
	nextQP := func() uint32 {
		qp = (qp + 1) & 0xffffff
		if qp < 2 { // QPs 0 and 1 are special (SMI, GSI)
			qp = 2
		}
		return qp
	}
	rep := &Report{Half: cfg.Half, Target: cfg.Target.String()}
	begin := time.Now()
	var extraRx int64 // datagrams the scenarios' own sockets read
	for _, sc := range sel {
		res := runOne(&cfg, sc, rng, socks, nextQP, &extraRx)
		rep.Results = append(rep.Results, res)
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "%-4s %s (%s) %s\n", res.Status, res.Name, res.Duration.Round(time.Millisecond), oneLine(res.Reason))
		}
		if res.Status == Fail && received(socks)+extraRx == 0 {
			rep.Elapsed = time.Since(begin)
			return rep, fmt.Errorf("%w: nothing came from %v during %s (%s)", ErrTargetSilent, cfg.Target, res.Name,
				res.Duration.Round(time.Millisecond))
		}
	}
	rep.Elapsed = time.Since(begin)
	return rep, nil
}

// received is the number of datagrams the runner's sockets read since the run began.
func received(socks map[string]*sock) int64 {
	var n int64
	for _, s := range socks {
		n += s.received.Load()
	}
	return n
}

func runOne(cfg *Config, sc Scenario, rng *rand.Rand, socks map[string]*sock, nextQP func() uint32, extraRx *int64) (res Result) {
	res = Result{Name: sc.Name, Half: sc.Half, Section: sc.Section, Optional: sc.Optional, Status: Pass}
	h := &Harness{cfg: cfg, rng: rng, socks: socks, res: &res, nextQP: nextQP}
	for name := range socks {
		h.flush(name)
	}
	h.start = time.Now()
	h.capt = nil
	defer func() {
		for _, s := range h.extra {
			s.close()
			*extraRx += s.received.Load()
		}
		res.Duration = time.Since(h.start)
		if res.Status == Fail {
			if n := len(h.capt); n > maxCaptured {
				h.capt = h.capt[n-maxCaptured:]
			}
			sort.SliceStable(h.capt, func(i, j int) bool { return h.capt[i].At < h.capt[j].At })
			res.Packets = h.capt
		}
		for _, s := range socks {
			s.mu.Lock()
			if s.dropped > 0 {
				res.Notes = append(res.Notes, fmt.Sprintf("the runner's %s socket dropped %d datagrams (queue full)", s.name, s.dropped))
				s.dropped = 0
			}
			s.mu.Unlock()
		}
	}()
	if sc.Long && !cfg.Long && cfg.ClockScale < 6 {
		res.Status, res.Reason = Skip, "long scenario: run with --long (or a target on a compressed clock, --clock-scale)"
		return res
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(stop); !ok {
					res.Status, res.Reason = Fail, fmt.Sprintf("the scenario stopped: %v", r)
				}
			}
		}()
		sc.Run(h)
	}()
	return res
}
