package crf

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/crem-project/crem/wire"
)

// Hooks bend the Receiver's decisions away from the draft, one rule each, so that the mutation
// check of `crem conform` (docs/conformance.md) can show the conformance tests catch every
// departure. Each method names the decision it bends and reports whether to bend it; package
// internal/fault maps its planted faults onto them. Production sets none (WithHooks is for
// tests and the conformance runner), and then no decision is bent.
type Hooks interface {
	// PadHelloAck: HELLO_ACK is padded to faultAckPadding octets more than the HELLO it
	// answers (Security Considerations: no reflection amplification).
	PadHelloAck() bool
	// OwnLimits: the CRF's own limits are taken as the flow's, not the minimum of both
	// sides' (Section 6).
	OwnLimits() bool
	// RareLossReports: LOSS_REPORT goes every faultReportEvery SRTT, at least
	// faultReportFloor apart, instead of once per SRTT (Section 8).
	RareLossReports() bool
	// HideLosses: a LOSS_REPORT states Expected equal to Received (Section 8).
	HideLosses() bool
	// AcceptMalformedRepair: a REPAIR whose Length disagrees with its datagram is read
	// anyway (Section 4).
	AcceptMalformedRepair() bool
	// HonourSpoofedClose: a CLOSE from an address other than the bound one ends the flow or
	// the pending session (Security Considerations).
	HonourSpoofedClose() bool
}

// hook reports whether the hooks bend decision d; without hooks (production) none is bent.
func (r *Receiver) hook(d func(Hooks) bool) bool { return r.o.hooks != nil && d(r.o.hooks) }

// The constants the bent decisions use.
const (
	// Under Hooks.RareLossReports LOSS_REPORT goes every faultReportEvery SRTT, at least
	// faultReportFloor apart, instead of once per SRTT.
	faultReportEvery = 16
	faultReportFloor = time.Second
	// faultAckPadding is how many octets beyond the HELLO it answers a HELLO_ACK has under
	// Hooks.PadHelloAck.
	faultAckPadding = 16
)

// closeSource is the address a CLOSE for flowID from from counts as coming from: from itself,
// or under Hooks.HonourSpoofedClose the bound address of the pending session or else of the
// flow with that ID, so that a CLOSE from anywhere ends it.
func (r *Receiver) closeSource(flowID uint32, from netip.AddrPort) netip.AddrPort {
	if !r.hook(Hooks.HonourSpoofedClose) {
		return from
	}
	if p := r.pendingFor(flowID); p != nil {
		return p.from
	}
	if f := r.flow(flowID); f != nil {
		return f.from
	}
	return from
}

// sendHelloAck queues a HELLO_ACK answering a HELLO of helloLen octets. Under
// Hooks.PadHelloAck it is padded with zero octets (its Length counting them) to
// faultAckPadding octets more than the HELLO: a reflection amplifier.
func (r *Receiver) sendHelloAck(to netip.AddrPort, ack *wire.HelloAck, helloLen int) bool {
	if !r.hook(Hooks.PadHelloAck) {
		return r.send(to, ack)
	}
	b, ok := r.reserve()
	if !ok {
		return false
	}
	b, err := ack.Append(b)
	if err == nil {
		for len(b) < helloLen+faultAckPadding {
			b = append(b, 0)
		}
		binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	}
	return r.commit(to, b, err)
}

// parseMalformedRepair is Hooks.AcceptMalformedRepair: a REPAIR whose Length disagrees with its datagram
// is read anyway, as if Length were the datagram's size, or else as if the datagram ended
// where Length says.
func parseMalformedRepair(msg []byte) (wire.Repair, error) {
	fixed := append([]byte(nil), msg...)
	if len(fixed) >= wire.HeaderLen && len(fixed) <= wire.MaxLength {
		binary.BigEndian.PutUint16(fixed[2:], uint16(len(fixed)))
	}
	m, err := wire.ParseRepair(fixed)
	if err == nil {
		return m, nil
	}
	if len(msg) >= wire.HeaderLen {
		if n := int(binary.BigEndian.Uint16(msg[2:])); n >= wire.HeaderLen && n < len(msg) {
			return wire.ParseRepair(msg[:n])
		}
	}
	return m, err
}
