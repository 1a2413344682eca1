package csf

import (
	"time"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
)

// block is one source block the Sender holds: its sources' symbols until the RDMA transport
// acknowledges them or the give-up time passes (draft, Coded Retransmission; C9).
type block struct {
	seq      uint64 // the block's number in the session: its slot is seq modulo the ring's length
	used     bool
	closed   bool
	start    psn.PSN
	k        int // positions covered; the block's k once closed
	limit    int // positions the block may cover: the configuration's k, or the message policy's
	cfg      flow.Config
	present  psn.Bitmap
	read     psn.Bitmap // positions consumed by a READ request: absent, never a source (C13)
	syms     [][]byte   // by position, T octets each where present (or the codec's prefix, in pre)
	pre      []byte     // with a codec that reads a prefix: every position's, one allocation a slot
	slab     []byte     // whole sources (no prefix): position j at j x fec.SymbolStride(cfg.T), F7
	opened   time.Duration
	closedAt time.Duration

	nextIndex int // the next fresh Repair Index (C16: never reuse one)
	ordinary  int // ordinary symbols sent or scheduled

	// Path reports (C16): the present positions a PATH_REPORT named as dropped since
	// reportedAt (an SRTT later they may be named again); ordinary symbols from Repair Index
	// proactiveFrom on are the extra ones sent for them (noProactive: none).
	reported      psn.Bitmap
	reportedAt    time.Duration
	proactiveFrom int
	extra         int // ordinary symbols sent for path reports after the block closed
	// covering is how many of the block's symbols answer the positions named in the current
	// window: its ordinary ones, then the extra ones sent since (0 after the window restarts).
	covering int

	// Pacing of ordinary symbols beyond a burst of 4 (C11 c).
	pacedLeft int
	pacedAt   time.Duration
	pacedStep time.Duration

	// Requests (C8).
	answeredAt  time.Duration
	answered    bool
	coded       int       // coded retransmission rounds answered (C9 a: two, then Source Copy)
	ids         [8]uint16 // Request IDs answered, newest last
	nids        int
	deferred    request
	deferredDue time.Duration
	giveUpAt    time.Duration // 0: none (held until the RDMA ACK)

	// The deadline the timer heap holds an entry for (entries are invalidated lazily).
	queued   bool
	queuedAt time.Duration
}

// noProactive is a block's proactiveFrom while no ordinary symbol is sent for a path report.
const noProactive = 256

// request is a REPAIR_REQUEST reduced to what the answer needs.
type request struct {
	valid    bool
	id       uint16
	lost     psn.Bitmap
	r, ms    int
	fallback bool
}

// last returns the last PSN the block covers.
func (b *block) last() psn.PSN { return b.start.Add(b.k - 1) }

// contains reports whether p falls inside the block.
func (b *block) contains(p psn.PSN) bool { return b.start.Forward(p) < uint32(b.k) }

// answeredID reports whether the Request ID was answered already.
func (b *block) answeredID(id uint16) bool {
	for i := 0; i < b.nids; i++ {
		if b.ids[i] == id {
			return true
		}
	}
	return false
}

func (b *block) remember(id uint16) {
	if b.nids == len(b.ids) {
		copy(b.ids[:], b.ids[1:])
		b.nids--
	}
	b.ids[b.nids] = id
	b.nids++
}

// deadline is the block's next timer: a paced symbol, a deferred answer or the give-up.
func (b *block) deadline() (time.Duration, bool) {
	if !b.used || !b.closed {
		return 0, false
	}
	var d time.Duration
	have := false
	at := func(t time.Duration) {
		if !have || t < d {
			d, have = t, true
		}
	}
	if b.pacedLeft > 0 {
		at(b.pacedAt)
	}
	if b.deferred.valid {
		at(b.deferredDue)
	}
	if b.giveUpAt > 0 {
		at(b.giveUpAt)
	}
	return d, have
}

// schedule gives the timer heap an entry for b's deadline if it has none for it yet. Every
// change of a block's timers calls it; entries left behind are dropped lazily (flow.Timers).
func (s *Sender) schedule(b *block) {
	t, ok := b.deadline()
	if !ok || b.queued && b.queuedAt == t {
		return
	}
	b.queued, b.queuedAt = true, t
	s.timers.Push(flow.Timer{At: t, Index: int32(b.seq % uint64(len(s.blocks))), Gen: b.seq})
	if s.timers.Len() > 4*len(s.blocks)+64 {
		s.timers.Compact(s.current)
	}
}

// current reports whether a heap entry still names a block's deadline.
func (s *Sender) current(e flow.Timer) bool {
	if int(e.Index) >= len(s.blocks) {
		return false
	}
	b := &s.blocks[e.Index]
	t, ok := b.deadline()
	return b.seq == e.Gen && ok && t == e.At
}

// nextBlockDeadline is the earliest block deadline: stale entries at the top are dropped.
func (s *Sender) nextBlockDeadline() (time.Duration, bool) {
	for {
		e, ok := s.timers.Peek()
		if !ok {
			return 0, false
		}
		if s.current(e) {
			return e.At, true
		}
		s.timers.Pop()
		s.unqueue(e)
	}
}

// unqueue notes that the heap no longer holds e for its block; a block whose deadline moved
// without its entry gets one again.
func (s *Sender) unqueue(e flow.Timer) {
	if int(e.Index) >= len(s.blocks) {
		return
	}
	if b := &s.blocks[e.Index]; b.seq == e.Gen && b.queued && b.queuedAt == e.At {
		b.queued = false
		s.schedule(b)
	}
}

// tickBlocks runs the timers of every block due at now, earliest first.
func (s *Sender) tickBlocks(now time.Duration) {
	for s.blocks != nil {
		e, ok := s.timers.Peek()
		if !ok || e.At > now {
			return
		}
		s.timers.Pop()
		if !s.current(e) {
			s.unqueue(e)
			continue
		}
		b := &s.blocks[e.Index]
		b.queued = false
		s.tickBlock(now, int(e.Index))
		s.schedule(b)
	}
}

// holdPosition makes the block's slab hold position j, laid out by fec.SymbolStride(cfg.T) so
// that the encoder, which reads the sources in lockstep, finds no two in the same first-level
// cache set (F7). It grows by doubling, up to the configuration's k, and moves the sources
// already held into the new slab; a slot's slab is kept for its next blocks, so a Sender with
// full blocks stops allocating after its first.
func (b *block) holdPosition(j int) {
	stride := fec.SymbolStride(b.cfg.T)
	if (j+1)*stride <= len(b.slab) {
		return
	}
	n := min(max(j+1, 2*len(b.slab)/stride, minSlabSymbols), max(b.cfg.K, j+1))
	slab := fec.NewSymbolBuffer(n, b.cfg.T)
	b.present.Each(func(i int) {
		sym := fec.SymbolAt(slab, i, b.cfg.T)
		copy(sym, b.syms[i])
		b.syms[i] = sym
	})
	b.slab = slab
}

// minSlabSymbols is the fewest positions a block's first slab holds.
const minSlabSymbols = 4
