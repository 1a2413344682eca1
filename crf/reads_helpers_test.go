package crf

import (
	"testing"
	"time"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// sblock is a source block as the CSF sees it: packets by position (nil: absent), under
// configuration cfg.
type sblock struct {
	start   psn.PSN
	cfg     uint8
	pkts    [][]byte
	syms    [][]byte
	present psn.Bitmap
}

// mkBlock builds a block from its packets by position (nil: absent).
func mkBlock(start psn.PSN, cfg uint8, pkts ...[]byte) *sblock {
	b := &sblock{start: start, cfg: cfg, pkts: pkts}
	for j, p := range pkts {
		s := make([]byte, testT)
		if p != nil {
			s, _ = fec.AppendSymbol(nil, p, testT)
			b.present.Set(j)
		}
		b.syms = append(b.syms, s)
	}
	return b
}

// writes returns n WRITE packets from PSN p, 200 octets and more.
func writes(p psn.PSN, n int) [][]byte {
	var out [][]byte
	for j := range n {
		out = append(out, packet(p.Add(j), 200+j))
	}
	return out
}

// symbol encodes Repair Index idx over the set over.
func (b *sblock) symbol(t testing.TB, idx int, over psn.Bitmap) []byte {
	t.Helper()
	enc, _ := fec.NewEncoder()
	dst := [][]byte{make([]byte, testT)}
	if err := enc.Encode(dst, []int{idx}, over, b.syms); err != nil {
		t.Fatal(err)
	}
	return dst[0]
}

// ordinary is the block's ordinary REPAIR with Repair Index idx.
func (b *sblock) ordinary(t testing.TB, id uint32, idx int, last bool) []byte {
	m := wire.Repair{FlowID: id, Last: last, ConfigID: b.cfg, Scheme: wire.SchemeCauchy, K: uint8(len(b.pkts)),
		RepairIndex: uint8(idx), BlockStartPSN: b.start, Present: b.present, Symbol: b.symbol(t, idx, b.present)}
	return msg(t, &m)
}

// retx is a coded retransmission with Repair Index idx over lost, answering request session.
func (b *sblock) retx(t testing.TB, id uint32, idx int, lost psn.Bitmap, session uint16) []byte {
	m := wire.Repair{FlowID: id, Retx: true, ConfigID: b.cfg, Scheme: wire.SchemeCauchy, K: uint8(len(b.pkts)),
		RepairIndex: uint8(idx), BlockStartPSN: b.start, RepairSessionID: session, Present: b.present, Lost: lost,
		Symbol: b.symbol(t, idx, lost)}
	return msg(t, &m)
}

// sourceCopy is the FALLBACK answer's Source Copy symbol of position j.
func (b *sblock) sourceCopy(t testing.TB, id uint32, j int, session uint16, last bool) []byte {
	m := wire.Repair{FlowID: id, Last: last, ConfigID: b.cfg, Scheme: wire.SchemeSourceCopy, K: uint8(len(b.pkts)),
		RepairIndex: uint8(j), BlockStartPSN: b.start, RepairSessionID: session, Present: b.present, Symbol: b.syms[j]}
	return msg(t, &m)
}

// info is the block's INFO (its Present Bitmap, no symbol).
func (b *sblock) info(t testing.TB, id uint32) []byte {
	m := wire.Repair{FlowID: id, Info: true, ConfigID: b.cfg, Scheme: wire.SchemeCauchy, K: uint8(len(b.pkts)),
		BlockStartPSN: b.start, Present: b.present}
	return msg(t, &m)
}

// infoNoBlock is an INFO with an all-zero Present Bitmap: k PSNs from start that carry no
// source and belong to no block (E45).
func infoNoBlock(t testing.TB, id uint32, cfg uint8, start psn.PSN, k int) []byte {
	m := wire.Repair{FlowID: id, Info: true, ConfigID: cfg, Scheme: wire.SchemeCauchy, K: uint8(k), BlockStartPSN: start}
	return msg(t, &m)
}

// trafficLog is what a Receiver sent and delivered, as a test reads it.
type trafficLog struct {
	reqs    []*wire.RepairRequest
	reqAt   []time.Duration
	reports []*wire.LossReport
	repAt   []time.Duration
	acks    []*wire.ParamAck
	dels    []Delivery
}

func (l *trafficLog) take(now time.Duration, r *Receiver) {
	for _, m := range drainMsgs(r) {
		switch m := m.(type) {
		case *wire.RepairRequest:
			l.reqs, l.reqAt = append(l.reqs, m), append(l.reqAt, now)
		case *wire.LossReport:
			l.reports, l.repAt = append(l.reports, m), append(l.repAt, now)
		case *wire.ParamAck:
			l.acks = append(l.acks, m)
		}
	}
	l.dels = append(l.dels, drainDel(r)...)
}

// runUntil runs r's timers up to until, collecting what it sends.
func (l *trafficLog) runUntil(r *Receiver, until time.Duration) {
	for d, ok := r.NextDeadline(); ok && d <= until; d, ok = r.NextDeadline() {
		r.Tick(d)
		l.take(d, r)
	}
}

// sums returns the Expected and Received of every LOSS_REPORT added up.
func (l *trafficLog) sums() (e, rcv uint32) {
	for _, m := range l.reports {
		e += m.Expected
		rcv += m.Received
	}
	return e, rcv
}

// rangeReqs returns the PSN-range requests.
func (l *trafficLog) rangeReqs() []*wire.RepairRequest {
	var out []*wire.RepairRequest
	for _, q := range l.reqs {
		if q.RangeForm {
			out = append(out, q)
		}
	}
	return out
}

// kinds counts the deliveries by kind.
func (l *trafficLog) kinds() (received, restored, abandoned int) {
	for _, d := range l.dels {
		switch d.Kind {
		case Received:
			received++
		case Restored:
			restored++
		default:
			abandoned++
		}
	}
	return
}

// paramUpdate offers configuration c from Effective PSN eff; returns the PARAM_ACK status.
func paramUpdate(t testing.TB, r *Receiver, now time.Duration, id uint32, c flow.Config, eff psn.PSN) wire.Status {
	t.Helper()
	pu := wire.ParamUpdate{FlowID: id, ConfigID: c.ID, Scheme: c.Scheme, K: uint8(c.K), M: uint8(c.M), T: uint16(c.T),
		EffectivePSN: eff}
	r.Handle(now, testCSF, msg(t, &pu), false)
	for _, m := range drainMsgs(r) {
		if a, ok := m.(*wire.ParamAck); ok && a.ConfigID == c.ID {
			return a.Status
		}
	}
	t.Fatalf("no PARAM_ACK for Config ID %d", c.ID)
	return 0
}

func smallLimits() flow.Limits {
	l := flow.DefaultLimits()
	l.MaxOpenBlocks, l.MaxK = 2, 8
	return l
}

// readResponse builds a READ response of opcode op with PSN p and the payload of n octets that
// PSN's responses carry (an AETH with msn on FIRST, LAST and ONLY).
func readResponse(p psn.PSN, op roce.Opcode, n int, msn uint32) []byte {
	pl := make([]byte, n)
	for i := range pl {
		pl[i] = byte(int(p)*5 + i)
	}
	pk := roce.Packet{BTH: roce.BTH{OpCode: op, DestQP: testFlow.DestQP, PSN: p}, Payload: pl}
	if op != roce.OpReadResponseMiddle {
		pk.AETH = roce.ACK(31, msn)
	}
	b, _ := pk.Append(nil)
	_ = testFlow.LogicalHeader().Seal(b)
	return b
}
