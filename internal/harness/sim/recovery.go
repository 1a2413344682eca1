package sim

import (
	"cmp"
	"slices"
	"time"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// recoveryLog measures, for a CREM trial, how long blocks that lost more than their ordinary
// repair took to recover (S20):
//
//   - A lost packet is a source packet of the message that a transmission lost on the forward
//     link before the PSN had reached the responder; its loss is dated by that transmission
//     (the instant the requester handed it to the link), the same instant for every scheme on a
//     seed, wherever or whether a reporter sits.
//   - A packet is recovered when its PSN first reaches the responder's QP, restored by the CREM
//     receiver or retransmitted (by CREM's Source Copy or by the RDMA transport).
//   - Blocks are the CSF's own, learned from the REPAIR messages it sends as they pass the shim:
//     each names its Block Start PSN and k. The block's ordinary repair is the count of ordinary
//     REPAIR symbols the CSF sent for it other than in answer to a PATH_REPORT: the m of its
//     configuration plus the long-message extra of C16, less what the budget refused. A block
//     the CSF sent nothing for (m = 0, no request answered) is not named by any message; the
//     CSF opens its blocks back to back from the message's first PSN (a WRITE at the line rate
//     has no burst gap before its end), so the PSNs between named blocks are cut into blocks of
//     the configuration's k, with no ordinary repair: what the CSF sent for them.
//   - A block's recovery time runs from its first lost packet's loss to the recovery of its last
//     lost packet. Only blocks that lost more source packets than their ordinary repair count.
//
// Losses before the message's first PSN (none in a trial) are counted, not measured.
type recoveryLog struct {
	first   psn.PSN // the message's first PSN: offsets order the blocks
	k       int     // the configuration's k, for the blocks no message named
	lost    map[psn.PSN]lostPSN
	pending int
	arrived psnSet
	blocks  map[psn.PSN]blockInfo
}

type lostPSN struct {
	sent, back time.Duration
	recovered  bool
}

type blockInfo struct {
	k        int
	ordinary int
}

func newRecoveryLog(first psn.PSN) *recoveryLog {
	return &recoveryLog{first: first, lost: map[psn.PSN]lostPSN{}, blocks: map[psn.PSN]blockInfo{}}
}

// drop records that a transmission of source PSN p, handed to the forward link at now, was lost.
func (r *recoveryLog) drop(p psn.PSN, now time.Duration) {
	if r.arrived.has(uint32(p)) {
		return // a copy of what had already arrived
	}
	if _, ok := r.lost[p]; ok {
		return // lost again: the first loss dates it
	}
	r.lost[p] = lostPSN{sent: now}
	r.pending++
}

// arrive takes a packet handed to the responder's QP at now.
func (r *recoveryLog) arrive(pkt []byte, now time.Duration) {
	if len(pkt) < roce.BTHLen || !roce.Opcode(pkt[0]).Info().Source {
		return
	}
	p := uint32(pkt[9])<<16 | uint32(pkt[10])<<8 | uint32(pkt[11])
	if r.arrived.add(p) || r.pending == 0 {
		return
	}
	if l, ok := r.lost[psn.PSN(p)]; ok && !l.recovered {
		l.back, l.recovered = now, true
		r.lost[psn.PSN(p)] = l
		r.pending--
	}
}

// repair takes a datagram the CSF sends; report says it answers a PATH_REPORT.
func (r *recoveryLog) repair(msg []byte, report bool) {
	if len(msg) < wire.HeaderLen || wire.Type(msg[0]&0x0f) != wire.TypeRepair {
		return
	}
	m, err := wire.ParseRepair(msg)
	if err != nil {
		return
	}
	b := r.blocks[m.BlockStartPSN]
	b.k = max(b.k, int(m.K))
	if !m.Retx && !m.Info && m.Scheme != wire.SchemeSourceCopy && !report {
		b.ordinary++
	}
	r.blocks[m.BlockStartPSN] = b
}

// Recovery is what a trial's recoveryLog found.
type Recovery struct {
	// Times are the recovery times of the blocks that lost more than their ordinary repair and
	// recovered, in PSN order.
	Times []time.Duration
	// LossBlocks counts blocks with any lost packet; Unrecovered those beyond their ordinary
	// repair whose losses had not all reached the responder when the trial ended; Unattributed
	// the lost packets in no block the CSF named.
	LossBlocks, Unrecovered, Unattributed int
}

// result folds the log into a Recovery.
func (r *recoveryLog) result() Recovery {
	type blk struct {
		off  uint32
		info blockInfo
	}
	named := make([]blk, 0, len(r.blocks))
	for s, b := range r.blocks {
		named = append(named, blk{off: r.first.Forward(s), info: b})
	}
	slices.SortFunc(named, func(a, b blk) int { return cmp.Compare(a.off, b.off) })
	var end uint32 // past the last lost PSN
	for p := range r.lost {
		if off := r.first.Forward(p); off < psn.Modulus/2 {
			end = max(end, off+1)
		}
	}
	// The blocks no message named, between and after the named ones.
	var bs []blk
	var cursor uint32
	tile := func(to uint32) {
		for k := uint32(max(r.k, 1)); cursor < to; cursor += k {
			bs = append(bs, blk{off: cursor, info: blockInfo{k: int(min(k, to-cursor))}})
		}
	}
	for _, b := range named {
		if b.off >= psn.Modulus/2 {
			continue // before the message: not one of its blocks
		}
		tile(b.off)
		bs = append(bs, b)
		cursor = max(cursor, b.off+uint32(b.info.k))
	}
	tile(end)
	type agg struct {
		x            int
		first, last  time.Duration
		allRecovered bool
	}
	aggs := make([]agg, len(bs))
	var out Recovery
	for p, l := range r.lost {
		off := r.first.Forward(p)
		i, found := slices.BinarySearchFunc(bs, off, func(b blk, t uint32) int { return cmp.Compare(b.off, t) })
		if !found {
			i--
		}
		if i < 0 || off-bs[i].off >= uint32(bs[i].info.k) {
			out.Unattributed++
			continue
		}
		a := &aggs[i]
		if a.x == 0 {
			a.first, a.last, a.allRecovered = l.sent, l.back, true
		}
		a.x++
		a.first = min(a.first, l.sent)
		a.last = max(a.last, l.back)
		a.allRecovered = a.allRecovered && l.recovered
	}
	for i, a := range aggs {
		if a.x == 0 {
			continue
		}
		out.LossBlocks++
		if a.x <= bs[i].info.ordinary {
			continue
		}
		if !a.allRecovered {
			out.Unrecovered++
			continue
		}
		out.Times = append(out.Times, a.last-a.first)
	}
	return out
}
