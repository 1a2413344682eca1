package csf

import (
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
	s.pathCong, s.pathDelay = 0, false
	used := s.est.Update(iv)
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
	s.mOverride = false
	if !used || !s.o.adapt || !s.haveCfg {
		return
	}
	chosen := policy.ChooseM(s.cur.K, s.est.P(), s.o.epsilon, s.o.rho, s.eff.MaxM)
	if s.cur.Scheme == wire.SchemeXOR {
		chosen = min(chosen, 1)
	}
	newM, _ := s.sel.Offer(chosen, s.est.LastSample(), s.est.P(), iv.Congested(s.o.ceCongested))
	// The selector's m against the m in force, not only the moment it moves: a choice that was
	// refused (or could not be sent while another update was outstanding) is offered again
	// (issue 10 item 8), a refused one once its back-off has passed.
	if newM == s.cur.M || s.pend.active || s.haveRetry && now < s.retryAt {
		return
	}
	cfg := s.cur
	cfg.M = newM
	if s.Reconfigure(now, cfg) == nil {
		s.stats.MChanges++
	}
}

// M returns the repair count in force for new blocks (0 while the breaker is open).
func (s *Sender) M() int {
	if s.mOverride || !s.haveCfg {
		return 0
	}
	return s.cur.M
}

// onPathReport takes a PATH_REPORT: only from configured reporters (C14), only for this flow.
// Dropped PSNs trigger extra ordinary repair at once (C16); nothing here marks data delivered.
func (s *Sender) onPathReport(now time.Duration, from netip.AddrPort, msg []byte) {
	ok := false
	for _, a := range s.o.reporters {
		if a == from.Addr().Unmap() {
			ok = true
		}
	}
	if !ok {
		s.stats.PathReportsRejected++
		return
	}
	m, err := wire.ParsePathReport(msg)
	if err != nil {
		s.stats.MessagesMalformed++
		return
	}
	if m.Source.Unmap() != s.o.desc.Src.Unmap() || m.Destination.Unmap() != s.o.desc.Dst.Unmap() ||
		m.FlowLabel&0xffffff != s.o.desc.DestQP {
		s.stats.PathReportsRejected++
		return
	}
	s.stats.PathReports++
	if s.state != StateEstablished {
		return
	}
	var extra [maxRangeBlocks]int
	var idx [maxRangeBlocks]int
	nb := 0
	for _, h := range m.Hops {
		if h.Cause == wire.CauseCongestion {
			s.pathCong += h.LostCount
		}
		if h.QueueDelayChangeUS > 0 && h.LostCount > 0 {
			s.pathDelay = true
		}
		for _, p := range h.DroppedPSNs {
			s.stats.PathReportDrops++
			i := s.find(p)
			if i < 0 || !s.blocks[i].closed || !s.blocks[i].present.Has(int(s.blocks[i].start.Forward(p))) {
				continue
			}
			n := 0
			for ; n < nb && idx[n] != i; n++ {
			}
			if n == nb {
				if nb == maxRangeBlocks {
					continue
				}
				idx[nb] = i
				nb++
			}
			extra[n]++
		}
	}
	if s.mOverride {
		return
	}
	for n := 0; n < nb; n++ {
		b := &s.blocks[idx[n]]
		if b.cfg.Scheme != wire.SchemeCauchy {
			continue
		}
		// C16: fresh indices, at most Max m ordinary symbols per block.
		c := min(extra[n], s.eff.MaxM-b.nextIndex, 255-b.k-b.nextIndex)
		if c <= 0 {
			continue
		}
		before := s.stats.RepairSent
		s.sendOrdinary(b, c, b.nextIndex+c)
		s.stats.ExtraSent += s.stats.RepairSent - before
	}
}
