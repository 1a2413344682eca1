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
	slotHeld            // a received source, bytes in buf
	slotMissing         // a PSN passed without its packet
	slotAbsent          // no packet in this direction (READ-consumed, or the Present Bitmap says so)
	slotRestored        // restored and verified; bytes in buf
	slotAbandoned       // left to the RDMA transport
)

// slot is one PSN of the source window (C7 b).
type slot struct {
	p         psn.PSN
	st        uint8
	ce        bool
	rx        bool // arrived from the network at least once
	hasID     bool // ipid holds the IPv4 Identification it arrived with (transparent mode)
	ipid      uint16
	delivered bool // handed to the RDMA receiver (ordered mode holds until then)
	rounds    uint8
	blk       int32 // index into blocks, -1 for none
	gen       uint32
	due       time.Duration // a missing slot's next request (PSN-range form)
	buf       []byte
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
	high     psn.PSN
	haveHigh bool
	missing  int
	missDue  time.Duration // no missing slot is due before this (it may be early)

	blocks  []rblock
	nextBlk int // the ring position of the next block
	live    int // blocks not yet ended
	gen     uint32

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
	if f.missing > 0 {
		d = min(d, f.missDue)
	}
	for i := range f.blocks {
		if b := &f.blocks[i]; b.used && !b.ended && b.haveDue {
			d = min(d, b.due)
		}
	}
	return d, true
}

func (f *rflow) idle() time.Duration {
	if f.set.Idle > 0 {
		return f.set.Idle
	}
	return 30 * time.Second
}
