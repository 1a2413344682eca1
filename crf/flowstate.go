package crf

import (
	"net/netip"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// maxConfigs is how many acknowledged, unreleased configurations a flow may hold.
const maxConfigs = 4

// Slot states of the source window.
const (
	slotEmpty     uint8 = iota
	slotHeld            // a received source, its bytes kept (rflow.kept)
	slotMissing         // a PSN passed without its packet
	slotAbsent          // no packet in this direction (READ-consumed, or the Present Bitmap says so)
	slotRestored        // restored and verified; its bytes kept
	slotAbandoned       // left to the RDMA transport
)

// slot is one PSN of the source window (C7 b). It holds no pointer, so the collector never
// scans the window, and its zero value is an unused slot (gen 0 names no block), so the pages of
// a window no PSN has reached yet cost nothing. The source's bytes are kept beside it (rflow.kept).
type slot struct {
	p         psn.PSN
	st        uint8
	ce        bool
	rx        bool // arrived from the network at least once
	hasID     bool // ipid holds the IPv4 Identification it arrived with (transparent mode)
	ipid      uint16
	delivered bool // handed to the RDMA receiver (ordered mode holds until then)
	rounds    uint8
	blk       int32 // index into blocks, valid with gen
	gen       uint32
	due       time.Duration // a missing slot's next request (PSN-range form)
	n         int32         // the source's length (what is kept may be the codec's prefix of it)
}

type cfgSlot struct {
	valid, released, seen bool
	cfg                   flow.Config
}

// rblock is one block the CRF knows from a REPAIR message.
type rblock struct {
	idx         int32
	used, ended bool
	gen         uint32
	start       psn.PSN
	k           int
	cfg         flow.Config
	present     psn.Bitmap
	dec         flow.Decoder
	decoding    bool // the decoder holds this block's sources
	due         time.Duration
	haveDue     bool
	rounds      int // coded requests sent (C9 counts them)
	fellBack    bool
	reqID       uint16
	reqAt       time.Duration
	sampled     bool
	incomplete  bool
	queued      bool          // the flow's timer heap holds an entry for due
	queuedAt    time.Duration // that entry's time
}

// rflow is the CRF's state of one flow.
type rflow struct {
	id    uint32
	desc  flow.Descriptor
	key   flow.Key
	from  netip.AddrPort
	nonce uint64
	eff   flow.Limits
	mtu   int
	set   Settings
	ack   wire.HelloAck

	cfgs [maxConfigs]cfgSlot

	win      []slot
	mask     uint32
	kp       int      // payload octets kept per slot when the codec reads a prefix; 0: whole sources
	bufs     [][]byte // kp 0: each slot's source, by slot
	pre      []byte   // kp > 0: each slot's prefix, kp octets a slot
	whole    [][]byte // kp > 0: whole packets waiting for in-order delivery, by slot (C7 a)
	high     psn.PSN
	haveHigh bool
	missing  int
	misses   flow.Timers // missing slots' range-request times: Index the window slot, Gen the PSN
	dueScr   []psn.PSN   // the PSNs one range timer finds due

	blocks    []rblock // grown up to maxBlocks as blocks are first needed
	maxBlocks int      // the ring's length: 2 x Max Open Blocks
	nextBlk   int      // the ring position of the next block
	made      uint64   // blocks made: the next one's number (its ring position is nextBlk)
	oldest    uint64   // no block numbered below it is open
	timers    flow.Timers
	spare     [][]byte // buffers of whole packets no longer waiting, for reuse
	live      int      // blocks not yet ended
	gen       uint32

	rtt     flow.RTT
	est     *policy.Estimator
	nextReq uint16

	iv         wire.LossReport
	ivStart    time.Duration
	reportAt   time.Duration
	lastSource time.Duration

	cursor     psn.PSN
	haveCursor bool
	heldPkts   int
	heldBytes  int
	holding    bool
	holdDue    time.Duration

	tmplIP, tmplUDP []byte
	idStep          uint16 // Identification step per PSN seen between consecutive sources
	hdr             [128]byte
	lost            [64]psn.Range

	st FlowStats
}

// slotOf returns the window slot of PSN p; the window is a power of two, so that this is a mask.
func (f *rflow) slotOf(p psn.PSN) *slot { return &f.win[uint32(p)&f.mask] }

// allowance is the reorder allowance of C7 f: max(1 ms, SRTT/8) unless configured.
func (f *rflow) allowance() time.Duration {
	if f.set.Reorder > 0 {
		return f.set.Reorder
	}
	return max(time.Millisecond, f.rtt.SRTT()/8)
}

// retry is C7 f's wait for an answer: 1.5 SRTT.
func (f *rflow) retry() time.Duration { return f.rtt.SRTT() * 3 / 2 }

// blockOf returns the live block a slot points to, or nil.
func (f *rflow) blockOf(s *slot) *rblock {
	if s.blk < 0 || int(s.blk) >= len(f.blocks) {
		return nil
	}
	b := &f.blocks[s.blk]
	if !b.used || b.gen != s.gen {
		return nil
	}
	return b
}

// config returns the acknowledged, unreleased configuration with this ID.
func (f *rflow) config(id uint8) *cfgSlot {
	for i := range f.cfgs {
		if c := &f.cfgs[i]; c.valid && !c.released && c.cfg.ID == id {
			return c
		}
	}
	return nil
}

// deadline is the flow's next timer.
func (f *rflow) deadline() (time.Duration, bool) {
	d := min(f.reportAt, f.lastSource+f.idle())
	if f.holding {
		d = min(d, f.holdDue)
	}
	if t, ok := f.nextMiss(); ok {
		d = min(d, t)
	}
	if t, ok := f.nextBlockDue(); ok {
		d = min(d, t)
	}
	return d, true
}

// schedule gives the timer heap an entry for b's due time if it has none for it yet; entries
// left behind by a change are dropped lazily (flow.Timers).
func (f *rflow) schedule(b *rblock) {
	if !b.used || b.ended || !b.haveDue || b.queued && b.queuedAt == b.due {
		return
	}
	b.queued, b.queuedAt = true, b.due
	f.timers.Push(flow.Timer{At: b.due, Index: b.idx, Gen: uint64(b.gen)})
	if f.timers.Len() > 4*len(f.blocks)+64 {
		f.timers.Compact(f.blockCurrent)
	}
}

// blockCurrent reports whether a heap entry still names a live block's due time.
func (f *rflow) blockCurrent(e flow.Timer) bool {
	if int(e.Index) >= len(f.blocks) {
		return false
	}
	b := &f.blocks[e.Index]
	return uint64(b.gen) == e.Gen && b.used && !b.ended && b.haveDue && b.due == e.At
}

// dropBlockTimer forgets a stale entry; a block whose due time moved without a new entry
// gets one.
func (f *rflow) dropBlockTimer(e flow.Timer) {
	if int(e.Index) >= len(f.blocks) {
		return
	}
	if b := &f.blocks[e.Index]; uint64(b.gen) == e.Gen && b.queued && b.queuedAt == e.At {
		b.queued = false
		f.schedule(b)
	}
}

// nextBlockDue is the earliest due time of a live block.
func (f *rflow) nextBlockDue() (time.Duration, bool) {
	for {
		e, ok := f.timers.Peek()
		if !ok {
			return 0, false
		}
		if f.blockCurrent(e) {
			return e.At, true
		}
		f.timers.Pop()
		f.dropBlockTimer(e)
	}
}

// scheduleMiss enters a missing slot's range-request time.
func (f *rflow) scheduleMiss(s *slot) {
	f.misses.Push(flow.Timer{At: s.due, Index: int32(uint32(s.p) & f.mask), Gen: uint64(s.p)})
	// At most one entry per missing slot is current.
	if f.misses.Len() > 2*f.missing+64 {
		f.misses.Compact(f.missCurrent)
	}
}

// missCurrent reports whether an entry still names a missing slot that no block describes,
// due at the entry's time: the PSN-range form asks for those (E12).
func (f *rflow) missCurrent(e flow.Timer) bool {
	s := &f.win[e.Index]
	return uint64(s.p) == e.Gen && s.st == slotMissing && s.due == e.At && f.blockOf(s) == nil
}

// nextMiss is the earliest range-request time.
func (f *rflow) nextMiss() (time.Duration, bool) {
	for {
		e, ok := f.misses.Peek()
		if !ok {
			return 0, false
		}
		if f.missCurrent(e) {
			return e.At, true
		}
		f.misses.Pop()
	}
}

// slotIndex is the window position of PSN p.
func (f *rflow) slotIndex(p psn.PSN) uint32 { return uint32(p) & f.mask }

// store keeps a source or restored packet for PSN p in its slot s: whole, or the prefix the codec
// reads (flow.SourcePrefixer), and its length.
func (f *rflow) store(s *slot, p psn.PSN, payload []byte) {
	s.n = int32(len(payload))
	i := f.slotIndex(p)
	if f.kp == 0 {
		f.bufs[i] = append(f.bufs[i][:0], payload...)
		return
	}
	o := int(i) * f.kp
	copy(f.pre[o:o+f.kp], payload)
}

// kept returns what slot s of PSN p keeps of its source: all of it, or the codec's prefix.
func (f *rflow) kept(s *slot, p psn.PSN) []byte {
	i := f.slotIndex(p)
	if f.kp == 0 {
		return f.bufs[i]
	}
	o := int(i) * f.kp
	return f.pre[o : o+min(int(s.n), f.kp)]
}

// keepWhole keeps a whole copy of pkt at PSN p for in-order delivery where the slot keeps only a
// prefix; the copy's buffer is reused once delivered.
func (f *rflow) keepWhole(p psn.PSN, pkt []byte) {
	if f.kp == 0 || len(pkt) <= f.kp {
		return
	}
	if f.whole == nil {
		f.whole = make([][]byte, len(f.win))
	}
	var b []byte
	if n := len(f.spare); n > 0 {
		b, f.spare = f.spare[n-1][:0], f.spare[:n-1]
	}
	f.whole[f.slotIndex(p)] = append(b, pkt...)
}

// packet returns the whole packet PSN p's slot holds for delivery.
func (f *rflow) packet(s *slot, p psn.PSN) []byte {
	if f.whole != nil {
		if b := f.whole[f.slotIndex(p)]; b != nil {
			return b
		}
	}
	return f.kept(s, p)
}

// maxSpare bounds the buffers kept for reuse.
const maxSpare = 4096

// dropWhole ends the whole copy held at PSN p's slot, keeping its buffer for reuse.
func (f *rflow) dropWhole(p psn.PSN) {
	if f.whole == nil {
		return
	}
	i := f.slotIndex(p)
	if b := f.whole[i]; b != nil {
		if len(f.spare) < maxSpare {
			f.spare = append(f.spare, b)
		}
		f.whole[i] = nil
	}
}

func (f *rflow) idle() time.Duration {
	if f.set.Idle > 0 {
		return f.set.Idle
	}
	return 30 * time.Second
}
