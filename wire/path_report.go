package wire

import (
	"encoding/binary"
	"math"
	"net/netip"
	"time"

	"github.com/crem-project/crem/psn"
)

// MaxHopEntries is the most hop entries one PATH_REPORT carries (draft, PATH_REPORT).
const MaxHopEntries = 16

// hopEntryFixedLen is a hop entry without its dropped PSNs (RULINGS C10).
const hopEntryFixedLen = 20

// PathReport is a PATH_REPORT message (type 8): a Path Reporter's per-hop loss and delay for one
// flow. The reporter does not know the Flow ID, which is zero; the flow is named by its addresses
// and Flow Label as in HELLO.
type PathReport struct {
	Truncated   bool // dropped-PSN lists were cut to fit the path MTU
	Method      Method
	Source      netip.Addr // both IPv4 or both IPv6, which sets the AF octet
	Destination netip.Addr
	FlowLabel   uint32
	Hops        []HopEntry // at most MaxHopEntries
}

// HopEntry is one measurement point of a PATH_REPORT (RULINGS C10).
type HopEntry struct {
	NodeID              uint32
	MarkingPeriodNumber uint32
	// LostCount is the flow's packets lost between the previous measurement point and this one
	// in the marking period.
	LostCount uint32
	// QueueDelayChangeUS is the change of queueing delay against the previous period, in
	// microseconds.
	QueueDelayChangeUS int32
	Cause              Cause
	DroppedPSNs        []psn.PSN // at most 255, the PSN Count
}

// Type returns TypePathReport.
func (m *PathReport) Type() Type { return TypePathReport }

// AF returns the address family of the flow's addresses (0 when they are unset or mixed).
func (m *PathReport) AF() AF {
	af := afOf(m.Source)
	if afOf(m.Destination) != af {
		return 0
	}
	return af
}

// Length returns the octets the message occupies on the wire.
func (m *PathReport) Length() int {
	n := HeaderLen + 4 + 2*afOf(m.Source).AddrLen() + 4
	for i := range m.Hops {
		n += hopEntryFixedLen + 4*len(m.Hops[i].DroppedPSNs)
	}
	return n
}

func (m *PathReport) validate() error {
	const t = TypePathReport
	if len(m.Hops) > MaxHopEntries {
		return fieldErr(t, "Entry Count", "%d exceeds %d", len(m.Hops), MaxHopEntries)
	}
	if err := checkFlowAddrs(t, m.Source, m.Destination); err != nil {
		return err
	}
	for i := range m.Hops {
		h := &m.Hops[i]
		if len(h.DroppedPSNs) > 255 {
			return fieldErr(t, "PSN Count", "%d dropped PSNs in hop entry %d exceed 255", len(h.DroppedPSNs), i+1)
		}
		for _, p := range h.DroppedPSNs {
			if err := checkPSN(t, "Dropped PSN", p); err != nil {
				return err
			}
		}
	}
	return checkLength(t, m.Length())
}

// Append validates the message and appends it, common header included, to b.
func (m *PathReport) Append(b []byte) ([]byte, error) {
	if err := m.validate(); err != nil {
		return b, err
	}
	var flags uint8
	if m.Truncated {
		flags |= FlagPathTruncated
	}
	b = appendHeader(b, TypePathReport, flags, m.Length(), 0)
	b = append(b, uint8(m.Method), uint8(len(m.Hops)), uint8(m.AF()), 0)
	b = appendAddr(b, m.Source)
	b = appendAddr(b, m.Destination)
	b = binary.BigEndian.AppendUint32(b, m.FlowLabel)
	for i := range m.Hops {
		h := &m.Hops[i]
		b = binary.BigEndian.AppendUint32(b, h.NodeID)
		b = binary.BigEndian.AppendUint32(b, h.MarkingPeriodNumber)
		b = binary.BigEndian.AppendUint32(b, h.LostCount)
		b = binary.BigEndian.AppendUint32(b, uint32(h.QueueDelayChangeUS))
		b = append(b, uint8(h.Cause), uint8(len(h.DroppedPSNs)), 0, 0)
		for _, p := range h.DroppedPSNs {
			b = append(b, 0) // Reserved
			b = appendU24(b, uint32(p))
		}
	}
	return b, nil
}

// ParsePathReport parses the datagram b as a PATH_REPORT message.
func ParsePathReport(b []byte) (PathReport, error) {
	const t = TypePathReport
	var m PathReport
	h, err := parseHeaderOf(b, t)
	if err != nil {
		return m, err
	}
	if h.FlowID != 0 {
		return m, fieldErr(t, "Flow ID", "%d in PATH_REPORT, whose sender does not know the Flow ID (must be 0)", h.FlowID)
	}
	m.Truncated = h.Flags&FlagPathTruncated != 0
	r := reader{b: b, off: HeaderLen, t: t}
	m.Method = Method(r.u8("Method"))
	count := int(r.u8("Entry Count"))
	af := AF(r.u8("AF"))
	r.take(1, "Reserved")
	if r.err == nil {
		if count > MaxHopEntries {
			return m, fieldErr(t, "Entry Count", "%d exceeds %d", count, MaxHopEntries)
		}
		if !af.Valid() {
			return m, fieldErr(t, "AF", "%d is neither 4 nor 6", uint8(af))
		}
	}
	m.Source = r.addr(af, "Source Address")
	m.Destination = r.addr(af, "Destination Address")
	m.FlowLabel = r.u32("Flow Label")
	if r.err == nil && count > 0 {
		m.Hops = make([]HopEntry, count)
	}
	for i := range m.Hops {
		e := &m.Hops[i]
		e.NodeID = r.u32("Node ID")
		e.MarkingPeriodNumber = r.u32("Marking Period Number")
		e.LostCount = r.u32("Lost Count")
		e.QueueDelayChangeUS = int32(r.u32("Queue Delay Change"))
		e.Cause = Cause(r.u8("Cause"))
		n := int(r.u8("PSN Count"))
		r.take(2, "Reserved")
		if r.err != nil {
			break
		}
		if n > 0 {
			e.DroppedPSNs = make([]psn.PSN, 0, n)
		}
		for range n {
			r.take(1, "Reserved")
			p := psn.PSN(r.u24("Dropped PSN"))
			if r.err != nil {
				break
			}
			e.DroppedPSNs = append(e.DroppedPSNs, p)
		}
	}
	if err := r.finish(); err != nil {
		return m, err
	}
	return m, m.validate()
}

// QueueDelayChange is d as a Queue Delay Change: microseconds, clamped to the field's signed 32
// bits.
func QueueDelayChange(d time.Duration) int32 {
	us := d.Microseconds()
	switch {
	case us > math.MaxInt32:
		return math.MaxInt32
	case us < math.MinInt32:
		return math.MinInt32
	}
	return int32(us)
}
