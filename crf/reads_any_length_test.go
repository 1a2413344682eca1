package crf

import (
	"fmt"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

var cfg8m1 = flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: 8, M: 1, T: testT}

// TestReadAnyLengthC13: an RDMA READ request of any DMA length, up to 2^31 octets, makes
// the PSNs it consumes absent (C13) however small the window: the block open before it still
// decodes after it and the sources that follow it; none of its PSNs is counted expected or lost
// in LOSS_REPORT, and none is asked for.
func TestReadAnyLengthC13(t *testing.T) {
	for _, lim := range []flow.Limits{flow.DefaultLimits(), smallLimits()} {
		for _, dma := range []uint32{4<<20 + 1, 64 << 20, 1 << 30, 1 << 31} {
			name := fmt.Sprintf("window %dx%d, READ of %d octets", lim.MaxOpenBlocks, lim.MaxK, dma)
			n := int(roce.OpReadRequest.PSNs(dma, 1024))
			r := newReceiver(t, Settings{}, WithLimits(lim))
			id := open(t, r, 0, cfg8m1)
			var log trafficLog
			a := mkBlock(0x100, 1, append(writes(0x100, 7), readRequest(0x107, dma))...)
			now := time.Duration(0)
			for j, p := range a.pkts {
				if j != 2 && j != 3 {
					r.Observe(now, id, p, false)
				}
				now += 10 * time.Microsecond
			}
			// The round's only ordinary symbol cannot restore two: a coded request at once.
			r.Handle(now, testCSF, a.ordinary(t, id, 0, true), false)
			log.take(now, r)
			if len(log.reqs) != 1 || log.reqs[0].RangeForm || log.reqs[0].Lost != lostSet(2, 3) {
				t.Fatalf("%s: requests %+v", name, log.reqs)
			}
			after := psn.PSN(0x107).Add(n)
			for _, p := range writes(after, 6) {
				now += 10 * time.Microsecond
				r.Observe(now, id, p, false)
			}
			now += 2 * time.Millisecond
			r.Handle(now, testCSF, a.retx(t, id, 1, lostSet(2, 3), log.reqs[0].RequestID), false)
			log.take(now, r)
			log.runUntil(r, now+200*time.Millisecond)
			st, _ := r.FlowStats(id)
			_, restored, abandoned := log.kinds()
			if restored != 2 || abandoned != 0 || st.BlocksEvicted+st.BlocksAbandoned != 0 || len(log.rangeReqs()) != 0 {
				t.Fatalf("%s: %d restored, %d abandoned, %d range requests: %+v", name, restored, abandoned, len(log.rangeReqs()), st)
			}
			if st.ReadAbsent != uint64(n-1) {
				t.Fatalf("%s: %d PSNs absent, want %d", name, st.ReadAbsent, n-1)
			}
			if e, rcv := log.sums(); rcv != 12 || e != rcv+2 {
				t.Fatalf("%s: LOSS_REPORTs say %d expected, %d received; want 14 and 12", name, e, rcv)
			}
		}
	}
}

// TestRestoredReadConsumesC13: a READ request the CRF restores rather than receives
// consumes its PSNs too (C13), whether its REPAIR comes before the sources after it or after
// them: nothing is asked for them, nothing counted; in ordered mode (C7 a) delivery steps over
// them and nothing is skipped.
func TestRestoredReadConsumesC13(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		for _, repairFirst := range []bool{false, true} {
			name := fmt.Sprintf("ordered %v, REPAIR first %v", ordered, repairFirst)
			r := newReceiver(t, Settings{Ordered: ordered}, WithLimits(smallLimits()))
			id := open(t, r, 0, cfg8m1)
			var log trafficLog
			read := readRequest(0x107, 1<<30)
			n := f1(r, id).consumes(read)
			a := mkBlock(0x100, 1, append(writes(0x100, 7), read)...)
			now := time.Duration(0)
			for _, p := range a.pkts[:7] {
				r.Observe(now, id, p, false)
				now += 10 * time.Microsecond
			}
			if repairFirst {
				r.Handle(now, testCSF, a.ordinary(t, id, 0, true), false)
			}
			next := writes(psn.PSN(0x107).Add(n), 6)
			for _, p := range next {
				now += 10 * time.Microsecond
				r.Observe(now, id, p, false)
			}
			if !repairFirst {
				r.Handle(now, testCSF, a.ordinary(t, id, 0, true), false)
			}
			log.take(now, r)
			log.runUntil(r, now+200*time.Millisecond)
			st, _ := r.FlowStats(id)
			_, restored, abandoned := log.kinds()
			if restored != 1 || abandoned != 0 || len(log.reqs) != 0 || st.GapsSkipped != 0 {
				t.Fatalf("%s: %d restored, %d abandoned, %d requests: %+v", name, restored, abandoned, len(log.reqs), st)
			}
			if e, rcv := log.sums(); rcv != 13 || e != rcv+1 {
				t.Fatalf("%s: LOSS_REPORTs say %d expected, %d received; want 14 and 13", name, e, rcv)
			}
			if ordered {
				var got []psn.PSN
				for _, d := range log.dels {
					got = append(got, d.PSN)
				}
				if want := 1; repairFirst {
					if len(got) != want || got[0] != 0x107 {
						t.Fatalf("%s: deliveries %v", name, got)
					}
				} else if len(got) != 7 || got[0] != 0x107 || got[1] != psn.PSN(0x107).Add(n) || got[6] != psn.PSN(0x107).Add(n+5) {
					t.Fatalf("%s: deliveries %v", name, got)
				}
			}
		}
	}
}

// f1 returns flow id's state.
func f1(r *Receiver, id uint32) *rflow { return r.flows[id] }

// TestOrderedReadAnyLengthC7a: in ordered mode the packet after a READ of 2^31 octets
// goes out at once (the cursor steps over the PSNs the READ consumed, however many), and a loss
// after it is held for and restored in order.
func TestOrderedReadAnyLengthC7a(t *testing.T) {
	r := newReceiver(t, Settings{Ordered: true}, WithLimits(smallLimits()))
	id := open(t, r, 0, cfg8m1)
	read := readRequest(0x107, 1<<31)
	for _, p := range append(writes(0x100, 7), read) {
		if v := r.Observe(0, id, p, false); v != Forward {
			t.Fatal("in-order source held")
		}
	}
	after := psn.PSN(0x107).Add(f1(r, id).consumes(read))
	b := mkBlock(after, 1, writes(after, 8)...)
	if v := r.Observe(0, id, b.pkts[0], false); v != Forward {
		t.Fatal("the packet after the READ was held: the cursor did not step over the READ's PSNs")
	}
	for _, p := range b.pkts[2:] {
		if v := r.Observe(0, id, p, false); v != Held {
			t.Fatal("a packet after a gap was not held")
		}
	}
	r.Handle(0, testCSF, b.ordinary(t, id, 0, false), false)
	ds := drainDel(r)
	if len(ds) != 7 || ds[0].Kind != Restored || ds[0].PSN != after.Add(1) || ds[6].PSN != after.Add(7) {
		t.Fatalf("deliveries %+v", ds)
	}
	if st, _ := r.FlowStats(id); st.GapsSkipped != 0 || st.HoldOverflows != 0 {
		t.Fatalf("%+v", st)
	}
}

// rangeAnswerer plays the CSF's answers to PSN-range requests for a lossless flow (C8 and
// E45): a PSN in a block is an absent position (the block's INFO), a PSN in
// no block gets an INFO with an all-zero Present Bitmap; a source asked for fails the test.
type rangeAnswerer struct {
	blocks []*sblock
	done   int // requests of the log answered
}

func (a *rangeAnswerer) answer(t *testing.T, r *Receiver, id uint32, now time.Duration, log *trafficLog) {
	t.Helper()
	for ; a.done < len(log.reqs); a.done++ {
		q := log.reqs[a.done]
		if !q.RangeForm {
			t.Fatalf("block-form request %+v for a lossless flow", q)
		}
		var run psn.Range
		flush := func() {
			if run.Count > 0 {
				r.Handle(now, testCSF, infoNoBlock(t, id, 1, run.Start, int(run.Count)), false)
				run = psn.Range{}
			}
		}
		infos := map[*sblock]bool{}
		for _, rg := range q.Ranges {
			for c := uint32(0); c < rg.Count; c++ {
				p := rg.Start.Add(int(c))
				var in *sblock
				for _, b := range a.blocks {
					if b.start.Forward(p) < uint32(len(b.pkts)) {
						in = b
					}
				}
				switch {
				case in == nil:
					if run.Count > 0 && run.End() != p || run.Count == 255 {
						flush()
					}
					if run.Count == 0 {
						run.Start = p
					}
					run.Count++
				case in.pkts[in.start.Forward(p)] != nil:
					t.Fatalf("PSN %v asked for, but it was received", p)
				default:
					infos[in] = true
				}
			}
		}
		flush()
		for b := range infos {
			r.Handle(now, testCSF, b.info(t, id), false)
		}
	}
}

// TestExpectedCountsSourcesOnly: LOSS_REPORT's Expected counts source packets only (E42):
// over lossless traffic, Expected equals Received in every report, with and without ordinary
// repair and in both delivery modes. Traffic in the READ-response direction has gaps inside
// blocks (absent positions, learned from the Present Bitmap or an INFO) and between blocks (a
// requester's own PSNs, learned from an INFO naming no block); the request direction has READs
// consuming PSNs inside a block and beyond its end.
func TestExpectedCountsSourcesOnly(t *testing.T) {
	w := func(p psn.PSN) []byte { return packet(p, 300) }
	response := []*sblock{
		mkBlock(0x100, 1, writes(0x100, 8)...),
		// 0x108: the requester's PSN, in no block
		mkBlock(0x109, 1, w(0x109), w(0x10a), nil, w(0x10c), w(0x10d), w(0x10e), w(0x10f), w(0x110)),
		// 0x111 to 0x113: in no block
		mkBlock(0x114, 1, writes(0x114, 8)...),
		// 300 PSNs in no block
		mkBlock(0x248, 1, writes(0x248, 8)...),
	}
	request := []*sblock{
		mkBlock(0x100, 1, append(writes(0x100, 5), readRequest(0x105, 3*1024), nil, nil)...),
		mkBlock(0x108, 1, append(writes(0x108, 7), readRequest(0x10f, 1000*1024))...),
		mkBlock(0x4f7, 1, w(0x4f7), readRequest(0x4f8, 1<<30)),
	}
	request = append(request, mkBlock(psn.PSN(0x4f8).Add(1<<20), 1, writes(psn.PSN(0x4f8).Add(1<<20), 8)...))
	for _, dir := range []string{"response", "request"} {
		for _, m := range []int{0, 1} {
			for _, ordered := range []bool{false, true} {
				name := fmt.Sprintf("%s direction, m = %d, ordered %v", dir, m, ordered)
				blocks := response
				if dir == "request" {
					blocks = request
				}
				r := newReceiver(t, Settings{Ordered: ordered})
				id := open(t, r, 0, flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: 8, M: m, T: testT})
				var log trafficLog
				ans := rangeAnswerer{blocks: blocks}
				now, sent := time.Duration(0), 0
				for _, b := range blocks {
					for _, p := range b.pkts {
						if p != nil {
							r.Observe(now, id, p, false)
							sent++
						}
						now += 100 * time.Microsecond
						log.take(now, r)
						log.runUntil(r, now)
						ans.answer(t, r, id, now, &log)
					}
					if m > 0 {
						r.Handle(now, testCSF, b.ordinary(t, id, 0, true), false)
					}
				}
				for end := now + 300*time.Millisecond; now < end; now += time.Millisecond {
					log.runUntil(r, now)
					ans.answer(t, r, id, now, &log)
				}
				for i, lr := range log.reports {
					if lr.Expected != lr.Received {
						t.Fatalf("%s: LOSS_REPORT %d at %v: %d expected, %d received", name, i, log.repAt[i], lr.Expected, lr.Received)
					}
				}
				st, _ := r.FlowStats(id)
				_, _, abandoned := log.kinds()
				if e, rcv := log.sums(); int(rcv) != sent || e != rcv || abandoned != 0 || st.Forgotten != 0 {
					t.Fatalf("%s: %d expected, %d received of %d sent, %d abandoned: %+v", name, e, rcv, sent, abandoned, st)
				}
				if dir == "request" && len(log.reqs) != 0 {
					t.Fatalf("%s: asked for %+v", name, log.reqs[0])
				}
			}
		}
	}
}

// TestLossCountedWhenSettled: a real loss is still reported (E42), at the time it is
// settled as a source: with ordinary repair in the report after the block's REPAIR; with m = 0
// in the report after the answer to the PSN-range request; and when no answer ever comes (the
// circuit breaker's bad minute: no repair, no coded retransmission, C11 f) in the first report
// after the PSN is given up, a reorder allowance and 4.5 SRTT after its gap was seen.
func TestLossCountedWhenSettled(t *testing.T) {
	for _, c := range []struct {
		name      string
		m         int
		answer    bool
		firstLoss time.Duration // the first report that shows the loss
	}{{"ordinary repair", 1, false, 10 * time.Millisecond}, {"m = 0, answered", 0, true, 20 * time.Millisecond},
		{"m = 0, unanswered", 0, false, 50 * time.Millisecond}} {
		r := newReceiver(t, Settings{})
		id := open(t, r, 0, flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: 8, M: c.m, T: testT})
		var log trafficLog
		a := mkBlock(0x100, 1, writes(0x100, 8)...)
		now := time.Duration(0)
		for j, p := range a.pkts {
			if j != 3 {
				r.Observe(now, id, p, false)
			}
			now += 10 * time.Microsecond
		}
		if c.m > 0 {
			r.Handle(now, testCSF, a.ordinary(t, id, 0, true), false)
		}
		for end := 100 * time.Millisecond; now < end; now += 100 * time.Microsecond {
			log.runUntil(r, now)
			if c.answer && now >= 12*time.Millisecond && len(log.rangeReqs()) == 1 {
				q := log.rangeReqs()[0]
				r.Handle(now, testCSF, a.retx(t, id, 0, lostSet(3), q.RequestID), false)
				c.answer = false
				log.take(now, r)
			}
		}
		var first time.Duration
		for i, lr := range log.reports {
			if lr.Expected > lr.Received && first == 0 {
				first = log.repAt[i]
			}
		}
		e, rcv := log.sums()
		st, _ := r.FlowStats(id)
		if first != c.firstLoss || e != rcv+1 || rcv != 7 {
			t.Fatalf("%s: loss first reported at %v (want %v); %d expected, %d received: %+v", c.name, first, c.firstLoss, e, rcv, st)
		}
		if c.name == "m = 0, unanswered" && (st.GivenUp != 1 || st.Abandoned != 1) {
			t.Fatalf("%s: %+v", c.name, st)
		}
	}
}

// TestLateOriginalOfRestored: the original of a restored packet arriving late does not
// cancel the loss it caused: LOSS_REPORT does not count it received, and the CRF's own loss
// estimate keeps it.
func TestLateOriginalOfRestored(t *testing.T) {
	r := newReceiver(t, Settings{})
	id := open(t, r, 0, cfg8)
	b := newBlock(0x100, 8)
	for j := range 8 {
		if j != 4 {
			r.Observe(time.Millisecond, id, b.pkts[j], false)
		}
	}
	r.Handle(time.Millisecond, testCSF, b.repair(t, id, 0, psn.Bitmap{}, 0), false)
	r.Observe(2*time.Millisecond, id, b.pkts[4], false) // the original, after its restoration
	var log trafficLog
	log.runUntil(r, 10*time.Millisecond)
	if len(log.reports) != 1 || log.reports[0].Expected != 8 || log.reports[0].Received != 7 || log.reports[0].Restored != 1 {
		t.Fatalf("LOSS_REPORTs %+v", log.reports)
	}
	if p := f1(r, id).est.P(); p < 0.1 {
		t.Fatalf("loss estimate %v after one loss in eight", p)
	}
	if st, _ := r.FlowStats(id); st.LateAfterRestore != 1 || st.Sources != 8 {
		t.Fatalf("%+v", st)
	}
}

// TestInfoForNoBlockC8: PSNs that belong to no block (a requester's own PSNs between
// blocks of READ responses; the PSNs a lost READ request consumes beyond its block's end) are
// asked for once in the PSN-range form and settled by an INFO with an all-zero Present Bitmap
// (contract 2; k up to 255 whatever the configuration's k): absent, no block made, nothing
// counted, nothing asked again, nothing abandoned; in ordered mode delivery steps over them.
func TestInfoForNoBlockC8(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		// Response direction: 300 requester PSNs between two blocks of READ responses. The
		// window keeps positions for a block's worth (Max k, 64) at each end of so long a gap
		// (E40): those are asked for. The CSF's INFO names 255 PSNs, the rest another.
		r := newReceiver(t, Settings{Ordered: ordered, Reorder: time.Millisecond})
		id := open(t, r, 0, cfg8m1)
		a, b := mkBlock(0x100, 1, writes(0x100, 8)...), mkBlock(0x234, 1, writes(0x234, 8)...)
		var log trafficLog
		for _, p := range a.pkts {
			r.Observe(0, id, p, false)
		}
		r.Handle(0, testCSF, a.ordinary(t, id, 0, true), false)
		for _, p := range b.pkts {
			r.Observe(0, id, p, false)
		}
		r.Handle(0, testCSF, b.ordinary(t, id, 0, true), false)
		log.runUntil(r, time.Millisecond)
		rq := log.rangeReqs()
		if len(rq) != 1 || len(rq[0].Ranges) != 2 || rq[0].Ranges[0] != (psn.Range{Start: 0x108, Count: 64}) ||
			rq[0].Ranges[1] != (psn.Range{Start: 0x1f4, Count: 64}) {
			t.Fatalf("ordered %v: range requests %+v", ordered, rq)
		}
		created := f1(r, id).st.BlocksCreated
		r.Handle(time.Millisecond, testCSF, infoNoBlock(t, id, 1, 0x108, 255), false)
		r.Handle(time.Millisecond, testCSF, infoNoBlock(t, id, 1, 0x207, 45), false)
		log.take(time.Millisecond, r)
		log.runUntil(r, 300*time.Millisecond)
		st, _ := r.FlowStats(id)
		received, _, abandoned := log.kinds()
		if len(log.reqs) != 1 || abandoned != 0 || st.BlocksCreated != created || st.InfoNoBlock != 2 || r.Stats().MessagesMalformed != 0 {
			t.Fatalf("ordered %v: %d requests, %d abandoned: %+v", ordered, len(log.reqs), abandoned, st)
		}
		if e, rcv := log.sums(); e != 16 || rcv != 16 || ordered && received != 8 {
			t.Fatalf("ordered %v: %d expected, %d received, %d released", ordered, e, rcv, received)
		}

		// Request direction, m = 0: a lost READ request consumes 100 PSNs, 99 of them beyond its
		// block's end. The range request names them all: a coded retransmission of the block
		// answers for the READ request, an INFO naming no block for the rest.
		r = newReceiver(t, Settings{Ordered: ordered, Reorder: time.Millisecond})
		id = open(t, r, 0, flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: 8, M: 0, T: testT})
		log = trafficLog{}
		c := mkBlock(0x100, 1, append(writes(0x100, 7), readRequest(0x107, 100*1024))...)
		for _, p := range c.pkts[:7] {
			r.Observe(0, id, p, false)
		}
		for _, p := range writes(0x16b, 4) {
			r.Observe(0, id, p, false)
		}
		log.runUntil(r, time.Millisecond)
		rq = log.rangeReqs()
		if len(rq) != 1 || len(rq[0].Ranges) != 1 || rq[0].Ranges[0] != (psn.Range{Start: 0x107, Count: 100}) {
			t.Fatalf("ordered %v: range requests %+v", ordered, rq)
		}
		r.Handle(time.Millisecond, testCSF, c.retx(t, id, 0, lostSet(7), rq[0].RequestID), false)
		r.Handle(time.Millisecond, testCSF, infoNoBlock(t, id, 1, 0x108, 99), false)
		log.take(time.Millisecond, r)
		log.runUntil(r, 300*time.Millisecond)
		received, restored, abandoned := log.kinds()
		if len(log.reqs) != 1 || abandoned != 0 || restored != 1 {
			t.Fatalf("ordered %v, lost READ: %d requests, %d restored, %d abandoned", ordered, len(log.reqs), restored, abandoned)
		}
		if e, rcv := log.sums(); e != 12 || rcv != 11 || ordered && received != 4 {
			t.Fatalf("ordered %v, lost READ: %d expected, %d received, %d released", ordered, e, rcv, received)
		}
	}
}

// TestTwoCodedRoundsC9: a block gets two coded rounds, then FALLBACK, then the RDMA
// transport (C9), counting a round asked in the PSN-range form: a block the CRF first learns of
// from the coded retransmission answering its range request gets one coded round more, not two;
// one whose range request was already the FALLBACK round gets none.
func TestTwoCodedRoundsC9(t *testing.T) {
	for _, c := range []struct {
		name             string
		rangeRounds      int // range requests before the answer
		coded, fallbacks int // block-form requests after it
	}{{"answered in round 1", 1, 1, 1}, {"answered in round 2", 2, 0, 1}, {"answered in the FALLBACK round", 3, 0, 0}} {
		r := newReceiver(t, Settings{Reorder: time.Millisecond})
		id := open(t, r, 0, flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: 8, M: 0, T: testT})
		a := mkBlock(0x100, 1, writes(0x100, 8)...)
		var log trafficLog
		for j, p := range a.pkts {
			if j != 2 && j != 3 {
				r.Observe(0, id, p, false)
			}
		}
		for len(log.rangeReqs()) < c.rangeRounds {
			d, _ := r.NextDeadline()
			r.Tick(d)
			log.take(d, r)
		}
		rq := log.rangeReqs()[c.rangeRounds-1]
		now := log.reqAt[len(log.reqAt)-1] + 5*time.Millisecond
		if rq.Fallback {
			// The FALLBACK answer: Source Copy; one of the two copies is lost.
			r.Handle(now, testCSF, a.sourceCopy(t, id, 2, rq.RequestID, true), false)
		} else {
			// One coded symbol of the two the CSF sent arrives: the block is still unsolved.
			r.Handle(now, testCSF, a.retx(t, id, 0, lostSet(2, 3), rq.RequestID), false)
		}
		n := len(log.reqs)
		log.take(now, r)
		log.runUntil(r, now+time.Second)
		coded, fallbacks := 0, 0
		for _, q := range log.reqs[n:] {
			switch {
			case q.RangeForm:
				t.Fatalf("%s: a range request after the block is known: %+v", c.name, q)
			case q.Fallback:
				fallbacks++
			default:
				coded++
			}
		}
		_, restored, abandoned := log.kinds()
		if coded != c.coded || fallbacks != c.fallbacks || abandoned != 2-restored {
			t.Fatalf("%s: %d coded and %d FALLBACK block requests (want %d, %d), %d abandoned", c.name, coded, fallbacks, c.coded, c.fallbacks, abandoned)
		}
	}
}

// TestConfigKeptWhileRepairable: the CRF keeps every acknowledged configuration while a
// block of it can still be repaired (E44), so a coded retransmission of an older configuration
// after a change is decoded: after a change away from m = 0 (no REPAIR of the old configuration
// ever came, so the CRF knows no block of it) and after a change to m = 0 (the new
// configuration's first REPAIR is a coded retransmission).
func TestConfigKeptWhileRepairable(t *testing.T) {
	for _, c := range []struct {
		name   string
		m1, m2 int
	}{{"away from m = 0", 0, 2}, {"to m = 0", 2, 0}} {
		r := newReceiver(t, Settings{Reorder: time.Millisecond})
		id := open(t, r, 0, flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: 8, M: c.m1, T: testT})
		var log trafficLog
		a := mkBlock(0x100, 1, writes(0x100, 8)...) // configuration 1; its REPAIRs, if any, are lost
		for j, p := range a.pkts {
			if j != 2 {
				r.Observe(0, id, p, false)
			}
		}
		c2 := flow.Config{ID: 2, Scheme: wire.SchemeCauchy, K: 8, M: c.m2, T: testT}
		if st := paramUpdate(t, r, 0, id, c2, 0x108); st != wire.StatusAccepted {
			t.Fatalf("%s: PARAM_ACK status %v", c.name, st)
		}
		b := mkBlock(0x108, 2, writes(0x108, 8)...)
		for j, p := range b.pkts {
			if j != 2 || c.m2 > 0 {
				r.Observe(0, id, p, false)
			}
		}
		for i := range c.m2 {
			r.Handle(0, testCSF, b.ordinary(t, id, i, i == c.m2-1), false)
		}
		log.runUntil(r, time.Millisecond)
		rq := log.rangeReqs()
		if len(rq) != 1 {
			t.Fatalf("%s: range requests %+v", c.name, rq)
		}
		// The CSF answers per block, each with its own Config ID; the newer one first.
		if c.m2 == 0 {
			r.Handle(time.Millisecond, testCSF, b.retx(t, id, 0, lostSet(2), rq[0].RequestID), false)
		}
		r.Handle(time.Millisecond, testCSF, a.retx(t, id, 0, lostSet(2), rq[0].RequestID), false)
		log.take(time.Millisecond, r)
		st, _ := r.FlowStats(id)
		if _, restored, _ := log.kinds(); restored != 1+(2-c.m2)/2 || st.RepairUnknownConfig != 0 {
			t.Fatalf("%s: %d restored: %+v", c.name, restored, st)
		}
	}
}

// TestConfigEffectivePSNContract3: a PARAM_UPDATE sent again with a later Effective PSN (its
// PARAM_ACK was lost and the Effective PSN passed) is acknowledged again and its Effective PSN
// kept; meanwhile the CSF went on with the older configuration past the first Effective PSN,
// and a coded retransmission of such a block is decoded.
func TestConfigEffectivePSNContract3(t *testing.T) {
	r := newReceiver(t, Settings{Reorder: time.Millisecond})
	id := open(t, r, 0, cfg8m1)
	c2 := flow.Config{ID: 2, Scheme: wire.SchemeCauchy, K: 8, M: 2, T: testT}
	if st := paramUpdate(t, r, 0, id, c2, 0x108); st != wire.StatusAccepted {
		t.Fatalf("PARAM_ACK status %v", st)
	}
	var log trafficLog
	a := mkBlock(0x108, 1, writes(0x108, 8)...) // still configuration 1: the PARAM_ACK was lost
	for j, p := range a.pkts {
		if j != 1 && j != 2 {
			r.Observe(0, id, p, false)
		}
	}
	r.Handle(0, testCSF, a.ordinary(t, id, 0, true), false)
	log.take(0, r)
	if st := paramUpdate(t, r, 0, id, c2, 0x118); st != wire.StatusAccepted {
		t.Fatalf("PARAM_ACK status %v to the update sent again", st)
	}
	if c := f1(r, id).config(2); c == nil || c.eff != 0x118 {
		t.Fatalf("configuration 2: %+v", c)
	}
	b := mkBlock(0x118, 2, writes(0x118, 8)...)
	for _, p := range append(writes(0x110, 8), b.pkts...) {
		r.Observe(0, id, p, false)
	}
	r.Handle(0, testCSF, b.ordinary(t, id, 0, false), false)
	if len(log.reqs) != 1 {
		t.Fatalf("requests %+v", log.reqs)
	}
	r.Handle(time.Millisecond, testCSF, a.retx(t, id, 1, lostSet(1, 2), log.reqs[0].RequestID), false)
	log.take(time.Millisecond, r)
	if _, restored, _ := log.kinds(); restored != 2 {
		st, _ := r.FlowStats(id)
		t.Fatalf("%d restored: %+v", restored, st)
	}
}

// TestConfigSlotsBound: at most four configurations are held (maxConfigs). A fifth proposed
// while all four may still have a repairable block is accepted, the configurations older than
// the newest held before it retired to make room (E81: the CSF proposes only once it holds no
// block of them, E80; counted), and a REPAIR of a retired one is dropped, counted. One that
// cannot make room, its Config ID older than every one held, gets PARAM_ACK status 3 (counted;
// a copy of it gets the same answer, E51). Once the older configurations' PSNs are behind the
// window they are released as before (E44).
func TestConfigSlotsBound(t *testing.T) {
	r := newReceiver(t, Settings{}, WithLimits(smallLimits()))
	id := open(t, r, 0, cfg8m1)
	p := psn.PSN(0x100)
	feed := func(n int) {
		for _, pk := range writes(p, n) {
			r.Observe(0, id, pk, false)
		}
		p = p.Add(n)
	}
	feed(8)
	for n := 2; n <= 4; n++ {
		if st := paramUpdate(t, r, 0, id, flow.Config{ID: uint8(n), Scheme: wire.SchemeCauchy, K: 8, M: n % 3, T: testT}, p); st != wire.StatusAccepted {
			t.Fatalf("configuration %d: status %v", n, st)
		}
		feed(8)
	}
	c5 := flow.Config{ID: 5, Scheme: wire.SchemeCauchy, K: 8, M: 2, T: testT}
	if st := paramUpdate(t, r, 0, id, c5, p); st != wire.StatusAccepted || r.Stats().ConfigsRetired != 3 || r.Stats().ConfigsFull != 0 {
		t.Fatalf("a fifth configuration while four may be repaired: status %v, %+v", st, r.Stats())
	}
	if f1(r, id).config(4) == nil || f1(r, id).config(5) == nil || f1(r, id).config(3) != nil {
		t.Fatal("configurations 4 and 5 not held, or 3 still held")
	}
	// A REPAIR of configuration 2, its block still in the window: dropped, counted as of a
	// retired configuration (E81), not as unknown.
	old := mkBlock(0x108, 2, writes(0x108, 8)...)
	r.Handle(0, testCSF, old.ordinary(t, id, 0, true), false)
	if st, _ := r.FlowStats(id); st.RepairRetiredConfig != 1 || st.RepairUnknownConfig != 0 {
		t.Fatalf("REPAIR of a retired configuration: %+v", st)
	}
	feed(8)
	for n := 6; n <= 7; n++ {
		if st := paramUpdate(t, r, 0, id, flow.Config{ID: uint8(n), Scheme: wire.SchemeCauchy, K: 8, M: 1, T: testT}, p); st != wire.StatusAccepted {
			t.Fatalf("configuration %d: status %v", n, st)
		}
		feed(8)
	}
	// Four held (4 to 7): a Config ID older than all of them has nothing to retire.
	c3 := flow.Config{ID: 3, Scheme: wire.SchemeCauchy, K: 8, M: 2, T: testT}
	if st := paramUpdate(t, r, 0, id, c3, p); st != wire.StatusResourcesExhausted || r.Stats().ConfigsFull != 1 {
		t.Fatalf("an older Config ID while four are held: status %v", st)
	}
	if st := paramUpdate(t, r, 0, id, c3, p); st != wire.StatusResourcesExhausted {
		t.Fatalf("a copy of the refused update: status %v", st)
	}
	feed(40) // the window (32 positions) moves past every block of configurations 4 and 5 (6 is bounded only by 8, E44)
	c8 := flow.Config{ID: 8, Scheme: wire.SchemeCauchy, K: 8, M: 2, T: testT}
	retired := r.Stats().ConfigsRetired
	if st := paramUpdate(t, r, 0, id, c8, p); st != wire.StatusAccepted || r.Stats().ConfigsReleased != 5 || r.Stats().ConfigsRetired != retired {
		t.Fatalf("after the window moved: status %v, %d released, %d retired", st, r.Stats().ConfigsReleased, r.Stats().ConfigsRetired)
	}
	late := func() uint64 { st, _ := r.FlowStats(id); return st.RepairLate }()
	r.Handle(0, testCSF, mkBlock(0x100, 1, writes(0x100, 8)...).ordinary(t, id, 0, true), false)
	if st, _ := r.FlowStats(id); st.RepairLate != late+1 {
		t.Fatalf("REPAIR of a released configuration (its block behind the window): %+v", st)
	}
}

// TestAnyStartPSN: the CRF works wherever the flow's PSNs start in the 24-bit space and
// across the wrap: ordinary repair, a loss asked for in the PSN-range form, a READ of 64 MiB,
// in both delivery modes.
func TestAnyStartPSN(t *testing.T) {
	for _, s := range []psn.PSN{0x000000, 0x7fffff, 0x800000, 0x900000, 0xfffff0, 0xfffffc} {
		for _, ordered := range []bool{false, true} {
			name := fmt.Sprintf("start %v, ordered %v", s, ordered)
			r := newReceiver(t, Settings{Ordered: ordered, Reorder: time.Millisecond})
			id := open(t, r, 0, cfg8m1)
			read := readRequest(s.Add(16), 64<<20)
			n := f1(r, id).consumes(read)
			a := mkBlock(s, 1, writes(s, 8)...)
			b := mkBlock(s.Add(8), 1, writes(s.Add(8), 8)...)
			c := mkBlock(s.Add(16), 1, read, nil, nil, nil, nil, nil, nil, nil)
			d := mkBlock(s.Add(16+n), 1, writes(s.Add(16+n), 8)...)
			var log trafficLog
			lost := map[psn.PSN]bool{s.Add(1): true, s.Add(8): true, s.Add(16 + n + 3): true}
			for _, blk := range []*sblock{a, b, c, d} {
				for _, p := range blk.pkts {
					if p != nil && !lost[psnOf(p)] {
						r.Observe(0, id, p, false)
					}
				}
				if blk != b { // b's REPAIR is lost: its loss is asked for by range
					r.Handle(0, testCSF, blk.ordinary(t, id, 0, true), false)
				}
			}
			log.take(0, r)
			log.runUntil(r, time.Millisecond)
			rq := log.rangeReqs()
			if len(rq) != 1 || len(rq[0].Ranges) != 1 || rq[0].Ranges[0] != (psn.Range{Start: s.Add(8), Count: 1}) {
				t.Fatalf("%s: range requests %+v", name, rq)
			}
			r.Handle(time.Millisecond, testCSF, b.retx(t, id, 0, lostSet(0), rq[0].RequestID), false)
			log.take(time.Millisecond, r)
			log.runUntil(r, 100*time.Millisecond)
			received, restored, abandoned := log.kinds()
			e, rcv := log.sums()
			if restored != 3 || abandoned != 0 || len(log.reqs) != 1 || rcv != 22 || e != 25 {
				t.Fatalf("%s: %d restored, %d abandoned, %d requests; %d expected, %d received", name, restored, abandoned, len(log.reqs), e, rcv)
			}
			if ordered {
				if received != 21 {
					t.Fatalf("%s: %d released in order", name, received)
				}
				// In PSN order, but for the range-request loss: its answer comes after the
				// hold's reorder allowance (E15), and late beats never.
				var prev psn.PSN
				have := false
				for _, d := range log.dels {
					if d.PSN == s.Add(8) {
						continue
					}
					if have && !prev.Before(d.PSN) {
						t.Fatalf("%s: delivered %v after %v", name, d.PSN, prev)
					}
					prev, have = d.PSN, true
				}
			}
		}
	}
}

// TestFilledLateIsLoss: a missing PSN filled half an SRTT or more after its gap was seen
// is the RDMA transport's retransmission (it needs a round trip), or an original as late:
// LOSS_REPORT counts it expected and not received, so the loss the path caused stays visible
// (to the circuit breaker above all, C11 f). One filled sooner was reordered or delayed:
// received, also after the reorder allowance made the CRF ask for it (C7 f).
func TestFilledLateIsLoss(t *testing.T) {
	for _, c := range []struct {
		name     string
		at       time.Duration // when the missing PSN arrives
		received uint32
	}{{"reordered", 500 * time.Microsecond, 8}, {"delayed past the allowance", 4 * time.Millisecond, 8},
		{"retransmitted", 8 * time.Millisecond, 7}} {
		r := newReceiver(t, Settings{Reorder: time.Millisecond})
		id := open(t, r, 0, flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: 8, M: 0, T: testT})
		a := mkBlock(0x100, 1, writes(0x100, 8)...)
		for j, p := range a.pkts {
			if j != 3 {
				r.Observe(0, id, p, false)
			}
		}
		var log trafficLog
		log.runUntil(r, c.at)
		if v := r.Observe(c.at, id, a.pkts[3], false); v != Forward {
			t.Fatalf("%s: verdict %v", c.name, v)
		}
		log.runUntil(r, 10*time.Millisecond)
		if len(log.reports) != 1 || log.reports[0].Expected != 8 || log.reports[0].Received != c.received {
			t.Fatalf("%s: LOSS_REPORTs %+v", c.name, log.reports)
		}
	}
}

// TestResentReadResponseC13: in the direction of READ responses (C13), a response sent
// again after a re-issued READ is not the packet first sent (its AETH, and a re-issue from the
// middle starts with READ_RESPONSE_FIRST where the original was MIDDLE). One with an AETH that
// arrives at a missing PSN after the CRF asked for it is delivered but never decoded with (E46):
// the block's other loss is restored from the repair, its ICRC checks (C12), nothing falls back.
func TestResentReadResponseC13(t *testing.T) {
	r := newReceiver(t, Settings{})
	id := open(t, r, 0, cfg8m1)
	var pkts [][]byte
	for j := range 8 {
		pkts = append(pkts, readResponse(psn.PSN(0x100+j), roce.OpReadResponseMiddle, 1024, 0))
	}
	a := mkBlock(0x100, 1, pkts...)
	for j, p := range pkts {
		if j != 2 && j != 5 {
			r.Observe(0, id, p, false)
		}
	}
	var log trafficLog
	r.Handle(0, testCSF, a.ordinary(t, id, 0, true), false)
	log.take(0, r)
	if len(log.reqs) != 1 || log.reqs[0].Lost != lostSet(2, 5) {
		t.Fatalf("requests %+v", log.reqs)
	}
	// Sent again after a re-issued READ, a round trip after the loss.
	resent := readResponse(0x105, roce.OpReadResponseFirst, 1024, 7)
	if v := r.Observe(6*time.Millisecond, id, resent, false); v != Forward {
		t.Fatalf("verdict %v", v)
	}
	r.Handle(7*time.Millisecond, testCSF, a.retx(t, id, 1, lostSet(2, 5), log.reqs[0].RequestID), false)
	log.take(7*time.Millisecond, r)
	st, _ := r.FlowStats(id)
	_, restored, abandoned := log.kinds()
	if restored != 1 || abandoned != 0 || st.ICRCMismatch != 0 || log.dels[0].PSN != 0x102 || string(log.dels[0].Packet) != string(pkts[2]) {
		t.Fatalf("%d restored, %d abandoned: %+v", restored, abandoned, st)
	}
}
