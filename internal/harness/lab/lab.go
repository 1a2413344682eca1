// Package lab is the engine of `crem lab`: the whole story on one machine. It runs an RDMA
// RC requester and responder (package rc over real UDP sockets on loopback), the impaired
// path between them (netem links driven on real sockets), and for the CREM configurations
// two gateways (package gateway, relay mode) at the ends of the path. Each configuration
// (gbn, tcaeth, crem+gbn, crem+tcaeth) moves the same messages over the same path with the
// same seed; every byte delivered is checked, and the figures of each run are collected.
package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/gateway"
	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/rc"
	"github.com/crem-project/crem/rc/udp"
)

// Configurations are the runs of the lab, in order.
var Configurations = []string{"gbn", "tcaeth", "crem+gbn", "crem+tcaeth"}

// ReporterConfiguration is the run Options.Reporter adds after Configurations: crem+tcaeth
// with a path reporter in the path. "+reporter" may follow any CREM configuration in Runs.
const ReporterConfiguration = "crem+tcaeth+reporter"

// Options describe the lab. Zero values take the defaults of `crem lab`.
type Options struct {
	RTT      time.Duration  // default 20 ms
	Loss     netem.LossSpec // each direction, seeds Seed*2+1 and Seed*2+2
	Rate     int64          // path rate, bit/s (default 500 Mbit/s)
	Seed     uint64
	Messages int    // default 16
	Size     int    // default 4 MiB
	Op       string // write (default), send or read
	MTU      int    // RDMA MTU, default 4096
	// K and M are the gateways' block size and first repair count (defaults 32 and 4).
	K, M int
	// Rule is the gateways' policy.rule: "cost" (the lab's default, P5-P14) or "draft" (the
	// gateway's default, P14).
	Rule string
	// Runs selects configurations (default: all four, and ReporterConfiguration with Reporter).
	Runs []string
	// Reporter adds ReporterConfiguration to the default runs: the path becomes an on-path node
	// with a path reporter (PATH_REPORT method 3, node-local drops) that tells the flow's CSF of
	// every RoCEv2 datagram it drops, and the gateways accept its reports (C14, C16).
	Reporter bool
	// ReportHold delays each drop before the reporter hears of it: 0 (the default) reports at
	// once, as a node on a real path does (the reporter's own 50 us aggregation only; a CSF
	// keeps the drops named while their block is open for its close, C16); negative holds each
	// drop one block's span (K packets at a QP's rate), so that its block has closed at the CSF
	// before the report arrives; positive holds it that long.
	ReportHold time.Duration
	// Pcap, if set, receives the impaired path of every run as one classic pcap file.
	Pcap io.Writer
	// Progress, if set, is called as messages complete.
	Progress func(run string, done, total int)
	// Logger receives the gateways' logs (default: discarded).
	Logger *slog.Logger
	// CREMPort is the CREM port of the gateways (0: ReservePorts chooses one), unless Ports
	// holds it already.
	CREMPort int
	// Ports, if set, is the CREM port already bound on the lab's addresses (ReservePorts); the
	// caller closes it after the lab.
	Ports *Ports
	// Timeout bounds each run (default 2 minutes).
	Timeout time.Duration
	// QPs is the number of queue pairs between the requester and the responder host that
	// carry a run's messages, message i over QP i mod QPs (default DefaultQPs; at most
	// Messages and MaxQPs). Each has its own initial PSNs, drawn over the 24-bit space from the
	// seed, and paces at its share of the RDMA rate.
	QPs int
	// Duration, if set, makes each run a soak: its gateways, path and queue pairs stay for the
	// whole duration, and its QPs post messages one after another until it ends (Messages is
	// then ignored); the run ends when the messages in flight have completed, and Timeout bounds
	// that wait. Every StatsInterval it reports an Interval, and it is judged at the end
	// (SoakVerdict).
	Duration time.Duration
	// StatsInterval is a soak's interval between reports (default one minute, or a sixth of a
	// duration shorter than two minutes).
	StatsInterval time.Duration
	// Report, if set, receives each Interval of a soak as it is taken.
	Report func(run string, iv Interval)
	// RetryCount is the QPs' timeouts without progress before they give up (rc.Config; default
	// 7, IBTA's retry_cnt and RULINGS T7).
	RetryCount int
}

// DefaultQPs is the lab's number of queue pairs: several between the same two hosts, as NCCL
// and storage clients open them (protocol notes G30).
const DefaultQPs = 4

// MaxQPs bounds Options.QPs.
const MaxQPs = 64

// Run is one configuration's outcome; the JSON names are `crem lab --json`'s.
type Run struct {
	Name       string  `json:"name"`
	Verified   bool    `json:"verified"`
	Messages   int     `json:"messages"`
	Bytes      int64   `json:"bytes"`
	MeanS      float64 `json:"mean_s"`
	MaxS       float64 `json:"max_s"`
	GoodputBps float64 `json:"goodput_bps"`
	Lost       uint64  `json:"lost"`
	Restored   uint64  `json:"restored"`
	CodedRetx  uint64  `json:"coded_retx"`
	RDMARetx   uint64  `json:"rdma_retx"`
	Overhead   float64 `json:"overhead"`
	Error      string  `json:"error,omitempty"`
	// GoodputBps is the run's message octets over its time when it verified, and 0 when it did
	// not (failed, with Error, or interrupted): a run that did not deliver its messages has no
	// goodput to report. MessagesVerified counts the messages that completed and were checked.
	MessagesVerified int `json:"messages_verified"`
	// Interrupted says that the lab was cancelled (SIGINT, SIGTERM) during this run: its
	// figures are those until then, Verified is false and Error is empty (nothing failed), and
	// Cancelled counts the messages in flight at the cancel (posted, not completed), which are
	// neither lost nor corrupted.
	Interrupted bool `json:"interrupted,omitempty"`
	Cancelled   int  `json:"cancelled,omitempty"`
	// DataLost counts the losses on the path of the packets that must arrive (SEND and WRITE
	// packets, READ responses; Lost counts every datagram, ACKs and CREM messages too), and
	// ResentDelivered the retransmissions of such packets that the path delivered after it had
	// delivered the packet once already (go-back-N resends what follows a loss; a retransmission
	// racing CREM's restoration). The verdict balances DataLost against Restored + RDMARetx.
	DataLost        uint64 `json:"data_lost"`
	ResentDelivered uint64 `json:"resent_delivered"`
	// RepairRequests are the REPAIR_REQUESTs the CSFs received, and RequestsUnknownBlock those
	// naming a block a CSF no longer held (released by an ACK, or evicted) and so could not
	// answer.
	RepairRequests       uint64 `json:"repair_requests"`
	RequestsUnknownBlock uint64 `json:"requests_unknown_block"`
	// RDMATimeouts counts the QPs' timer expiries that retransmitted: on these paths a few tail
	// losses' worth, unless the machine starved the lab's timers of CPU.
	RDMATimeouts uint64 `json:"rdma_timeouts"`
	// PathReports are the PATH_REPORTs the CSFs of both gateways accepted, ReportRepair the
	// ordinary repair symbols they sent because a path report named dropped PSNs (C16): 0 in a
	// run without a reporter. Reporter is what the run's reporter did.
	PathReports  uint64       `json:"path_reports"`
	ReportRepair uint64       `json:"report_repair"`
	Reporter     *ReporterRun `json:"reporter,omitempty"`
	// QPs and PerQP describe the queue pairs; the figures above are the run's, over all of them.
	QPs   int     `json:"qps"`
	PerQP []QPRun `json:"per_qp"`
	// A soak's (Options.Duration): its duration, its reports, and its verdict. Messages and
	// Bytes are then those it posted.
	DurationS float64      `json:"duration_s,omitempty"`
	Intervals []Interval   `json:"intervals,omitempty"`
	Soak      *SoakVerdict `json:"soak,omitempty"`
}

// QPRun is one queue pair's part of a run.
type QPRun struct {
	// KM is the k and m the QP's flow used over time, from its CSF (protocol notes P11): absent
	// without CREM.
	KM           []csf.KMPoint `json:"km,omitempty"`
	QP           int           `json:"qp"`
	RequesterQPN uint32        `json:"requester_qpn"`
	ResponderQPN uint32        `json:"responder_qpn"`
	InitialPSN   uint32        `json:"initial_psn"` // the requester's first PSN
	Messages     int           `json:"messages"`
	Verified     bool          `json:"verified"` // every message of this QP completed and checked
	MeanS        float64       `json:"mean_s"`
	MaxS         float64       `json:"max_s"`
	// Lost counts the RoCEv2 datagrams of this QP the path dropped, both directions.
	Lost uint64 `json:"lost"`
	// RestoredOnly counts the packets of this QP (SEND and WRITE packets, READ responses) that
	// the path lost every time they were sent, so that they arrived only because a CRF restored
	// them: a lower bound of CREM's restorations on this QP, measured on the path.
	RestoredOnly uint64 `json:"restored_only"`
	RDMARetx     uint64 `json:"rdma_retx"`
}

// Result is the whole lab.
type Result struct {
	CREMPort int   `json:"crem_port"`
	Runs     []Run `json:"runs"`
	// Interrupted says that the lab was cancelled (SIGINT, SIGTERM) before its last run ended;
	// NotRun names the configurations it did not start.
	Interrupted bool     `json:"interrupted,omitempty"`
	NotRun      []string `json:"not_run,omitempty"`
	// Signal names what interrupted it (SIGINT, SIGTERM), where the caller knows (crem lab).
	Signal string `json:"signal,omitempty"`
	// Verdict is what the lab proved (see Judge); set by Lab.
	Verdict *Verdict `json:"verdict,omitempty"`
}

// Verified reports whether every run verified.
func (r Result) Verified() bool {
	for _, x := range r.Runs {
		if !x.Verified {
			return false
		}
	}
	return len(r.Runs) > 0
}

// Passed reports whether every run verified and every soak passed its verdict.
func (r Result) Passed() bool {
	for _, x := range r.Runs {
		if x.Soak != nil && !x.Soak.Pass {
			return false
		}
	}
	return r.Verified()
}

func (o *Options) defaults() error {
	if o.RTT == 0 {
		o.RTT = 20 * time.Millisecond
	}
	if o.RTT < 0 {
		return fmt.Errorf("lab: rtt %v is negative", o.RTT)
	}
	if o.Rate == 0 {
		o.Rate = 500e6
	}
	if o.Rate < 1e6 {
		return fmt.Errorf("lab: rate %d bit/s: want at least 1 Mbit/s", o.Rate)
	}
	if o.Messages == 0 {
		o.Messages = 16
	}
	if o.Size == 0 {
		o.Size = 4 << 20
	}
	if o.Messages < 1 || o.Size < 1 || o.Size > 1<<30 {
		return fmt.Errorf("lab: %d messages of %d octets: want at least one message of 1 octet to 1 GiB", o.Messages, o.Size)
	}
	if o.Op == "" {
		o.Op = "write"
	}
	switch o.Op {
	case "write", "send", "read":
	default:
		return fmt.Errorf("lab: op %q: want write, send or read", o.Op)
	}
	if o.MTU == 0 {
		o.MTU = 4096
	}
	if !rc.ValidMTU(o.MTU) {
		return fmt.Errorf("lab: MTU %d: want 256, 512, 1024, 2048 or 4096", o.MTU)
	}
	if o.K == 0 {
		o.K = 32
	}
	if o.M == 0 {
		o.M = 4
	}
	if o.Rule == "" {
		o.Rule = string(policy.RuleCost)
	}
	if len(o.Runs) == 0 {
		o.Runs = Configurations
		if o.Reporter {
			o.Runs = append(append([]string(nil), Configurations...), ReporterConfiguration)
		}
	}
	for _, r := range o.Runs {
		if _, err := parseRun(r); err != nil {
			return err
		}
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.RetryCount < 0 {
		return fmt.Errorf("lab: retry count %d: want 0 (the default, 7) or more", o.RetryCount)
	}
	if o.Duration < 0 || o.StatsInterval < 0 {
		return fmt.Errorf("lab: duration %v, stats interval %v: negative", o.Duration, o.StatsInterval)
	}
	if o.Duration > 0 {
		// A soak's messages never run out: the QPs are not bounded by them.
		if o.QPs == 0 {
			o.QPs = DefaultQPs
		}
		if o.QPs < 1 || o.QPs > MaxQPs {
			return fmt.Errorf("lab: %d queue pairs: want 1 to %d", o.QPs, MaxQPs)
		}
		if o.StatsInterval == 0 {
			o.StatsInterval = time.Minute
			if o.Duration < 2*time.Minute {
				o.StatsInterval = max(o.Duration/6, time.Millisecond)
			}
		}
		return nil
	}
	if o.QPs == 0 {
		o.QPs = min(DefaultQPs, o.Messages)
	}
	if o.QPs < 1 || o.QPs > MaxQPs || o.QPs > o.Messages {
		return fmt.Errorf("lab: %d queue pairs for %d messages: want 1 to %d, and no more than the messages", o.QPs, o.Messages, MaxQPs)
	}
	return nil
}

// runKind is what a configuration's name says.
type runKind struct {
	crem     bool
	mode     rc.Mode
	reporter bool // a path reporter in the path ("+reporter", CREM runs only)
}

func parseRun(name string) (runKind, error) {
	base, reporter := strings.CutSuffix(name, "+reporter")
	var k runKind
	switch base {
	case "gbn":
		k = runKind{mode: rc.ModeGBN}
	case "tcaeth":
		k = runKind{mode: rc.ModeTCAETH}
	case "crem+gbn":
		k = runKind{crem: true, mode: rc.ModeGBN}
	case "crem+tcaeth":
		k = runKind{crem: true, mode: rc.ModeTCAETH}
	default:
		return k, fmt.Errorf("lab: configuration %q: want gbn, tcaeth, crem+gbn, crem+tcaeth or %s", name, ReporterConfiguration)
	}
	if reporter && !k.crem {
		return k, fmt.Errorf("lab: configuration %q: a path reporter needs CREM (crem+gbn+reporter or %s)", name, ReporterConfiguration)
	}
	k.reporter = reporter
	return k, nil
}

// Loopback addresses of the lab: the requester's side, the responder's side, and the path's
// two ends. Linux answers on all of 127.0.0.0/8.
var (
	addrA     = netip.MustParseAddr("127.0.0.1") // requester and gateway A
	addrB     = netip.MustParseAddr("127.0.0.2") // responder and gateway B
	addrPathA = netip.MustParseAddr("127.0.0.3") // the path's end facing A
	addrPathB = netip.MustParseAddr("127.0.0.4") // the path's end facing B
)

// PickCREMPort finds a port in the Dynamic Ports range (49152-65535) free on the four lab
// addresses: every CREM message of the lab is addressed to it (draft, CREM port). It lets the
// port go again: another socket may take it before the caller binds it. The lab itself holds
// its port with ReservePorts.
func PickCREMPort(seed uint64) (int, error) {
	r := rand.New(rand.NewPCG(seed, uint64(time.Now().UnixNano())))
	for range 200 {
		port := 49152 + r.IntN(65536-49152)
		ok := true
		var held []*net.UDPConn
		for _, a := range []netip.Addr{addrA, addrB, addrPathA, addrPathB} {
			c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, uint16(port))))
			if err != nil {
				ok = false
				break
			}
			held = append(held, c)
		}
		for _, c := range held {
			c.Close()
		}
		if ok {
			return port, nil
		}
	}
	return 0, errors.New("lab: no free CREM port on 127.0.0.1-4")
}

// Lab runs every configuration and returns their figures. The error is about setting up;
// a run that fails to verify says so in its Run.
func Lab(ctx context.Context, o Options) (Result, error) {
	if err := o.defaults(); err != nil {
		return Result{}, err
	}
	ports := o.Ports
	if ports == nil {
		var err error
		if ports, err = ReservePorts(o.CREMPort); err != nil {
			return Result{}, err
		}
		defer ports.Close()
	}
	port := ports.Port()
	var err error
	res := Result{CREMPort: port}
	var pc *pathPcap
	if o.Pcap != nil {
		if pc, err = newPathPcap(o.Pcap); err != nil {
			return res, err
		}
	}
	for i, name := range o.Runs {
		if ctx.Err() != nil {
			res.Interrupted, res.NotRun = true, append([]string(nil), o.Runs[i:]...)
			break
		}
		r, err := runOne(ctx, &o, name, ports, pc)
		if err != nil {
			r.Name, r.Error = name, err.Error()
			if ctx.Err() != nil {
				r.Interrupted, r.Error = true, ""
			}
		}
		res.Runs = append(res.Runs, r)
		res.Interrupted = res.Interrupted || r.Interrupted
	}
	v := Judge(res)
	res.Verdict = &v
	if pc != nil {
		if err := pc.flush(); err != nil {
			return res, fmt.Errorf("lab: pcap: %w", err)
		}
	}
	return res, nil
}

// pathConfigs builds the two directions of the path.
func pathConfigs(o *Options) (ab, ba netem.Config) {
	mk := func(seed uint64) netem.Config {
		return netem.Config{Rate: o.Rate, Delay: o.RTT / 2, QueuePackets: 100000, Loss: o.Loss.New(seed), Seed: seed}
	}
	return mk(o.Seed*2 + 1), mk(o.Seed*2 + 2)
}

// labBurstGap is the gateways' burst gap (C5): the RDMA senders' pacer sends in bursts of up
// to 1 ms on real sockets, and a block closes on a longer gap only, so that blocks fill up to k.
const labBurstGap = 2 * time.Millisecond

// rcRate is the RDMA senders' preset rate: 80 percent of the path, leaving room for the
// ACKs and CREM's repair (every configuration uses the same rate).
func rcRate(o *Options) int64 { return o.Rate * 8 / 10 }

// qpNumbers are the QPNs of pair q: the requester's and the responder's.
func qpNumbers(q int) (a, b uint32) { return 0x111 + uint32(q)<<12, 0x222 + uint32(q)<<12 }

// initialPSNs are the first PSNs of pair q, the requester's and the responder's, drawn over the
// whole 24-bit space from the seed, as real deployments draw them.
func initialPSNs(seed uint64, q int) (a, b psn.PSN) {
	return psn.Of(uint32(mix(seed, 0x4c50_0000+uint64(q)) >> 40)), psn.Of(uint32(mix(seed, 0x4c50_8000+uint64(q)) >> 40))
}

// runOne runs one configuration of the lab, stage by stage: the path, the hosts, the QPs'
// configurations, the gateways (CREM runs), the QPs and their workload, the transfer (and a
// soak's intervals), then the run's figures from the workload, the gateways and the path.
func runOne(ctx context.Context, o *Options, name string, ports *Ports, pc *pathPcap) (Run, error) {
	run := Run{Name: name, Messages: o.Messages, Bytes: int64(o.Messages) * int64(o.Size), QPs: o.QPs}
	kind, _ := parseRun(name)
	lr := &labRun{o: o, name: name, kind: kind, port: ports.Port(), ports: ports,
		rate: rcRate(o) / int64(o.QPs)} // every QP paces at its share of the RDMA rate: they share the path (G30)
	p, err := lr.openPath(pc)
	if err != nil {
		return run, err
	}
	defer p.close()
	if p.rep != nil {
		// The figures are taken once the path has stopped counting (pathFigures); this only
		// makes sure the reporter's goroutine and socket end with the run.
		defer p.rep.close()
	}
	if err := lr.openHosts(); err != nil {
		return run, err
	}
	defer lr.hostA.Close()
	defer lr.hostB.Close()
	lr.qpConfigs()

	lr.gctx, lr.gcancel = context.WithCancel(context.Background())
	defer lr.releaseGateways()
	if err := lr.startGateways(); err != nil {
		return run, err
	}
	p.run()

	defer lr.disconnect()
	if err := lr.connect(); err != nil {
		return run, err
	}
	timeout := o.Timeout
	if lr.w.soak {
		timeout += o.Duration
		stop := lr.stalls.run()
		defer stop()
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	elapsed, endedEarly, interrupted := lr.transfer(ctx, rctx, &run)
	lr.verdict(&run, elapsed, interrupted)
	if lr.w.soak {
		v := judgeSoak(&run, run.Intervals, lr.closes, endedEarly)
		run.Soak = &v
	}
	if run.Verified {
		run.GoodputBps = float64(run.Bytes) * 8 / elapsed.Seconds()
	}
	lr.stopGateways()
	lr.gatewayFigures(&run)
	lr.pathFigures(&run)
	return run, nil
}

// labRun is one run of runOne while it runs: what each stage sets up for the next.
type labRun struct {
	o       *Options
	name    string
	kind    runKind
	port    int // the CREM port
	ports   *Ports
	rate    int64 // each QP's pace
	p       *path
	hostA   *udp.Host // the requesters'
	hostB   *udp.Host // the responders'
	cfgs    [][2]rc.Config
	toA     netip.AddrPort // where A's QPs send: into the path directly, or to their gateway
	toB     netip.AddrPort
	gws     []*gateway.Gateway
	gwWG    sync.WaitGroup
	gctx    context.Context
	gcancel context.CancelFunc
	pairs   [][2]*rc.QP
	w       *workload
	conns   [][2]*udp.Conn
	start   time.Time
	closes  uint64 // the CLOSEs so far (sample)
	stalls  stallMeter
}

// openPath opens the path between the hosts and, for a run with one, its path reporter.
func (lr *labRun) openPath(pc *pathPcap) (*path, error) {
	o := lr.o
	ab, ba := pathConfigs(o)
	// The path's two ends listen on the CREM port: every CREM message of the lab is addressed
	// to it (the relayed RoCEv2 datagrams share the sockets, so their order is kept).
	p, err := newPath(ab, ba, pc, lr.ports.path)
	if err != nil {
		return nil, err
	}
	if lr.kind.reporter {
		if p.rep, err = newPathReporter(lr.port, p.start, reportHold(o, lr.rate)); err != nil {
			p.close()
			return nil, err
		}
	}
	if o.Duration > 0 {
		// A QP has at most its slots' messages in flight: twice their PSNs bound what the path
		// must remember of a soak's PSNs.
		p.window = uint32(2*slotsPerQP(o)*((o.Size+o.MTU-1)/o.MTU+1) + 1024)
	}
	lr.p = p
	return p, nil
}

// openHosts opens the requesters' and the responders' sockets.
func (lr *labRun) openHosts() error {
	hostA, err := udp.Listen(netip.AddrPortFrom(addrA, 0).String(), udp.Options{})
	if err != nil {
		return fmt.Errorf("lab: requester socket: %w", err)
	}
	hostB, err := udp.Listen(netip.AddrPortFrom(addrB, 0).String(), udp.Options{})
	if err != nil {
		hostA.Close()
		return fmt.Errorf("lab: responder socket: %w", err)
	}
	lr.hostA, lr.hostB = hostA, hostB
	return nil
}

// qpConfigs sets the configurations of each QP pair, the requester's and the responder's.
func (lr *labRun) qpConfigs() {
	o := lr.o
	for q := range o.QPs {
		qpA, qpB := qpNumbers(q)
		psnA, psnB := initialPSNs(o.Seed, q)
		cfgA := rc.Config{QPN: qpA, RemoteQPN: qpB, SendPSN: psnA, RecvPSN: psnB,
			MTU: o.MTU, Mode: lr.kind.mode, Rate: lr.rate, RTT: o.RTT + time.Millisecond, Burst: time.Millisecond, RetryCount: o.RetryCount,
			LocalAddr: addrA, RemoteAddr: addrB, LocalPort: lr.hostA.LocalAddr().Port(), RemotePort: lr.hostB.LocalAddr().Port()}
		cfgB := cfgA
		cfgB.QPN, cfgB.RemoteQPN, cfgB.SendPSN, cfgB.RecvPSN = qpB, qpA, cfgA.RecvPSN, cfgA.SendPSN
		cfgB.LocalAddr, cfgB.RemoteAddr, cfgB.LocalPort, cfgB.RemotePort = addrB, addrA, cfgA.RemotePort, cfgA.LocalPort
		cfgB.NotifyWrites = true
		if lr.kind.crem && lr.kind.mode != rc.ModeGBN {
			// T5: where CREM protects the flow, the reorder window covers CREM's restoration
			// delay, a block's span plus the repair's flight, so the RDMA sender does not race it:
			// the tcaeth loss decision of WRITE and SEND, and READ responses (protocol notes R22).
			// gbn keeps IBTA's behaviour and has no window. A block is one QP's packets, at its
			// share of the rate.
			w := blockSpan(o, lr.rate) + 2*max(time.Millisecond, o.RTT/8)
			cfgA.ReorderWindow, cfgB.ReorderWindow = w, w
			if o.Rule == string(policy.RuleCost) {
				// The cost rule repairs only the blocks within one recovery round of a message's
				// end (P9): the packets before them have no repair to wait for (R38).
				tail := policy.RoundCost(o.RTT) + w
				cfgA.ReorderTail, cfgB.ReorderTail = tail, tail
			}
		}
		lr.cfgs = append(lr.cfgs, [2]rc.Config{cfgA, cfgB})
	}
}

// startGateways starts a CREM run's two gateways and routes the path through them; without
// CREM the path carries the hosts' datagrams directly.
func (lr *labRun) startGateways() error {
	p := lr.p
	lr.toA, lr.toB = p.addr[0], p.addr[1]
	if !lr.kind.crem {
		p.def = [2]netip.AddrPort{lr.hostB.LocalAddr(), lr.hostA.LocalAddr()}
		p.roce = [2]netip.AddrPort{lr.hostA.LocalAddr(), lr.hostB.LocalAddr()}
		return nil
	}
	for i, c := range lr.gatewayConfigs() {
		lr.ports.release(i) // for the instant in which the gateway binds it
		g, err := gateway.New(c, gateway.Options{Logger: lr.o.Logger, Seed: lr.o.Seed*16 + uint64(i) + 1})
		if err != nil {
			return fmt.Errorf("lab: gateway %c: %w", 'A'+i, err)
		}
		lr.gws = append(lr.gws, g)
		lr.gwWG.Add(1)
		go func() { defer lr.gwWG.Done(); g.Run(lr.gctx) }()
	}
	gws := lr.gws
	for i := range 2 {
		p.route(i, gws[i].CREMAddr(), gws[1-i].CREMAddr())
		p.route(i, gws[i].WANAddr(), gws[1-i].WANAddr())
		p.def[i] = gws[1-i].WANAddr()
		p.roce[i] = gws[i].WANAddr()
	}
	lr.toA, lr.toB = gws[0].RelayAddr(), gws[1].RelayAddr()
	return nil
}

// gatewayConfigs are the configurations of gateway A and gateway B.
func (lr *labRun) gatewayConfigs() []gateway.Config {
	o, p, hostA, hostB := lr.o, lr.p, lr.hostA, lr.hostB
	ordered := lr.kind.mode == rc.ModeGBN
	// One rule per direction covers every QP between the two hosts, as a deployment
	// configures it: the gateways tell the flows apart by destination QP, and which reverse
	// QP belongs to which flow is theirs to learn (G30).
	rules := []gateway.ProtectRule{
		{Src: gateway.HostPrefix(addrA), Dst: gateway.HostPrefix(addrB), SrcPort: hostA.LocalAddr().Port(), Ordered: &ordered},
		{Src: gateway.HostPrefix(addrB), Dst: gateway.HostPrefix(addrA), SrcPort: hostB.LocalAddr().Port(), Ordered: &ordered},
	}
	// The RDMA senders' pacer sends in bursts of up to 1 ms on real sockets: a block
	// closes on a longer gap only (C5), so that blocks fill up to k.
	burstGap := labBurstGap
	var reorder time.Duration
	if ordered {
		// A go-back-N receiver NAKs the first packet after a gap: the CRF's hold (C7 a)
		// also waits for one coded retransmission round, and still ends well before the
		// requester's retransmission timeout (3 SRTT).
		reorder = 3 * o.RTT / 2
	}
	// With a reporter in the path, the CSFs accept PATH_REPORT from its address only (C14).
	var reporters []netip.Addr
	if p.rep != nil {
		reporters = []netip.Addr{p.rep.addr().Addr()}
	}
	mkcfg := func(self, other netip.Addr, pathSelf netip.AddrPort, host *udp.Host, pathData netip.AddrPort) gateway.Config {
		return gateway.Config{CREMAddress: netip.AddrPortFrom(self, uint16(lr.port)), Peer: pathSelf,
			Mode: gateway.ModeRelay, Shards: 1, Protect: rules,
			Relay: gateway.RelayConfig{Listen: netip.AddrPortFrom(self, 0), Target: host.LocalAddr(),
				WANListen: netip.AddrPortFrom(self, 0), PeerData: pathData,
				LocalEndpoint: self, RemoteEndpoint: other},
			Policy: gateway.PolicyConfig{K: gateway.Opt(o.K), M: gateway.Opt(o.M), MTU: gateway.Opt(o.MTU), InitialRTT: gateway.Dur(o.RTT + time.Millisecond),
				Rule: policy.Rule(o.Rule), FlowRate: gateway.Rate(lr.rate),
				MaxOpenBlocks: gateway.Opt(maxOpen(o, lr.rate)), BurstGap: gateway.Dur(burstGap), Reorder: gateway.Dur(reorder)},
			Reporters: reporters}
	}
	return []gateway.Config{
		mkcfg(addrA, addrB, p.addr[0], hostA, p.addr[0]),
		mkcfg(addrB, addrA, p.addr[1], hostB, p.addr[1]),
	}
}

// stopGateways stops the gateways and waits for them; again is harmless.
func (lr *labRun) stopGateways() {
	lr.gcancel()
	lr.gwWG.Wait()
}

// releaseGateways stops the gateways, which close their sockets, and takes their ports back
// until the next run.
func (lr *labRun) releaseGateways() {
	lr.stopGateways()
	if lr.kind.crem {
		lr.ports.retake(0)
		lr.ports.retake(1)
	}
}

// connect makes the QPs and their workload and adds them to the hosts (disconnect removes them).
func (lr *labRun) connect() error {
	for q, c := range lr.cfgs {
		qa, err := rc.NewQP(c[0])
		if err != nil {
			return fmt.Errorf("lab: QP %d: requester: %w", q, err)
		}
		qb, err := rc.NewQP(c[1])
		if err != nil {
			return fmt.Errorf("lab: QP %d: responder: %w", q, err)
		}
		lr.pairs = append(lr.pairs, [2]*rc.QP{qa, qb})
	}
	lr.w = newWorkload(lr.o, lr.name, lr.pairs)
	if err := lr.w.prepareResponders(); err != nil {
		return err
	}
	lr.conns = make([][2]*udp.Conn, len(lr.pairs))
	for q, k := range lr.w.qps {
		ca, err := lr.hostA.Add(k.qa, lr.toA, nil, k.requesterDone)
		if err != nil {
			return fmt.Errorf("lab: QP %d: requester: %w", q, err)
		}
		lr.conns[q][0] = ca
		cb, err := lr.hostB.Add(k.qb, lr.toB, nil, k.responderDone)
		if err != nil {
			return fmt.Errorf("lab: QP %d: responder: %w", q, err)
		}
		lr.conns[q][1] = cb
	}
	return nil
}

// disconnect removes the QPs connect added from the hosts, the last added first.
func (lr *labRun) disconnect() {
	for q := len(lr.conns) - 1; q >= 0; q-- {
		if cb := lr.conns[q][1]; cb != nil {
			lr.hostB.Remove(cb)
		}
		if ca := lr.conns[q][0]; ca != nil {
			lr.hostA.Remove(ca)
		}
	}
}

// rdmaRetx is the packets the QPs have retransmitted so far.
func (lr *labRun) rdmaRetx() uint64 {
	var n uint64
	for _, c := range lr.conns {
		for _, x := range c {
			x.Do(func(qp *rc.QP) { n += qp.Stats().RetransmittedPackets })
		}
	}
	return n
}

// sample takes a soak's interval at elapsed since the start, and the CLOSEs so far.
func (lr *labRun) sample(elapsed time.Duration) Interval {
	w := lr.w
	iv := Interval{ElapsedS: elapsed.Seconds()}
	w.mu.Lock()
	iv.Messages, iv.Bad, iv.Posted = w.checked, w.bad, w.posted
	w.mu.Unlock()
	iv.Bytes = int64(iv.Messages) * int64(lr.o.Size)
	for _, g := range lr.gws {
		st := g.Stats()
		iv.Flows += st.Flows
		iv.FlowsOpened += st.Receiver.FlowsOpened
		iv.Closes += st.Sender.CloseSent + st.Sender.CloseReceived + st.Receiver.CloseSent + st.Receiver.CloseReceived
		iv.Restored += st.Receiver.Flows.Restored
	}
	lr.closes = iv.Closes
	iv.Lost = lr.p.lost()
	iv.RDMARetx = lr.rdmaRetx()
	iv.HeapBytes, iv.HeapObjects, iv.Goroutines = memory()
	iv.MaxStallMS = float64(lr.stalls.take()) / 1e6
	return iv
}

// transfer posts the workload and waits for it to end, or for rctx (the run's timeout, or ctx
// cancelled from outside: interrupted); a soak takes its intervals meanwhile. endedEarly says
// why a soak ended before its duration ("": it did not).
func (lr *labRun) transfer(ctx, rctx context.Context, run *Run) (elapsed time.Duration, endedEarly string, interrupted bool) {
	w := lr.w
	lr.start = time.Now()
	w.start = lr.start
	for q, k := range w.qps {
		lr.conns[q][0].Do(func(*rc.QP) { k.postAll() })
	}
	if w.soak {
		endedEarly = lr.soakIntervals(rctx, run)
		w.stop()
	}
	finished := false
	select {
	case <-w.done:
		finished = true
	case <-rctx.Done():
	}
	elapsed = time.Since(lr.start)
	// Cancelled from outside (not the run's own timeout) before the run ended: interrupted.
	interrupted = !finished && ctx.Err() != nil
	if w.soak {
		// The CLOSEs until the last transfer ended, before the gateways stop; a soak that
		// ended early keeps this last look too.
		iv := lr.sample(elapsed)
		if endedEarly != "" {
			lr.report(run, iv)
		}
		run.DurationS = elapsed.Seconds()
	}
	return elapsed, endedEarly, interrupted
}

// soakIntervals takes a soak's intervals until its duration ends, a message fails or rctx
// ends, and says why it ended early ("": it did not).
func (lr *labRun) soakIntervals(rctx context.Context, run *Run) string {
	o, start := lr.o, lr.start
	// One timer: at each interval's end, and the last at the duration's.
	end, next := o.Duration, o.StatsInterval // since start
	t := time.NewTimer(min(next, end))
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-lr.w.done: // an error ended it
			return "a message failed"
		case <-rctx.Done():
			return rctx.Err().Error()
		}
		now := time.Since(start)
		lr.report(run, lr.sample(now))
		if now >= end {
			return ""
		}
		// The next one even when this one was late (a busy machine): a line per interval.
		next += o.StatsInterval
		t.Reset(max(min(next, end)-time.Since(start), 0))
	}
}

// report keeps a soak's interval and reports it.
func (lr *labRun) report(run *Run, iv Interval) {
	run.Intervals = append(run.Intervals, iv)
	if lr.o.Report != nil {
		lr.o.Report(lr.name, iv)
	}
}

// verdict sets the run's verification and the figures of the workload and its QPs.
func (lr *labRun) verdict(run *Run, elapsed time.Duration, interrupted bool) {
	o, w := lr.o, lr.w
	stats := make([][2]rc.Stats, len(lr.pairs))
	for q, c := range lr.conns {
		c[0].Do(func(x *rc.QP) { stats[q][0] = x.Stats() })
		c[1].Do(func(x *rc.QP) { stats[q][1] = x.Stats() })
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	want := w.want()
	run.Verified = w.err == nil && w.completed == want && w.checked == want && w.bad == 0 && want > 0
	run.MessagesVerified = min(w.completed, w.checked)
	if interrupted {
		// Cancelled: what completed was checked, the rest was in flight and is neither lost
		// nor corrupted; a message that failed its check still says so below.
		run.Verified, run.Interrupted, run.Cancelled = false, true, w.posted-w.completed
	}
	if w.err != nil {
		run.Error = w.err.Error()
	} else if w.bad > 0 || !run.Verified && !interrupted {
		run.Error = fmt.Sprintf("%d of %d messages completed, %d checked, %d bad", w.completed, want, w.checked, w.bad)
	}
	if w.soak {
		run.Messages, run.Bytes = want, int64(want)*int64(o.Size)
	}
	run.MeanS, run.MaxS = w.durations.meanMax()
	for q, k := range w.qps {
		n := k.n
		if w.soak {
			n = k.posted
		}
		r := QPRun{QP: q, RequesterQPN: lr.cfgs[q][0].QPN, ResponderQPN: lr.cfgs[q][1].QPN, InitialPSN: uint32(lr.cfgs[q][0].SendPSN),
			Messages: n, Verified: w.err == nil && k.completed == n && k.checked == n && k.bad == 0,
			RDMARetx: stats[q][0].RetransmittedPackets + stats[q][1].RetransmittedPackets}
		r.MeanS, r.MaxS = k.durations.meanMax()
		run.PerQP = append(run.PerQP, r)
		run.RDMARetx += r.RDMARetx
		run.RDMATimeouts += stats[q][0].Timeouts + stats[q][1].Timeouts
	}
}

// gatewayFigures adds the stopped gateways' counters to the run.
func (lr *labRun) gatewayFigures(run *Run) {
	for _, g := range lr.gws {
		st := g.Stats()
		run.Restored += st.Receiver.Flows.Restored
		run.CodedRetx += st.Sender.RetxSent
		run.RepairRequests += st.Sender.RequestsReceived
		run.RequestsUnknownBlock += st.Sender.RequestsUnknownBlock
		run.PathReports += st.Sender.PathReports
		run.ReportRepair += st.Sender.ExtraSent
	}
	if lr.kind.crem {
		// P11: the codes each flow's CSF used over time (gateway A's CSFs protect the WRITEs to
		// B's QPs).
		for q := range run.PerQP {
			r := &run.PerQP[q]
			if f, ok := lr.gws[0].SenderFlow(flow.Key{Src: addrA.Unmap(), Dst: addrB.Unmap(), DestQP: r.ResponderQPN}); ok {
				r.KM = f.KM
			}
		}
	}
}

// pathFigures ends the path and adds its figures (and its reporter's) to the run.
func (lr *labRun) pathFigures(run *Run) {
	p := lr.p
	ps, figs := p.end()
	if p.rep != nil {
		// The path counts no drop after end: the reporter's figures are the run's.
		r := p.rep.close()
		for _, g := range lr.gws {
			st := g.Stats()
			r.Rejected += st.Sender.PathReportsRejected
			r.PSNs += st.Sender.PathReportDrops
		}
		if taken := run.PathReports + r.Rejected; r.Sent > taken {
			r.Unclaimed = r.Sent - taken
		}
		run.Reporter = &r
	}
	for q := range run.PerQP {
		r := &run.PerQP[q]
		for _, qpn := range []uint32{r.RequesterQPN, r.ResponderQPN} {
			r.Lost += figs[qpn].lost
			r.RestoredOnly += figs[qpn].restoredOnly
			run.DataLost += figs[qpn].dataLost
			run.ResentDelivered += figs[qpn].resent
		}
	}
	var carried uint64
	for _, s := range ps {
		run.Lost += s.DroppedLoss + s.DroppedOverflow
		carried += s.SentBytes
	}
	run.Overhead = float64(carried) / float64(run.Bytes)
}

// reportHold is the reporter's hold of a run (Options.ReportHold).
func reportHold(o *Options, rate int64) time.Duration {
	if o.ReportHold < 0 {
		return blockSpan(o, rate)
	}
	return o.ReportHold
}

// blockSpan is the time one QP's block of K packets takes at its rate.
func blockSpan(o *Options, rate int64) time.Duration {
	return time.Duration(float64(o.K*(o.MTU+64)*8) / float64(rate) * 1e9)
}

// maxOpen sizes the CRF's Max Open Blocks for the path (E14): the blocks one round trip and
// a half carries, at least C15's 64.
func maxOpen(o *Options, rate int64) int {
	perBlock := float64(o.K*(o.MTU+64)*8) / float64(rate)
	n := int(1.5*o.RTT.Seconds()/perBlock) + 8
	return min(max(64, n), 1024)
}
