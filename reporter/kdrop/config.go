package kdrop

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/crem-project/crem/reporter"
	"github.com/crem-project/crem/wire"
)

// DefaultReasons are the drops that are the node's own by default: a queue that overflowed
// or whose discipline dropped (C1: congestion).
var DefaultReasons = map[string]string{
	"QDISC_DROP": "congestion", "QDISC_OVERLIMIT": "congestion", "QDISC_CONGESTED": "congestion",
	"CAKE_FLOOD": "congestion", "FQ_BAND_LIMIT": "congestion", "FQ_HORIZON_LIMIT": "congestion",
	"FQ_FLOW_LIMIT": "congestion", "CPU_BACKLOG": "congestion", "DUALPI2_STEP_DROP": "congestion",
}

// FileConfig is the configuration file of crem reporter (TOML).
type FileConfig struct {
	// NodeID is the hop entries' Node ID.
	NodeID uint32 `toml:"node_id"`
	// CREMPort is the domain's CREM port, where the CSFs take reports (C14: no default).
	CREMPort uint16 `toml:"crem_port"`
	// Netns is the router's network namespace (a path such as /run/netns/router); empty: the
	// daemon's own. Devices are named there and reports sent from there.
	Netns string `toml:"netns"`
	// Devices are the devices whose drops are reported (egress queues of the router).
	Devices []string `toml:"devices"`
	// UDPPorts are the protected datagrams' destination ports (default 4791).
	UDPPorts []uint16 `toml:"udp_ports"`
	// Reasons maps a kernel drop reason (enum skb_drop_reason without SKB_DROP_REASON_) to a
	// hop entry's Cause: congestion, corruption or other. Default: DefaultReasons.
	Reasons map[string]string `toml:"reasons"`
	// Source is the address reports are sent from (one the CSFs list among their reporters);
	// empty: the route's choice.
	Source string `toml:"source_address"`
	// Routes send the reports of flows from a prefix to a CSF other than the flow's source.
	Routes         []RouteConfig `toml:"routes"`
	PathMTU        int           `toml:"path_mtu"`
	Aggregation    string        `toml:"aggregation"`
	FlowInterval   string        `toml:"flow_interval"`
	PortRate       float64       `toml:"port_rate"`
	PortBurst      int           `toml:"port_burst"`
	MaxFlows       int           `toml:"max_flows"`
	RingSize       int           `toml:"ring_size"`
	MetricsAddress string        `toml:"metrics_address"`
	LogLevel       string        `toml:"log_level"`
}

// RouteConfig is one [[routes]] entry.
type RouteConfig struct {
	Prefix string `toml:"prefix"`
	CSF    string `toml:"csf"`
}

// ParseConfig reads a configuration; unknown fields are errors.
func ParseConfig(r io.Reader) (FileConfig, error) {
	var c FileConfig
	d := toml.NewDecoder(r)
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		var sm *toml.StrictMissingError
		if errors.As(err, &sm) && len(sm.Errors) > 0 {
			row, _ := sm.Errors[0].Position()
			return c, fmt.Errorf("unknown field %q (line %d)", strings.Join(sm.Errors[0].Key(), "."), row)
		}
		return c, err
	}
	return c, nil
}

// LoadConfig reads the file at path.
func LoadConfig(path string) (FileConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return FileConfig{}, err
	}
	c, err := ParseConfig(bytes.NewReader(b))
	if err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Resolved is a checked configuration: the engine's configuration and the source's, but for
// the devices, which are named in the router's namespace at the start.
type Resolved struct {
	Engine  reporter.Config
	Ports   []uint16
	Reasons map[string]wire.Cause
	Source  netip.Addr // invalid: not set
	Devices []string
	Netns   string
	Ring    int
	Metrics string
	Log     string
	// defaults: Reasons are DefaultReasons, of which a kernel may lack some (newer ones).
	defaults bool
}

// Resolve checks c and fills in the defaults.
func (c FileConfig) Resolve() (Resolved, error) {
	r := Resolved{Devices: c.Devices, Netns: c.Netns, Ring: c.RingSize, Metrics: c.MetricsAddress, Log: c.LogLevel}
	if c.CREMPort == 0 {
		return r, errors.New("crem_port is required: the domain's CREM port (there is no default, C14)")
	}
	if len(c.Devices) == 0 || len(c.Devices) > 64 {
		return r, fmt.Errorf("devices: %d named, want 1 to 64", len(c.Devices))
	}
	for i, d := range c.Devices {
		if d == "" || slices.Contains(c.Devices[:i], d) {
			return r, fmt.Errorf("devices: %q is empty or named twice", d)
		}
	}
	r.Ports = c.UDPPorts
	if len(r.Ports) == 0 {
		r.Ports = []uint16{4791}
	}
	if len(r.Ports) > 64 || slices.Contains(r.Ports, 0) {
		return r, fmt.Errorf("udp_ports %v: 1 to 64 ports, none 0", r.Ports)
	}
	reasons := c.Reasons
	if len(reasons) == 0 {
		reasons, r.defaults = DefaultReasons, true
	}
	var err error
	if r.Reasons, err = reasonCauses(reasons); err != nil {
		return r, err
	}
	if c.Source != "" {
		a, err := netip.ParseAddr(c.Source)
		if err != nil {
			return r, fmt.Errorf("source_address: %w", err)
		}
		r.Source = a.Unmap()
	}
	switch c.LogLevel {
	case "", "debug", "info", "warn", "error":
	default:
		return r, fmt.Errorf("log_level %q: want debug, info, warn or error", c.LogLevel)
	}
	if c.RingSize != 0 && (c.RingSize < 4096 || c.RingSize&(c.RingSize-1) != 0 || c.RingSize > 1<<30) {
		return r, fmt.Errorf("ring_size %d: a power of two from 4096 to 1 GiB", c.RingSize)
	}
	dur := func(name, s string) (time.Duration, error) {
		if s == "" {
			return 0, nil
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("%s %q: want a positive duration such as 50us", name, s)
		}
		return d, nil
	}
	e := reporter.Config{NodeID: c.NodeID, Port: c.CREMPort, PathMTU: c.PathMTU, PortRate: c.PortRate,
		PortBurst: c.PortBurst, MaxFlows: c.MaxFlows}
	if e.Aggregation, err = dur("aggregation", c.Aggregation); err != nil {
		return r, err
	}
	if e.FlowInterval, err = dur("flow_interval", c.FlowInterval); err != nil {
		return r, err
	}
	if e.Routes, err = routes(c.Routes); err != nil {
		return r, err
	}
	// The engine fills in its defaults and refuses what it cannot take.
	if _, err := reporter.New(e); err != nil {
		return r, err
	}
	r.Engine = e
	return r, nil
}

// reasonCauses maps the configured drop reasons (the kernel's names, with or without their
// SKB_DROP_REASON_ prefix) to the Cause each reports (C1).
func reasonCauses(reasons map[string]string) (map[string]wire.Cause, error) {
	out := map[string]wire.Cause{}
	for name, cause := range reasons {
		var cs wire.Cause
		switch cause {
		case "congestion":
			cs = wire.CauseCongestion
		case "corruption":
			cs = wire.CauseCorruption
		case "other":
			cs = wire.CauseOther
		default:
			return nil, fmt.Errorf("reasons.%s = %q: want congestion, corruption or other", name, cause)
		}
		out[strings.TrimPrefix(strings.ToUpper(name), "SKB_DROP_REASON_")] = cs
	}
	return out, nil
}

// ReasonNumbers resolves the reason names with the kernel's own table (its BTF): the numbers
// to pass on and their causes. A name the kernel does not know is an error.
func (r Resolved) ReasonNumbers(kernel map[string]uint32) ([]uint32, map[uint32]wire.Cause, error) {
	var nums []uint32
	causes := map[uint32]wire.Cause{}
	names := make([]string, 0, len(r.Reasons))
	for n := range r.Reasons {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		v, ok := kernel[n]
		if !ok && r.defaults {
			continue
		}
		if !ok {
			return nil, nil, fmt.Errorf("reasons: this kernel has no drop reason %s", n)
		}
		if v >= 256 {
			return nil, nil, fmt.Errorf("reasons: %s is %d; only reasons below 256 are supported", n, v)
		}
		nums = append(nums, v)
		causes[v] = r.Reasons[n]
	}
	if len(nums) == 0 {
		return nil, nil, errors.New("reasons: this kernel knows none of the default queue drop reasons")
	}
	return nums, causes, nil
}

// routes parses [[routes]]: which CSF hears of the drops of flows from a source prefix.
func routes(in []RouteConfig) ([]reporter.Route, error) {
	var out []reporter.Route
	for _, rt := range in {
		p, err := netip.ParsePrefix(rt.Prefix)
		if err != nil {
			return nil, fmt.Errorf("routes: prefix %q: %w", rt.Prefix, err)
		}
		a, err := netip.ParseAddr(rt.CSF)
		if err != nil {
			return nil, fmt.Errorf("routes: csf %q: %w", rt.CSF, err)
		}
		out = append(out, reporter.Route{Prefix: p.Masked(), CSF: a})
	}
	return out, nil
}
