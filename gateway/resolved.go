package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/units"
)

// Resolved is a configuration as a start runs it: validated, with every default filled in.
// `crem gateway --check-config` prints it (WriteTOML, or encoding/json with these field names).
// Durations are Go duration strings ("10ms"); an empty Reorder follows the flow's RTT.
type Resolved struct {
	CREMAddress string `json:"crem_address"`
	// DomainProtection is ipsec or boundary; empty only for a loopback CREMAddress.
	DomainProtection string `json:"domain_protection"`
	Peer             string `json:"peer"`
	Mode             string `json:"mode"`
	MetricsAddress   string `json:"metrics_address"` // empty: serves nothing
	LogLevel         string `json:"log_level"`
	// Shards is the number of shards a start runs: the configured one, or GOMAXPROCS for 0.
	Shards int `json:"shards"`
	// ShardsPerCore says Shards came from GOMAXPROCS (0 or none in the file).
	ShardsPerCore bool           `json:"shards_per_core"`
	Pcap          string         `json:"pcap"`      // empty: none
	Reporters     []string       `json:"reporters"` // empty: every PATH_REPORT is refused
	Relay         *ResolvedRelay `json:"relay,omitempty"`
	Tun           *ResolvedTun   `json:"tun,omitempty"`
	// Protect holds the rules in order; a file without any has one that matches every flow.
	Protect []ResolvedRule `json:"protect"`
	// ProtectAll says the file has no rule: every RoCEv2 flow is protected.
	ProtectAll bool           `json:"protect_all"`
	Policy     ResolvedPolicy `json:"policy"`
	// Warnings name what is valid but will likely not do what was meant.
	Warnings []string `json:"warnings"`
}

// ResolvedRelay is the relay data path as it runs.
type ResolvedRelay struct {
	Listen         string `json:"listen"`
	Target         string `json:"target"`
	WANListen      string `json:"wan_listen"`
	PeerData       string `json:"peer_data"`
	LocalEndpoint  string `json:"local_endpoint"`
	RemoteEndpoint string `json:"remote_endpoint"`
	Offload        bool   `json:"offload"`
}

// ResolvedTun is the TUN data path as it runs.
type ResolvedTun struct {
	Name          string   `json:"name"`
	LocalPrefixes []string `json:"local_prefixes"`
	Mark          int      `json:"mark"`
	Verify        string   `json:"verify"`
	Offload       bool     `json:"offload"`
	Write         string   `json:"write"`
}

// ResolvedRule is one protect rule; empty Src and Dst, and zero SrcPort and QP, match any.
// ReverseQP 0 is learned.
type ResolvedRule struct {
	Src       string `json:"src"`
	Dst       string `json:"dst"`
	SrcPort   int    `json:"src_port"`
	QP        int    `json:"qp"`
	Ordered   bool   `json:"ordered"`
	ReverseQP int    `json:"reverse_qp"`
}

// ResolvedPolicy is the policy of both engines as they run.
type ResolvedPolicy struct {
	K              int     `json:"k"`
	M              int     `json:"m"`
	Adapt          bool    `json:"adapt"`
	Epsilon        float64 `json:"epsilon"`
	Rho            float64 `json:"rho"`
	RepairFraction float64 `json:"repair_fraction"`
	MaxOpenBlocks  int     `json:"max_open_blocks"`
	MaxK           int     `json:"max_k"`
	MaxM           int     `json:"max_m"`
	MTU            int     `json:"rdma_mtu"`
	InitialRTT     string  `json:"initial_rtt"`
	HelloHoldOff   string  `json:"hello_hold_off"`
	Idle           string  `json:"idle_timeout"`
	Reorder        string  `json:"reorder"` // empty: max(1ms, SRTT/8), per flow
	BurstGap       string  `json:"burst_gap"`
	Rule           string  `json:"rule"`
	FlowRate       string  `json:"flow_rate"` // empty: measured
	RepairCompetes bool    `json:"repair_competes"`
}

// defaultBurstGap is the CSF's floor of the burst gap when the configuration sets none.
const defaultBurstGap = 50 * time.Microsecond

// Resolve validates the configuration as a start does, without opening a socket or the TUN
// device, and returns every field with the value the gateway runs with. It also builds the
// engines a start and a first flow build (a CRF, and a CSF for each protect rule), so that a
// value the engines refuse is an error now (a *ConfigError naming the field where one does)
// rather than a refused flow at run time. It cannot tell whether an address is in use, the TUN
// device may be opened, or the pcap file written.
func (c Config) Resolve() (Resolved, error) {
	r, err := c.resolve()
	if err != nil {
		return Resolved{}, err
	}
	if r.mode == "tun" && runtime.GOOS != "linux" {
		return Resolved{}, configErr("mode tun needs Linux")
	}
	if err := r.checkEngines(); err != nil {
		return Resolved{}, err
	}
	out := Resolved{CREMAddress: r.crem.String(), DomainProtection: c.DomainProtection, Peer: r.peer.String(),
		Mode: r.mode, MetricsAddress: r.metricsAddr, LogLevel: c.LogLevel, Shards: r.shards, Pcap: c.Pcap,
		Reporters: []string{}, ProtectAll: len(c.Protect) == 0, Warnings: []string{}}
	if out.LogLevel == "" {
		out.LogLevel = "info"
	}
	if out.Shards == 0 {
		out.Shards, out.ShardsPerCore = runtime.GOMAXPROCS(0), true
	}
	for _, a := range r.reporters {
		out.Reporters = append(out.Reporters, a.String())
	}
	switch r.mode {
	case "relay":
		out.Relay = &ResolvedRelay{Listen: r.listen.String(), Target: r.target.String(), WANListen: r.wanListen.String(),
			PeerData: r.peerData.String(), LocalEndpoint: r.localEP.String(), RemoteEndpoint: r.remoteEP.String(),
			Offload: r.offload}
	case "tun":
		t := &ResolvedTun{Name: r.tunName, Mark: r.tunMark, Verify: "template", LocalPrefixes: []string{}, Offload: r.tunOffload, Write: "raw"}
		if r.tunDevWrite {
			t.Write = "device"
		}
		if r.tunLogical {
			t.Verify = "logical"
		}
		for _, p := range r.tunLocal {
			t.LocalPrefixes = append(t.LocalPrefixes, p.String())
		}
		out.Tun = t
	}
	for _, ru := range r.rules {
		rr := ResolvedRule{SrcPort: int(ru.srcPort), QP: int(ru.qp), Ordered: ru.ordered, ReverseQP: int(ru.reverseQP)}
		if ru.src.IsValid() {
			rr.Src = ru.src.String()
		}
		if ru.dst.IsValid() {
			rr.Dst = ru.dst.String()
		}
		out.Protect = append(out.Protect, rr)
	}
	if r.mode == "relay" {
		for i, ru := range r.rules {
			if ru.srcPort == 0 {
				which := fmt.Sprintf("protect[%d] has no src_port", i)
				if out.ProtectAll {
					which = "no protect rule gives a src_port"
				}
				out.Warnings = append(out.Warnings, which+": in relay mode the CRF refuses the HELLO of a flow arriving from the peer without one (it checks restored packets under the logical header, C12), and such a flow stays unprotected")
			}
		}
	}
	out.Policy = ResolvedPolicy{K: r.k, M: r.m, Adapt: r.adapt, Epsilon: r.epsilon, Rho: r.rho, RepairFraction: r.repairFrac,
		MaxOpenBlocks: r.maxOpen, MaxK: r.maxK, MaxM: r.maxM, MTU: r.mtu, InitialRTT: durString(r.initialRTT),
		HelloHoldOff: durString(r.holdOff), Idle: durString(r.idle), BurstGap: durString(defaultBurstGap),
		Rule: string(r.rule), RepairCompetes: r.competes}
	if r.flowRate > 0 {
		out.Policy.FlowRate = units.FormatRate(r.flowRate)
	}
	if r.reorder > 0 {
		out.Policy.Reorder = durString(r.reorder)
	}
	if r.burstGap > 0 {
		out.Policy.BurstGap = durString(r.burstGap)
	}
	return out, nil
}

// durString writes a duration as ParseDuration reads it back, in ASCII ("50us", not "50µs").
func durString(d time.Duration) string { return strings.ReplaceAll(d.String(), "µ", "u") }

// checkEngines refuses what resolve lets through but the engines, or the TUN device, would
// refuse at run time; New and Resolve both call it, so a start refuses what --check-config
// refuses.
func (r *resolved) checkEngines() error {
	if r.mode == "tun" && len(r.tunName) > 15 {
		return configErr("tun.name %q: at most 15 characters (IFNAMSIZ)", r.tunName)
	}
	if err := engineLimits(r); err != nil {
		return err
	}
	return probeEngines(r)
}

// engineLimits refuses, naming the field, the values resolve lets through that the CSF of
// every flow would refuse at run time (it would leave each flow unprotected).
func engineLimits(r *resolved) error {
	switch {
	case r.initialRTT <= 0:
		return configErr("policy.initial_rtt %v: want more than 0", r.initialRTT)
	case r.holdOff <= 0:
		return configErr("policy.hello_hold_off %v: want more than 0", r.holdOff)
	case r.idle <= 0:
		return configErr("policy.idle_timeout %v: want more than 0", r.idle)
	case !(r.epsilon > 0 && r.epsilon < 1):
		return configErr("policy.epsilon %v: want a value in (0, 1)", r.epsilon)
	case !(r.rho > 0 && r.rho < 1):
		return configErr("policy.rho %v: want a value in (0, 1)", r.rho)
	case !(r.repairFrac > 0 && r.repairFrac <= 16):
		return configErr("policy.repair_fraction %v: want a value in (0, 16]", r.repairFrac)
	}
	return nil
}

// probeEngines builds, on a node of its own that nothing reaches, the CRF of a start and the
// CSF a first flow of each protect rule gets: what the engines refuse is an error.
func probeEngines(r *resolved) error {
	rec := &errRecorder{}
	n, err := newNode(r, slog.New(rec), 1, 0, nil)
	if err != nil {
		return &ConfigError{fmt.Errorf("policy: %w", err)}
	}
	for i, ru := range r.rules {
		k, port := probeFlow(r, ru)
		rec.err = nil
		// nil with no error: the probe flow matched no rule (a rule no flow can match, such as
		// an IPv6 source with an IPv4 destination), which a start accepts too.
		if n.senderFor(0, k, port) == nil && rec.err != nil {
			return configErr("protect[%d] with [policy]: a flow it covers could not be protected: %v", i, rec.err)
		}
	}
	return nil
}

// probeFlow is a flow that rule ru covers (and that no earlier rule need cover).
func probeFlow(r *resolved, ru rule) (flow.Key, uint16) {
	src, dst := r.localEP, r.remoteEP
	if r.mode == "tun" {
		src = r.tunLocal[0].Addr()
		dst = netip.AddrFrom4([4]byte{192, 0, 2, 1})
	}
	if ru.src.IsValid() {
		src = ru.src.Addr()
	}
	if ru.dst.IsValid() {
		dst = ru.dst.Addr()
	}
	if !src.IsValid() || src.IsUnspecified() {
		src = netip.AddrFrom4([4]byte{192, 0, 2, 2})
	}
	if !dst.IsValid() || dst.IsUnspecified() || src.Is4() != dst.Is4() {
		dst = src.Next()
	}
	qp := ru.qp
	if qp == 0 {
		qp = 1
	}
	port := ru.srcPort
	if port == 0 {
		port = 4791
	}
	return flow.Key{Src: src, Dst: dst, DestQP: qp}, port
}

// errRecorder is a log handler that keeps the err attribute of the last error record.
type errRecorder struct{ err error }

func (h *errRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }
func (h *errRecorder) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *errRecorder) WithGroup(string) slog.Handler                { return h }
func (h *errRecorder) Handle(_ context.Context, rec slog.Record) error {
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			if e, ok := a.Value.Any().(error); ok {
				h.err = e
			} else {
				h.err = errors.New(a.Value.String())
			}
			return false
		}
		return true
	})
	if h.err == nil {
		h.err = errors.New(rec.Message)
	}
	return nil
}

// WriteTOML writes the resolved configuration as a TOML configuration file: every field with
// its effective value, a comment where the value is a default or is derived. Read back, it
// resolves to the same configuration (on a machine of the same GOMAXPROCS).
func (r Resolved) WriteTOML(w io.Writer) error {
	var b strings.Builder
	line := func(key, val, comment string) {
		s := fmt.Sprintf("%-17s = %s", key, val)
		if comment != "" {
			s = fmt.Sprintf("%-40s # %s", s, comment)
		}
		b.WriteString(s + "\n")
	}
	q := strconv.Quote
	cmt := func(cond bool, s string) string {
		if cond {
			return s
		}
		return ""
	}
	for _, w := range r.Warnings {
		b.WriteString("# warning: " + w + "\n")
	}
	line("crem_address", q(r.CREMAddress), "")
	line("domain_protection", q(r.DomainProtection), cmt(r.DomainProtection == "", "none: crem_address is a loopback address"))
	line("peer", q(r.Peer), "")
	line("mode", q(r.Mode), "")
	line("metrics_address", q(r.MetricsAddress), cmt(r.MetricsAddress == "", "serves nothing"))
	line("log_level", q(r.LogLevel), "")
	line("shards", strconv.Itoa(r.Shards), cmt(r.ShardsPerCore, "one per core (GOMAXPROCS): 0 or none in the file"))
	line("pcap", q(r.Pcap), cmt(r.Pcap == "", "none"))
	rep := make([]string, len(r.Reporters))
	for i, a := range r.Reporters {
		rep[i] = q(a)
	}
	line("reporters", "["+strings.Join(rep, ", ")+"]", cmt(len(rep) == 0, "none: every PATH_REPORT is refused"))
	if t := r.Relay; t != nil {
		b.WriteString("\n[relay]\n")
		line("listen", q(t.Listen), "")
		line("target", q(t.Target), "")
		line("wan_listen", q(t.WANListen), "")
		line("peer_data", q(t.PeerData), "")
		line("local_endpoint", q(t.LocalEndpoint), "")
		line("remote_endpoint", q(t.RemoteEndpoint), "")
		line("offload", strconv.FormatBool(t.Offload), cmt(t.Offload, "UDP GSO and GRO where the kernel has them"))
	}
	if t := r.Tun; t != nil {
		b.WriteString("\n[tun]\n")
		line("name", q(t.Name), "")
		ps := make([]string, len(t.LocalPrefixes))
		for i, p := range t.LocalPrefixes {
			ps[i] = q(p)
		}
		line("local_prefixes", "["+strings.Join(ps, ", ")+"]", "")
		line("mark", fmt.Sprintf("%#x", t.Mark), "")
		line("verify", q(t.Verify), "")
		line("offload", fmt.Sprint(t.Offload), cmt(t.Offload, "off where the kernel refuses"))
		line("write", q(t.Write), cmt(t.Write == "raw", "the raw socket with mark"))
	}
	for i, p := range r.Protect {
		b.WriteString("\n[[protect]]")
		if r.ProtectAll && i == 0 {
			b.WriteString("                              # none in the file: every RoCEv2 flow")
		}
		b.WriteString("\n")
		line("src", q(p.Src), cmt(p.Src == "", "any"))
		line("dst", q(p.Dst), cmt(p.Dst == "", "any"))
		line("src_port", strconv.Itoa(p.SrcPort), cmt(p.SrcPort == 0, "any"))
		line("qp", strconv.Itoa(p.QP), cmt(p.QP == 0, "any"))
		line("ordered", strconv.FormatBool(p.Ordered), "")
		line("reverse_qp", strconv.Itoa(p.ReverseQP), cmt(p.ReverseQP == 0, "learned"))
	}
	p := r.Policy
	b.WriteString("\n[policy]\n")
	line("k", strconv.Itoa(p.K), "")
	line("m", strconv.Itoa(p.M), "")
	line("adapt", strconv.FormatBool(p.Adapt), "")
	line("rule", q(p.Rule), "")
	line("flow_rate", q(p.FlowRate), cmt(p.FlowRate == "", "measured"))
	line("repair_competes", strconv.FormatBool(p.RepairCompetes), "")
	line("epsilon", tomlFloat(p.Epsilon), "")
	line("rho", tomlFloat(p.Rho), "")
	line("repair_fraction", tomlFloat(p.RepairFraction), "")
	line("max_open_blocks", strconv.Itoa(p.MaxOpenBlocks), "")
	line("max_k", strconv.Itoa(p.MaxK), "")
	line("max_m", strconv.Itoa(p.MaxM), "")
	line("rdma_mtu", strconv.Itoa(p.MTU), "")
	line("initial_rtt", q(p.InitialRTT), "")
	line("hello_hold_off", q(p.HelloHoldOff), "")
	line("idle_timeout", q(p.Idle), "")
	line("reorder", q(p.Reorder), cmt(p.Reorder == "", "max(1ms, SRTT/8), per flow"))
	line("burst_gap", q(p.BurstGap), "")
	_, err := io.WriteString(w, b.String())
	return err
}

// tomlFloat writes a float as TOML reads it back as a float (1 is 1.0).
func tomlFloat(v float64) string {
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEn") { // n: inf, nan
		s += ".0"
	}
	return s
}
