package crf

import "unsafe"

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
	RepairBadK, RepairBadT, RepairInconsistent, RepairLate, RepairOverlap     uint64
	RepairRejected, InfoReceived, SourceCopies                                uint64
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
}
