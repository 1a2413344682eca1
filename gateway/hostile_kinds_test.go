package gateway_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/gateway"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// The kinds of hostile datagram TestHostileTraffic sends, indexes into hostileKinds.
const (
	hEmpty         = iota // an empty datagram (CREM and WAN sockets)
	hGarbage              // random octets
	hMalformed            // a CREM header (Version 1) with a body that does not parse
	hHelloSpoofed         // HELLO for a new descriptor from a spoofed address
	hHelloLive            // HELLO with a live flow's descriptor (a takeover) from a spoofed address
	hCloseSpoofed         // CLOSE with a live flow's Flow ID from a spoofed address
	hRepairSpoofed        // REPAIR with a live flow's Flow ID from a spoofed address
	hPathReport           // PATH_REPORT from an address not in reporters
	hForgedRepair         // REPAIR from the handshake address (injected on the path) with a forged symbol
	hKinds
)

// hostileEnv is what the attack knows when it makes a datagram.
type hostileEnv struct {
	gws          [2]*gateway.Gateway
	addrA, addrB netip.Addr
	qpA, qpB     []uint32    // the QPs' numbers at A and at B
	ids          [2][]uint32 // the live Flow IDs seen on the path, per side (side 0: B's CRF's)
	batch        int
	mtu          int
}

// hostileOutcome is what a kind's check reads: each gateway's counters before and after the
// attack, and what was sent of the kind to each gateway's CREM socket.
type hostileOutcome struct {
	base, st [2]gateway.Stats
	sentCREM [hKinds][2]uint64
	sent     [hKinds]uint64
}

// gw is the growth of gateway i's counter name through the attack.
func (o *hostileOutcome) gw(i int, name string) uint64 {
	return o.st[i].Gateway[name] - o.base[i].Gateway[name]
}

// lost is what gateway i lost of its CREM datagrams before any engine or the router saw them
// (counted): a kind's refusals fall short of what was sent by as much.
func (o *hostileOutcome) lost(i int) uint64 {
	return o.gw(i, "socket_drops_crem") + o.gw(i, "shard_queue_full") + o.gw(i, "buffers_exhausted")
}

// d returns the growth of a counter read by f from gateway i's Stats.
func (o *hostileOutcome) d(i int, f func(s *gateway.Stats) uint64) uint64 {
	return f(&o.st[i]) - f(&o.base[i])
}

// peerRestarts is how many sessions the CSFs of the gateway other than i started anew.
func (o *hostileOutcome) peerRestarts(i int) uint64 {
	return o.d(1-i, func(s *gateway.Stats) uint64 { return s.Sender.PeerSilent + s.Sender.PSNSpaceRestarts })
}

// hostileKind is one kind of hostile datagram: how the attack makes one (nil: the path
// forges it) and what it must have caused at gateway i, which was sent some of it.
type hostileKind struct {
	name  string
	gen   func(e *hostileEnv, r *rand.Rand, side int) (to netip.AddrPort, b []byte)
	check func(t *testing.T, i int, o *hostileOutcome)
}

// atLeast fails t unless got plus what gateway i lost reaches 9/10 of want.
func atLeast(t *testing.T, o *hostileOutcome, i int, what string, got, want uint64) {
	t.Helper()
	t.Logf("gateway %c: %s %d (lost %d) for %d", 'A'+i, what, got, o.lost(i), want)
	if got+o.lost(i) < want*9/10 {
		t.Errorf("gateway %c: %s %d (and %d lost, counted), want about %d", 'A'+i, what, got, o.lost(i), want)
	}
}

// nonZero fails t unless the counter grew.
func nonZero(t *testing.T, i int, what string, n uint64) {
	t.Helper()
	t.Logf("gateway %c: %s %d", 'A'+i, what, n)
	if n == 0 {
		t.Errorf("gateway %c: %s did not grow", 'A'+i, what)
	}
}

// encoded returns b, or panics: a kind that failed to encode would send an empty datagram
// in its name (the attack goroutine has no t to fail).
func encoded(b []byte, err error) []byte {
	if err != nil {
		panic(fmt.Sprintf("a hostile datagram does not encode: %v", err))
	}
	return b
}

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(r.Uint32())
	}
	return b
}

// hello makes a HELLO to the CRF of gateway side (A's serves the flows from B).
func (e *hostileEnv) hello(r *rand.Rand, side int, live bool) []byte {
	src, dst := e.addrA, e.addrB
	if side == 0 {
		src, dst = e.addrB, e.addrA
	}
	qp := r.Uint32N(1 << 24)
	if live {
		j := r.IntN(len(e.qpB))
		qp = e.qpB[j]
		if side == 0 {
			qp = e.qpA[j]
		}
	} else if r.IntN(2) == 0 {
		src = netip.AddrFrom4([4]byte{10, 9, byte(r.IntN(256)), byte(r.IntN(256))}) // no rule's
	}
	h := wire.Hello{Capabilities: flow.DefaultLimits().Capabilities(e.mtu), SenderNonce: r.Uint64(),
		Source: src, Destination: dst, FlowLabel: qp}
	return encoded(h.Append(nil))
}

// liveID is one of the Flow IDs of gateway side's CRF.
func (e *hostileEnv) liveID(r *rand.Rand, side int) uint32 {
	l := e.ids[1-side]
	return l[r.IntN(len(l))]
}

var hostileKinds = [hKinds]hostileKind{
	hEmpty: {name: "empty",
		gen: func(e *hostileEnv, r *rand.Rand, side int) (netip.AddrPort, []byte) {
			if r.IntN(2) == 0 {
				return e.gws[side].WANAddr(), nil
			}
			return e.gws[side].CREMAddr(), nil
		},
		check: func(t *testing.T, i int, o *hostileOutcome) {
			atLeast(t, o, i, "router's crem_discarded", o.gw(i, "crem_discarded"), o.sentCREM[hEmpty][i])
		}},
	hGarbage: {name: "garbage",
		gen: func(e *hostileEnv, r *rand.Rand, side int) (netip.AddrPort, []byte) {
			return e.gws[side].CREMAddr(), randomBytes(r, 1+r.IntN(1400))
		},
		check: func(t *testing.T, i int, o *hostileOutcome) {
			// 15 in 16 have another Version than CREM's; the empty ones are discarded as well.
			atLeast(t, o, i, "router's crem_discarded", o.gw(i, "crem_discarded"), o.sentCREM[hEmpty][i]+o.sentCREM[hGarbage][i]*15/16)
		}},
	hMalformed: {name: "malformed",
		gen: func(e *hostileEnv, r *rand.Rand, side int) (netip.AddrPort, []byte) {
			b := randomBytes(r, wire.HeaderLen+r.IntN(40))
			b[0] = wire.Version<<4 | byte(r.IntN(16))
			binary.BigEndian.PutUint16(b[2:], uint16(len(b)+1+r.IntN(100))) // a Length the datagram does not have
			return e.gws[side].CREMAddr(), b
		},
		check: func(t *testing.T, i int, o *hostileOutcome) {
			// The router refuses what it cannot route (a header type it does not know, a HELLO
			// it cannot peek at, an unknown Flow ID); a HELLO or PATH_REPORT that names a flow
			// goes to its engine, which counts it malformed.
			routed := o.gw(i, "crem_malformed") + o.gw(i, "crem_unknown_flow")
			engines := o.d(i, func(s *gateway.Stats) uint64 { return s.Receiver.MessagesMalformed + s.Sender.MessagesMalformed })
			// Of the 16 Type values, those the router does not know (about 6 in 16) are
			// discarded with the garbage; the others (well over half) are counted here.
			t.Logf("gateway %c: engines' MessagesMalformed (CRF + CSF) %d", 'A'+i, engines)
			atLeast(t, o, i, "router's crem_malformed + crem_unknown_flow + engines' MessagesMalformed", routed+engines, o.sentCREM[hMalformed][i]/2)
		}},
	hHelloSpoofed: {name: "hello spoofed",
		gen: func(e *hostileEnv, r *rand.Rand, side int) (netip.AddrPort, []byte) {
			return e.gws[side].CREMAddr(), e.hello(r, side, false)
		},
		check: func(t *testing.T, i int, o *hostileOutcome) {
			// Half name a source no rule serves: refused; the others open sessions that
			// no one proves, expired or evicted (or turned away while the budget is full).
			nonZero(t, i, "CRF HelloRefused", o.d(i, func(s *gateway.Stats) uint64 { return s.Receiver.HelloRefused }))
			nonZero(t, i, "CRF HandshakesExpired + HandshakesEvicted + HelloBusy", o.d(i, func(s *gateway.Stats) uint64 {
				return s.Receiver.HandshakesExpired + s.Receiver.HandshakesEvicted + s.Receiver.HelloBusy
			}))
		}},
	hHelloLive: {name: "hello live descriptor",
		gen: func(e *hostileEnv, r *rand.Rand, side int) (netip.AddrPort, []byte) {
			return e.gws[side].CREMAddr(), e.hello(r, side, true)
		},
		check: func(t *testing.T, i int, o *hostileOutcome) {
			// The flow is established from the peer gateway: no other address takes it over
			// (that the same flows carried both transfers is checked in "transfer verified").
			nonZero(t, i, "CRF TakeoverRefused", o.d(i, func(s *gateway.Stats) uint64 { return s.Receiver.TakeoverRefused }))
			// A flow restarts only when its CSF (at the other gateway) started a session anew.
			if n, r := o.d(i, func(s *gateway.Stats) uint64 { return s.Receiver.FlowsRestarted }), o.peerRestarts(i); n > r {
				t.Errorf("gateway %c: %d flows restarted for %d sessions the CSFs started anew", 'A'+i, n, r)
			}
		}},
	hCloseSpoofed: {name: "close spoofed",
		gen: func(e *hostileEnv, r *rand.Rand, side int) (netip.AddrPort, []byte) {
			m := wire.Close{FlowID: e.liveID(r, side), Reason: wire.ReasonNormal}
			return e.gws[side].CREMAddr(), encoded(m.Append(nil))
		},
		check: func(t *testing.T, i int, o *hostileOutcome) {
			nonZero(t, i, "CRF MessagesWrongSource", o.d(i, func(s *gateway.Stats) uint64 { return s.Receiver.MessagesWrongSource }))
			if n := o.d(i, func(s *gateway.Stats) uint64 { return s.Receiver.CloseReceived + s.Sender.CloseReceived }); n != 0 {
				t.Errorf("gateway %c: %d CLOSE taken", 'A'+i, n)
			}
		}},
	hRepairSpoofed: {name: "repair spoofed",
		gen: func(e *hostileEnv, r *rand.Rand, side int) (netip.AddrPort, []byte) {
			m := wire.Repair{FlowID: e.liveID(r, side), ConfigID: 1, Scheme: wire.SchemeCauchy, K: 32, RepairIndex: uint8(r.IntN(4)),
				BlockStartPSN: psn.PSN(r.Uint32N(psn.Modulus)), Present: psn.FirstK(32), Symbol: make([]byte, 1024)}
			return e.gws[side].CREMAddr(), encoded(m.Append(nil))
		},
		check: func(t *testing.T, i int, o *hostileOutcome) {
			// Every spoofed CLOSE and REPAIR names a live flow of this CRF from another address.
			// When a CSF started a session anew (a stalled machine), the old Flow ID is the
			// router's unknown flow.
			got, what := o.d(i, func(s *gateway.Stats) uint64 { return s.Receiver.MessagesWrongSource }), "CRF MessagesWrongSource (spoofed CLOSE and REPAIR)"
			if o.peerRestarts(i) > 0 {
				got, what = got+o.gw(i, "crem_unknown_flow"), what+" + crem_unknown_flow (sessions restarted)"
			}
			atLeast(t, o, i, what, got,
				o.sentCREM[hCloseSpoofed][i]+o.sentCREM[hRepairSpoofed][i])
		}},
	hPathReport: {name: "path report unlisted",
		gen: func(e *hostileEnv, r *rand.Rand, side int) (netip.AddrPort, []byte) {
			src, dst := e.addrA, e.addrB // A's CSFs: the flows from A
			j := r.IntN(len(e.qpB))
			qp := e.qpB[j]
			if side == 1 {
				src, dst, qp = e.addrB, e.addrA, e.qpA[j]
			}
			m := wire.PathReport{Method: 1, Source: src, Destination: dst, FlowLabel: qp,
				Hops: []wire.HopEntry{{NodeID: 7, MarkingPeriodNumber: uint32(e.batch)}}}
			return e.gws[side].CREMAddr(), encoded(m.Append(nil))
		},
		check: func(t *testing.T, i int, o *hostileOutcome) {
			atLeast(t, o, i, "CSF PathReportsUnlisted", o.d(i, func(s *gateway.Stats) uint64 { return s.Sender.PathReportsUnlisted }),
				o.sentCREM[hPathReport][i])
			nonZero(t, i, "CSF PathReportsRejected", o.d(i, func(s *gateway.Stats) uint64 { return s.Sender.PathReportsRejected }))
		}},
	hForgedRepair: {name: "repair forged on path",
		check: func(t *testing.T, i int, o *hostileOutcome) {
			// A forged symbol fails the ICRC check of what it restores, or is held as a
			// conflicting version, or waits aside for a block it never fits: never a wrong
			// byte (checked in "transfer verified"), and restorations go on.
			nonZero(t, i, "CRF ICRCMismatch + RepairConflict + RepairAside", o.d(i, func(s *gateway.Stats) uint64 {
				f := &s.Receiver.Flows
				return f.ICRCMismatch + f.RepairConflict + f.RepairAside
			}))
			nonZero(t, i, "CRF Restored", o.d(i, func(s *gateway.Stats) uint64 { return s.Receiver.Flows.Restored }))
		}},
}
