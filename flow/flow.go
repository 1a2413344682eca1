package flow

import (
	"fmt"
	"net/netip"

	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// Descriptor names a protected flow as HELLO and PATH_REPORT do: flow kind, the two endpoint
// addresses and, for RoCEv2, the destination queue pair in the Flow Label. SrcPort is the flow's
// UDP source port, which the logical header of RULINGS C12 needs; it is not on the CREM wire.
type Descriptor struct {
	Kind    wire.FlowKind
	Src     netip.Addr
	Dst     netip.Addr
	DestQP  uint32 // 24 bits
	SrcPort uint16
}

// Check reports whether the descriptor can go into a HELLO.
func (d Descriptor) Check() error {
	if d.Kind != wire.FlowKindRoCEv2 {
		return fmt.Errorf("flow: kind %v: only RoCEv2 is defined", d.Kind)
	}
	s, t := d.Src.Unmap(), d.Dst.Unmap()
	if !s.IsValid() || !t.IsValid() || s.Is4() != t.Is4() {
		return fmt.Errorf("flow: addresses %v and %v are not of one IP version", d.Src, d.Dst)
	}
	if d.DestQP > 0xffffff {
		return fmt.Errorf("flow: destination QP %#x exceeds 24 bits", d.DestQP)
	}
	return nil
}

// Key identifies the flow inside an engine: addresses and destination QP.
type Key struct {
	Src, Dst netip.Addr
	DestQP   uint32
}

// Key returns the descriptor's lookup key (IPv4-mapped addresses unmapped).
func (d Descriptor) Key() Key { return Key{Src: d.Src.Unmap(), Dst: d.Dst.Unmap(), DestQP: d.DestQP} }

// LogicalHeader returns the header of RULINGS C12 that the flow's ICRC is computed under in
// relay mode and in the project's own transport.
func (d Descriptor) LogicalHeader() roce.LogicalHeader {
	return roce.LogicalHeader{Src: d.Src, Dst: d.Dst, SrcPort: d.SrcPort}
}

// Config is one configuration of a flow (draft, Configuration).
type Config struct {
	ID     uint8
	Scheme wire.Scheme
	K      int // positions per block
	M      int // ordinary repair symbols per block
	T      int // symbol length
}

// Check applies RULINGS C6(a) against the effective limits.
func (c Config) Check(l Limits) error {
	switch {
	case c.Scheme != wire.SchemeCauchy && c.Scheme != wire.SchemeXOR:
		return fmt.Errorf("flow: config %d: scheme %v cannot be a configuration", c.ID, c.Scheme)
	case !l.Schemes.Has(c.Scheme):
		return fmt.Errorf("flow: config %d: scheme %v not supported by both sides", c.ID, c.Scheme)
	case c.K < 1 || c.K > l.MaxK:
		return fmt.Errorf("flow: config %d: k = %d outside 1..%d", c.ID, c.K, l.MaxK)
	case c.M < 0 || c.M > l.MaxM || c.K+c.M > 255:
		return fmt.Errorf("flow: config %d: m = %d with k = %d (Max m %d, k + m <= 255)", c.ID, c.M, c.K, l.MaxM)
	case c.Scheme == wire.SchemeXOR && c.M > 1:
		return fmt.Errorf("flow: config %d: XOR has at most one repair symbol, m = %d", c.ID, c.M)
	case c.T < 2 || c.T > l.MaxT:
		return fmt.Errorf("flow: config %d: T = %d outside 2..%d", c.ID, c.T, l.MaxT)
	}
	return nil
}

// Limits are what one side can do: the schemes and the largest k, m and T it supports, and
// (for the CRF) the blocks it can hold at once.
type Limits struct {
	Schemes       wire.SchemeSet
	MaxK          int
	MaxM          int
	MaxT          int
	MaxOpenBlocks int
}

// DefaultLimits are generous limits for one flow: scheme 0, 1 and 2, k up to 64, m up to 16,
// T up to 4096, and RULINGS C15's 64 open blocks.
func DefaultLimits() Limits {
	return Limits{
		Schemes: wire.SchemeSet(0).With(wire.SchemeSourceCopy).With(wire.SchemeCauchy).With(wire.SchemeXOR),
		MaxK:    64, MaxM: 16, MaxT: 4096, MaxOpenBlocks: 64,
	}
}

// Check reports whether the limits fit the wire's fields.
func (l Limits) Check() error {
	switch {
	case l.MaxK < 1 || l.MaxK > 255:
		return fmt.Errorf("flow: Max k %d outside 1..255", l.MaxK)
	case l.MaxM < 0 || l.MaxM > 254:
		return fmt.Errorf("flow: Max m %d outside 0..254", l.MaxM)
	case l.MaxT < 2 || l.MaxT > 0xffff:
		return fmt.Errorf("flow: Max T %d outside 2..65535", l.MaxT)
	case l.MaxOpenBlocks < 1 || l.MaxOpenBlocks > 0xffff:
		return fmt.Errorf("flow: Max Open Blocks %d outside 1..65535", l.MaxOpenBlocks)
	case !l.Schemes.Has(wire.SchemeCauchy):
		return fmt.Errorf("flow: scheme 1 is REQUIRED")
	}
	return nil
}

// Min returns the effective limits of two sides: the minimum of each, the common schemes
// (draft, Session).
func (l Limits) Min(o Limits) Limits {
	r := Limits{Schemes: l.Schemes & o.Schemes, MaxK: min(l.MaxK, o.MaxK), MaxM: min(l.MaxM, o.MaxM),
		MaxT: min(l.MaxT, o.MaxT), MaxOpenBlocks: l.MaxOpenBlocks}
	if o.MaxOpenBlocks > 0 && (r.MaxOpenBlocks == 0 || o.MaxOpenBlocks < r.MaxOpenBlocks) {
		r.MaxOpenBlocks = o.MaxOpenBlocks
	}
	return r
}

// Capabilities returns the limits as HELLO and HELLO_ACK state them.
func (l Limits) Capabilities(mtu int) wire.Capabilities {
	return wire.Capabilities{FlowKind: wire.FlowKindRoCEv2, Schemes: l.Schemes, MaxK: uint8(l.MaxK),
		MaxM: uint8(l.MaxM), MaxT: uint16(l.MaxT), RDMAMTU: uint16(mtu)}
}

// LimitsOf reads the limits a HELLO or HELLO_ACK states.
func LimitsOf(c wire.Capabilities, maxOpenBlocks int) Limits {
	return Limits{Schemes: c.Schemes, MaxK: int(c.MaxK), MaxM: int(c.MaxM), MaxT: int(c.MaxT), MaxOpenBlocks: maxOpenBlocks}
}
