package csf

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// prefixEncoder reads only the first n octets of each source symbol (flow.SourcePrefixer), as
// a simulator's symbolic codec does, and records what it was given.
type prefixEncoder struct {
	n      int
	got    [][]byte // the source symbols of the last call, copied
	record bool
}

func (e *prefixEncoder) SourcePrefix() int { return e.n }

func (e *prefixEncoder) keep(over psn.Bitmap, src [][]byte) {
	if !e.record {
		return
	}
	e.got = e.got[:0]
	over.Each(func(j int) { e.got = append(e.got, append([]byte(nil), src[j]...)) })
}

func (e *prefixEncoder) Encode(dst [][]byte, indices []int, over psn.Bitmap, src [][]byte) error {
	e.keep(over, src)
	for _, d := range dst {
		clear(d)
	}
	return nil
}

func (e *prefixEncoder) XOR(dst []byte, present psn.Bitmap, src [][]byte) error {
	e.keep(present, src)
	clear(dst)
	return nil
}

// TestSourcePrefixKept: with a codec that reads only a prefix of each source symbol, the Sender
// keeps and hands it only that prefix (length and the packet's first octets); a Source Copy
// carries the prefix and zeros to T; a retransmission is compared on its length and prefix.
func TestSourcePrefixKept(t *testing.T) {
	enc := &prefixEncoder{n: 14, record: true}
	s, now := fullBlock(t, wire.SchemeCauchy, 8, 2, WithEncoder(enc))
	if len(enc.got) != 8 {
		t.Fatalf("encoder saw %d sources, want 8", len(enc.got))
	}
	for j, sym := range enc.got {
		p := packet(psn.PSN(0x100+j), 300)
		if len(sym) != 14 || binary.BigEndian.Uint16(sym) != uint16(len(p)) || !bytes.Equal(sym[2:], p[:12]) {
			t.Fatalf("source %d handed to the encoder as % x", j, sym)
		}
	}
	req := wire.RepairRequest{Fallback: true, RequestID: 7, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8,
		BlockStartPSN: 0x100, Lost: lost(3)}
	rs := sendRequest(t, s, now, req)
	if len(rs) != 1 || rs[0].Scheme != wire.SchemeSourceCopy {
		t.Fatalf("Source Copy answer %+v", rs)
	}
	want := append(binary.BigEndian.AppendUint16(nil, uint16(len(packet(0x103, 300)))), packet(0x103, 300)[:12]...)
	want = append(want, make([]byte, 1062-len(want))...)
	if !bytes.Equal(rs[0].Symbol, want) {
		t.Fatal("Source Copy symbol is not the kept prefix padded with zeros to T")
	}
	same := packet(0x102, 300)
	s.Observe(now, same)
	if st := s.Stats(); st.Retransmissions != 1 || st.RetransmissionMismatch != 0 {
		t.Fatalf("an identical retransmission: %+v", st)
	}
	other := packet(0x102, 301)
	s.Observe(now, other) // another length
	other = packet(0x102, 300)
	other[1] ^= 0x40 // inside the prefix
	s.Observe(now, other)
	if st := s.Stats(); st.RetransmissionMismatch != 2 {
		t.Fatalf("%d mismatches, want 2", st.RetransmissionMismatch)
	}
}

// deadlineScan is NextDeadline as a scan of every block: what the heap must equal.
func deadlineScan(s *Sender) (time.Duration, bool) {
	var d time.Duration
	have := false
	at := func(t time.Duration) {
		if !have || t < d {
			d, have = t, true
		}
	}
	if s.state != StateEstablished {
		return s.NextDeadline()
	}
	if s.pend.active && !s.pend.acked {
		at(s.pend.due)
	}
	if s.haveNext {
		at(max(s.lastSrc, s.lastAgain) + s.o.idle)
	}
	if s.peerMayBeSilent() {
		at(max(s.lastHeard, s.unheardFrom) + s.silence())
	}
	if s.haveRetry && !s.pend.active {
		at(s.retryAt)
	}
	if s.open >= 0 {
		at(s.lastSrc + s.burstGap())
	}
	for i := range s.blocks {
		if t, ok := s.blocks[i].deadline(); ok {
			at(t)
		}
	}
	return d, have
}

// TestNextDeadlineMatchesScan: through random traffic, requests (coded, deferred, FALLBACK),
// acknowledgments and ticks, the deadline the heap gives is always the earliest of every
// block's timers, and a Tick at it runs what is due.
func TestNextDeadlineMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := newSender(t, WithConfig(wire.SchemeCauchy, 8, 6, 0), WithAdaptation(false), WithRepairFraction(16), WithReverseQP(0x22),
		WithMaxHeldBlocks(16), WithBurstGap(20*time.Microsecond))
	establish(t, s, 0, 3)
	now, next, reqID := time.Millisecond, psn.PSN(0x100), uint16(1)
	type known struct {
		start psn.PSN
		k     int
	}
	var blocks []known // blocks seen in REPAIR messages, newest last
	for step := range 20000 {
		now += time.Duration(rng.IntN(40)) * time.Microsecond
		switch r := rng.IntN(100); {
		case r < 70:
			s.Observe(now, packet(next, 100))
			next = next.Add(1)
		case r < 88 && len(blocks) > 0:
			// A request for a recent block, often within SRTT of the previous answer.
			b := blocks[len(blocks)-1-rng.IntN(min(len(blocks), 12))]
			req := wire.RepairRequest{FlowID: 3, RequestID: reqID, ConfigID: 1, Scheme: wire.SchemeCauchy, K: uint8(b.k),
				BlockStartPSN: b.start, SuggestedM: 1, Lost: lost(rng.IntN(b.k)), Fallback: rng.IntN(10) == 0}
			reqID++
			m, _ := req.Append(nil)
			s.Handle(now, testCRF, m)
		case r < 92:
			s.ObserveReverse(now, ackPacket(next.Add(-1-rng.IntN(200))))
		default:
			now += s.SRTT() / time.Duration(1+rng.IntN(4))
		}
		if d, ok := s.NextDeadline(); ok && d <= now {
			s.Tick(now)
		}
		for _, r := range repairs(drain(s)) {
			if n := len(blocks); !r.Retx && (n == 0 || blocks[n-1].start != r.BlockStartPSN) {
				blocks = append(blocks, known{r.BlockStartPSN, int(r.K)})
			}
		}
		got, ok1 := s.NextDeadline()
		want, ok2 := deadlineScan(s)
		if got != want || ok1 != ok2 {
			t.Fatalf("step %d: NextDeadline %v %v, scan %v %v", step, got, ok1, want, ok2)
		}
	}
	st := s.Stats()
	if st.RequestsDeferred == 0 || st.RepairPaced == 0 || st.BlocksGivenUp+st.SourceCopySent == 0 || st.BlocksAcked == 0 {
		t.Fatalf("the run did not exercise every timer: %+v", st)
	}
	if s.timers.Len() > 4*len(s.blocks)+64 {
		t.Fatalf("heap of %d entries for %d blocks", s.timers.Len(), len(s.blocks))
	}
}

var _ flow.Encoder = (*prefixEncoder)(nil)
