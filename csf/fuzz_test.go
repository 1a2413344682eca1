package csf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// FuzzSender feeds arbitrary bytes to every input of an established Sender: it never panics.
func FuzzSender(f *testing.F) {
	for _, m := range []wire.Message{
		&wire.RepairRequest{FlowID: 3, RequestID: 1, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, BlockStartPSN: 0x100, Lost: lost(1)},
		&wire.RepairRequest{FlowID: 3, RangeForm: true, RequestID: 2, Ranges: []psn.Range{{Start: 0x100, Count: 9}}},
		&wire.LossReport{FlowID: 3, IntervalUS: 1000, Expected: 10, Received: 5},
		&wire.Close{FlowID: 3},
		&wire.ParamAck{FlowID: 3, ConfigID: 2},
	} {
		b, _ := m.Append(nil)
		f.Add(b, uint8(0))
	}
	f.Add(packet(0x104, 50), uint8(1))
	f.Add(ackPacket(0x100), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, where uint8) {
		s := newSender(t, WithConfig(wire.SchemeCauchy, 8, 2, 0), WithReporters(netip.MustParseAddr("10.0.0.2")))
		establish(t, s, 0, 3)
		for p := psn.PSN(0x100); p < 0x108; p++ {
			s.Observe(time.Millisecond, packet(p, 100))
		}
		switch where % 3 {
		case 0:
			s.Handle(2*time.Millisecond, testCRF, data)
		case 1:
			s.Observe(2*time.Millisecond, data)
		default:
			s.ObserveReverse(2*time.Millisecond, data)
		}
		for range 5 {
			if d, ok := s.NextDeadline(); ok {
				s.Tick(d)
			}
		}
		drain(s)
	})
}
