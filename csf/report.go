package csf

import (
	"math"
	"net/netip"
	"time"

	"github.com/crem-project/crem/policy"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// ObserveReverse takes an RDMA packet passing back toward the RDMA sender. ACKs, NAKs and READ
// responses addressed to the flow's reverse queue pair (the requester's) acknowledge PSNs of the
// protected direction; blocks entirely acknowledged are released (draft, Coded Retransmission:
// sources are kept until the RDMA transport has acknowledged them; C9). Until the reverse queue
// pair is known (WithReverseQP, SetReverseQP) nothing is released: an ACK of another queue pair
// between the same hosts belongs to another PSN space. Nor does an acknowledgement of a PSN the
// RDMA sender has not sent yet release anything.
func (s *Sender) ObserveReverse(now time.Duration, pkt []byte) {
	s.stats.ReverseObserved++
	if s.state != StateEstablished || len(pkt) < roce.BTHLen+roce.ICRCLen {
		s.stats.ReverseIgnored++
		return
	}
	bth, _, _ := roce.ParseBTH(pkt)
	if !s.haveReverseQP {
		s.stats.ReverseUnpaired++
		return
	}
	if bth.DestQP != s.reverseQP {
		s.stats.ReverseIgnored++
		return
	}
	var through psn.PSN
	switch bth.OpCode {
	case roce.OpAcknowledge, roce.OpAtomicAcknowledge:
		a, _, err := roce.ParseAETH(pkt[roce.BTHLen:])
		if err != nil {
			s.stats.ReverseIgnored++
			return
		}
		through = bth.PSN
		if a.Type() != roce.AckTypeACK {
			through = bth.PSN.Add(-1) // a NAK acknowledges what precedes its PSN
		}
	case roce.OpReadResponseFirst, roce.OpReadResponseMiddle, roce.OpReadResponseLast, roce.OpReadResponseOnly:
		through = bth.PSN.Add(-1)
	default:
		s.stats.ReverseIgnored++
		return
	}
	if !s.haveNext || through.After(s.next.Add(-1)) {
		s.stats.ReverseImplausible++ // acknowledges what was never sent: another PSN space, or forged
		return
	}
	s.stats.ReverseAcks++
	if !s.haveAcked || through.After(s.ackedThrough) {
		s.ackedThrough, s.haveAcked = through, true
	}
	s.Acknowledge(through)
}

// SetReverseQP names the queue pair the flow's RDMA acknowledgements are addressed to (the
// requester's), as a driver learns it (RDMA CM, or PSN correlation): from now on ObserveReverse
// takes acknowledgements to that queue pair, and only those.
func (s *Sender) SetReverseQP(qp uint32) {
	s.reverseQP, s.haveReverseQP = qp&0xffffff, true
}

// ClearReverseQP forgets the reverse queue pair (the driver's pairing ended: the queue pairs
// were created again, or the evidence turned against it): nothing is released until a new one
// is set.
func (s *Sender) ClearReverseQP() { s.reverseQP, s.haveReverseQP = 0, false }

// ReverseQP returns the reverse queue pair in use, if one is known.
func (s *Sender) ReverseQP() (uint32, bool) { return s.reverseQP, s.haveReverseQP }

// AckedThrough returns the highest PSN an accepted reverse packet acknowledged in this session,
// if any: every block released by an acknowledgement lies at or before it.
func (s *Sender) AckedThrough() (psn.PSN, bool) { return s.ackedThrough, s.haveAcked }

// Acknowledge releases every closed block whose PSNs are all at or before through: the RDMA
// transport has acknowledged them. Blocks open in PSN order, so the walk starts at the oldest
// held block and stops at the first one not covered: its cost is the blocks released.
func (s *Sender) Acknowledge(through psn.PSN) {
	if !s.haveReleased || through.After(s.releasedThrough) {
		s.releasedThrough, s.haveReleased = through, true
	}
	n := uint64(len(s.blocks))
	if n == 0 {
		return
	}
	s.ackSeq = max(s.ackSeq, s.seq-min(s.seq, n))
	for ; s.ackSeq < s.seq; s.ackSeq++ {
		b := &s.blocks[s.ackSeq%n]
		if !b.used {
			continue
		}
		if !b.closed || !b.last().AtOrBefore(through) {
			return
		}
		b.used = false
		s.stats.BlocksAcked++
	}
}

// onLossReport feeds the estimator, the breaker and the budget, and moves m (RULINGS C6, C11).
func (s *Sender) onLossReport(now time.Duration, msg []byte) {
	m, err := wire.ParseLossReport(msg)
	if err != nil {
		s.stats.MessagesMalformed++
		return
	}
	s.stats.LossReports++
	iv := policy.Interval{Expected: m.Expected, Received: m.Received, CEMarked: m.CEMarked,
		Repairs: m.RepairsReceived, RepairsCE: m.RepairsCEMarked,
		CongestionDrops: s.pathCong, QueueDelayRising: s.pathDelay}
	// The path reports' findings go to the first interval that shows loss: the CRF counts a lost
	// PSN only once it is settled (E42), often an interval after the reporter saw the drop. An
	// interval without loss leaves them for the next, until they are older than a few SRTT.
	if iv.Lost() > 0 || now >= s.pathSince+pathFindingsLife*s.srtt() {
		s.pathCong, s.pathDelay = 0, false
	}
	used := s.est.Update(iv)
	if used {
		s.ivLost, s.ivExpected = uint32(math.Round(s.est.LastSample()*float64(iv.Expected))), iv.Expected
		s.evidence.Add(s.ivLost, s.ivExpected)
	}
	s.budget.OnRepairCE(now, s.srtt(), m.RepairsCEMarked)
	interval := time.Duration(m.IntervalUS) * time.Microsecond
	switch s.breaker.Report(now, interval, m.Expected, m.Received, m.CEMarked) {
	case policy.BreakerCloseFlow:
		s.Close(now, wire.ReasonCircuitBreaker)
		return
	case policy.BreakerOpen:
		s.mOverride = true
		return
	}
	if s.hook(Hooks.KeepBreakerTripped) && s.breaker.Trips() > 0 {
		return // bent: once tripped, m stays zero and coded retransmission stopped
	}
	s.mOverride = false
	if !used || !s.o.adapt || !s.haveCfg {
		return
	}
	chosen := s.chooseM(now)
	if s.cur.Scheme == wire.SchemeXOR {
		chosen = min(chosen, 1)
	}
	newM, _ := s.sel.Offer(chosen, s.est.LastSample(), s.est.P(), iv.Congested(s.o.ceCongested))
	// The selector's m against the m in force, not only the moment it moves: a choice that was
	// refused (or could not be sent while another update was outstanding) is offered again
	// (E28), a refused one once its back-off has passed.
	if newM == s.cur.M || s.pend.active || s.haveRetry && now < s.retryAt || s.waitOlder(now) {
		return // E80: a wait for older blocks ends at a later LOSS_REPORT
	}
	cfg := s.cur
	cfg.M = newM
	if s.Reconfigure(now, cfg) == nil {
		s.stats.MChanges++
	}
}

// msgMemory is how long after a block of the latest message whose length it learned opened the
// cost rule still takes the flow for one of messages (P9): at least this, and eight SRTT.
const msgMemory = time.Second

// chooseM is the policy's m for the flow's configuration (C6; P5-P9).
func (s *Sender) chooseM(now time.Duration) int {
	if s.o.rule != policy.RuleCost {
		// P15: the draft's rule moves m down only after the hold, as the cost rule does (P12).
		m := policy.ChooseM(s.cur.K, s.est.P(), s.o.epsilon, s.o.rho, s.eff.MaxM)
		if m > s.cur.M && !s.mOverride {
			// P15: a raise goes no higher than the rule's m at the loss the evidence shows (P12).
			m = max(s.cur.M, min(m, policy.ChooseM(s.cur.K, s.evidence.LowerBound(), s.o.epsilon, s.o.rho, s.eff.MaxM)))
		}
		m = s.holdFall(now, m)
		if m < s.cur.M && !s.mOverride {
			// P15: no lower than the highest m the rule wanted through the hold, nor than its m
			// at the loss rate the intervals of the hold do not rule out.
			up := policy.PoissonUpperBound(s.lowerLost, 1-policy.EvidenceConfidence) / float64(max(s.lowerExpected, 1))
			m = max(s.lowerTop, policy.ChooseM(s.cur.K, min(up, 1), s.o.epsilon, s.o.rho, s.eff.MaxM))
			m = min(m, s.cur.M)
		}
		return m
	}
	if s.msg && s.o.msgPolicy == nil && now-s.msgAt < max(msgMemory, 8*s.srtt()) {
		// Messages of known length: each message's critical blocks get their repair as extra
		// symbols (P9); the others need none of the configuration's.
		return 0
	}
	path := s.CostPath()
	m := policy.CostM(s.cur.K, path)
	if m != s.cur.M && !s.mOverride {
		// P12: m moves only for a saving of at least costGain of what the m in force costs: one
		// loss in an interval of a few hundred packets moves the estimate across the choice's
		// boundaries, and m would follow each such loss between choices of nearly equal cost.
		cur, next := policy.BlockCost(s.cur.K, s.cur.M, path), policy.BlockCost(s.cur.K, m, path)
		if cur-next < costGain*cur {
			m = s.cur.M
		}
	}
	// P12: a raise goes no higher than the rule's m at the loss rate the latest intervals show
	// with confidence (one loss in a few hundred packets lifts the EWMA across boundaries a
	// steady 1e-4 path never reaches); a fall waits until the rule has wanted a lower m for
	// lowerHold without a break (a steady path's estimate decays across the boundary a loss
	// made it cross).
	if m > s.cur.M && !s.mOverride {
		sure := path
		sure.Loss = s.evidence.LowerBound()
		m = max(s.cur.M, min(m, policy.CostM(s.cur.K, sure)))
	}
	return s.holdFall(now, m)
}

// holdFall returns m, the rule's choice, unless it is below the m in force and the rule has not
// wanted a lower m at every interval for lowerHold (P12, P15): then the m in force.
func (s *Sender) holdFall(now time.Duration, m int) int {
	if m >= s.cur.M || s.mOverride {
		s.lowering = false
		return m
	}
	if !s.lowering {
		s.lowering, s.lowerSince, s.lowerTop, s.lowerLost, s.lowerExpected = true, now, m, 0, 0
	}
	s.lowerTop = max(s.lowerTop, m)
	s.lowerLost += uint64(s.ivLost)
	s.lowerExpected += uint64(s.ivExpected)
	if now-s.lowerSince < lowerHold(s.srtt()) {
		return s.cur.M
	}
	if s.o.rule == policy.RuleCost {
		// The fall is certain: the evidence of the loss that raised m is not evidence for the
		// next raise.
		s.evidence = policy.LossEvidence{}
	}
	return m
}

// lowerHold is how long the cost rule must have wanted a lower m before m falls (P12): 64 SRTT,
// at least a second.
func lowerHold(srtt time.Duration) time.Duration { return max(time.Second, 64*srtt) }

// costGain is the share of the expected block time of the m in force that another m must save
// before the cost rule moves to it (P12).
const costGain = 0.25

// M returns the repair count in force for new blocks (0 while the breaker is open).
func (s *Sender) M() int {
	if s.mOverride || !s.haveCfg {
		return 0
	}
	return s.cur.M
}

// onPathReport takes a PATH_REPORT (draft, Path Reports). It is refused as a whole, and
// counted by why, unless it comes from a configured reporter (C14), names this flow (its
// descriptor's addresses, or an address pair given by WithReportAddresses, and its destination
// QP), uses a Method the draft defines (C1), and is plausible: no entry lists more PSNs than its
// Lost Count, and the Lost Counts together do not exceed the packets the flow sent in the last
// second or two (sentWithin: a marking period of 100 ms is reported 50 ms after it ends, long
// after the LOSS_REPORT intervals of a short path that covered it).
//
// What a report taken does, and nothing more (draft: reports influence only redundancy, the
// timing of retransmission and loss classification, never what is delivered):
//   - Loss classification, every method: Lost Counts with Cause 1 (congestion) are taken out of
//     the interval's transmission loss, and a rising Queue Delay Change together with a loss
//     marks the interval congested (C6 c); either way m is never raised for them. The sum is
//     saturating and bounded by the packets the flow sent in that same window.
//   - Proactive repair, method 3 only (the only method that names PSNs): for each named PSN
//     that is a present position of a held block, not yet acknowledged by the RDMA transport
//     and not named within the last SRTT, one more ordinary symbol with a fresh Repair Index
//     (C16): at once for a closed block, when it closes for an open one; at most Max m ordinary
//     symbols per block, every one through the repair budget (C11 b). Other PSNs (no held
//     block, not sent yet, absent, acknowledged) cause nothing and are counted.
func (s *Sender) onPathReport(now time.Duration, from netip.AddrPort, msg []byte) {
	m, sent, ok := s.takePathReport(now, from, msg)
	if !ok {
		return
	}
	s.stats.PathReports++
	if s.state != StateEstablished {
		for i := range m.Hops {
			s.stats.PathReportDrops += uint64(len(m.Hops[i].DroppedPSNs))
			s.stats.PathReportDropsUnknown += uint64(len(m.Hops[i].DroppedPSNs))
		}
		return
	}
	limit := uint32(min(sent, math.MaxUint32))
	var marked reportedBlocks
	for i := range m.Hops {
		h := &m.Hops[i]
		s.classifyHop(now, h, limit)
		s.stats.PathReportDrops += uint64(len(h.DroppedPSNs))
		if m.Method != wire.MethodNodeDrops {
			s.stats.PathReportDropsUnknown += uint64(len(h.DroppedPSNs))
			continue
		}
		for _, p := range h.DroppedPSNs {
			if i := s.reportedDrop(now, p); i >= 0 {
				marked.add(i)
			}
		}
	}
	if s.mOverride {
		return
	}
	s.sendReported(&marked)
}

// takePathReport parses and checks a PATH_REPORT (onPathReport), counting why it is rejected
// (ok false); sent is what the flow sent within the report's reach (sentWithin).
func (s *Sender) takePathReport(now time.Duration, from netip.AddrPort, msg []byte) (m wire.PathReport, sent uint64, ok bool) {
	if !s.listedReporter(from.Addr().Unmap()) && !s.hook(Hooks.PathReportAnySource) {
		s.stats.PathReportsRejected++
		s.stats.PathReportsUnlisted++
		return m, 0, false
	}
	m, err := wire.ParsePathReport(msg)
	if err != nil {
		s.stats.MessagesMalformed++
		s.stats.PathReportsRejected++
		s.stats.PathReportsMalformed++
		return m, 0, false
	}
	if !s.namesFlow(&m) {
		s.stats.PathReportsRejected++
		s.stats.PathReportsWrongFlow++
		return m, 0, false
	}
	switch m.Method {
	case wire.MethodAltMark, wire.MethodClusteredAltMark, wire.MethodNodeDrops:
	default:
		s.stats.PathReportsRejected++
		s.stats.PathReportsUnknownMethod++
		return m, 0, false
	}
	sent = s.sentWithin(now)
	var lost uint64
	for i := range m.Hops {
		h := &m.Hops[i]
		lost += uint64(h.LostCount)
		if uint64(len(h.DroppedPSNs)) > uint64(h.LostCount) {
			lost = sent + 1 // lists more drops than it counts
		}
	}
	if lost > sent {
		s.stats.PathReportsRejected++
		s.stats.PathReportsImplausible++
		return m, sent, false
	}
	return m, sent, true
}

// classifyHop takes a hop's loss classification (C6 c): its congestion losses, at most limit
// in all, and a rising queue delay with loss.
func (s *Sender) classifyHop(now time.Duration, h *wire.HopEntry, limit uint32) {
	if (h.Cause == wire.CauseCongestion || h.QueueDelayChangeUS > 0) && h.LostCount > 0 && s.pathCong == 0 && !s.pathDelay {
		s.pathSince = now
	}
	if h.Cause == wire.CauseCongestion && h.LostCount > 0 {
		// Saturating, and never more than the flow sent in the window.
		if c := uint64(s.pathCong) + uint64(h.LostCount); c > uint64(limit) {
			s.pathCong = limit
			s.stats.PathReportCongestionCapped++
		} else {
			s.pathCong = uint32(c)
		}
	}
	if h.QueueDelayChangeUS > 0 && h.LostCount > 0 {
		s.pathDelay = true
	}
}

// reportedDrop marks PSN p, which a method 3 report names dropped, in its held block: the index
// of a closed block that wants an extra symbol for it, else -1 (counted why: no held block, not
// sent yet, absent, acknowledged, named within the last SRTT, or an open block, whose extra
// symbols go with its ordinary ones when it closes).
func (s *Sender) reportedDrop(now time.Duration, p psn.PSN) int {
	i := s.find(p)
	if i < 0 || s.haveReleased && p.AtOrBefore(s.releasedThrough) {
		s.stats.PathReportDropsUnknown++ // no held block, not sent yet, or acknowledged
		return -1
	}
	b := &s.blocks[i]
	j := int(b.start.Forward(p))
	if j >= b.k || !b.present.Has(j) {
		s.stats.PathReportDropsUnknown++ // not sent yet, or an absent position
		return -1
	}
	if b.closed && now >= b.reportedAt+max(s.srtt(), time.Millisecond) {
		// A round trip since the window of the block's reports opened: a position
		// dropped again (the RDMA transport sent it again) may be named again.
		if b.reported.Count() > 0 {
			// The block's symbols answered the positions named before; those named
			// again need their own.
			b.reported, b.covering = psn.Bitmap{}, 0
		}
		b.reportedAt = now
	}
	if b.reported.Has(j) {
		s.stats.PathReportDropsRepeated++
		return -1
	}
	b.reported.Set(j)
	if !b.closed {
		return -1
	}
	return i
}

// reportedBlocks are the closed blocks a path report names drops of, at most maxRangeBlocks,
// each with the drops it names.
type reportedBlocks struct {
	idx, drops [maxRangeBlocks]int
	n          int
}

func (r *reportedBlocks) add(i int) {
	n := 0
	for ; n < r.n && r.idx[n] != i; n++ {
	}
	if n == r.n {
		if r.n == maxRangeBlocks {
			return
		}
		r.idx[r.n] = i
		r.n++
	}
	r.drops[n]++
}

// sendReported sends the extra ordinary symbols of the blocks a path report named drops of.
func (s *Sender) sendReported(r *reportedBlocks) {
	for n := 0; n < r.n; n++ {
		b := &s.blocks[r.idx[n]]
		if b.cfg.Scheme != wire.SchemeCauchy {
			continue
		}
		// C16: fresh indices, at most Max m ordinary symbols per block: those of its round
		// (sent or still paced) and the extra ones sent before.
		// Only the drops beyond what the block's symbols of this window cover (its ordinary ones,
		// and the extra ones sent for earlier reports), and one more for a burst (symbolsFor).
		need := symbolsFor(b.reported.Count()) - b.covering
		c := min(need, s.eff.MaxM-b.ordinary-b.extra, 255-b.k-b.nextIndex-b.pacedLeft)
		if c <= 0 {
			s.stats.PathReportDropsCovered += uint64(r.drops[n])
			continue
		}
		b.extra += c
		b.covering += c
		pf := b.proactiveFrom
		b.proactiveFrom = noProactive // counted here, not by index
		before := s.stats.RepairSent
		s.sendOrdinary(b, c, b.nextIndex+c)
		s.stats.ExtraSent += s.stats.RepairSent - before
		b.proactiveFrom = pf
	}
}

// pathFindingsLife is how many SRTT the congestion findings of path reports wait for a
// LOSS_REPORT interval that shows loss.
const pathFindingsLife = 4

// reportMargin is how many repair symbols beyond the reported drops a block is given when a
// report names two or more of its positions: the node reports the source packets it dropped,
// not the repair symbols, which the same burst may take. A lone drop gets no margin: its
// block's symbols meet the path's loss rate only.
const reportMargin = 1

// symbolsFor returns how many symbols a block needs for named dropped positions.
func symbolsFor(named int) int {
	if named >= 2 {
		return named + reportMargin
	}
	return named
}

// plausibleWindow is the least time a Lost Count may cover: the packets the flow sent within it
// bound what a report may say was lost.
const plausibleWindow = time.Second

// countPacket counts a packet of the flow (a new source or one sent again) for sentWithin.
func (s *Sender) countPacket(now time.Duration) {
	s.rotatePackets(now)
	s.winPackets[1]++
}

// sentWithin returns the packets of the flow sent since at least plausibleWindow ago (and at
// most twice that): two counts, each of one window, the older dropped as a new one starts.
func (s *Sender) sentWithin(now time.Duration) uint64 {
	s.rotatePackets(now)
	return s.winPackets[0] + s.winPackets[1]
}

func (s *Sender) rotatePackets(now time.Duration) {
	if now < s.winStart+plausibleWindow {
		return
	}
	if now < s.winStart+2*plausibleWindow {
		s.winPackets[0] = s.winPackets[1]
	} else {
		s.winPackets[0] = 0
	}
	s.winPackets[1], s.winStart = 0, now
}

// listedReporter reports whether a is a configured path reporter (C14).
func (s *Sender) listedReporter(a netip.Addr) bool {
	for _, r := range s.o.reporters {
		if r == a {
			return true
		}
	}
	return false
}

// namesFlow reports whether a PATH_REPORT names this flow: its destination QP, and its
// descriptor's addresses or a pair given by WithReportAddresses.
func (s *Sender) namesFlow(m *wire.PathReport) bool {
	if m.FlowLabel&0xffffff != s.o.desc.DestQP {
		return false
	}
	src, dst := m.Source.Unmap(), m.Destination.Unmap()
	if src == s.o.desc.Src.Unmap() && dst == s.o.desc.Dst.Unmap() {
		return true
	}
	for _, a := range s.o.reportAliases {
		if (a[0].IsUnspecified() || a[0] == src) && (a[1].IsUnspecified() || a[1] == dst) {
			return true
		}
	}
	return false
}
