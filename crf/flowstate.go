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
	slotNone      uint8 = iota // never the record of any PSN (the zero value)
	slotEmpty                  // the record of its PSN, nothing known of it yet
	slotHeld                   // a received source, its bytes kept (rflow.kept)
	slotMissing                // a PSN passed without its packet
	slotAbsent                 // no packet in this direction (READ-consumed, or the Present Bitmap says so)
	slotRestored               // restored and verified; its bytes kept
	slotAbandoned              // left to the RDMA transport
)

// slot is one position of the source window (C7 b, E40). It holds no pointer, so the collector
// never scans the window, and its zero value is an unused slot (slotNone; gen 0 names no block),
// so the pages of a window no PSN has reached yet cost nothing. The source's bytes are kept
// beside it (rflow.kept).
type slot struct {
	p         psn.PSN
	st        uint8
	ce        bool
	rx        bool // arrived from the network at least once
	hasID     bool // ipid holds the IPv4 Identification it arrived with (transparent mode)
	ipid      uint16
	delivered bool // handed to the RDMA receiver (ordered mode holds until then)
	rounds    uint8
	counted   bool  // entered LOSS_REPORT's Expected: settled as a source (E42)
	resent    bool  // a READ response that came after the CRF asked for it: maybe not the original (E46)
	blk       int32 // index into blocks, valid with gen
	gen       uint32
	due       time.Duration // a missing slot's next request (PSN-range form)
	n         int32         // the source's length (what is kept may be the codec's prefix of it); while missing, when its gap was seen (missedAt)
	v         uint32        // the virtual position it records (E40)
}

// cfgSlot is an acknowledged configuration (E44).
type cfgSlot struct {
	valid, released bool
	retired         bool    // released to make room for the CSF's next configuration (E81)
	first           bool    // the flow's first: it applies wherever the flow's PSNs start
	eff             psn.PSN // the latest Effective PSN acknowledged for it
	until           psn.PSN // every block of it starts before this PSN (with haveUntil)
	haveUntil       bool
	cfg             flow.Config
}

// rblock is one block the CRF knows from a REPAIR message.
type rblock struct {
	idx         int32
	used, ended bool
	gen         uint32
	start       psn.PSN
	k           int
	v0          uint32 // the position of start; with flat, position j is at v0 + j (no hole inside)
	flat        bool
	cfg         flow.Config
	present     psn.Bitmap
	dec         flow.Decoder
	decoding    bool // the decoder holds this block's sources
	due         time.Duration
	haveDue     bool
	rounds      int       // coded requests sent (C9 counts them)
	sessions    [4]uint16 // Repair Session IDs of coded answers counted as rounds, newest last
	fellBack    bool
	reqID       uint16
	reqAt       time.Duration
	sampled     bool
	incomplete  bool
	queued      bool          // the flow's timer heap holds an entry for due
	queuedAt    time.Duration // that entry's time
	// The repair symbols kept for another solve (candidates.go, E56); done holds the positions
	// restored and delivered; failed counts solves whose packets failed the ICRC check, solves
	// every solve, tried the sets of symbols of the failed ones; stuck: no untried set can
	// solve the block until something new comes.
	cands  []cand
	seq    uint16
	done   psn.Bitmap
	failed int
	solves int
	tried  [maxSolves]uint64
	stuck  bool
	// A second definition of the block (definitions.go, E66): twin names the other one's block
	// (with twinGen; 0: none); shadow says this one binds no window slot (it came second);
	// confirmed that a solve of it verified, condemned that one failed verification or a source
	// came where it says none is, while the other stood; defs counts the definitions made for
	// the block's Block Start PSN.
	twin      int32
	twinGen   uint32
	shadow    bool
	confirmed bool
	condemned bool
	defs      uint8
	waited    bool // its round ended on a failed solve, and it waited an allowance before asking
}

// rflow is the CRF's state of one flow.
type rflow struct {
	// again holds the PSN ranges the RDMA requester asked for again (a READ re-issued), as the
	// driver saw them leave (E48): a READ response with an AETH in one of them may be one sent
	// again, not the original.
	again [maxAgain]againRange
	nextA int

	id    uint32
	desc  flow.Descriptor
	key   flow.Key
	from  netip.AddrPort
	nonce uint64
	eff   flow.Limits
	mtu   int
	set   Settings
	ack   wire.HelloAck
	// active says a source or a REPAIR has come: until then the flow idles out after the
	// handshake time, not Settings.Idle (E54). takeoverLogged: a HELLO from elsewhere was logged.
	active, takeoverLogged bool

	cfgs [maxConfigs]cfgSlot
	// refused remembers the latest Config IDs refused, and how, so that their copies get the
	// same answer (E51).
	refused [8]refusal
	// preHigh is the newest PSN that went by before the first configuration (E52).
	preHigh psn.PSN
	havePre bool
	nextRef int
	configs int // configurations acknowledged so far (the first applies wherever PSNs start)

	win   []slot
	mask  uint32
	kp    int      // payload octets kept per slot when the codec reads a prefix; 0: whole sources
	bufs  [][]byte // kp 0: each slot's source, by slot
	pre   []byte   // kp > 0: each slot's prefix, kp octets a slot
	whole [][]byte // kp > 0: whole packets waiting for in-order delivery, by slot (C7 a)
	// The window's mapping from PSN to position (window.go, E40).
	based, started bool    // a PSN anchors the mapping; a source has arrived
	high, top      psn.PSN // the highest PSN consumed; the highest given a position or a hole
	vhigh, vtop    uint32  // their positions (a PSN in a hole: the position before it)
	holes          []hole  // oldest first, from h0
	h0             int
	floor          psn.PSN // every PSN before it is behind the window (with haveFloor)
	haveFloor      bool
	missing        int
	misses         flow.Timers // missing slots' range-request times: Index the window slot, Gen the PSN
	dueScr         []psn.PSN   // the PSNs one range timer finds due

	blocks    []rblock // grown up to maxBlocks as blocks are first needed
	maxBlocks int      // the ring's length: 2 x Max Open Blocks
	nextBlk   int      // the ring position of the next block
	made      uint64   // blocks made: the next one's number (its ring position is nextBlk)
	oldest    uint64   // no block numbered below it is open
	timers    flow.Timers
	spare     [][]byte // buffers of whole packets no longer waiting, for reuse
	live      int      // blocks not yet ended
	gen       uint32

	rtt flow.RTT
	// helloAcks counts HELLO_ACKs sent (1: the first PARAM_UPDATE samples the RTT, E49);
	// ranges holds the latest PSN-range requests and when they went (their answers sample it).
	helloAcks  int
	helloAckAt time.Duration
	ranges     [8]rangeAsk
	nextRange  int
	est        *policy.Estimator
	nextReq    uint16

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

	// aside holds REPAIRs for blocks ahead of the sources, oldest first (maxAside); the
	// entries past its length keep their buffers for reuse.
	aside []asideRepair

	st FlowStats
}

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

// bslot returns the slot of b's position j if it holds that PSN's record, else nil.
func (f *rflow) bslot(b *rblock, j int) *slot {
	p := b.start.Add(j)
	if !b.flat {
		return f.at(p)
	}
	v := b.v0 + uint32(j)
	if f.vtop-v >= uint32(len(f.win)) {
		return nil // behind the window
	}
	if s := &f.win[v&f.mask]; s.is(p, v) {
		return s
	}
	return nil
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

// retired reports whether configuration id was retired to make room (E81) and its slot not
// reused since.
func (f *rflow) retired(id uint8) bool {
	for i := range f.cfgs {
		if c := &f.cfgs[i]; c.valid && c.released && c.retired && c.cfg.ID == id {
			return true
		}
	}
	return false
}

// deadline is the flow's next timer.
func (f *rflow) deadline(handshake time.Duration) (time.Duration, bool) {
	d := min(f.reportAt, f.lastSource+f.idle(handshake))
	if f.holding {
		d = min(d, f.holdDue)
	}
	if t, ok := f.nextMiss(); ok {
		d = min(d, t)
	}
	if t, ok := f.nextBlockDue(); ok {
		d = min(d, t)
	}
	if t, ok := f.asideDeadline(); ok {
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
	f.misses.Push(flow.Timer{At: s.due, Index: int32(s.v & f.mask), Gen: uint64(s.p)})
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

// index is slot s's place in the window (and in the arrays kept beside it).
func (f *rflow) index(s *slot) uint32 { return s.v & f.mask }

// expect enters slot s's PSN into LOSS_REPORT's Expected once: it is settled as a source (E42).
func (f *rflow) expect(s *slot) {
	if !s.counted {
		s.counted = true
		f.st.Expected++
		f.iv.Expected++
	}
}

// receive counts a source received from the network for LOSS_REPORT (before restoration).
func (f *rflow) receive(ce bool) {
	f.st.Received++
	f.iv.Received++
	if ce {
		f.iv.CEMarked++
	}
}

// missAt marks slot s missing from now on: it records when (in microseconds, modulo 2^32, in
// the length field the slot does not use until its packet comes).
func (f *rflow) missAt(s *slot, now time.Duration) {
	s.st = slotMissing
	s.n = int32(uint32(now / time.Microsecond))
	f.missing++
}

// lateFill reports whether a packet filling missing slot s now comes half an SRTT or more
// after its gap was seen: too late for reordering, in time for the RDMA transport's
// retransmission, which needs a round trip (E42).
func (f *rflow) lateFill(s *slot, now time.Duration) bool {
	return uint32(now/time.Microsecond)-uint32(s.n) >= uint32(f.rtt.SRTT()/2/time.Microsecond)
}

// unmiss ends slot s's missing state.
func (f *rflow) unmiss(s *slot) {
	if s.st == slotMissing {
		f.missing--
	}
}

// store keeps a source or restored packet in its slot s: whole, or the prefix the codec reads
// (flow.SourcePrefixer), and its length.
func (f *rflow) store(s *slot, payload []byte) {
	s.n = int32(len(payload))
	i := f.index(s)
	if f.kp == 0 {
		f.bufs[i] = append(f.bufs[i][:0], payload...)
		return
	}
	o := int(i) * f.kp
	copy(f.pre[o:o+f.kp], payload)
}

// kept returns what slot s keeps of its source: all of it, or the codec's prefix.
func (f *rflow) kept(s *slot) []byte {
	i := f.index(s)
	if f.kp == 0 {
		return f.bufs[i]
	}
	o := int(i) * f.kp
	return f.pre[o : o+min(int(s.n), f.kp)]
}

// keepWhole keeps a whole copy of pkt at slot s for in-order delivery where the slot keeps only a
// prefix; the copy's buffer is reused once delivered.
func (f *rflow) keepWhole(s *slot, pkt []byte) {
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
	f.whole[f.index(s)] = append(b, pkt...)
}

// packet returns the whole packet slot s holds for delivery.
func (f *rflow) packet(s *slot) []byte {
	if f.whole != nil {
		if b := f.whole[f.index(s)]; b != nil {
			return b
		}
	}
	return f.kept(s)
}

// maxSpare bounds the buffers kept for reuse.
const maxSpare = 4096

// dropWhole ends the whole copy held at slot s, keeping its buffer for reuse.
func (f *rflow) dropWhole(s *slot) {
	if f.whole == nil {
		return
	}
	i := f.index(s)
	if b := f.whole[i]; b != nil {
		if len(f.spare) < maxSpare {
			f.spare = append(f.spare, b)
		}
		f.whole[i] = nil
	}
}

// idle is how long the flow lives without sources: Settings.Idle (default 30 s, C15), or the
// handshake time (at most) while no source or REPAIR has come (handshake > 0).
func (f *rflow) idle(handshake time.Duration) time.Duration {
	d := 30 * time.Second
	if f.set.Idle > 0 {
		d = f.set.Idle
	}
	if !f.active {
		d = min(d, handshake)
	}
	return d
}

// maxAgain bounds the re-requested ranges a flow remembers.
const maxAgain = 32

// againRange is a PSN range asked for again, and when.
type againRange struct {
	r  psn.Range
	at time.Duration
}

// askedAgain reports whether PSN p lies in a range the requester asked for again within the
// last max(2 s, 32 SRTT): the responses to it arrive about one round trip after the request.
func (f *rflow) askedAgain(p psn.PSN, now time.Duration) bool {
	keep := max(2*time.Second, 32*f.rtt.SRTT())
	for i := range f.again {
		if a := &f.again[i]; a.r.Count > 0 && now-a.at <= keep && a.r.Contains(p) {
			return true
		}
	}
	return false
}

// newSession reports whether id is a Repair Session ID the block has not counted yet, and
// records it.
func (b *rblock) newSession(id uint16) bool {
	for _, x := range b.sessions {
		if x == id {
			return false
		}
	}
	copy(b.sessions[:], b.sessions[1:])
	b.sessions[len(b.sessions)-1] = id
	return true
}

// rangeAsk is a PSN-range request sent, for the RTT sample its first answer gives (E49).
type rangeAsk struct {
	id      uint16
	at      time.Duration
	sampled bool
}

// rangeAnswered takes a coded retransmission answering request id: the first answer to one of
// the latest range requests is an RTT sample (every request has its own ID, so Karn's rule
// needs nothing more).
func (f *rflow) rangeAnswered(id uint16, now time.Duration) bool {
	for i := range f.ranges {
		if a := &f.ranges[i]; a.id == id && a.at > 0 && now > a.at && !a.sampled {
			a.sampled = true
			f.rtt.Sample(now - a.at)
			return true
		}
	}
	return false
}

// refusal is a Config ID refused, and its status.
type refusal struct {
	id     uint8
	status wire.Status
	valid  bool
}

// refusedAs returns the status a Config ID was refused with, if it was among the latest refused.
func (f *rflow) refusedAs(id uint8) (wire.Status, bool) {
	for _, x := range f.refused {
		if x.valid && x.id == id {
			return x.status, true
		}
	}
	return 0, false
}

// refuse records a refusal.
func (f *rflow) refuse(id uint8, st wire.Status) {
	if _, ok := f.refusedAs(id); ok {
		return
	}
	f.refused[f.nextRef%len(f.refused)] = refusal{id: id, status: st, valid: true}
	f.nextRef++
}
