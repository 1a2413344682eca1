package wire

import "encoding/binary"

const lossReportLen = HeaderLen + 32

// LossReport is a LOSS_REPORT message (type 7): the CRF's counts for one interval. The counters
// are carried as sent; judging whether they are consistent is the policy's business.
type LossReport struct {
	FlowID           uint32
	IntervalUS       uint32 // interval duration in microseconds
	Expected         uint32 // source packets expected
	Received         uint32 // source packets received, before restoration
	Restored         uint32 // packets restored by decoding
	IncompleteBlocks uint32 // blocks incomplete after the first decoding attempt
	CEMarked         uint32 // ECN CE marks on source packets
	RepairsReceived  uint32 // REPAIR messages received
	RepairsCEMarked  uint32 // CE marks on REPAIR messages
}

// Type returns TypeLossReport.
func (m *LossReport) Type() Type { return TypeLossReport }

// Length returns the octets the message occupies on the wire: always 40.
func (m *LossReport) Length() int { return lossReportLen }

func (m *LossReport) counters() [8]*uint32 {
	return [8]*uint32{&m.IntervalUS, &m.Expected, &m.Received, &m.Restored,
		&m.IncompleteBlocks, &m.CEMarked, &m.RepairsReceived, &m.RepairsCEMarked}
}

var lossReportFields = [8]string{"Interval", "Expected", "Received", "Restored",
	"Incomplete Blocks", "CE Marked", "Repairs Received", "Repairs CE Marked"}

// Append appends the message, common header included, to b. Every field value is valid.
func (m *LossReport) Append(b []byte) ([]byte, error) {
	b = appendHeader(b, TypeLossReport, 0, lossReportLen, m.FlowID)
	for _, c := range m.counters() {
		b = binary.BigEndian.AppendUint32(b, *c)
	}
	return b, nil
}

// ParseLossReport parses the datagram b as a LOSS_REPORT message.
func ParseLossReport(b []byte) (LossReport, error) {
	var m LossReport
	h, err := parseHeaderOf(b, TypeLossReport)
	if err != nil {
		return m, err
	}
	m.FlowID = h.FlowID
	r := reader{b: b, off: HeaderLen, t: TypeLossReport}
	for i, c := range m.counters() {
		*c = r.u32(lossReportFields[i])
	}
	return m, r.finish()
}
