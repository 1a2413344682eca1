package csf

import (
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/wire"
)

// Option configures a Sender; it returns an error for a value it cannot use.
type Option func(*options) error

type options struct {
	desc       flow.Descriptor
	crf        netip.AddrPort
	limits     flow.Limits
	mtu        int
	rand       func() uint64
	initialRTT time.Duration

	scheme wire.Scheme
	k, m   int
	t      int // 0: derived from the RDMA MTU
	adapt  bool

	epsilon, rho   float64
	ceCongested    float64
	repairFraction float64
	burstGapMin    time.Duration
	idle           time.Duration
	holdOff        time.Duration
	silence        time.Duration
	peer           *Peer // shared by the CSFs toward one CRF (E71); nil: the Sender's own
	maxHeld        int
	reporters      []netip.Addr
	reportAliases  [][2]netip.Addr // more (source, destination) pairs that name the flow in PATH_REPORT
	reverseQP      uint32
	haveReverseQP  bool
	queue          int
	log            *slog.Logger
	longExtra      int
	longMin        uint32
	msgPolicy      func(packets int, p float64) (k, extra int)
	rule           policy.Rule
	rateBits       float64 // the flow's sending rate for the cost rule (0: measured)
	competes       bool    // repair competes with the sources for the bottleneck
	lossBurst      float64 // the mean loss burst the cost rule assumes (S18: not measured)
	initialLoss    float64
	seedLoss       bool
	encoder        flow.Encoder
	hooks          Hooks
	events         func(Event)
}

func defaults() options {
	return options{
		limits: flow.DefaultLimits(), mtu: 1024, initialRTT: flow.DefaultInitialRTT,
		scheme: wire.SchemeCauchy, k: policy.DefaultK, m: 0, adapt: true,
		epsilon: policy.DefaultEpsilon, rho: policy.DefaultRho, ceCongested: 0.05,
		rule: policy.RuleDraft, competes: true, lossBurst: 1,
		repairFraction: policy.DefaultRepairFraction, burstGapMin: 50 * time.Microsecond,
		idle: 30 * time.Second, holdOff: time.Second, silence: time.Second, queue: 4096,
	}
}

// WithFlow names the protected flow (required).
func WithFlow(d flow.Descriptor) Option {
	return func(o *options) error {
		if err := d.Check(); err != nil {
			return fmt.Errorf("csf: WithFlow: %w", err)
		}
		o.desc = d
		return nil
	}
}

// WithCRF sets the address and CREM port of the receiver function (required: there is no
// default CREM port, RULINGS C14).
func WithCRF(a netip.AddrPort) Option {
	return func(o *options) error {
		if !a.IsValid() || a.Port() == 0 {
			return fmt.Errorf("csf: WithCRF(%v): need an address and a CREM port (no default port, C14)", a)
		}
		o.crf = a
		return nil
	}
}

// WithLimits sets the sender's own limits for HELLO.
func WithLimits(l flow.Limits) Option {
	return func(o *options) error {
		if err := l.Check(); err != nil {
			return fmt.Errorf("csf: WithLimits: %w", err)
		}
		o.limits = l
		return nil
	}
}

// WithRDMAMTU sets the RDMA connection's MTU (payload octets per packet), announced in HELLO.
func WithRDMAMTU(mtu int) Option {
	return func(o *options) error {
		if mtu < 1 || mtu > 0xffff {
			return fmt.Errorf("csf: WithRDMAMTU(%d): want 1..65535", mtu)
		}
		o.mtu = mtu
		return nil
	}
}

// WithRandom sets the source of the HELLO nonce (required: no global randomness).
func WithRandom(r func() uint64) Option {
	return func(o *options) error {
		if r == nil {
			return fmt.Errorf("csf: WithRandom(nil)")
		}
		o.rand = r
		return nil
	}
}

// WithInitialRTT sets the RTT assumed before the first sample (RULINGS C4; default 10 ms).
func WithInitialRTT(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("csf: WithInitialRTT(%v): want > 0", d)
		}
		o.initialRTT = d
		return nil
	}
}

// WithConfig sets the first configuration's scheme, k, m and T (T 0: the RDMA MTU plus the
// largest RoCEv2 header, ICRC and length prefix). It is clipped to the effective limits.
func WithConfig(s wire.Scheme, k, m, T int) Option {
	return func(o *options) error {
		if s != wire.SchemeCauchy && s != wire.SchemeXOR {
			return fmt.Errorf("csf: WithConfig: scheme %v cannot be a configuration", s)
		}
		if k < 1 || k > 255 || m < 0 || k+m > 255 || (T != 0 && (T < 2 || T > 0xffff)) {
			return fmt.Errorf("csf: WithConfig(k=%d, m=%d, T=%d): out of range", k, m, T)
		}
		o.scheme, o.k, o.m, o.t = s, k, m, T
		return nil
	}
}

// WithAdaptation turns the RECOMMENDED policy (RULINGS C6) on or off; off keeps m as configured.
func WithAdaptation(on bool) Option {
	return func(o *options) error { o.adapt = on; return nil }
}

// WithPolicy sets epsilon and rho of the binomial choice of m (defaults 1e-4 and 0.01).
func WithPolicy(epsilon, rho float64) Option {
	return func(o *options) error {
		if epsilon <= 0 || epsilon >= 1 || rho <= 0 || rho >= 1 {
			return fmt.Errorf("csf: WithPolicy(%g, %g): want values in (0, 1)", epsilon, rho)
		}
		o.epsilon, o.rho = epsilon, rho
		return nil
	}
}

// WithRule sets how the Sender chooses m and, for messages whose length it learns, k and their
// repair (protocol notes P5-P9): policy.RuleDraft (the default of the engine) is the draft's
// binomial target alone (C6); policy.RuleCost minimises the expected completion time, from the
// loss estimate, SRTT and what one repair symbol costs at the flow's rate (WithPathRate). Both
// keep the hysteresis, the congestion rule, the repair budget and the circuit breaker.
func WithRule(r policy.Rule) Option {
	return func(o *options) error {
		if r != policy.RuleCost && r != policy.RuleDraft {
			return fmt.Errorf("csf: WithRule(%q): want cost or draft", r)
		}
		o.rule = r
		return nil
	}
}

// WithPathRate tells the cost rule the flow's sending rate in bit/s (0: measured from the gaps
// between the packets of its bursts, E35) and whether repair competes with the sources for the
// bottleneck (default true); when it does not, redundancy costs nothing and the cost rule is the
// draft's target (P6).
func WithPathRate(bitsPerSecond float64, competes bool) Option {
	return func(o *options) error {
		if bitsPerSecond < 0 || math.IsNaN(bitsPerSecond) || math.IsInf(bitsPerSecond, 0) {
			return fmt.Errorf("csf: WithPathRate(%g): want a rate >= 0", bitsPerSecond)
		}
		o.rateBits, o.competes = bitsPerSecond, competes
		return nil
	}
}

// WithLossBurst sets the mean loss burst (in packets, at least 1) the cost rule assumes; the
// estimator does not measure bursts (S18). Default 1, independent loss.
func WithLossBurst(b float64) Option {
	return func(o *options) error {
		if b < 1 || b > 1e6 || math.IsNaN(b) {
			return fmt.Errorf("csf: WithLossBurst(%g): want 1..1e6", b)
		}
		o.lossBurst = b
		return nil
	}
}

// WithRepairFraction sets the repair budget's share of the source rate (C11 b; default 0.5).
func WithRepairFraction(f float64) Option {
	return func(o *options) error {
		if f <= 0 || f > 16 {
			return fmt.Errorf("csf: WithRepairFraction(%g): want (0, 16]", f)
		}
		o.repairFraction = f
		return nil
	}
}

// WithBurstGap sets the floor of the burst gap that closes an open block (C5; default 50 us).
func WithBurstGap(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("csf: WithBurstGap(%v): want > 0", d)
		}
		o.burstGapMin = d
		return nil
	}
}

// WithIdleTimeout sets how long without source packets ends the flow with CLOSE reason 1 (C15).
func WithIdleTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("csf: WithIdleTimeout(%v): want > 0", d)
		}
		o.idle = d
		return nil
	}
}

// WithHoldOff sets the least time between two probes of a CRF that left eight HELLOs
// unanswered (C3; default 1 s): one round of HELLOs per hold-off toward it, per Peer (E71).
func WithHoldOff(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("csf: WithHoldOff(%v): want > 0", d)
		}
		o.holdOff = d
		return nil
	}
}

// WithPeerSilence sets the least time the CRF may send nothing while sources flow before the
// Sender takes the session for lost (the CRF restarted) and starts a new one: the larger of it
// and 32 SRTT, the CRF owing a LOSS_REPORT every SRTT (default 1 s; E31, E70).
func WithPeerSilence(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("csf: WithPeerSilence(%v): want > 0", d)
		}
		o.silence = d
		return nil
	}
}

// WithMaxHeldBlocks bounds the blocks whose sources are kept for retransmission (default twice
// the CRF's Max Open Blocks). The oldest is dropped, and counted, when a new block needs room.
func WithMaxHeldBlocks(n int) Option {
	return func(o *options) error {
		if n < 2 || n > 1<<16 {
			return fmt.Errorf("csf: WithMaxHeldBlocks(%d): want 2..65536", n)
		}
		o.maxHeld = n
		return nil
	}
}

// WithReportAddresses adds an address pair by which path reporters may name the flow in
// PATH_REPORT besides its descriptor's addresses: a node on the path between two relay-mode
// gateways sees the flow's datagrams between the gateways' WAN sockets, not between the
// endpoints' logical addresses, and names it by what it sees. An unspecified address (0.0.0.0,
// ::) on either side matches any address there, not on both. The Flow Label must still be the
// flow's destination QP, and the report must still come from a configured reporter (C14).
func WithReportAddresses(src, dst netip.Addr) Option {
	return func(o *options) error {
		if !src.IsValid() || !dst.IsValid() || src.IsUnspecified() && dst.IsUnspecified() {
			return fmt.Errorf("csf: WithReportAddresses(%v, %v): want two addresses, at least one specified", src, dst)
		}
		o.reportAliases = append(o.reportAliases, [2]netip.Addr{src.Unmap(), dst.Unmap()})
		return nil
	}
}

// WithPeer shares p, what is known of the CRF's liveness and when it may be probed, with the
// other CSFs toward the same CRF (E71): a dead CRF then gets one round of HELLOs per hold-off from all of
// them, not eight per flow. Without it each Sender has a Peer of its own.
func WithPeer(p *Peer) Option {
	return func(o *options) error {
		if p == nil {
			return fmt.Errorf("csf: WithPeer(nil)")
		}
		o.peer = p
		return nil
	}
}

// WithReporters sets the path reporters whose PATH_REPORT is accepted (C14); none by default.
func WithReporters(addrs ...netip.Addr) Option {
	return func(o *options) error {
		for _, a := range addrs {
			if !a.IsValid() {
				return fmt.Errorf("csf: WithReporters: invalid address %v", a)
			}
			o.reporters = append(o.reporters, a.Unmap())
		}
		return nil
	}
}

// WithReverseQP names the queue pair the flow's RDMA acknowledgements are addressed to (the
// requester's): ObserveReverse takes only those. Without it (or SetReverseQP) ObserveReverse
// releases nothing.
func WithReverseQP(qp uint32) Option {
	return func(o *options) error {
		if qp > 0xffffff {
			return fmt.Errorf("csf: WithReverseQP(%#x): exceeds 24 bits", qp)
		}
		o.reverseQP, o.haveReverseQP = qp, true
		return nil
	}
}

// WithQueue bounds the datagrams waiting for Drain (default 4096); more are dropped and counted.
func WithQueue(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("csf: WithQueue(%d): want >= 1", n)
		}
		o.queue = n
		return nil
	}
}

// WithLogger sets where the Sender says what a counter alone would not make visible: a flow
// left unprotected after eight unanswered HELLOs (C3), a CLOSE. Nil (the default) logs nothing.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error { o.log = l; return nil }
}

// WithLongMessageRepair sends extra ordinary repair symbols (fresh indices, at most Max m per
// block, within the budget) for the blocks of a message the Sender knows to be long: an RDMA
// WRITE whose RETH DMA Length is at least minDMA octets (C16). extra 0 (the default) turns it off.
func WithLongMessageRepair(extra int, minDMA uint32) Option {
	return func(o *options) error {
		if extra < 0 || extra > 254 {
			return fmt.Errorf("csf: WithLongMessageRepair(%d, %d): extra out of 0..254", extra, minDMA)
		}
		o.longExtra, o.longMin = extra, minDMA
		return nil
	}
}

// WithMessagePolicy chooses the code of each message whose length the Sender learns: for every
// RDMA WRITE whose RETH gives its DMA Length (the first or only packet), f gets the message's
// packets (ceil(DMA Length / RDMA MTU), 1 to 2^22) and the Sender's loss estimate p, and returns
// k and extra. Blocks that start at a PSN of the message cover at most k positions (a block closed
// early carries its smaller k, which the CRF accepts without a PARAM_UPDATE, C7 c), so the
// configuration's k is the largest the policy may choose; k < 1 keeps the configuration's.
// Blocks that hold PSNs of the message get extra more ordinary symbols at close (fresh indices, at
// most Max m in all, within the budget; C16). It replaces WithLongMessageRepair, which then has
// no effect.
func WithMessagePolicy(f func(packets int, p float64) (k, extra int)) Option {
	return func(o *options) error {
		if f == nil {
			return fmt.Errorf("csf: WithMessagePolicy(nil)")
		}
		o.msgPolicy = f
		return nil
	}
}

// WithInitialLoss starts the loss estimate at p, as a warm flow's estimator would hold it (C6:
// the first LOSS_REPORT intervals are smoothed into it rather than replacing it). It informs
// delta (E11), the policy's choice of m when adaptation is on, and WithMessagePolicy.
func WithInitialLoss(p float64) Option {
	return func(o *options) error {
		if p < 0 || p >= 1 {
			return fmt.Errorf("csf: WithInitialLoss(%g): want [0, 1)", p)
		}
		o.initialLoss, o.seedLoss = p, true
		return nil
	}
}

// WithEncoder replaces package fec's encoder (a simulator's symbolic codec). An encoder that
// implements flow.SourcePrefixer gets source symbols cut to its prefix, and the Sender keeps only
// that much of each source; its Source Copy symbols carry zeros after it.
func WithEncoder(e flow.Encoder) Option {
	return func(o *options) error {
		if e == nil {
			return fmt.Errorf("csf: WithEncoder(nil)")
		}
		o.encoder = e
		return nil
	}
}

// WithHooks sets hooks that bend the Sender's decisions away from the draft (Hooks): tests and
// the conformance runner plant faults through them (package internal/fault). nil (the default)
// bends none; nothing in a deployment sets them.
func WithHooks(h Hooks) Option {
	return func(o *options) error { o.hooks = h; return nil }
}
