package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"time"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/internal/fault"
	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/wire"
)

// resolved is what Validate makes of a Config: the configuration with every default filled in
// (cfg, whose optional fields are all set) and the engines' configurations, checked once. The
// nodes, the shards and the sockets run it as it is.
type resolved struct {
	cfg         Config // every pointer set: what --check-config prints
	crem        netip.AddrPort
	peer        netip.AddrPort
	mode        Mode
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
	limits      flow.Limits // both engines' (C15)
	mtu         int
	initialRTT  time.Duration
	holdOff     time.Duration
	idle        time.Duration
	reorder     time.Duration
	burstGap    time.Duration // 0: the CSF's own floor (defaultBurstGap)
	shards      int
	tunName     string
	tunLocal    []netip.Prefix
	tunMark     int
	tunLogical  bool
	tunOffload  bool
	tunDevWrite bool
	datapath    Datapath
	lanIf       string
	wanIf       string
	xdpAttach   XDPAttach
	metricsAddr string
	faults      fault.Set // planted in both engines (Config.Faults)
	offload     bool      // relay: UDP GSO and GRO where the kernel has them
	// peerState is what every CSF of the gateway knows of the peer's CRF, shared by the shards'
	// CSFs: taken for down, it is probed once per hold-off in all, not per flow (E71, G59).
	peerState *csf.Peer
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

// defaultBurstGap is the CSF's floor of the burst gap when the configuration sets none.
const defaultBurstGap = 50 * time.Microsecond

// Validate checks the configuration as a start does, without opening anything.
func (c Config) Validate() error {
	_, err := c.validate()
	return err
}

// errAt is a refusal of key's value; val is the value as the Config holds it, shown when the
// key was not written (a default, a value set in process).
func (c *Config) errAt(key string, val any, format string, a ...any) error {
	where, raw, ok := c.src.at(key)
	if !ok && val != nil {
		raw = fmt.Sprint(val)
	}
	return &ConfigError{Where: where, Key: key, Value: raw, Err: fmt.Errorf(format, a...)}
}

// missing is a required key the configuration lacks.
func (c *Config) missing(key, format string, a ...any) error {
	where, _, _ := c.src.at(key)
	return &ConfigError{Where: where, Key: key, Err: fmt.Errorf("is required: "+format, a...)}
}

func orInt(p *int, d int) *int {
	if p == nil {
		return &d
	}
	return p
}

func orFloat(p *float64, d float64) *float64 {
	if p == nil {
		return &d
	}
	return p
}

func orBool(p *bool, d bool) *bool {
	if p == nil {
		return &d
	}
	return p
}

func orDur(p *Duration, d time.Duration) *Duration {
	if p == nil {
		return Dur(d)
	}
	return p
}

// validate checks every value once, fills in the defaults and makes the engines'
// configurations; the errors name the key, its value and where it was written.
func (c Config) validate() (*resolved, error) {
	n := c // normalized: the defaults filled in
	n.Protect = append([]ProtectRule(nil), c.Protect...)
	n.Reporters = append([]netip.Addr(nil), c.Reporters...)
	n.Tun.LocalPrefixes = append([]Prefix(nil), c.Tun.LocalPrefixes...)
	r := &resolved{faults: c.Faults, peerState: csf.NewPeer()}

	for _, step := range []func(*Config, *resolved) error{c.validateCREM, c.validateDataPath, c.validateRules} {
		if err := step(&n, r); err != nil {
			return nil, err
		}
	}
	if err := c.validatePolicy(&n, r); err != nil {
		return nil, err
	}

	// The rest.
	if c.Shards < 0 || c.Shards > 256 {
		return nil, c.errAt("shards", c.Shards, "want 0 (one per core) to 256")
	}
	r.shards = c.Shards
	if c.MetricsAddress.IsValid() {
		r.metricsAddr = c.MetricsAddress.String()
	}
	if c.LogLevel > LogError {
		return nil, c.errAt("log_level", c.LogLevel, "want debug, info, warn or error")
	}
	if err := r.buildEngines(&c); err != nil {
		return nil, err
	}
	r.cfg = n
	return r, nil
}

// validatePolicy checks [policy] and fills in its defaults.
func (c *Config) validatePolicy(n *Config, r *resolved) error {
	p := &n.Policy
	p.K, p.M = orInt(p.K, 32), orInt(p.M, 4)
	p.MaxOpenBlocks, p.MaxK, p.MaxM, p.MTU = orInt(p.MaxOpenBlocks, 64), orInt(p.MaxK, 64), orInt(p.MaxM, 16), orInt(p.MTU, 4096)
	p.Adapt, p.RepairCompetes = orBool(p.Adapt, true), orBool(p.RepairCompetes, true)
	p.Epsilon, p.Rho, p.RepairFraction = orFloat(p.Epsilon, 1e-4), orFloat(p.Rho, 0.01), orFloat(p.RepairFraction, 0.5)
	p.InitialRTT, p.HelloHoldOff, p.Idle = orDur(p.InitialRTT, 10*time.Millisecond), orDur(p.HelloHoldOff, time.Second), orDur(p.Idle, 30*time.Second)
	p.Reorder, p.BurstGap = orDur(p.Reorder, 0), orDur(p.BurstGap, defaultBurstGap)
	r.k, r.m, r.mtu = *p.K, *p.M, *p.MTU
	switch {
	case r.k < 1 || r.k > 255:
		return c.errAt("policy.k", r.k, "want 1 to 255 (C6 a)")
	case r.m < 0 || r.k+r.m > 255:
		return c.errAt("policy.m", r.m, "k %d and m %d: want 0 <= m and k + m <= 255 (C6 a; m = 0 is coded retransmission alone)", r.k, r.m)
	case *p.MaxK < r.k || *p.MaxK > 255:
		return c.errAt("policy.max_k", *p.MaxK, "want k (%d) to 255", r.k)
	case *p.MaxM < r.m || *p.MaxM > 255:
		return c.errAt("policy.max_m", *p.MaxM, "want m (%d) to 255", r.m)
	case *p.MaxOpenBlocks < 1 || *p.MaxOpenBlocks > 65535:
		return c.errAt("policy.max_open_blocks", *p.MaxOpenBlocks, "want 1 to 65535 (C15)")
	}
	switch r.mtu {
	case 256, 512, 1024, 2048, 4096:
	default:
		return c.errAt("policy.rdma_mtu", r.mtu, "want 256, 512, 1024, 2048 or 4096")
	}
	r.limits = flow.DefaultLimits()
	r.limits.MaxK, r.limits.MaxM, r.limits.MaxOpenBlocks = *p.MaxK, *p.MaxM, *p.MaxOpenBlocks
	r.limits.MaxT = max(r.limits.MaxT, r.mtu+128)
	r.adapt, r.competes = *p.Adapt, *p.RepairCompetes
	// The draft's rule by default, the cost rule on request (P14: under it one flow of the
	// many-QP relay test was now and then closed idle by its CRF; one cause is ended, E82, and
	// the default waits for runs on an idle host). Flows delivered in order keep the draft's
	// rule whatever this says (P13).
	r.rule = policy.RuleDraft
	if p.Rule != "" {
		var err error
		if r.rule, err = policy.ParseRule(string(p.Rule)); err != nil {
			return c.errAt("policy.rule", p.Rule, "want draft or cost")
		}
	}
	p.Rule = r.rule
	if p.FlowRate < 0 {
		return c.errAt("policy.flow_rate", p.FlowRate, "want a rate above 0, or none to measure it")
	}
	r.flowRate = int64(p.FlowRate)
	r.epsilon, r.rho, r.repairFrac = *p.Epsilon, *p.Rho, *p.RepairFraction
	switch {
	case !(r.epsilon > 0 && r.epsilon < 1):
		return c.errAt("policy.epsilon", r.epsilon, "want a value in (0, 1): the target probability of losing a block")
	case !(r.rho > 0 && r.rho < 1):
		return c.errAt("policy.rho", r.rho, "want a value in (0, 1)")
	case !(r.repairFrac > 0 && r.repairFrac <= 16):
		return c.errAt("policy.repair_fraction", r.repairFrac, "want a value in (0, 16]")
	}
	r.initialRTT, r.holdOff, r.idle = time.Duration(*p.InitialRTT), time.Duration(*p.HelloHoldOff), time.Duration(*p.Idle)
	r.reorder, r.burstGap = time.Duration(*p.Reorder), time.Duration(*p.BurstGap)
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"policy.initial_rtt", r.initialRTT}, {"policy.hello_hold_off", r.holdOff}, {"policy.idle_timeout", r.idle}, {"policy.burst_gap", r.burstGap}} {
		if d.v <= 0 {
			return c.errAt(d.key, durString(d.v), "want more than 0")
		}
	}
	return nil
}

// socketsApart refuses two sockets of the file on one port where one would take the other's
// datagrams, or the second bind fail: the same address and port, or the unspecified address
// and any address at that port. Port 0 is a port of the kernel's choosing, never shared.
func (c *Config) socketsApart(r *resolved) error {
	type sockKey struct {
		key string
		ap  netip.AddrPort
	}
	socks := []sockKey{{"crem_address", r.crem}}
	if r.mode == ModeRelay {
		socks = append(socks, sockKey{"relay.listen", r.listen}, sockKey{"relay.wan_listen", r.wanListen})
	}
	for i, a := range socks {
		for _, b := range socks[:i] {
			if a.ap.Port() == 0 || a.ap.Port() != b.ap.Port() {
				continue
			}
			if a.ap.Addr() == b.ap.Addr() || a.ap.Addr().IsUnspecified() || b.ap.Addr().IsUnspecified() {
				return c.errAt(a.key, a.ap, "the UDP socket of %s (%v) takes this port too: each socket needs a port or address of its own", b.key, b.ap)
			}
		}
	}
	return nil
}

func unmapAP(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// csfOptions are the options of the CSF of flow d under protect rule ru: made here alone, for
// the nodes and for the check of buildEngines.
func (r *resolved) csfOptions(d flow.Descriptor, ru rule, rnd func() uint64, log *slog.Logger) []csf.Option {
	opts := []csf.Option{csf.WithFlow(d), csf.WithCRF(r.peer), csf.WithRandom(rnd), csf.WithPeer(r.peerState),
		csf.WithConfig(wire.SchemeCauchy, r.k, r.m, 0), csf.WithRDMAMTU(r.mtu), csf.WithLimits(r.limits),
		csf.WithInitialRTT(r.initialRTT), csf.WithHoldOff(r.holdOff), csf.WithIdleTimeout(r.idle),
		csf.WithAdaptation(r.adapt), csf.WithPolicy(r.epsilon, r.rho), csf.WithRepairFraction(r.repairFrac),
		csf.WithRule(ruleFor(r.rule, ru.ordered)), csf.WithPathRate(float64(r.flowRate), r.competes),
		csf.WithLogger(log), csf.WithHooks(csfHooks(r.faults)), csf.WithBurstGap(r.burstGap)}
	if len(r.reporters) > 0 {
		opts = append(opts, csf.WithReporters(r.reporters...))
	}
	if r.mode == ModeRelay { // reportKey's mapping
		src, dst := r.wanListen.Addr().Unmap(), r.peerData.Addr().Unmap()
		if src.IsValid() && !src.IsUnspecified() {
			opts = append(opts, csf.WithReportAddresses(src, unspecified(src)))
		}
		if dst.IsValid() && !dst.IsUnspecified() {
			opts = append(opts, csf.WithReportAddresses(unspecified(dst), dst))
		}
	}
	if ru.reverseQP != 0 {
		opts = append(opts, csf.WithReverseQP(ru.reverseQP))
	}
	return opts
}

// crfOptions are the options of a node's CRF.
func (r *resolved) crfOptions(rnd func() uint64, settings func(flow.Descriptor) (crf.Settings, bool), log *slog.Logger) []crf.Option {
	return []crf.Option{crf.WithRandom(rnd), crf.WithLimits(r.limits), crf.WithInitialRTT(r.initialRTT),
		crf.WithSettings(settings), crf.WithLogger(log), crf.WithHooks(crfHooks(r.faults))}
}

// buildEngines builds the CRF of a start and the CSF a flow of each protect rule gets, with
// the options the nodes use: what the engines' own checks refuse beyond those above is a
// configuration error now, rather than a flow left unprotected at run time.
func (r *resolved) buildEngines(c *Config) error {
	discard := slog.New(slog.DiscardHandler)
	rnd := func() uint64 { return 1 }
	if _, err := crf.New(r.crfOptions(rnd, func(flow.Descriptor) (crf.Settings, bool) { return crf.Settings{}, false }, discard)...); err != nil {
		return c.errAt("policy", "", "the receiver function refuses it: %v", err)
	}
	for i, ru := range r.rules {
		k, port := probeFlow(r, ru)
		d := flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: k.Src, Dst: k.Dst, DestQP: k.DestQP, SrcPort: port}
		if _, err := csf.New(r.csfOptions(d, ru, rnd, discard)...); err != nil {
			key := fmt.Sprintf("protect[%d]", i)
			if len(c.Protect) == 0 {
				key = "policy"
			}
			return c.errAt(key, "", "with [policy], a flow it covers could not be protected: %v", err)
		}
	}
	return nil
}

// probeFlow is a flow that rule ru covers.
func probeFlow(r *resolved, ru rule) (flow.Key, uint16) {
	src, dst := r.localEP, r.remoteEP
	if r.mode == ModeTun {
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

// placed adds to a refusal of a key's value, made where the source is not known (a socket's
// bind), where the key was written and its text.
func (c *Config) placed(err error) error {
	var ce *ConfigError
	if errors.As(err, &ce) && ce.Where == "" && ce.Key != "" {
		if where, raw, ok := c.src.at(ce.Key); where != "" {
			ce.Where = where
			if ok {
				ce.Value = raw
			}
		}
	}
	return err
}

// validateCREM checks the CREM socket, the domain's protection and the peer.
func (c Config) validateCREM(n *Config, r *resolved) error {
	if !c.CREMAddress.IsValid() {
		return c.missing("crem_address", "there is no default CREM port (C14)")
	}
	if c.CREMAddress.Port() == 0 {
		return c.errAt("crem_address", c.CREMAddress, "the port must not be 0: the domain's one CREM port (C14)")
	}
	n.CREMAddress = unmapAP(c.CREMAddress)
	r.crem = n.CREMAddress
	switch c.DomainProtection {
	case ProtectionNone:
		if !r.crem.Addr().IsLoopback() {
			return c.errAt("crem_address", r.crem, "not a loopback address: domain_protection must say how the domain is protected (ipsec or boundary)")
		}
	case ProtectionIPsec, ProtectionBoundary:
	default:
		return c.errAt("domain_protection", c.DomainProtection, "want ipsec or boundary")
	}
	if !c.Peer.IsValid() {
		return c.missing("peer", "the peer gateway's CREM address")
	}
	if c.Peer.Port() == 0 {
		return c.errAt("peer", c.Peer, "the port must not be 0")
	}
	n.Peer = unmapAP(c.Peer)
	r.peer = n.Peer

	return nil
}

// validateDataPath checks the sockets or the device of the mode, and that no two sockets share
// a port.
func (c Config) validateDataPath(n *Config, r *resolved) error {
	r.mode = c.Mode
	switch c.Mode {
	case ModeRelay:
		if err := c.validateRelay(n, r); err != nil {
			return err
		}
	case ModeTun:
		if err := c.validateTun(n, r); err != nil {
			return err
		}
	default:
		return c.errAt("mode", c.Mode, "want relay or tun")
	}
	return c.socketsApart(r)
}

// validateRelay checks [relay].
func (c Config) validateRelay(n *Config, r *resolved) error {
	n.Tun = TunConfig{}
	rl := &n.Relay
	for _, f := range []struct {
		key  string
		v    *netip.AddrPort
		port bool // a destination: port 0 reaches nothing
	}{{"relay.listen", &rl.Listen, false}, {"relay.target", &rl.Target, true},
		{"relay.wan_listen", &rl.WANListen, false}, {"relay.peer_data", &rl.PeerData, true}} {
		if !f.v.IsValid() {
			return c.missing(f.key, "in relay mode")
		}
		if f.port && f.v.Port() == 0 {
			return c.errAt(f.key, *f.v, "the port must not be 0")
		}
		*f.v = unmapAP(*f.v)
	}
	r.listen, r.target, r.wanListen, r.peerData = rl.Listen, rl.Target, rl.WANListen, rl.PeerData
	if !rl.LocalEndpoint.IsValid() {
		rl.LocalEndpoint = rl.Target.Addr()
	}
	if !rl.RemoteEndpoint.IsValid() {
		rl.RemoteEndpoint = rl.PeerData.Addr()
	}
	rl.LocalEndpoint, rl.RemoteEndpoint = rl.LocalEndpoint.Unmap(), rl.RemoteEndpoint.Unmap()
	r.localEP, r.remoteEP = rl.LocalEndpoint, rl.RemoteEndpoint
	if r.localEP.Is4() != r.remoteEP.Is4() {
		return c.errAt("relay.remote_endpoint", r.remoteEP, "not of the address family of relay.local_endpoint %v", r.localEP)
	}
	rl.Offload = orBool(rl.Offload, true)
	r.offload = *rl.Offload
	return nil
}

// validateTun checks [tun].
func (c Config) validateTun(n *Config, r *resolved) error {
	n.Relay = RelayConfig{}
	t := &n.Tun
	if t.Name == "" {
		t.Name = "crem0"
	}
	if len(t.Name) > 15 {
		return c.errAt("tun.name", t.Name, "at most 15 characters (IFNAMSIZ)")
	}
	r.tunName = t.Name
	if len(t.LocalPrefixes) == 0 {
		return c.missing("tun.local_prefixes", "in tun mode: the prefixes of this side's endpoints")
	}
	for _, p := range t.LocalPrefixes {
		if !p.IsValid() || !p.Addr().Is4() {
			return c.errAt("tun.local_prefixes", p, "tun mode carries IPv4 only")
		}
		r.tunLocal = append(r.tunLocal, p.Prefix)
	}
	if t.Verify > VerifyLogical {
		return c.errAt("tun.verify", t.Verify, "want template or logical")
	}
	if t.Write > WriteDevice {
		return c.errAt("tun.write", t.Write, "want raw or device")
	}
	r.tunLogical, r.tunDevWrite = t.Verify == VerifyLogical, t.Write == WriteDevice
	t.Offload = orBool(t.Offload, true)
	r.tunOffload = *t.Offload
	if t.Mark == nil {
		m := uint32(0x43)
		t.Mark = &m
	}
	if *t.Mark == 0 || *t.Mark > math.MaxInt32 {
		return c.errAt("tun.mark", *t.Mark, "want 1 to 2147483647: the raw socket's packets must carry a mark that policy routing keeps out of the device")
	}
	r.tunMark = int(*t.Mark)
	return c.validateDatapath(t, r)
}

// validateDatapath checks tun.datapath and the keys it needs.
func (c Config) validateDatapath(t *TunConfig, r *resolved) error {
	if t.Datapath > DatapathAuto {
		return c.errAt("tun.datapath", t.Datapath, "want tun, xdp or auto")
	}
	if t.XDPAttach > XDPAttachGeneric {
		return c.errAt("tun.xdp_attach", t.XDPAttach, "want auto, driver or generic")
	}
	r.datapath, r.xdpAttach = t.Datapath, t.XDPAttach
	if t.Datapath == DatapathTun {
		return nil
	}
	for _, f := range []struct{ key, name string }{{"tun.lan", t.LAN}, {"tun.wan", t.WAN}} {
		switch {
		case f.name == "":
			return c.missing(f.key, "with datapath "+t.Datapath.String()+": the interface the XDP program attaches to")
		case len(f.name) > 15:
			return c.errAt(f.key, f.name, "at most 15 characters (IFNAMSIZ)")
		}
	}
	if t.LAN == t.WAN {
		return c.errAt("tun.wan", t.WAN, "the WAN interface must differ from the LAN interface")
	}
	if t.Write == WriteDevice {
		return c.errAt("tun.write", t.Write, "datapath %s sends on the interfaces' TX rings: want raw (the fallback's)", t.Datapath)
	}
	r.lanIf, r.wanIf = t.LAN, t.WAN
	return nil
}

// validateRules checks the protect rules and the reporters.
func (c Config) validateRules(n *Config, r *resolved) error {
	for i, p := range n.Protect {
		key := func(leaf string) string { return fmt.Sprintf("protect[%d].%s", i, leaf) }
		if p.QP >= 1<<24 {
			return c.errAt(key("qp"), p.QP, "a 24-bit queue pair number: at most 16777215")
		}
		if p.ReverseQP >= 1<<24 {
			return c.errAt(key("reverse_qp"), p.ReverseQP, "a 24-bit queue pair number: at most 16777215")
		}
		if p.ReverseQP != 0 && p.QP == 0 {
			return c.errAt(key("reverse_qp"), p.ReverseQP, "reverse_qp %d needs qp: it names the reverse QP of one flow (without it the gateway learns each flow's)", p.ReverseQP)
		}
		n.Protect[i].Ordered = orBool(p.Ordered, true)
		r.rules = append(r.rules, rule{src: p.Src.Prefix, dst: p.Dst.Prefix, srcPort: p.SrcPort, qp: p.QP,
			ordered: *n.Protect[i].Ordered, reverseQP: p.ReverseQP})
	}
	if len(r.rules) == 0 {
		r.rules = []rule{{ordered: true}}
	}
	for i, a := range n.Reporters {
		if !a.IsValid() {
			return c.errAt(fmt.Sprintf("reporters[%d]", i), "", "want an address")
		}
		n.Reporters[i] = a.Unmap()
	}
	r.reporters = n.Reporters

	return nil
}
