package crf

import (
	"testing"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// FuzzReceiver feeds arbitrary bytes to the Receiver's inputs: it never panics.
func FuzzReceiver(f *testing.F) {
	b := newBlock(0x100, 8)
	for _, m := range []wire.Message{
		&wire.ParamUpdate{ConfigID: 2, Scheme: wire.SchemeCauchy, K: 8, M: 1, T: testT},
		&wire.Repair{ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, BlockStartPSN: 0x100, Present: psn.FirstK(8), Symbol: b.syms[0]},
		&wire.Repair{ConfigID: 1, Scheme: wire.SchemeSourceCopy, K: 8, RepairIndex: 2, BlockStartPSN: 0x100, Present: psn.FirstK(8), Symbol: b.syms[2]},
		&wire.Repair{Info: true, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 4, BlockStartPSN: 0x100, Present: psn.FirstK(2)},
		&wire.Close{},
	} {
		bb, _ := m.Append(nil)
		f.Add(bb, uint8(0))
		f.Add(bb, uint8(8))
	}
	f.Add(b.pkts[1], uint8(1))
	f.Add(readRequest(0x105, 100000), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, where uint8) {
		for _, ordered := range []bool{false, true} {
			r := newReceiver(t, Settings{Ordered: ordered})
			var id uint32
			if where&8 != 0 { // a flow without a configuration yet
				h := hello(3)
				r.Handle(0, testCSF, msg(t, &h), false)
				id = drainMsgs(r)[0].(*wire.HelloAck).FlowID
			} else {
				id = open(t, r, 0, cfg8)
			}
			for j := 0; j < 8; j += 2 {
				r.Observe(0, id, b.pkts[j], false)
			}
			d := append([]byte(nil), data...)
			if where%2 == 0 && len(d) >= 8 {
				d[4], d[5], d[6], d[7] = byte(id>>24), byte(id>>16), byte(id>>8), byte(id)
				r.Handle(time.Millisecond, testCSF, d, false)
			} else {
				r.Observe(time.Millisecond, id, d, where&4 != 0)
			}
			for range 8 {
				if dl, ok := r.NextDeadline(); ok {
					r.Tick(dl)
				}
			}
			drainMsgs(r)
			drainDel(r)
		}
	})
}
