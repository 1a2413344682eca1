package crf

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/crem-project/crem/flow"
)

// Option configures a Receiver; it returns an error for a value it cannot use.
type Option func(*options) error

type options struct {
	limits     flow.Limits
	rand       func() uint64
	settings   func(flow.Descriptor) (Settings, bool)
	maxFlows   int
	initialRTT time.Duration
	queue      int
	deliveries int
	firstReqID uint16
	memory     int // per-flow decoding memory a configuration may reserve (PARAM_ACK status 3 beyond)
	decoders   func() (flow.Decoder, error)
	// Pending sessions (E54): in all, per source address, and how long one waits for its proof
	// (also how long a flow without any source or REPAIR lives).
	pending, perSource int
	handshake          time.Duration
	log                *slog.Logger
	hooks              Hooks
	events             func(Event)
}

// Defaults of the pending sessions (WithHandshakes).
const (
	defaultPending   = 2048
	defaultPerSource = 256
	defaultHandshake = 3 * time.Second
)

func defaults() options {
	return options{limits: flow.DefaultLimits(), maxFlows: 1024, initialRTT: flow.DefaultInitialRTT,
		queue: 4096, deliveries: 8192, memory: 64 << 20,
		pending: defaultPending, perSource: defaultPerSource, handshake: defaultHandshake}
}

// Verify selects how a restored packet's ICRC is checked (RULINGS C12).
type Verify int

const (
	// VerifyLogical checks under the flow's logical header (relay mode, own transport).
	VerifyLogical Verify = iota
	// VerifyTemplate checks under the flow's header template (transparent mode): the latest
	// received source packet's IP and UDP headers, which ObserveIP (or SetTemplate) records, with
	// the IPv4 Identification interpolated from the PSN neighbours.
	VerifyTemplate
	// VerifyFunc checks with Settings.Verifier (flow kinds whose packets are not RoCEv2).
	VerifyFunc
)

// Settings are a flow's local choices, made by the driver when HELLO arrives.
type Settings struct {
	// Ordered delivers in PSN order for go-back-N receivers, holding packets after a gap
	// (C7 a); otherwise sources pass at once and restored packets follow when decoded.
	Ordered bool
	// Verify and Verifier choose the ICRC check of restored packets.
	Verify   Verify
	Verifier func(pkt []byte) error
	// SrcPort is the flow's UDP source port, part of its logical header (C12); HELLO does not
	// carry it, so the driver supplies it from its configuration or the first source packet.
	// 0 in transparent mode: the UDP source port of the flow's header template (ObserveIP).
	SrcPort uint16
	// HoldPackets and HoldBytes bound the ordered-mode hold (C15: Max Open Blocks x k packets,
	// 64 MiB); 0 takes the defaults.
	HoldPackets, HoldBytes int
	// Reorder is the reorder allowance of C7 f (0: max(1 ms, SRTT/8)).
	Reorder time.Duration
	// Idle ends the flow with CLOSE reason 1 after this long without source packets (0: 30 s).
	Idle time.Duration
}

// WithLimits sets the CRF's limits for HELLO_ACK, Max Open Blocks included.
func WithLimits(l flow.Limits) Option {
	return func(o *options) error {
		if err := l.Check(); err != nil {
			return fmt.Errorf("crf: WithLimits: %w", err)
		}
		o.limits = l
		return nil
	}
}

// WithRandom sets the source of Flow IDs and Request IDs (required: no global randomness).
func WithRandom(r func() uint64) Option {
	return func(o *options) error {
		if r == nil {
			return fmt.Errorf("crf: WithRandom(nil)")
		}
		o.rand = r
		return nil
	}
}

// WithSettings sets the callback that chooses a new flow's settings; returning false refuses
// the flow (its HELLO is dropped silently and counted, C3).
func WithSettings(f func(flow.Descriptor) (Settings, bool)) Option {
	return func(o *options) error {
		if f == nil {
			return fmt.Errorf("crf: WithSettings(nil)")
		}
		o.settings = f
		return nil
	}
}

// WithMaxFlows bounds the flows served at once (default 1024).
func WithMaxFlows(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("crf: WithMaxFlows(%d): want >= 1", n)
		}
		o.maxFlows = n
		return nil
	}
}

// WithInitialRTT sets the RTT assumed before the first sample (C4; default 10 ms).
func WithInitialRTT(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("crf: WithInitialRTT(%v): want > 0", d)
		}
		o.initialRTT = d
		return nil
	}
}

// WithQueues bounds the CREM messages and the deliveries waiting to be drained.
func WithQueues(messages, deliveries int) Option {
	return func(o *options) error {
		if messages < 1 || deliveries < 1 {
			return fmt.Errorf("crf: WithQueues(%d, %d): want >= 1", messages, deliveries)
		}
		o.queue, o.deliveries = messages, deliveries
		return nil
	}
}

// WithFirstRequestID makes every new flow number its Request IDs from id (tests reproducing
// the Appendix); by default each flow starts at a random nonzero value.
func WithFirstRequestID(id uint16) Option {
	return func(o *options) error {
		if id == 0 {
			return fmt.Errorf("crf: WithFirstRequestID(0): Request IDs are never 0 (C4)")
		}
		o.firstReqID = id
		return nil
	}
}

// WithMemory bounds the decoding memory (Max Open Blocks x k x T) one configuration may
// reserve; a larger one is refused with PARAM_ACK status 3 (default 64 MiB).
func WithMemory(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("crf: WithMemory(%d): want >= 1", n)
		}
		o.memory = n
		return nil
	}
}

// WithDecoders replaces package fec's decoder (a simulator's symbolic codec): f returns a new one
// whenever no ended block's decoder is free for reuse. New calls it once to learn whether the
// codec reads only a prefix of each source (flow.SourcePrefixer); an error there fails New.
func WithDecoders(f func() (flow.Decoder, error)) Option {
	return func(o *options) error {
		if f == nil {
			return fmt.Errorf("crf: WithDecoders(nil)")
		}
		o.decoders = f
		return nil
	}
}

// WithHandshakes bounds the sessions HELLO begins before they prove themselves by a message
// with their Flow ID from the HELLO's address (E54): at most pending in all and perSource from
// one source address (default 2048 and 256), each for at most expiry (default 3 s), which is
// also how long a flow lives before its first source or REPAIR. When a budget is full the
// oldest of it is evicted for the new HELLO, unless it is younger than the initial RTT (the
// round trip its proof needs): then the HELLO is refused, silently and counted (C3).
func WithHandshakes(pending, perSource int, expiry time.Duration) Option {
	return func(o *options) error {
		if pending < 1 || perSource < 1 || expiry <= 0 {
			return fmt.Errorf("crf: WithHandshakes(%d, %d, %v): want >= 1, >= 1, > 0", pending, perSource, expiry)
		}
		o.pending, o.perSource, o.handshake = pending, perSource, expiry
		return nil
	}
}

// WithLogger sets where the Receiver logs what an operator should hear of: a HELLO refused for
// a flow bound to another address (once per flow), a HELLO flood (once until it ends), a flow
// restarted by its CSF. nil (the default) logs nothing; the counters count it all.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		o.log = l
		return nil
	}
}

// WithHooks sets hooks that bend the Receiver's decisions away from the draft (Hooks): tests
// and the conformance runner plant faults through them (package internal/fault). nil (the
// default) bends none; nothing in a deployment sets them.
func WithHooks(h Hooks) Option {
	return func(o *options) error { o.hooks = h; return nil }
}
