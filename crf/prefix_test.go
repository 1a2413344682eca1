package crf

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// prefixDecoder reads only the length and BTH of each source (flow.SourcePrefixer), as a
// simulator's symbolic codec does: fec.Block decides what is solvable, and a restored packet
// comes from the sender's table by PSN, the block's first PSN learned from a source's BTH.
type prefixDecoder struct {
	blk     fec.Block
	T       int
	base    psn.PSN
	hasBase bool
	table   map[psn.PSN][]byte
	lens    *[]int // lengths of the payloads AddSource got, if not nil
}

func (d *prefixDecoder) SourcePrefix() int { return 14 }

func (d *prefixDecoder) Reset(s fec.Scheme, k, T int, present psn.Bitmap) error {
	d.T, d.hasBase = T, false
	return d.blk.Reset(s, k, present)
}

func (d *prefixDecoder) AddSource(j int, payload []byte) error {
	if d.lens != nil {
		*d.lens = append(*d.lens, len(payload))
	}
	if err := d.blk.AddSource(j); err != nil {
		return err
	}
	if !d.hasBase && len(payload) >= 12 {
		d.base, d.hasBase = psn.PSN(uint32(payload[9])<<16|uint32(payload[10])<<8|uint32(payload[11])).Add(-j), true
	}
	return nil
}

func (d *prefixDecoder) AddSourceSymbol(j int, sym []byte) error { return d.blk.AddSource(j) }

func (d *prefixDecoder) AddRepair(i int, over psn.Bitmap, sym []byte) error {
	if len(sym) != d.T {
		return fec.ErrSymbolLength
	}
	return d.blk.AddRepair(i, over)
}

func (d *prefixDecoder) Status() fec.Status { return d.blk.Status() }

func (d *prefixDecoder) Decode() (psn.Bitmap, error) { return d.blk.Restore() }

func (d *prefixDecoder) Payload(j int) ([]byte, error) {
	p, ok := d.table[d.base.Add(j)]
	if !d.hasBase || !ok {
		return nil, fmt.Errorf("no packet at position %d", j)
	}
	return p, nil
}

// prefixReceiver returns a Receiver whose decoders read only a prefix, the table they restore
// from, the payload lengths they were given and the count of decoders made.
func prefixReceiver(t *testing.T, set Settings, opts ...Option) (*Receiver, map[psn.PSN][]byte, *[]int, *int) {
	table, lens, made := map[psn.PSN][]byte{}, new([]int), new(int)
	r := newReceiver(t, set, append(opts, WithDecoders(func() (flow.Decoder, error) {
		*made++
		return &prefixDecoder{table: table, lens: lens}, nil
	}))...)
	return r, table, lens, made
}

// zeroRepair is an ordinary REPAIR of an 8-block whose symbol a prefix codec does not read.
func zeroRepair(t *testing.T, id uint32, start psn.PSN, idx int, last bool) []byte {
	m := wire.Repair{FlowID: id, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 8, RepairIndex: uint8(idx), Last: last,
		BlockStartPSN: start, Present: psn.FirstK(8), Symbol: make([]byte, testT)}
	return msg(t, &m)
}

// TestSourcePrefixKept: with a codec that reads only a prefix of each source, the Receiver
// hands it only that prefix, restores whole packets that pass the ICRC check (C12), and uses as
// many decoders as blocks decode at once, not one per block.
func TestSourcePrefixKept(t *testing.T) {
	r, table, lens, made := prefixReceiver(t, Settings{})
	id := open(t, r, 0, cfg8)
	restored := 0
	for n := range 50 {
		b := newBlock(psn.PSN(0x100+8*n), 8)
		for j, p := range b.pkts {
			table[b.start.Add(j)] = p
			if j != 2 && j != 5 {
				r.Observe(time.Millisecond, id, p, false)
			}
		}
		r.Handle(time.Millisecond, testCSF, zeroRepair(t, id, b.start, 0, false), false)
		r.Handle(time.Millisecond, testCSF, zeroRepair(t, id, b.start, 1, true), false)
		for _, d := range drainDel(r) {
			if d.Kind != Restored || !bytes.Equal(d.Packet, b.pkts[b.start.Forward(d.PSN)]) {
				t.Fatalf("block %d: delivery %+v", n, d)
			}
			restored++
		}
	}
	st, _ := r.FlowStats(id)
	if restored != 100 || st.ICRCMismatch != 0 || st.BlocksDecoded != 50 {
		t.Fatalf("%d restored: %+v", restored, st)
	}
	for _, n := range *lens {
		if n != 12 {
			t.Fatalf("the decoder got a source of %d octets, want the prefix's 12", n)
		}
	}
	if len(*lens) != 300 || *made > 2 {
		t.Fatalf("%d sources handed to decoders, %d decoders made", len(*lens), *made)
	}
}

// TestSourcePrefixOrdered: in ordered mode (C7 a) the packets held behind a gap are kept whole,
// apart from the codec's prefix, and come out whole and in order once the gap is restored.
func TestSourcePrefixOrdered(t *testing.T) {
	r, table, _, _ := prefixReceiver(t, Settings{Ordered: true})
	id := open(t, r, 0, cfg8)
	b := newBlock(0x100, 8)
	for j, p := range b.pkts {
		table[b.start.Add(j)] = p
	}
	for j, p := range b.pkts {
		if j == 2 {
			continue
		}
		v := r.Observe(time.Millisecond, id, p, false)
		if want := map[bool]Verdict{true: Forward, false: Held}[j < 2]; v != want {
			t.Fatalf("source %d: verdict %v, want %v", j, v, want)
		}
	}
	r.Handle(time.Millisecond, testCSF, zeroRepair(t, id, b.start, 0, true), false)
	ds := drainDel(r)
	if len(ds) != 6 {
		t.Fatalf("%d deliveries, want 6", len(ds))
	}
	for n, d := range ds {
		j := 2 + n
		if d.PSN != b.start.Add(j) || !bytes.Equal(d.Packet, b.pkts[j]) {
			t.Fatalf("delivery %d: PSN %v, %d octets", n, d.PSN, len(d.Packet))
		}
	}
}

// TestSourcePrefixDuplicateMismatch: with only a prefix kept, a duplicate is compared on its
// length and prefix (C7 d, E10).
func TestSourcePrefixDuplicateMismatch(t *testing.T) {
	r, _, _, _ := prefixReceiver(t, Settings{})
	id := open(t, r, 0, cfg8)
	p := packet(0x100, 300)
	r.Observe(0, id, p, false)
	r.Observe(0, id, p, false)
	r.Observe(0, id, packet(0x100, 301), false)
	q := bytes.Clone(p)
	q[1] ^= 0x40
	r.Observe(0, id, q, false)
	st, _ := r.FlowStats(id)
	if st.Duplicates != 3 || st.DuplicateMismatch != 2 {
		t.Fatalf("%d duplicates, %d mismatches; want 3 and 2", st.Duplicates, st.DuplicateMismatch)
	}
}

// TestBlocksAllocatedOnUse: a flow's block table grows as blocks are first needed, up to its
// ring of 2 x Max Open Blocks, and decoders return to a pool when their block ends.
func TestBlocksAllocatedOnUse(t *testing.T) {
	l := flow.DefaultLimits()
	l.MaxOpenBlocks = 3
	r := newReceiver(t, Settings{}, WithLimits(l))
	id := open(t, r, 0, cfg8)
	f := r.flows[id]
	if len(f.blocks) != 0 {
		t.Fatalf("%d blocks allocated before any REPAIR", len(f.blocks))
	}
	for n := range 10 {
		b := newBlock(psn.PSN(0x100+8*n), 8)
		for j := 1; j < 8; j++ {
			r.Observe(0, id, b.pkts[j], false)
		}
		r.Handle(0, testCSF, b.repair(t, id, 0, psn.Bitmap{}, 0), false)
		if want := min(n+1, 6); len(f.blocks) != want {
			t.Fatalf("after %d blocks: %d allocated, want %d", n+1, len(f.blocks), want)
		}
	}
	st, _ := r.FlowStats(id)
	if st.BlocksDecoded != 10 || len(r.decs) != 1 {
		t.Fatalf("%d decoded, %d decoders pooled: %+v", st.BlocksDecoded, len(r.decs), st)
	}
}

// deadlineScan is the flow's deadline as a scan of every block and window slot: what the heaps
// must equal.
func deadlineScan(f *rflow) time.Duration {
	d := min(f.reportAt, f.lastSource+f.idle(defaultHandshake))
	if f.holding {
		d = min(d, f.holdDue)
	}
	for i := range f.win {
		if s := &f.win[i]; s.st == slotMissing && f.blockOf(s) == nil {
			d = min(d, s.due)
		}
	}
	for i := range f.blocks {
		if b := &f.blocks[i]; b.used && !b.ended && b.haveDue {
			d = min(d, b.due)
		}
	}
	return d
}

// TestNextDeadlineMatchesScan: through random loss, partial repair, late sources and ticks, the
// deadline the heaps give is always the earliest of every block's and missing PSN's timers.
func TestNextDeadlineMatchesScan(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(3, 4))
		l := flow.DefaultLimits()
		l.MaxOpenBlocks = 8
		r := newReceiver(t, Settings{Ordered: ordered}, WithLimits(l))
		id := open(t, r, 0, cfg8)
		f := r.flows[id]
		now := time.Duration(0)
		var late [][]byte
		for n := range 400 {
			b := newBlock(psn.PSN(0x100+8*n), 8)
			for _, p := range b.pkts {
				now += time.Duration(rng.IntN(200)) * time.Microsecond
				switch rng.IntN(10) {
				case 0:
				case 1:
					late = append(late, p)
				default:
					r.Observe(now, id, p, false)
				}
				if len(late) > 0 && rng.IntN(8) == 0 {
					r.Observe(now, id, late[0], false)
					late = late[1:]
				}
				if d, ok := r.NextDeadline(); ok && d <= now {
					r.Tick(now)
				}
				drainDel(r)
				drainMsgs(r)
				if got, _ := r.NextDeadline(); got != deadlineScan(f) {
					t.Fatalf("ordered %v, block %d: NextDeadline %v, scan %v", ordered, n, got, deadlineScan(f))
				}
			}
			if rng.IntN(4) != 0 { // some blocks get no REPAIR: the range form asks for their losses
				n := rng.IntN(3)
				for i := range n {
					m, _ := wire.ParseRepair(b.repair(t, id, i, psn.Bitmap{}, 0))
					m.Last = i == n-1 && rng.IntN(2) == 0 // the round's end: a request at once (C7 f)
					r.Handle(now, testCSF, msg(t, &m), false)
				}
			}
		}
		st, _ := r.FlowStats(id)
		if st.Requests == 0 || st.RangeRequests == 0 || st.BlocksDecoded == 0 || st.Abandoned == 0 {
			t.Fatalf("the run did not exercise every timer: %+v", st)
		}
	}
}

// BenchmarkReceiverOpenBlocks measures the per-packet cost (Observe, the block's REPAIR,
// NextDeadline, Tick when due, the drains) with 64 and with 8192 blocks open at once, each
// missing two sources and holding one repair symbol, with package fec's decoder (fec) and with
// one that reads only a prefix of each source (prefix): the deadline heaps make the engine's
// own work independent of the blocks open; what remains with fec is the decoders' memory.
func BenchmarkReceiverOpenBlocks(b *testing.B) {
	const k, payload = 8, 1024
	for _, c := range []struct {
		name  string
		nopen int
	}{{"fec/64", 64}, {"fec/8192", 8192}, {"prefix/64", 64}, {"prefix/8192", 8192}} {
		nopen := c.nopen
		b.Run(c.name, func(b *testing.B) {
			l := flow.DefaultLimits()
			l.MaxOpenBlocks, l.MaxK = nopen, k
			// A long reorder allowance and RTT: blocks stay open until evicted.
			opts := []Option{WithLimits(l), WithInitialRTT(time.Hour), WithMemory(1 << 40)}
			if c.name[0] == 'p' {
				opts = append(opts, WithDecoders(func() (flow.Decoder, error) {
					return &prefixDecoder{table: map[psn.PSN][]byte{}}, nil
				}))
			}
			r := newReceiver(b, Settings{Reorder: time.Hour}, opts...)
			id := open(b, r, 0, flow.Config{ID: 1, Scheme: wire.SchemeCauchy, K: k, M: 2, T: testT})
			pkt := packet(0, payload)
			rep := wire.Repair{FlowID: id, ConfigID: 1, Scheme: wire.SchemeCauchy, K: k, Present: psn.FirstK(k),
				Symbol: make([]byte, testT)}
			repb := msg(b, &rep)
			now, i := time.Duration(0), 0
			step := func() {
				p := psn.PSN(i)
				if j := i % k; j != 2 && j != 5 {
					pkt[9], pkt[10], pkt[11] = byte(p>>16), byte(p>>8), byte(p)
					r.Observe(now, id, pkt, false)
				}
				if i%k == k-1 {
					start := p.Add(-(k - 1))
					repb[12], repb[13], repb[14] = byte(start>>16), byte(start>>8), byte(start)
					r.Handle(now, testCSF, repb, false)
				}
				i++
				now += time.Microsecond
				if d, ok := r.NextDeadline(); ok && d <= now {
					r.Tick(now)
				}
				r.DrainDeliveries(func(Delivery) {})
				r.Drain(func(flow.Datagram) {})
			}
			for range 4 * nopen * k { // the window full of open blocks, and reused, before the measurement
				step()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				step()
			}
			b.StopTimer()
			if st, _ := r.FlowStats(id); st.Abandoned == 0 || r.flows[id].live < nopen-1 {
				b.Fatalf("%d blocks open, want %d or one fewer: %+v", r.flows[id].live, nopen, st)
			}
		})
	}
}
