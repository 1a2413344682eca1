package crf

import (
	"bytes"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// forged is a REPAIR from the CSF's address for block b's Block Start PSN with another
// definition: k positions, present, and a symbol of no source (seeded by idx).
func forged(t testing.TB, id uint32, b *block, k int, present psn.Bitmap, idx int) []byte {
	t.Helper()
	sym := make([]byte, testT)
	for i := range sym {
		sym[i] = byte(i*31 + idx*7 + 1)
	}
	m := wire.Repair{FlowID: id, ConfigID: 1, Scheme: wire.SchemeCauchy, K: uint8(k), RepairIndex: uint8(idx),
		BlockStartPSN: b.start, Present: present, Symbol: sym}
	return msg(t, &m)
}

// without returns the first k positions but j.
func without(k, j int) psn.Bitmap {
	p := psn.FirstK(k)
	p.Clear(j)
	return p
}

// TestDefinitionContradictedBySource (E66): a forged first REPAIR clears a position from the
// Present Bitmap before that position's source came; the CSF's REPAIR then defines the block
// another way and is kept beside it. The source arriving at the cleared position condemns the
// forged definition, and the CSF's restores the loss, byte for byte.
func TestDefinitionContradictedBySource(t *testing.T) {
	r := newReceiver(t, Settings{})
	id := open(t, r, 0, cfg8)
	g := newBlock(0x100, 8)
	now := time.Millisecond
	for j := range 3 {
		r.Observe(now, id, g.pkts[j], false)
	}
	r.Handle(now, testCSF, forged(t, id, g, 8, without(8, 5), 0), false)
	r.Handle(now, testCSF, g.repair(t, id, 0, psn.Bitmap{}, 0), false)
	if st, _ := r.FlowStats(id); st.DefinitionConflicts != 1 || st.DefinitionsKept != 1 || st.BlocksCreated != 2 {
		t.Fatalf("the CSF's definition not kept beside the forged one: %+v", st)
	}
	for _, j := range []int{5, 3, 4, 6} { // 7 is lost
		r.Observe(now+time.Duration(j)*time.Microsecond, id, g.pkts[j], false)
	}
	st, _ := r.FlowStats(id)
	if st.DefinitionsContradicted != 1 || st.DefinitionsConfirmed != 1 || st.Restored != 1 || st.ICRCMismatch != 0 || st.Abandoned != 0 {
		t.Fatalf("contradicted %d, confirmed %d, restored %d, ICRC mismatches %d, abandoned %d",
			st.DefinitionsContradicted, st.DefinitionsConfirmed, st.Restored, st.ICRCMismatch, st.Abandoned)
	}
	var got []Delivery
	for _, d := range drainDel(r) {
		if d.Kind == Restored {
			got = append(got, d)
		}
	}
	if len(got) != 1 || got[0].PSN != 0x107 || !bytes.Equal(got[0].Packet, g.pkts[7]) {
		t.Fatalf("restored %+v", got)
	}
}

// TestDefinitionGenuineFirst (E66): the CSF's REPAIR defines the block and its solve verifies;
// a forged REPAIR with half its k after that is refused (RepairInconsistent) and makes nothing.
func TestDefinitionGenuineFirst(t *testing.T) {
	r := newReceiver(t, Settings{})
	id := open(t, r, 0, cfg8)
	g := newBlock(0x100, 8)
	now := time.Millisecond
	for j := range 8 {
		if j != 2 {
			r.Observe(now, id, g.pkts[j], false)
		}
	}
	r.Handle(now, testCSF, g.repair(t, id, 0, psn.Bitmap{}, 0), false)
	r.Handle(now, testCSF, forged(t, id, g, 4, psn.FirstK(4), 0), false)
	r.Handle(now, testCSF, forged(t, id, g, 8, without(8, 2), 1), false)
	st, _ := r.FlowStats(id)
	if st.Restored != 1 || st.DefinitionConflicts != 2 || st.RepairInconsistent != 2 || st.DefinitionsKept != 0 ||
		st.BlocksCreated != 1 || st.ICRCMismatch != 0 {
		t.Fatalf("%+v", st)
	}
}

// TestDefinitionsBounded (E67, E68): definitions that fail verification while the first stands
// are condemned; one takes a condemned one's place, and past maxDefinitions a Block Start PSN
// takes no more. Nothing that fails the ICRC check is delivered.
func TestDefinitionsBounded(t *testing.T) {
	r := newReceiver(t, Settings{})
	id := open(t, r, 0, cfg8)
	g := newBlock(0x100, 8)
	now := time.Millisecond
	for j := range 8 {
		if j != 2 {
			r.Observe(now, id, g.pkts[j], false)
		}
	}
	r.Handle(now, testCSF, forged(t, id, g, 4, psn.FirstK(4), 0), false) // the first: fails alone (E56)
	r.Handle(now, testCSF, forged(t, id, g, 6, psn.FirstK(6), 0), false) // kept, fails: condemned
	r.Handle(now, testCSF, forged(t, id, g, 5, psn.FirstK(5), 0), false) // in its place, condemned
	r.Handle(now, testCSF, forged(t, id, g, 7, psn.FirstK(7), 0), false) // beyond the bound
	st, _ := r.FlowStats(id)
	if st.DefinitionConflicts != 3 || st.DefinitionsKept != 2 || st.DefinitionsCondemned != 2 || st.DefinitionsRefused != 1 ||
		st.BlocksCreated != 3 || st.ICRCMismatch != 3 || st.Restored != 0 {
		t.Fatalf("%+v", st)
	}
	if f := r.flows[id]; f.live != 1 {
		t.Fatalf("%d blocks live, want the first definition only", f.live)
	}
	for _, d := range drainDel(r) {
		if d.Kind == Restored {
			t.Fatalf("delivered %v", d.PSN)
		}
	}
}

// TestDefinitionNeverEvicts (E68): with every open block taken, a second definition is refused,
// not made by pushing an open block out.
func TestDefinitionNeverEvicts(t *testing.T) {
	lim := flow.DefaultLimits()
	lim.MaxOpenBlocks = 1
	r := newReceiver(t, Settings{}, WithLimits(lim))
	id := open(t, r, 0, cfg8)
	g := newBlock(0x100, 8)
	now := time.Millisecond
	for j := range 8 {
		if j != 2 && j != 3 {
			r.Observe(now, id, g.pkts[j], false)
		}
	}
	r.Handle(now, testCSF, g.repair(t, id, 0, psn.Bitmap{}, 0), false)
	r.Handle(now, testCSF, forged(t, id, g, 4, psn.FirstK(4), 0), false)
	st, _ := r.FlowStats(id)
	if st.DefinitionConflicts != 1 || st.DefinitionsRefused != 1 || st.BlocksEvicted != 0 || st.BlocksCreated != 1 {
		t.Fatalf("%+v", st)
	}
	r.Handle(now, testCSF, g.repair(t, id, 1, psn.Bitmap{}, 0), false)
	if st, _ := r.FlowStats(id); st.Restored != 2 {
		t.Fatalf("the CSF's block lost: %+v", st)
	}
}
