package crf

import (
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// TestRepairAheadKeptAsideE60 (C7 c, C7 e, C7 f; E60): a REPAIR naming a block none of whose
// sources has been seen is kept aside, not made a block: it is taken once the sources pass the
// block (a reorder allowance later), at once when another REPAIR makes the block or its REPAIRs
// alone can solve it, and dropped when no source reaches it. A forged one for the block after
// the sources then only ever comes second, and one for a block that never comes makes none.
func TestRepairAheadKeptAsideE60(t *testing.T) {
	cfg := flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: 4, M: 4, T: testT}
	type run struct {
		r   *Receiver
		id  uint32
		log trafficLog
	}
	start := func() *run {
		r := newReceiver(t, Settings{Reorder: time.Millisecond})
		x := &run{r: r, id: open(t, r, 0, cfg)}
		for _, p := range writes(0x100, 4) { // a first block, whole: the flow has started
			r.Observe(time.Millisecond, x.id, p, false)
		}
		return x
	}
	restored := func(x *run, want ...psn.PSN) bool {
		got := map[psn.PSN]bool{}
		for _, d := range x.log.dels {
			if d.Kind == Restored {
				got[d.PSN] = true
			}
		}
		for _, q := range want {
			if !got[q] {
				return false
			}
		}
		return true
	}
	now := 2 * time.Millisecond

	t.Run("overtaking its sources", func(t *testing.T) {
		x := start()
		b := mkBlock(0x104, 1, writes(0x104, 4)...)
		x.r.Handle(now, testCSF, b.ordinary(t, x.id, 0, true), false)
		if st, _ := x.r.FlowStats(x.id); st.RepairAside != 1 || st.BlocksCreated != 0 {
			t.Fatalf("not kept aside: %+v", st)
		}
		for _, j := range []int{0, 2, 3} { // position 1 lost
			x.r.Observe(now+time.Duration(j)*time.Microsecond, x.id, b.pkts[j], false)
		}
		x.log.take(now, x.r)
		x.log.runUntil(x.r, now+2*time.Millisecond)
		if st, _ := x.r.FlowStats(x.id); !restored(x, 0x105) || st.RepairAsideTaken != 1 || st.RepairAsideExpired != 0 {
			t.Fatalf("not restored: %+v", st)
		}
	})

	t.Run("all sources lost, solvable from its REPAIRs", func(t *testing.T) {
		x := start()
		b := mkBlock(0x104, 1, writes(0x104, 4)...)
		for i := range 4 {
			x.r.Handle(now, testCSF, b.ordinary(t, x.id, i, i == 3), false)
		}
		x.log.take(now, x.r)
		if st, _ := x.r.FlowStats(x.id); !restored(x, 0x104, 0x105, 0x106, 0x107) || st.RepairAsideTaken != 4 {
			t.Fatalf("not restored at once: %+v", st)
		}
	})

	t.Run("all sources lost, later sources pass", func(t *testing.T) {
		x := start()
		b := mkBlock(0x104, 1, writes(0x104, 4)...)
		x.r.Handle(now, testCSF, b.ordinary(t, x.id, 0, true), false)
		for _, p := range writes(0x108, 2) {
			x.r.Observe(now+time.Microsecond, x.id, p, false)
		}
		x.log.take(now, x.r)
		x.log.runUntil(x.r, now+20*time.Millisecond)
		st, _ := x.r.FlowStats(x.id)
		if st.RepairAsideTaken != 1 || st.BlocksCreated != 1 || len(x.log.reqs) == 0 {
			t.Fatalf("the block was not made and asked for: %d requests\n%+v", len(x.log.reqs), st)
		}
	})

	t.Run("no source reaches it", func(t *testing.T) {
		x := start()
		b := mkBlock(0x104, 1, writes(0x104, 4)...)
		x.r.Handle(now, testCSF, forge(b.ordinary(t, x.id, 0, true), 2), false)
		x.log.take(now, x.r)
		x.log.runUntil(x.r, now+(asideWait+1)*time.Millisecond)
		st, _ := x.r.FlowStats(x.id)
		if st.RepairAsideExpired != 1 || st.BlocksCreated != 0 || len(x.log.reqs) != 0 {
			t.Fatalf("a block was made: %d requests\n%+v", len(x.log.reqs), st)
		}
	})

	t.Run("forged for the next block, then its sources and genuine REPAIR", func(t *testing.T) {
		x := start()
		b := mkBlock(0x104, 1, writes(0x104, 4)...)
		x.r.Handle(now, testCSF, forge(b.ordinary(t, x.id, 0, false), 1), false)
		for _, j := range []int{0, 1, 3} { // position 2 lost
			x.r.Observe(now+time.Duration(j)*time.Microsecond, x.id, b.pkts[j], false)
		}
		x.r.Handle(now+10*time.Microsecond, testCSF, b.ordinary(t, x.id, 0, false), false)
		x.log.take(now, x.r)
		x.log.runUntil(x.r, now+20*time.Millisecond)
		st, _ := x.r.FlowStats(x.id)
		if !restored(x, 0x106) || st.ICRCMismatch != 0 || st.RepairAsideTaken != 1 || st.BlocksAbandoned != 0 {
			t.Fatalf("not restored by the genuine REPAIR alone: %+v", st)
		}
	})

	t.Run("bounded", func(t *testing.T) {
		x := start()
		for i := range maxAside + 3 {
			b := mkBlock(0x104+psn.PSN(4*i), 1, writes(0x104+psn.PSN(4*i), 4)...)
			x.r.Handle(now, testCSF, forge(b.ordinary(t, x.id, 0, false), byte(i)), false)
		}
		f := x.r.flows[x.id]
		if st, _ := x.r.FlowStats(x.id); len(f.aside) != maxAside || st.RepairAsideDropped != 3 || st.BlocksCreated != 0 {
			t.Fatalf("%d aside: %+v", len(f.aside), st)
		}
	})
}
