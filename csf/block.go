package csf

import (
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
)

// block is one source block the Sender holds: its sources' symbols until the RDMA transport
// acknowledges them or the give-up time passes (draft, Coded Retransmission; C9).
type block struct {
	used     bool
	closed   bool
	start    psn.PSN
	k        int // positions covered; the block's k once closed
	cfg      flow.Config
	present  psn.Bitmap
	read     psn.Bitmap // positions consumed by a READ request: absent, never a source (C13)
	syms     [][]byte   // by position, T octets each where present
	opened   time.Duration
	closedAt time.Duration

	nextIndex int // the next fresh Repair Index (C16: never reuse one)
	ordinary  int // ordinary symbols sent or scheduled

	// Pacing of ordinary symbols beyond a burst of 4 (C11 c).
	pacedLeft int
	pacedAt   time.Duration
	pacedStep time.Duration

	// Requests (C8).
	answeredAt  time.Duration
	answered    bool
	ids         [8]uint16 // Request IDs answered, newest last
	nids        int
	deferred    request
	deferredDue time.Duration
	giveUpAt    time.Duration // 0: none (held until the RDMA ACK)
}

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
