package rc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/crem-project/crem/psn"
)

// SetupType is the kind of a connection-setup message.
type SetupType uint8

// The connection-setup messages (protocol notes, RC transport).
const (
	SetupRequest SetupType = 1 // requester to responder: its QP and the connection's parameters
	SetupAccept  SetupType = 2 // the answer: the responder's QP
	SetupReject  SetupType = 3 // the answer when the responder cannot serve; App says why
	SetupDone    SetupType = 4 // the application's end-of-run message (App)
	SetupResult  SetupType = 5 // its answer (App)
)

// SetupVersion is the version this package speaks.
const SetupVersion = 1

// SetupHeaderLen is the fixed part of a setup message; SetupMaxApp bounds its App data.
const (
	SetupHeaderLen = 74
	SetupMaxApp    = 1024
)

// ErrSetup is wrapped by every error about a malformed setup message.
var ErrSetup = errors.New("rc: malformed setup message")

// SetupMsg is one message of the connection-setup exchange, carried in one UDP datagram on a
// port of its own (not 4791).
type SetupMsg struct {
	Type     SetupType
	Nonce    uint64 // chosen by the requester; answers and retransmissions repeat it
	QPN      uint32 // the sender's QP
	StartPSN psn.PSN
	MTU      int
	Mode     Mode
	TCAETH   bool // the T/C AETH extension is used (T2): true exactly with Mode tcaeth
	SRNoNAK  bool // sr without NAKs
	Rate     int64
	RTT      time.Duration // the sender's RTT estimate, microsecond resolution
	DataPort uint16        // UDP port the sender's RoCE socket receives on
	FlowPort uint16        // UDP source port of the sender's packets in the logical header (C12)
	// The flow's endpoint addresses (C12), requester's then responder's, as the requester
	// configured them; both sides seal and check ICRCs under them.
	RequesterAddr, ResponderAddr netip.Addr
	App                          []byte
}

var setupMagic = [2]byte{'R', 'C'}

func setupErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrSetup, fmt.Sprintf(format, a...))
}

// srSACK reports whether the QP's sr NAKs carry the runs received (protocol notes R15): set
// in the flags exactly with mode sr and NAKs on.
func (m *SetupMsg) srSACK() bool { return m.Mode == ModeSR && !m.SRNoNAK }

// srRTOSACK reports whether the QP's sr ACKs without NAKs come with the runs received
// (protocol notes R19): set in the flags exactly with mode sr and NAKs off.
func (m *SetupMsg) srRTOSACK() bool { return m.Mode == ModeSR && m.SRNoNAK }

// connects reports whether the type carries QP parameters.
func (t SetupType) connects() bool { return t == SetupRequest || t == SetupAccept }

func (m *SetupMsg) validate() error {
	if m.Type < SetupRequest || m.Type > SetupResult {
		return setupErr("type %d", m.Type)
	}
	if len(m.App) > SetupMaxApp {
		return setupErr("%d octets of application data exceed %d", len(m.App), SetupMaxApp)
	}
	if !m.Type.connects() {
		return nil
	}
	switch {
	case m.QPN < 2 || m.QPN > psn.Mask:
		return setupErr("QPN %#x outside 2..2^24-1", m.QPN)
	case m.StartPSN > psn.Mask:
		return setupErr("start PSN %#x exceeds 24 bits", uint32(m.StartPSN))
	case !ValidMTU(m.MTU):
		return setupErr("MTU %d", m.MTU)
	case m.Mode > ModeTCAETH:
		return setupErr("mode %d", m.Mode)
	case m.TCAETH != (m.Mode == ModeTCAETH):
		return setupErr("T/C AETH flag %v with mode %v", m.TCAETH, m.Mode)
	case m.SRNoNAK && m.Mode != ModeSR:
		return setupErr("SR NAKs off with mode %v", m.Mode)
	case m.Rate < 0:
		return setupErr("rate %d", m.Rate)
	case m.RTT < 0 || m.RTT > time.Duration(1<<32-1)*time.Microsecond:
		return setupErr("RTT %v", m.RTT)
	case !m.RequesterAddr.IsValid() || !m.ResponderAddr.IsValid():
		return setupErr("endpoint addresses missing")
	case m.RequesterAddr.Unmap().Is4() != m.ResponderAddr.Unmap().Is4():
		return setupErr("endpoint addresses %v and %v of two IP versions", m.RequesterAddr, m.ResponderAddr)
	}
	return nil
}

// Len returns the encoded length.
func (m *SetupMsg) Len() int { return SetupHeaderLen + len(m.App) }

// Append appends the encoded message to b.
func (m *SetupMsg) Append(b []byte) ([]byte, error) {
	if err := m.validate(); err != nil {
		return b, err
	}
	var flags byte
	if m.TCAETH {
		flags |= 1
	}
	if m.SRNoNAK {
		flags |= 2
	}
	if m.srSACK() {
		flags |= 4
	}
	if m.srRTOSACK() {
		flags |= 8
	}
	b = append(b, setupMagic[0], setupMagic[1], SetupVersion, byte(m.Type))
	b = binary.BigEndian.AppendUint64(b, m.Nonce)
	b = binary.BigEndian.AppendUint32(b, m.QPN)
	b = binary.BigEndian.AppendUint32(b, uint32(m.StartPSN))
	b = binary.BigEndian.AppendUint16(b, uint16(m.MTU))
	b = append(b, byte(m.Mode), flags)
	b = binary.BigEndian.AppendUint64(b, uint64(m.Rate))
	b = binary.BigEndian.AppendUint32(b, uint32(m.RTT/time.Microsecond))
	b = binary.BigEndian.AppendUint16(b, m.DataPort)
	b = binary.BigEndian.AppendUint16(b, m.FlowPort)
	for _, a := range []netip.Addr{m.RequesterAddr, m.ResponderAddr} {
		var x [16]byte
		if a.IsValid() {
			x = a.As16() // IPv4 as IPv4-mapped
		}
		b = append(b, x[:]...)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.App)))
	return append(b, m.App...), nil
}

// ParseSetup decodes a setup message from the start of b and reports how many octets it read.
// App aliases b.
func ParseSetup(b []byte) (SetupMsg, int, error) {
	var m SetupMsg
	if len(b) < SetupHeaderLen {
		return m, 0, setupErr("%d octets, want at least %d", len(b), SetupHeaderLen)
	}
	if b[0] != setupMagic[0] || b[1] != setupMagic[1] {
		return m, 0, setupErr("magic %#x %#x", b[0], b[1])
	}
	if b[2] != SetupVersion {
		return m, 0, setupErr("version %d, want %d", b[2], SetupVersion)
	}
	m.Type = SetupType(b[3])
	m.Nonce = binary.BigEndian.Uint64(b[4:])
	m.QPN = binary.BigEndian.Uint32(b[12:])
	m.StartPSN = psn.PSN(binary.BigEndian.Uint32(b[16:]))
	m.MTU = int(binary.BigEndian.Uint16(b[20:]))
	m.Mode = Mode(b[22])
	flags := b[23]
	if flags&^15 != 0 {
		return m, 0, setupErr("reserved flags %#x", flags)
	}
	m.TCAETH, m.SRNoNAK = flags&1 != 0, flags&2 != 0
	if flags&4 != 0 != m.srSACK() {
		// A peer that reads sr NAKs by protocol notes R4 alone would take R15's runs in
		// the MSN field for message numbers, and the other way round.
		return m, 0, setupErr("sr selective acknowledgement flag %v with mode %v, NAKs off %v", flags&4 != 0, m.Mode, m.SRNoNAK)
	}
	if flags&8 != 0 != m.srRTOSACK() {
		// A peer that keeps sr without NAKs free of reports would take them for NAKs.
		return m, 0, setupErr("sr run report flag %v with mode %v, NAKs off %v", flags&8 != 0, m.Mode, m.SRNoNAK)
	}
	rate := binary.BigEndian.Uint64(b[24:])
	if rate > 1<<62 {
		return m, 0, setupErr("rate %d", rate)
	}
	m.Rate = int64(rate)
	m.RTT = time.Duration(binary.BigEndian.Uint32(b[32:])) * time.Microsecond
	m.DataPort = binary.BigEndian.Uint16(b[36:])
	m.FlowPort = binary.BigEndian.Uint16(b[38:])
	var zero [16]byte
	for i, dst := range []*netip.Addr{&m.RequesterAddr, &m.ResponderAddr} {
		raw := [16]byte(b[40+16*i:])
		if raw != zero {
			*dst = netip.AddrFrom16(raw).Unmap()
		}
	}
	n := int(binary.BigEndian.Uint16(b[72:]))
	if len(b) < SetupHeaderLen+n {
		return m, 0, setupErr("application data of %d octets cut to %d", n, len(b)-SetupHeaderLen)
	}
	m.App = b[SetupHeaderLen : SetupHeaderLen+n]
	if err := m.validate(); err != nil {
		return SetupMsg{}, 0, err
	}
	return m, SetupHeaderLen + n, nil
}
