package crf

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/crem-project/crem/internal/fault"
	"github.com/crem-project/crem/wire"
)

// The planted faults' constants (WithFaults; package internal/fault). Each fault's effect sits
// where the rule it breaks is implemented; these are the values it uses there.
const (
	// Under fault.LossReportRare LOSS_REPORT goes every faultReportEvery SRTT, at least
	// faultReportFloor apart, instead of once per SRTT.
	faultReportEvery = 16
	faultReportFloor = time.Second
	// faultAckPadding is how many octets beyond the HELLO it answers a HELLO_ACK has under
	// fault.HelloAckLarger.
	faultAckPadding = 16
)

// sendHelloAck queues a HELLO_ACK answering a HELLO of helloLen octets. Under
// fault.HelloAckLarger it is padded with zero octets (its Length counting them) to
// faultAckPadding octets more than the HELLO: a reflection amplifier.
func (r *Receiver) sendHelloAck(to netip.AddrPort, ack *wire.HelloAck, helloLen int) bool {
	if !r.o.faults.Has(fault.HelloAckLarger) {
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

// faultParseRepair is fault.AcceptMalformed: a REPAIR whose Length disagrees with its datagram
// is read anyway, as if Length were the datagram's size, or else as if the datagram ended
// where Length says.
func faultParseRepair(msg []byte) (wire.Repair, error) {
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
