package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/crem-project/crem/internal/fault"
	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/units"
	"github.com/pelletier/go-toml/v2"
)

// Config is the gateway's configuration, as read from its TOML file (docs/gateway.md
// describes every field). Zero values take the defaults noted; CREMAddress has none (C14).
type Config struct {
	// CREMAddress is the address and CREM port the gateway receives CREM messages on
	// (required, no default port: RULINGS C14).
	CREMAddress string `toml:"crem_address"`
	// DomainProtection says how the domain keeps outsiders from the CREM port (draft, Security
	// Considerations): "ipsec" or "boundary". Required unless CREMAddress is a loopback address.
	DomainProtection string `toml:"domain_protection"`
	// Peer is the peer gateway's CREM address: where the CSFs send HELLO.
	Peer string `toml:"peer"`
	// Mode is "relay" (default) or "tun".
	Mode  string      `toml:"mode"`
	Relay RelayConfig `toml:"relay"`
	Tun   TunConfig   `toml:"tun"`
	// Protect lists the flows the gateway protects; empty protects every RoCEv2 flow.
	Protect []ProtectRule `toml:"protect"`
	// Reporters are the path reporters whose PATH_REPORT is accepted (C14).
	Reporters []string     `toml:"reporters"`
	Policy    PolicyConfig `toml:"policy"`
	// MetricsAddress serves /metrics and /healthz over HTTP; empty serves nothing.
	MetricsAddress string `toml:"metrics_address"`
	// LogLevel is debug, info (default), warn or error.
	LogLevel string `toml:"log_level"`
	// Shards is the number of goroutines driving engines (default: GOMAXPROCS).
	Shards int `toml:"shards"`
	// Pcap, if set, records every datagram the gateway receives and sends to this file.
	Pcap string `toml:"pcap"`
	// Faults plants deliberate departures from the draft (package internal/fault), for the
	// mutation check of `crem conform`; never read from a file, zero in a deployment.
	Faults fault.Set `toml:"-"`
}

// RelayConfig is the relay data path.
type RelayConfig struct {
	// Listen receives RoCEv2 datagrams from this side's RDMA endpoints.
	Listen string `toml:"listen"`
	// Target is where RoCEv2 datagrams arriving from the peer are delivered.
	Target string `toml:"target"`
	// WANListen receives RoCEv2 datagrams from the peer gateway.
	WANListen string `toml:"wan_listen"`
	// PeerData is where this gateway relays its endpoints' datagrams (the peer's wan_listen,
	// or the path in front of it).
	PeerData string `toml:"peer_data"`
	// LocalEndpoint and RemoteEndpoint are the logical addresses of the RDMA endpoints on
	// this side and on the peer's side: the addresses of the flow's logical header (C12)
	// and of its HELLO. Default: the addresses of Target and PeerData.
	LocalEndpoint  string `toml:"local_endpoint"`
	RemoteEndpoint string `toml:"remote_endpoint"`
	// Offload moves the relay's datagrams with UDP segmentation offload where the kernel has
	// it (Linux): runs of equal datagrams to one address leave in one send (UDP_SEGMENT, GSO)
	// and the kernel coalesces what arrives (UDP_GRO). Default true; false for a kernel or
	// device that mishandles it (a send failing with EIO turns GSO off by itself).
	Offload *bool `toml:"offload"`
}

// TunConfig is the transparent data path (Linux).
type TunConfig struct {
	// Name is the TUN device (created if absent and brought up; default crem0).
	Name string `toml:"name"`
	// LocalPrefixes are the prefixes of this side's RDMA endpoints: a packet read from the
	// device toward one of them arrives from the peer (CRF), any other leaves toward it (CSF).
	LocalPrefixes []string `toml:"local_prefixes"`
	// Mark is the firewall mark (SO_MARK) of the raw socket that sends packets on, so that
	// policy routing keeps them out of the device (default 0x43).
	Mark int `toml:"mark"`
	// Verify is how the CRF checks restored packets (C12): "template" (default: under the
	// flow's header template, as RoCE NICs compute the ICRC over the real header) or
	// "logical" (under the logical header, for endpoints that seal the ICRC under it, such as
	// the project's own transport over kernel sockets, whose IPv4 Identification the kernel
	// chooses after sealing; needs src_port in the protect rule).
	Verify string `toml:"verify"`
	// Offload opens the device with a virtio_net_hdr and checksum and segmentation offloads
	// (IFF_VNET_HDR, TUNSETOFFLOAD), so that the kernel hands over a GSO or GRO super-packet
	// in one read, which the gateway cuts into its packets (default true). Where the kernel
	// refuses the offloads the device runs without them; false never asks.
	Offload *bool `toml:"offload"`
	// Write is where packets sent on go: "raw" (default), the raw socket with Mark, out by
	// the host's routing as its own packets; or "device", back into the TUN device, as if
	// they had arrived on it, and the kernel forwards them (one write per packet, or, with
	// offloads, per run of a flow's consecutive packets coalesced into one UDP segmentation
	// super-packet). "device" needs routing that sends what arrives on the device onward
	// (rules on iif, say), never back into it.
	Write string `toml:"write"`
}

// ProtectRule selects flows. Empty fields match anything.
type ProtectRule struct {
	Src     string `toml:"src"`      // source prefix, such as 10.1.0.0/16 or an address
	Dst     string `toml:"dst"`      // destination prefix
	SrcPort int    `toml:"src_port"` // the flow's UDP source port; relay mode needs it at the CRF (C12)
	QP      int    `toml:"qp"`       // destination QP
	// Ordered asks the CRF for in-order delivery (C7 a: go-back-N receivers). Default true.
	Ordered *bool `toml:"ordered"`
	// ReverseQP names the QP the RDMA ACKs of the flow are addressed to (the requester's); it
	// needs QP. Without it the gateway learns the reverse QP of each flow (RDMA CM, or PSN
	// correlation), and until it knows, an ACK releases nothing (docs/gateway.md).
	ReverseQP int `toml:"reverse_qp"`
}

// PolicyConfig holds the policy knobs and limits of both engines.
type PolicyConfig struct {
	K              int     `toml:"k"`               // block size (default 32)
	M              int     `toml:"m"`               // first configuration's repair count (default 4)
	Adapt          *bool   `toml:"adapt"`           // RECOMMENDED policy on (default true)
	Epsilon        float64 `toml:"epsilon"`         // default 1e-4
	Rho            float64 `toml:"rho"`             // retransmission budget (default 0.01)
	RepairFraction float64 `toml:"repair_fraction"` // repair budget, share of the source rate (default 0.5)
	MaxOpenBlocks  int     `toml:"max_open_blocks"` // default 64 (C15)
	MaxK           int     `toml:"max_k"`           // default 64
	MaxM           int     `toml:"max_m"`           // default 16
	MTU            int     `toml:"rdma_mtu"`        // RDMA MTU announced in HELLO (default 4096)
	InitialRTT     string  `toml:"initial_rtt"`     // default 10ms (C4)
	HelloHoldOff   string  `toml:"hello_hold_off"`  // default 10s (C3)
	Idle           string  `toml:"idle_timeout"`    // default 30s (C15)
	Reorder        string  `toml:"reorder"`         // CRF reorder allowance (default max(1 ms, SRTT/8))
	BurstGap       string  `toml:"burst_gap"`       // floor of the CSF's burst gap that closes a block (C5; default 50us)
	// Rule is how the CSF chooses k and m: "draft" (default: the draft's binomial target alone,
	// C6) or "cost" (the least expected completion time, protocol notes P5-P9, P14).
	Rule string `toml:"rule"`
	// FlowRate is a flow's sending rate for the cost rule ("125Mbit"); default measured.
	FlowRate string `toml:"flow_rate"`
	// RepairCompetes says whether repair shares the bottleneck with the sources (default true);
	// false makes redundancy free to the cost rule, which is then the draft's (P6).
	RepairCompetes *bool `toml:"repair_competes"`
}

// ConfigError is a configuration the gateway refuses: the command exits with status 2.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return "configuration: " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func configErr(format string, a ...any) error { return &ConfigError{fmt.Errorf(format, a...)} }

// LoadConfig reads a TOML configuration file; unknown fields are errors.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, configErr("%w", err)
	}
	return ParseConfig(b)
}

// ParseConfig reads a TOML configuration; unknown fields are errors.
func ParseConfig(b []byte) (Config, error) {
	var c Config
	d := toml.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		var sm *toml.StrictMissingError
		if errors.As(err, &sm) && len(sm.Errors) > 0 {
			k := sm.Errors[0].Key()
			return Config{}, configErr("unknown field %q (line %d)", strings.Join(k, "."), lineOf(sm.Errors[0]))
		}
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return Config{}, configErr("line %d column %d: %s", row, col, de.Error())
		}
		return Config{}, configErr("%w", err)
	}
	return c, nil
}

func lineOf(e toml.DecodeError) int {
	row, _ := e.Position()
	return row
}

// resolved is a validated configuration with its values parsed.
type resolved struct {
	crem        netip.AddrPort
	peer        netip.AddrPort
	mode        string
	listen      netip.AddrPort
	target      netip.AddrPort
	wanListen   netip.AddrPort
	peerData    netip.AddrPort
	localEP     netip.Addr
	remoteEP    netip.Addr
	rules       []rule
	reporters   []netip.Addr
	k, m        int
	adapt       bool
	rule        policy.Rule
	flowRate    int64
	competes    bool
	epsilon     float64
	rho         float64
	repairFrac  float64
	maxOpen     int
	maxK, maxM  int
	mtu         int
	initialRTT  time.Duration
	holdOff     time.Duration
	idle        time.Duration
	reorder     time.Duration
	burstGap    time.Duration
	shards      int
	tunName     string
	tunLocal    []netip.Prefix
	tunMark     int
	tunLogical  bool
	tunOffload  bool
	tunDevWrite bool
	metricsAddr string
	faults      fault.Set // planted in both engines (Config.Faults)
	offload     bool      // relay: UDP GSO and GRO where the kernel has them
}

type rule struct {
	src, dst  netip.Prefix
	srcPort   uint16
	qp        uint32
	ordered   bool
	reverseQP uint32
}

func (r rule) match(src, dst netip.Addr, srcPort uint16, qp uint32) bool {
	return (!r.src.IsValid() || r.src.Contains(src)) && (!r.dst.IsValid() || r.dst.Contains(dst)) &&
		(r.srcPort == 0 || srcPort == 0 || r.srcPort == srcPort) && (r.qp == 0 || r.qp == qp)
}

func parseAddrPort(field, s string, needPort bool) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(strings.TrimSpace(s))
	if err != nil {
		return netip.AddrPort{}, configErr("%s %q: want address:port (%v)", field, s, err)
	}
	if needPort && ap.Port() == 0 {
		return netip.AddrPort{}, configErr("%s %q: the port must not be 0", field, s)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

func parsePrefix(field, s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, nil
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, configErr("%s %q: %v", field, s, err)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, configErr("%s %q: %v", field, s, err)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func parseDur(field, s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, configErr("%s %q: want a duration such as 10ms", field, s)
	}
	return d, nil
}

// resolve validates the configuration and fills in the defaults.
func (c Config) resolve() (*resolved, error) {
	r := &resolved{faults: c.Faults}
	var err error
	if strings.TrimSpace(c.CREMAddress) == "" {
		return nil, configErr("crem_address is required: there is no default CREM port (C14)")
	}
	if r.crem, err = parseAddrPort("crem_address", c.CREMAddress, true); err != nil {
		return nil, err
	}
	switch c.DomainProtection {
	case "":
		if !r.crem.Addr().IsLoopback() {
			return nil, configErr("crem_address %v is not a loopback address: domain_protection must say how the domain is protected (ipsec or boundary)", r.crem)
		}
	case "ipsec", "boundary":
	default:
		return nil, configErr("domain_protection %q: want ipsec or boundary", c.DomainProtection)
	}
	if c.Peer == "" {
		return nil, configErr("peer is required: the peer gateway's CREM address")
	}
	if r.peer, err = parseAddrPort("peer", c.Peer, true); err != nil {
		return nil, err
	}
	r.mode = c.Mode
	if r.mode == "" {
		r.mode = "relay"
	}
	switch r.mode {
	case "relay":
		for _, f := range []struct {
			name, v string
			dst     *netip.AddrPort
			port    bool
		}{{"relay.listen", c.Relay.Listen, &r.listen, false}, {"relay.target", c.Relay.Target, &r.target, true},
			{"relay.wan_listen", c.Relay.WANListen, &r.wanListen, false}, {"relay.peer_data", c.Relay.PeerData, &r.peerData, true}} {
			if f.v == "" {
				return nil, configErr("%s is required in relay mode", f.name)
			}
			if *f.dst, err = parseAddrPort(f.name, f.v, f.port); err != nil {
				return nil, err
			}
		}
		r.localEP, r.remoteEP = r.target.Addr(), r.peerData.Addr()
		if c.Relay.LocalEndpoint != "" {
			if r.localEP, err = netip.ParseAddr(c.Relay.LocalEndpoint); err != nil {
				return nil, configErr("relay.local_endpoint %q: %v", c.Relay.LocalEndpoint, err)
			}
		}
		if c.Relay.RemoteEndpoint != "" {
			if r.remoteEP, err = netip.ParseAddr(c.Relay.RemoteEndpoint); err != nil {
				return nil, configErr("relay.remote_endpoint %q: %v", c.Relay.RemoteEndpoint, err)
			}
		}
		r.localEP, r.remoteEP = r.localEP.Unmap(), r.remoteEP.Unmap()
		r.offload = c.Relay.Offload == nil || *c.Relay.Offload
		if r.localEP.Is4() != r.remoteEP.Is4() {
			return nil, configErr("relay.local_endpoint and relay.remote_endpoint must be of one address family")
		}
	case "tun":
		r.tunName = c.Tun.Name
		if r.tunName == "" {
			r.tunName = "crem0"
		}
		if len(c.Tun.LocalPrefixes) == 0 {
			return nil, configErr("tun.local_prefixes is required in tun mode: the prefixes of this side's endpoints")
		}
		for i, s := range c.Tun.LocalPrefixes {
			p, err := parsePrefix(fmt.Sprintf("tun.local_prefixes[%d]", i), s)
			if err != nil {
				return nil, err
			}
			if !p.Addr().Is4() {
				return nil, configErr("tun.local_prefixes[%d] %q: tun mode carries IPv4 only", i, s)
			}
			r.tunLocal = append(r.tunLocal, p)
		}
		switch c.Tun.Verify {
		case "", "template":
		case "logical":
			r.tunLogical = true
		default:
			return nil, configErr("tun.verify %q: want template or logical", c.Tun.Verify)
		}
		r.tunOffload = c.Tun.Offload == nil || *c.Tun.Offload
		switch c.Tun.Write {
		case "", "raw":
		case "device":
			r.tunDevWrite = true
		default:
			return nil, configErr("tun.write %q: want raw or device", c.Tun.Write)
		}
		r.tunMark = c.Tun.Mark
		if r.tunMark == 0 {
			r.tunMark = 0x43
		}
	default:
		return nil, configErr("mode %q: want relay or tun", c.Mode)
	}
	for i, p := range c.Protect {
		var ru rule
		if ru.src, err = parsePrefix(fmt.Sprintf("protect[%d].src", i), p.Src); err != nil {
			return nil, err
		}
		if ru.dst, err = parsePrefix(fmt.Sprintf("protect[%d].dst", i), p.Dst); err != nil {
			return nil, err
		}
		if p.SrcPort < 0 || p.SrcPort > 65535 {
			return nil, configErr("protect[%d].src_port %d: out of range", i, p.SrcPort)
		}
		if p.QP < 0 || p.QP >= 1<<24 || p.ReverseQP < 0 || p.ReverseQP >= 1<<24 {
			return nil, configErr("protect[%d]: qp and reverse_qp are 24-bit queue pair numbers", i)
		}
		if p.ReverseQP != 0 && p.QP == 0 {
			return nil, configErr("protect[%d]: reverse_qp %d needs qp: it names the reverse QP of one flow (without it the gateway learns each flow's)", i, p.ReverseQP)
		}
		ru.srcPort, ru.qp, ru.reverseQP = uint16(p.SrcPort), uint32(p.QP), uint32(p.ReverseQP)
		ru.ordered = p.Ordered == nil || *p.Ordered
		r.rules = append(r.rules, ru)
	}
	if len(r.rules) == 0 {
		r.rules = []rule{{ordered: true}}
	}
	for _, s := range c.Reporters {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, configErr("reporters: %q: %v", s, err)
		}
		r.reporters = append(r.reporters, a.Unmap())
	}
	p := c.Policy
	r.k, r.m, r.maxOpen, r.maxK, r.maxM, r.mtu = def(p.K, 32), p.M, def(p.MaxOpenBlocks, 64), def(p.MaxK, 64), def(p.MaxM, 16), def(p.MTU, 4096)
	// The gateway's default stays the draft's rule until the cost rule shows on real sockets
	// what it shows in the simulator (protocol notes P14); "cost" is the operator's choice.
	r.rule = policy.RuleDraft
	if p.Rule != "" {
		if r.rule, err = policy.ParseRule(p.Rule); err != nil {
			return nil, configErr("policy.rule: %v", err)
		}
	}
	if p.M == 0 {
		r.m = 4
	}
	if r.k < 1 || r.k > 255 || r.m < 0 || r.k+r.m > 255 {
		return nil, configErr("policy: k %d and m %d: want 1 <= k, 0 <= m, k + m <= 255 (C6 a)", r.k, r.m)
	}
	if r.maxK < r.k || r.maxM < r.m || r.maxK > 255 || r.maxM > 255 {
		return nil, configErr("policy: max_k %d and max_m %d must hold k %d and m %d and be at most 255", r.maxK, r.maxM, r.k, r.m)
	}
	if r.maxOpen < 1 || r.maxOpen > 65535 {
		return nil, configErr("policy.max_open_blocks %d: want 1..65535", r.maxOpen)
	}
	switch r.mtu {
	case 256, 512, 1024, 2048, 4096:
	default:
		return nil, configErr("policy.rdma_mtu %d: want 256, 512, 1024, 2048 or 4096", r.mtu)
	}
	r.adapt = p.Adapt == nil || *p.Adapt
	if p.FlowRate != "" {
		rate, err := units.ParseRate(p.FlowRate)
		if err != nil || rate <= 0 {
			return nil, configErr("policy.flow_rate %q: want a rate such as 125Mbit", p.FlowRate)
		}
		r.flowRate = rate
	}
	r.competes = p.RepairCompetes == nil || *p.RepairCompetes
	r.epsilon, r.rho, r.repairFrac = deff(p.Epsilon, 1e-4), deff(p.Rho, 0.01), deff(p.RepairFraction, 0.5)
	if r.epsilon <= 0 || r.epsilon >= 1 || r.rho <= 0 || r.rho >= 1 || r.repairFrac <= 0 {
		return nil, configErr("policy: epsilon and rho must lie in (0, 1) and repair_fraction be positive")
	}
	if r.initialRTT, err = parseDur("policy.initial_rtt", p.InitialRTT, 10*time.Millisecond); err != nil {
		return nil, err
	}
	if r.holdOff, err = parseDur("policy.hello_hold_off", p.HelloHoldOff, 10*time.Second); err != nil {
		return nil, err
	}
	if r.idle, err = parseDur("policy.idle_timeout", p.Idle, 30*time.Second); err != nil {
		return nil, err
	}
	if r.reorder, err = parseDur("policy.reorder", p.Reorder, 0); err != nil {
		return nil, err
	}
	if r.burstGap, err = parseDur("policy.burst_gap", p.BurstGap, 0); err != nil {
		return nil, err
	}
	if c.Shards < 0 || c.Shards > 256 {
		return nil, configErr("shards %d: want 0 (one per core) to 256", c.Shards)
	}
	r.shards = c.Shards
	if c.MetricsAddress != "" {
		if _, err := parseAddrPort("metrics_address", c.MetricsAddress, false); err != nil {
			return nil, err
		}
		r.metricsAddr = c.MetricsAddress
	}
	switch c.LogLevel {
	case "", "debug", "info", "warn", "error":
	default:
		return nil, configErr("log_level %q: want debug, info, warn or error", c.LogLevel)
	}
	return r, nil
}

func def(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

func deff(v, d float64) float64 {
	if v == 0 {
		return d
	}
	return v
}

// Validate checks the configuration without opening anything.
func (c Config) Validate() error {
	_, err := c.resolve()
	return err
}
