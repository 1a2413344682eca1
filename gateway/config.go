package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/crem-project/crem/internal/fault"
	"github.com/crem-project/crem/policy"
	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// Config is the gateway's configuration, as read from its TOML file (docs/gateway.md
// describes every field) or built in process. Every value is typed: the file's text is parsed
// as it is decoded. A nil pointer is a key the file leaves out, which takes the default noted;
// an explicit zero is a value (m = 0 is coded retransmission alone). CREMAddress has no
// default (C14). Validate checks it once and New, NewNode and Resolve run what it produces.
type Config struct {
	// CREMAddress is the address and CREM port the gateway receives CREM messages on
	// (required, no default port: RULINGS C14).
	CREMAddress netip.AddrPort `toml:"crem_address"`
	// DomainProtection says how the domain keeps outsiders from the CREM port (draft, Security
	// Considerations). Required unless CREMAddress is a loopback address.
	DomainProtection Protection `toml:"domain_protection"`
	// Peer is the peer gateway's CREM address: where the CSFs send HELLO.
	Peer  netip.AddrPort `toml:"peer"`
	Mode  Mode           `toml:"mode"` // relay (the zero value) or tun
	Relay RelayConfig    `toml:"relay"`
	Tun   TunConfig      `toml:"tun"`
	// Protect lists the flows the gateway protects; empty protects every RoCEv2 flow.
	Protect []ProtectRule `toml:"protect"`
	// Reporters are the path reporters whose PATH_REPORT is accepted (C14).
	Reporters []netip.Addr `toml:"reporters"`
	Policy    PolicyConfig `toml:"policy"`
	// MetricsAddress serves /metrics and /healthz over HTTP; the zero value serves nothing.
	MetricsAddress netip.AddrPort `toml:"metrics_address"`
	LogLevel       LogLevel       `toml:"log_level"` // info (the zero value), debug, warn or error
	// Shards is the number of goroutines driving engines; 0 is one per core (GOMAXPROCS).
	Shards int `toml:"shards"`
	// Pcap, if set, records every datagram the gateway receives and sends to this file.
	Pcap string `toml:"pcap"`
	// Faults plants deliberate departures from the draft (package internal/fault), for the
	// mutation check of `crem conform`; never read from a file, zero in a deployment.
	Faults fault.Set `toml:"-"`

	src *source // where each key was written (a file, a flag); nil when built in process
}

// RelayConfig is the relay data path.
type RelayConfig struct {
	// Listen receives RoCEv2 datagrams from this side's RDMA endpoints.
	Listen netip.AddrPort `toml:"listen"`
	// Target is where RoCEv2 datagrams arriving from the peer are delivered.
	Target netip.AddrPort `toml:"target"`
	// WANListen receives RoCEv2 datagrams from the peer gateway.
	WANListen netip.AddrPort `toml:"wan_listen"`
	// PeerData is where this gateway relays its endpoints' datagrams (the peer's wan_listen,
	// or the path in front of it).
	PeerData netip.AddrPort `toml:"peer_data"`
	// LocalEndpoint and RemoteEndpoint are the logical addresses of the RDMA endpoints on
	// this side and on the peer's side: the addresses of the flow's logical header (C12)
	// and of its HELLO. Default: the addresses of Target and PeerData.
	LocalEndpoint  netip.Addr `toml:"local_endpoint"`
	RemoteEndpoint netip.Addr `toml:"remote_endpoint"`
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
	LocalPrefixes []Prefix `toml:"local_prefixes"`
	// Mark is the firewall mark (SO_MARK) of the raw socket that sends packets on, so that
	// policy routing keeps them out of the device (default 0x43).
	Mark *uint32 `toml:"mark"`
	// Verify is how the CRF checks restored packets (C12): template (the zero value: under the
	// flow's header template, as RoCE NICs compute the ICRC over the real header) or logical
	// (under the logical header, for endpoints that seal the ICRC under it, such as the
	// project's own transport over kernel sockets, whose IPv4 Identification the kernel
	// chooses after sealing; needs src_port in the protect rule).
	Verify Verify `toml:"verify"`
	// Offload opens the device with a virtio_net_hdr and checksum and segmentation offloads
	// (IFF_VNET_HDR, TUNSETOFFLOAD), so that the kernel hands over a GSO or GRO super-packet
	// in one read, which the gateway cuts into its packets (default true). Where the kernel
	// refuses the offloads the device runs without them; false never asks.
	Offload *bool `toml:"offload"`
	// Write is where packets sent on go: raw (the zero value), the raw socket with Mark, out
	// by the host's routing as its own packets; or device, back into the TUN device, as if
	// they had arrived on it, and the kernel forwards them (one write per packet, or, with
	// offloads, per run of a flow's consecutive packets coalesced into one UDP segmentation
	// super-packet). device needs routing that sends what arrives on the device onward
	// (rules on iif, say), never back into it.
	Write TunWrite `toml:"write"`
	// Datapath is how the traffic is taken off the path: tun (the zero value), the device
	// above and policy routing into it; xdp, an XDP program on the LAN and WAN interfaces that
	// hands the RoCEv2 and CREM datagrams to AF_XDP sockets, the gateway forwarding them as a
	// router would (no device, no policy routing; the start fails where it cannot load, attach
	// or bind); or auto, xdp where it can, else tun.
	Datapath Datapath `toml:"datapath"`
	// LAN and WAN name the interfaces toward this side's endpoints and toward the peer
	// (datapath xdp or auto).
	LAN string `toml:"lan"`
	WAN string `toml:"wan"`
	// XDPAttach is how the program attaches: auto (the zero value: the driver's XDP, else
	// generic), driver or generic.
	XDPAttach XDPAttach `toml:"xdp_attach"`
}

// ProtectRule selects flows. Zero fields match anything.
type ProtectRule struct {
	Src     Prefix `toml:"src"`      // source prefix, such as 10.1.0.0/16 or an address
	Dst     Prefix `toml:"dst"`      // destination prefix
	SrcPort uint16 `toml:"src_port"` // the flow's UDP source port; relay mode needs it at the CRF (C12)
	QP      uint32 `toml:"qp"`       // destination QP
	// Ordered asks the CRF for in-order delivery (C7 a: go-back-N receivers). Default true.
	Ordered *bool `toml:"ordered"`
	// ReverseQP names the QP the RDMA ACKs of the flow are addressed to (the requester's); it
	// needs QP. Without it the gateway learns the reverse QP of each flow (RDMA CM, or PSN
	// correlation), and until it knows, an ACK releases nothing (docs/gateway.md).
	ReverseQP uint32 `toml:"reverse_qp"`
}

// PolicyConfig holds the policy knobs and limits of both engines. A nil field takes the
// default noted.
type PolicyConfig struct {
	K              *int      `toml:"k"`               // block size (default 32)
	M              *int      `toml:"m"`               // first configuration's repair count (default 4; 0: coded retransmission alone)
	Adapt          *bool     `toml:"adapt"`           // RECOMMENDED policy on (default true)
	Epsilon        *float64  `toml:"epsilon"`         // default 1e-4
	Rho            *float64  `toml:"rho"`             // retransmission budget (default 0.01)
	RepairFraction *float64  `toml:"repair_fraction"` // repair budget, share of the source rate (default 0.5)
	MaxOpenBlocks  *int      `toml:"max_open_blocks"` // default 64 (C15)
	MaxK           *int      `toml:"max_k"`           // default 64
	MaxM           *int      `toml:"max_m"`           // default 16
	MTU            *int      `toml:"rdma_mtu"`        // RDMA MTU announced in HELLO (default 4096)
	InitialRTT     *Duration `toml:"initial_rtt"`     // default 10ms (C4)
	HelloHoldOff   *Duration `toml:"hello_hold_off"`  // default 1s (C3): the least time between two probes of a peer taken for down
	Idle           *Duration `toml:"idle_timeout"`    // default 30s (C15)
	// Reorder is the CRF's reorder allowance; nil or 0: max(1 ms, SRTT/8), per flow.
	Reorder *Duration `toml:"reorder"`
	// BurstGap is the floor of the CSF's burst gap that closes a block (C5; default 50us).
	BurstGap *Duration `toml:"burst_gap"`
	// Rule is how the CSF chooses k and m: draft (the default: the draft's binomial target
	// alone, C6) or cost (the least expected completion time, protocol notes P5-P9, P14).
	Rule policy.Rule `toml:"rule"`
	// FlowRate is a flow's sending rate for the cost rule ("125Mbit"); 0: measured.
	FlowRate Rate `toml:"flow_rate"`
	// RepairCompetes says whether repair shares the bottleneck with the sources (default true);
	// false makes redundancy free to the cost rule, which is then the draft's (P6).
	RepairCompetes *bool `toml:"repair_competes"`
}

// LoadConfig reads a TOML configuration file; unknown fields are errors, and every error
// names the file, the line, the key and the value.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, &ConfigError{Where: path, Err: err}
	}
	return parseConfig(path, b)
}

// ParseConfig reads a TOML configuration; unknown fields are errors.
func ParseConfig(b []byte) (Config, error) { return parseConfig("", b) }

func parseConfig(file string, b []byte) (Config, error) {
	c := Config{src: newSource(file, b)}
	if err := c.src.decode(b, &c, ""); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Set sets one key as a line `key = value` of the file would (value in TOML: strings quoted),
// on top of what is there; errors name by (a flag, say) rather than a line of the file.
func (c *Config) Set(by, key, value string) error {
	// A copy of the Config shares its source: the key is marked on a source of its own.
	src := &source{keys: map[string]keyPos{}}
	if c.src != nil {
		src.file, src.keys = c.src.file, maps.Clone(c.src.keys)
	}
	c.src = src
	doc := key + " = " + value + "\n"
	if table, leaf, ok := strings.Cut(key, "."); ok {
		doc = "[" + table + "]\n" + leaf + " = " + value + "\n"
	}
	if err := c.src.decode([]byte(doc), c, by); err != nil {
		return err
	}
	c.src.keys[key] = keyPos{by: by, raw: value}
	return nil
}

// ConfigError is a configuration the gateway refuses: the command exits with status 2. It
// names where the value was written (FILE:LINE, or the flag), the key and the value as written.
type ConfigError struct {
	Where string // "gw.toml:12", "--crem-address", "gw.toml" for a key it lacks; "" in process
	Key   string // "policy.m", "protect[1].src"; "" for the whole file
	Value string // the value as written ("300", "\"2ms\""); "" for a key that is missing
	Err   error
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString("configuration: ")
	if e.Where != "" {
		b.WriteString(e.Where + ": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteString(" = " + e.Value)
			b.WriteString(": ")
		} else {
			b.WriteString(" ")
		}
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *ConfigError) Unwrap() error { return e.Err }

// configErr is an error of no key in particular.
func configErr(format string, a ...any) error { return &ConfigError{Err: fmt.Errorf(format, a...)} }

// keyPos is where a key's value was written.
type keyPos struct {
	line int    // in the file; 0: set by a flag
	by   string // the flag that set it
	raw  string // the value's text
}

// source is where the keys of a configuration were written: the file and a key->line index
// built from the document, and the keys flags set since.
type source struct {
	file string
	keys map[string]keyPos // "policy.m", "protect[0].src"
}

// at returns where key was written and its text, if it was.
func (s *source) at(key string) (where, raw string, ok bool) {
	if s == nil {
		return "", "", false
	}
	p, ok := s.keys[key]
	if !ok {
		return s.file, "", false
	}
	switch {
	case p.by != "":
		return p.by, p.raw, true
	case s.file != "":
		return fmt.Sprintf("%s:%d", s.file, p.line), p.raw, true
	}
	return fmt.Sprintf("line %d", p.line), p.raw, true
}

// has tells whether key was written, in the file or by a flag.
func (s *source) has(key string) bool {
	if s == nil {
		return false
	}
	_, ok := s.keys[key]
	return ok
}

// keyAtLine is the key written on a line, "" if none.
func (s *source) keyAtLine(line int) string {
	for k, p := range s.keys {
		if p.line == line && p.by == "" {
			return k
		}
	}
	return ""
}

// decode decodes b into c, turning what the decoder refuses into a ConfigError; by names a
// flag's document (its lines are not the file's).
func (s *source) decode(b []byte, c *Config, by string) error {
	d := toml.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	err := d.Decode(c)
	if err == nil {
		return nil
	}
	where := func(line int) string {
		switch {
		case by != "":
			return by
		case s.file != "":
			return fmt.Sprintf("%s:%d", s.file, line)
		}
		return fmt.Sprintf("line %d", line)
	}
	var sm *toml.StrictMissingError
	if errors.As(err, &sm) && len(sm.Errors) > 0 {
		e := sm.Errors[0]
		row, _ := e.Position()
		return &ConfigError{Where: where(row), Err: fmt.Errorf("unknown field %q (docs/gateway.md lists every field)", strings.Join(e.Key(), "."))}
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, _ := de.Position()
		key := strings.Join(de.Key(), ".")
		var raw string
		if by == "" {
			if k := s.keyAtLine(row); k != "" {
				key, raw = k, s.keys[k].raw
			}
		} else if ks := de.Key(); len(ks) > 0 {
			raw = strings.TrimSpace(string(b[strings.LastIndex(string(b), "=")+1:]))
		}
		msg := strings.TrimPrefix(de.Error(), "toml: ")
		redefined := strings.Contains(msg, "already defined")
		if want := wantOf(key); want != "" && !redefined && !strings.HasPrefix(msg, "want ") {
			msg = "want " + want // not the decoder's Go types
		}
		if key == "" || redefined {
			msg = "TOML: " + msg
		}
		return &ConfigError{Where: where(row), Key: key, Value: raw, Err: errors.New(msg)}
	}
	// A value's own refusal the decoder passes on without a position (a TextUnmarshaler given
	// a number): found by decoding the keys one by one.
	if k := s.culprit(); k != "" && by == "" {
		where, raw, _ := s.at(k)
		msg := err.Error()
		if want := wantOf(k); want != "" && !strings.HasPrefix(msg, "want ") {
			msg = "want " + want
		}
		return &ConfigError{Where: where, Key: k, Value: raw, Err: errors.New(msg)}
	}
	return &ConfigError{Where: s.file, Err: err}
}

// culprit is the first key, by line, whose value alone does not decode; "" if none.
func (s *source) culprit() string {
	keys := make([]string, 0, len(s.keys))
	for k, p := range s.keys {
		if p.by == "" {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b string) int { return s.keys[a].line - s.keys[b].line })
	for _, k := range keys {
		doc := k + " = " + s.keys[k].raw + "\n"
		if i := strings.LastIndexByte(k, '.'); i >= 0 {
			table, leaf := k[:i], k[i+1:]
			if j := strings.IndexByte(table, '['); j >= 0 {
				doc = "[[" + table[:j] + "]]\n" + leaf + " = " + s.keys[k].raw + "\n"
			} else {
				doc = "[" + table + "]\n" + leaf + " = " + s.keys[k].raw + "\n"
			}
		}
		var c Config
		if toml.Unmarshal([]byte(doc), &c) != nil {
			return k
		}
	}
	return ""
}

// wantOf says what a key takes, for the errors of values of the wrong type.
func wantOf(key string) string {
	leaf := key
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		leaf = key[i+1:]
	}
	switch leaf {
	case "crem_address", "peer", "listen", "target", "wan_listen", "peer_data", "metrics_address":
		return `an address and port in quotes, such as "192.0.2.1:61234"`
	case "local_endpoint", "remote_endpoint", "reporters":
		return `an address in quotes, such as "192.0.2.1"`
	case "src", "dst", "local_prefixes":
		return `an address or prefix in quotes, such as "10.1.0.0/16"`
	case "src_port":
		return "a UDP port: an integer from 0 (any) to 65535"
	case "qp", "reverse_qp":
		return "a queue pair number: an integer from 0 to 16777215"
	case "mark":
		return "a firewall mark: an integer from 1 to 4294967295"
	case "k", "m", "max_open_blocks", "max_k", "max_m", "rdma_mtu", "shards":
		return "an integer"
	case "epsilon", "rho", "repair_fraction":
		return "a number"
	case "adapt", "ordered", "offload", "repair_competes":
		return "true or false"
	case "initial_rtt", "hello_hold_off", "idle_timeout", "reorder", "burst_gap":
		return `a duration in quotes, such as "10ms"`
	case "name", "pcap":
		return "a string in quotes"
	}
	return ""
}

// newSource indexes the keys of a TOML document by where their values are written: tables
// and array tables prefix their keys ("policy.m", "protect[1].src"). A document that does not
// parse indexes what comes before the fault; the decoder reports the fault itself.
func newSource(file string, b []byte) *source {
	s := &source{file: file, keys: map[string]keyPos{}}
	var p unstable.Parser
	p.Reset(b)
	table := ""
	arrays := map[string]int{}
	keyOf := func(it unstable.Iterator) string {
		var parts []string
		for it.Next() {
			parts = append(parts, string(it.Node().Data))
		}
		return strings.Join(parts, ".")
	}
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table:
			table = keyOf(e.Key())
		case unstable.ArrayTable:
			k := keyOf(e.Key())
			table = fmt.Sprintf("%s[%d]", k, arrays[k])
			arrays[k]++
		case unstable.KeyValue:
			k := keyOf(e.Key())
			if table != "" {
				k = table + "." + k
			}
			v := e.Value()
			raw := strings.TrimSpace(string(p.Raw(v.Raw)))
			line := p.Shape(v.Raw).Start.Line
			if v.Kind == unstable.Array || v.Kind == unstable.InlineTable || raw == "" {
				// Containers have no range of their own: the line of the key.
				it := e.Key()
				it.Next()
				line = p.Shape(it.Node().Raw).Start.Line
				raw = strings.TrimSpace(lineText(b, line))
				if _, after, ok := strings.Cut(raw, "="); ok {
					raw = strings.TrimSpace(after)
				}
			}
			s.keys[k] = keyPos{line: line, raw: raw}
		}
	}
	return s
}

// lineText is line n (from 1) of b.
func lineText(b []byte, n int) string {
	lines := strings.Split(string(b), "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	return lines[n-1]
}
