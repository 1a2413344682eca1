package gateway

import (
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
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
	Datapath      string   `json:"datapath"`
	LAN           string   `json:"lan"` // empty: none (datapath tun)
	WAN           string   `json:"wan"`
	XDPAttach     string   `json:"xdp_attach"`
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

// Resolve validates the configuration as a start does, without opening a socket or the TUN
// device, and returns every field with the value the gateway runs with, read off the
// configuration Validate completes. Validate builds the engines a start and a first flow of
// each protect rule build, so that a value the engines refuse is an error now (a *ConfigError
// naming the key) rather than a refused flow at run time. It cannot tell whether an address is
// in use, the TUN device may be opened, or the pcap file written.
func (c Config) Resolve() (Resolved, error) {
	r, err := c.validate()
	if err != nil {
		return Resolved{}, err
	}
	if r.mode == ModeTun && runtime.GOOS != "linux" {
		return Resolved{}, c.errAt("mode", r.mode, "tun mode needs Linux")
	}
	return r.cfg.resolvedView(len(c.Protect) == 0), nil
}

// resolvedView writes a normalized configuration (Validate's: every optional field set) out
// as Resolved.
func (n Config) resolvedView(protectAll bool) Resolved {
	out := Resolved{CREMAddress: n.CREMAddress.String(), DomainProtection: n.DomainProtection.String(), Peer: n.Peer.String(),
		Mode: n.Mode.String(), LogLevel: n.LogLevel.String(), Shards: n.Shards, Pcap: n.Pcap,
		Reporters: []string{}, ProtectAll: protectAll, Warnings: []string{}}
	if n.MetricsAddress.IsValid() {
		out.MetricsAddress = n.MetricsAddress.String()
	}
	if out.Shards == 0 {
		out.Shards, out.ShardsPerCore = runtime.GOMAXPROCS(0), true
	}
	for _, a := range n.Reporters {
		out.Reporters = append(out.Reporters, a.String())
	}
	switch n.Mode {
	case ModeRelay:
		rl := n.Relay
		out.Relay = &ResolvedRelay{Listen: rl.Listen.String(), Target: rl.Target.String(), WANListen: rl.WANListen.String(),
			PeerData: rl.PeerData.String(), LocalEndpoint: rl.LocalEndpoint.String(), RemoteEndpoint: rl.RemoteEndpoint.String(),
			Offload: *rl.Offload}
	case ModeTun:
		t := n.Tun
		rt := &ResolvedTun{Name: t.Name, Mark: int(*t.Mark), Verify: t.Verify.String(), LocalPrefixes: []string{},
			Offload: *t.Offload, Write: t.Write.String(), Datapath: t.Datapath.String(), LAN: t.LAN, WAN: t.WAN,
			XDPAttach: t.XDPAttach.String()}
		for _, p := range t.LocalPrefixes {
			rt.LocalPrefixes = append(rt.LocalPrefixes, p.String())
		}
		out.Tun = rt
	}
	rules := n.Protect
	if len(rules) == 0 {
		rules = []ProtectRule{{Ordered: orBool(nil, true)}}
	}
	for i, ru := range rules {
		out.Protect = append(out.Protect, ResolvedRule{Src: ru.Src.String(), Dst: ru.Dst.String(), SrcPort: int(ru.SrcPort),
			QP: int(ru.QP), Ordered: *ru.Ordered, ReverseQP: int(ru.ReverseQP)})
		if n.Mode == ModeRelay && ru.SrcPort == 0 {
			which := fmt.Sprintf("protect[%d] has no src_port", i)
			if protectAll {
				which = "no protect rule gives a src_port"
			}
			out.Warnings = append(out.Warnings, which+": in relay mode the CRF refuses the HELLO of a flow arriving from the peer without one (it checks restored packets under the logical header, C12), and such a flow stays unprotected")
		}
	}
	p := n.Policy
	out.Policy = ResolvedPolicy{K: *p.K, M: *p.M, Adapt: *p.Adapt, Epsilon: *p.Epsilon, Rho: *p.Rho, RepairFraction: *p.RepairFraction,
		MaxOpenBlocks: *p.MaxOpenBlocks, MaxK: *p.MaxK, MaxM: *p.MaxM, MTU: *p.MTU, InitialRTT: p.InitialRTT.String(),
		HelloHoldOff: p.HelloHoldOff.String(), Idle: p.Idle.String(), BurstGap: p.BurstGap.String(),
		Rule: string(p.Rule), FlowRate: p.FlowRate.String(), RepairCompetes: *p.RepairCompetes}
	if *p.Reorder > 0 {
		out.Policy.Reorder = p.Reorder.String()
	}
	return out
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
		line("datapath", q(t.Datapath), cmt(t.Datapath == "tun", "the device and policy routing"))
		line("lan", q(t.LAN), cmt(t.LAN == "", "none: the TUN device's data path"))
		line("wan", q(t.WAN), cmt(t.WAN == "", "none: the TUN device's data path"))
		line("xdp_attach", q(t.XDPAttach), cmt(t.XDPAttach == "auto", "the driver's XDP, else generic"))
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
	reorder := p.Reorder
	if reorder == "" {
		reorder = "0s"
	}
	line("reorder", q(reorder), cmt(p.Reorder == "", "max(1ms, SRTT/8), per flow"))
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
