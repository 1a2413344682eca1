package crf

import (
	"math"
	"slices"
	"time"
	"unsafe"
)

// FlowStats are one flow's counters, one for every outcome.
type FlowStats struct {
	Sources, SourcesCE, Duplicates, DuplicateMismatch, Late, Expected uint64
	ReadAbsent, SourceAtAbsent, SourceTooLong, WindowJumps            uint64
	Forwarded, HeldPackets, Released, HoldOverflows, GapsSkipped      uint64
	Superseded                                                        uint64 // late originals not forwarded: the restored copy goes out in order
	// Received counts the sources LOSS_REPORT calls received: arrived from the network before
	// they were restored or given up (E42). Forgotten counts missing PSNs the window moved past
	// before anything settled them (neither expected nor lost); GivenUp those asked for three
	// times in the PSN-range form without any answer (lost). LateAfterRestore counts originals
	// that arrived after their restoration, LateFilled sources that arrived at a missing PSN
	// half an SRTT or more after its gap was seen (neither is received: the loss stands). ReadReissued
	// counts sources at a PSN a READ consumed (C13: left to the RDMA transport).
	Received, Forgotten, GivenUp, LateAfterRestore, LateFilled, ReadReissued uint64
	ReadsAskedAgain, ResentAskedAgain                                        uint64 // READ ranges the requester asked for again; responses with an AETH in them kept out of decoding (E48)
	RangeRoundsCounted                                                       uint64 // coded answers to other requests than a block\'s own, counted among its two rounds (E45)

	Repairs, RepairsCE, RepairDuplicate, RepairUnknownConfig, RepairBadScheme uint64
	// RepairRetiredConfig: REPAIRs of a configuration retired to make room for the CSF's next
	// (E81), which came after all; their blocks fall back to the RDMA transport.
	RepairRetiredConfig                                                   uint64
	RepairBadK, RepairBadT, RepairInconsistent, RepairLate, RepairOverlap uint64
	RepairRejected, InfoReceived, SourceCopies                            uint64
	// RepairUntracked counts REPAIRs for a block with a source where the window keeps no
	// position (a READ's or a long gap's hole, E40) or further ahead than it reaches;
	// RepairBeforeEffective those of a block starting before its configuration's Effective PSN
	// (served all the same). InfoNoBlock counts INFOs naming PSNs in no block (all-zero Present
	// Bitmap); InfoConflict the PSNs such an INFO named that a block says carry a source.
	RepairUntracked, RepairBeforeEffective, InfoNoBlock, InfoConflict uint64

	// Of the symbols kept for another solve (E56): RepairConflict counts versions of a held
	// Repair Index with other bytes, kept; RepairNotKept symbols dropped (a third version, or
	// the block's bound full of unsuspected ones); SourceCopyMismatch Source Copy symbols that
	// failed the ICRC check (also in ICRCMismatch), forgotten so that a genuine one may come;
	// SolveRetries solves after one that failed the check; BlocksRescued blocks restored after
	// one; BlocksMismatchAbandoned blocks that fell back or were evicted after one.
	RepairConflict, RepairNotKept, SourceCopyMismatch, SolveRetries uint64
	BlocksRescued, BlocksMismatchAbandoned                          uint64

	// Of the REPAIRs naming a block no source of which has been seen (its Block Start PSN
	// after the highest source PSN), kept aside rather than making the block: RepairAside
	// counts them; RepairAsideTaken those taken once the flow's sources passed the block's
	// last PSN, another REPAIR made the block, or its REPAIRs aside could solve it alone;
	// RepairAsideUnneeded those dropped when the sources passed the block and every one of its
	// PSNs had arrived (nothing to restore);
	// RepairAsideExpired those dropped when no source reached the block in 64 reorder
	// allowances; RepairAsideDropped those pushed out by the bound, or left when the
	// flow ended.
	RepairAside, RepairAsideTaken, RepairAsideUnneeded, RepairAsideExpired, RepairAsideDropped uint64

	// Of the REPAIRs that define a block another way than one made already (another k, Present
	// Bitmap or Config ID for the same Block Start PSN, E66): DefinitionConflicts counts them;
	// DefinitionsKept the second definitions kept beside the first; DefinitionsRefused those
	// not kept (a third while two stand, or no room among the open blocks); DefinitionsConfirmed
	// definitions whose solve verified while another stood; DefinitionsCondemned those whose
	// solve failed the ICRC check while the other stood; DefinitionsContradicted those a source
	// arrived against (at a position they say no packet takes); DefinitionsRetired those ended
	// without a word because the other was confirmed, or their rounds ran out while the other
	// stood. RepairInconsistent counts REPAIRs against a confirmed definition, and other
	// versions of a definition condemned.
	DefinitionConflicts, DefinitionsKept, DefinitionsRefused, DefinitionsConfirmed uint64
	DefinitionsCondemned, DefinitionsContradicted, DefinitionsRetired              uint64

	BlocksCreated, BlocksComplete, BlocksDecoded, BlocksIncomplete, BlocksEvicted uint64
	BlocksFallback, BlocksAbandoned, BlocksFullyReceived                          uint64

	Restored, RestoredSourceCopy, ICRCMismatch, Abandoned, DecodeErrors uint64
	Requests, RangeRequests, FallbackRequests, RequestRetries           uint64
	LossReports, RTTSamples                                             uint64
	TemplateErrors                                                      uint64 // transparent-mode headers refused by SetTemplate
}

// flowCounters is how many counters FlowStats has: it holds nothing else (TestFlowStatsOnlyCounters).
const flowCounters = int(unsafe.Sizeof(FlowStats{}) / 8)

// add accumulates o into s.
func (s *FlowStats) add(o *FlowStats) {
	a := (*[flowCounters]uint64)(unsafe.Pointer(s))
	b := (*[flowCounters]uint64)(unsafe.Pointer(o))
	for i := range a {
		a[i] += b[i]
	}
}

// Stats are the Receiver's counters: its own, and the sum over every flow it served.
type Stats struct {
	Flows FlowStats

	// Messages counts every datagram Handle took; each is counted once more among HelloReceived,
	// ParamUpdates, CloseReceived, Flows.Repairs, MessagesIgnored, MessagesMalformed,
	// MessagesWrongSource, UnknownFlow and HandshakesRefused.
	Messages uint64
	// A HELLO is a duplicate (C3), refused (C3: no room in the flow table, a descriptor or
	// capabilities the CRF cannot serve, or the settings callback's no), TakeoverRefused
	// (its flow is established from another address), HelloBusy (the pending budget is full of
	// sessions younger than the initial RTT), or it opens a pending session (HandshakesOpened;
	// HandshakesRestart of them come from the address of their descriptor's established flow).
	HelloReceived, HelloDuplicate, HelloRefused, HelloAckSent       uint64
	TakeoverRefused, HelloBusy, HandshakesOpened, HandshakesRestart uint64
	// A pending session becomes a flow (FlowsOpened; FlowsRestarted of them replaced their
	// descriptor's flow at the same address), or is evicted for a newer one, expires unproven,
	// is superseded (another session of its descriptor proved itself first), closed, or refused
	// at its first message (its descriptor's flow is bound elsewhere, or the flow table is full).
	// FlowsClosed counts flows released (CLOSE either way, idle, replaced by a restart).
	FlowsOpened, FlowsRestarted, FlowsClosed                             uint64
	HandshakesEvicted, HandshakesExpired, HandshakesSuperseded           uint64
	HandshakesClosed, HandshakesRefused                                  uint64
	ParamUpdates, ParamAccepted, ParamRejected, ConfigsReleased          uint64
	ConfigsFull                                                          uint64 // PARAM_UPDATEs refused (status 3): every configuration slot still repairable (E44)
	ConfigsRetired                                                       uint64 // configurations released to make room: older than the CSF's in force (E81; also in ConfigsReleased)
	CloseSent, CloseReceived                                             uint64
	CloseSentByReason, CloseReceivedByReason                             [6]uint64
	MessagesIgnored, MessagesMalformed, MessagesWrongSource, UnknownFlow uint64
	QueueFull, DeliveriesDropped, EncodeErrors                           uint64

	// The recovery times of the blocks a solve restored (PR18), by how many sources the solve
	// restored: at most the block's m (RecoveryWithinM: what its ordinary repair is for), or
	// more (RecoveryBeyondM: the blocks that needed repair beyond the ordinary, which a path
	// reporter's extra repair brings sooner, C16).
	RecoveryWithinM, RecoveryBeyondM Recovery
}

// RecoveryBuckets is how many bounded buckets a Recovery histogram has; one more counts the
// recoveries beyond the last bound. Bucket i holds the recoveries of at most RecoveryBound(i):
// 100 us times 2^(i/8), so the bounds are about 9 percent apart, up to about 5.9 s (PR18).
const RecoveryBuckets = 128

// recoveryBase is the first bucket's bound.
const recoveryBase = 100 * time.Microsecond

// recoveryBounds are the buckets' bounds in microseconds.
var recoveryBounds = func() (b [RecoveryBuckets]uint64) {
	for i := range b {
		b[i] = uint64(math.Round(float64(recoveryBase/time.Microsecond) * math.Exp2(float64(i)/8)))
	}
	return b
}()

// RecoveryBound returns the upper bound of bucket i (0 <= i < RecoveryBuckets).
func RecoveryBound(i int) time.Duration {
	return time.Duration(recoveryBounds[i]) * time.Microsecond
}

// Recovery is a histogram of blocks' recovery times (PR18): the time from the first gap the
// CRF saw among the sources a solve restored to that solve. Its size is fixed.
type Recovery struct {
	// Buckets[i] counts the recoveries of at most RecoveryBound(i) and more than the bound
	// before (not cumulative); Buckets[RecoveryBuckets] those beyond the last bound.
	Buckets [RecoveryBuckets + 1]uint64
	// SumMicros is the sum of the recoveries in microseconds.
	SumMicros uint64
}

// add counts one recovery of d.
func (h *Recovery) add(d time.Duration) {
	us := uint64(max(d, 0) / time.Microsecond)
	i, _ := slices.BinarySearch(recoveryBounds[:], us)
	h.Buckets[i]++
	h.SumMicros += us
}

// Count returns how many recoveries h counts.
func (h *Recovery) Count() uint64 {
	var n uint64
	for _, c := range h.Buckets {
		n += c
	}
	return n
}

// Minus returns the recoveries counted in h and not in before (an earlier reading of the same
// counters).
func (h Recovery) Minus(before Recovery) Recovery {
	for i := range h.Buckets {
		h.Buckets[i] -= before.Buckets[i]
	}
	h.SumMicros -= before.SumMicros
	return h
}

// Quantile returns the q-quantile (0 < q <= 1) of the recoveries, interpolated linearly
// within its bucket (the first bucket from 0; beyond the last bound, that bound); false when
// h counts none.
func (h *Recovery) Quantile(q float64) (time.Duration, bool) {
	n := h.Count()
	if n == 0 {
		return 0, false
	}
	rank := q * float64(n)
	var below uint64
	for i, c := range h.Buckets {
		if c == 0 || float64(below+c) < rank {
			below += c
			continue
		}
		if i == RecoveryBuckets {
			return RecoveryBound(RecoveryBuckets - 1), true
		}
		lo := 0.0
		if i > 0 {
			lo = float64(recoveryBounds[i-1])
		}
		hi := float64(recoveryBounds[i])
		frac := (rank - float64(below)) / float64(c)
		return time.Duration((lo + frac*(hi-lo)) * float64(time.Microsecond)), true
	}
	return RecoveryBound(RecoveryBuckets - 1), true
}
