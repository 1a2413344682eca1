package csf

// Stats are the Sender's counters: one for every outcome, the bad ones most of all.
type Stats struct {
	// Session.
	HelloSent, HelloRetransmitted, HelloAckAccepted, HelloAckIgnored uint64
	Unprotected                                                      uint64 // episodes of eight unanswered HELLOs (C3)
	PeerSilent                                                       uint64 // sessions started anew after the CRF fell silent (E31)
	PSNSpaceRestarts                                                 uint64 // sessions started anew for a new PSN space of the flow (E32)
	MTUChanges                                                       uint64 // RDMA MTUs learned from the flow's packets that differed (E33)
	HelloProbes                                                      uint64 // rounds of HELLOs to a CRF taken for down, one per hold-off per Peer (E71)
	ParamUpdateSent, ParamUpdateRetransmitted, ParamAccepted         uint64
	ParamRejected, ParamAckIgnored                                   uint64
	ParamRetried                                                     uint64 // refused choices offered again after the back-off
	ParamDeferred                                                    uint64 // choices not proposed yet: a block of a configuration before the one in force was held (E80)
	ParamOlderBlocksHeld                                             uint64 // choices proposed after the wait with such a block still held (E80)
	ParamEffectiveMoved                                              uint64 // updates sent again because their Effective PSN passed first
	ConfigsApplied                                                   uint64
	CloseSent, CloseReceived                                         uint64
	CloseSentByReason, CloseReceivedByReason                         [6]uint64
	RTTSamples                                                       uint64

	// Packets observed.
	Observed, Malformed, NonSource, OtherQP           uint64
	Sources, SourcesUnprotected, SourceTooLong        uint64
	Retransmissions, RetransmissionMismatch           uint64
	RetransmissionUnheld, ReadReissued, SkippedPSNs   uint64
	BlocksOpened, BlocksClosedFull, BlocksClosedBurst uint64
	BlocksAcked, BlocksGivenUp, BlocksEvicted         uint64
	BlocksFarBehind                                   uint64 // released when the flow's PSNs moved half the PSN space past them
	ReverseObserved, ReverseIgnored, ReverseAcks      uint64
	ReverseUnpaired                                   uint64 // passing back while the reverse QP is unknown: released nothing
	ReverseImplausible                                uint64 // acknowledged a PSN not yet sent: released nothing

	// Packets that crossed with nothing to repair them, by why (E72): sources while the flow had
	// no session (UnprotectedNoSession) or no configuration yet (UnprotectedNoConfig), the two
	// that make SourcesUnprotected; sources too long to code, or that failed to encode; sources
	// coded while the circuit breaker held m at zero; sources coded since the CRF last spoke
	// in a session that then turned out lost (silence, E31, or CLOSE reason 5 for a Flow ID the
	// CRF does not know, E70); retransmissions of a packet the Sender never held or no longer
	// holds (RetransmissionUnheld).
	UnprotectedNoSession, UnprotectedNoConfig, UnprotectedTooLong uint64
	UnprotectedEncodeError, UnprotectedBreaker                    uint64
	UnprotectedSessionLost, UnprotectedUnheld                     uint64

	// Repair sent.
	RepairSent, RepairPaced, RetxSent, SourceCopySent, InfoSent, ExtraSent uint64
	RepairDeniedBudget, RepairSkippedBreaker, QueueFull                    uint64
	LongMessageBlocks                                                      uint64 // blocks given extra repair as part of a long message (C16)
	MessagesChosen                                                         uint64 // messages WithMessagePolicy chose k and extra for
	MessagePolicyBlocks                                                    uint64 // blocks of such messages given extra repair (C16)
	MessagesPlanned                                                        uint64 // messages the cost rule planned repair for (P9)
	KMPointsDropped                                                        uint64 // changes of k and m beyond the timeline's bound (P11)

	// Requests.
	RequestsReceived, RequestsAnswered, RequestsDeferred, RequestsDuplicate uint64
	RequestsUnknownBlock, RequestsAbsent, RequestsBreaker, RequestsNoIndex  uint64
	RangeRequests, FallbackRequests                                         uint64
	RequestsTruncated                                                       uint64 // PSN-range requests naming more PSNs than are looked up
	RequestsPastRounds                                                      uint64 // requests past a block's two coded rounds, answered with Source Copy (E34)
	InfoAbsentSent                                                          uint64 // INFO messages naming PSNs of no block (E29)

	// Reports and messages.
	LossReports uint64
	// PATH_REPORT (draft, Path Reports; C10, C14, C16). PathReports counts the reports taken;
	// PathReportsRejected those refused as a whole, which are exactly one of: PathReportsUnlisted
	// (the source is not a configured reporter, C14), PathReportsWrongFlow (the addresses or the
	// Flow Label name another flow), PathReportsUnknownMethod (a Method CREM does not define, or
	// private use: C1, never acted on), PathReportsImplausible (Lost Counts above the packets the
	// flow sent in the last second or two, or an entry listing more PSNs than its Lost Count),
	// PathReportsMalformed (from a listed reporter, but it does not parse: also counted in
	// MessagesMalformed).
	PathReports, PathReportsRejected                 uint64
	PathReportsUnlisted, PathReportsWrongFlow        uint64
	PathReportsUnknownMethod, PathReportsImplausible uint64
	PathReportsMalformed                             uint64
	// PathReportDrops counts the dropped PSNs the reports taken named; PathReportDropsUnknown
	// those that caused nothing: of no held block, not sent yet, absent positions, already
	// acknowledged by the RDMA transport, or named by a method other than 3 (node drops).
	// PathReportDropsRepeated counts PSNs named again within an SRTT of the block's last
	// proactive repair: at most one extra symbol per reported position and round trip.
	// PathReportDropsCovered counts the named PSNs for which no extra symbol was needed: the
	// block's own symbols already answer every position named, and one more.
	PathReportDrops, PathReportDropsUnknown, PathReportDropsRepeated uint64
	PathReportDropsCovered                                           uint64
	// PathReportCongestionCapped counts Lost Counts with Cause congestion cut to the packets the
	// flow sent in that window (the interval's sum is saturating: it never wraps).
	PathReportCongestionCapped                              uint64
	BreakerTrips, MChanges                                  uint64
	MessagesIgnored, MessagesMalformed, MessagesWrongSource uint64
	EncodeErrors                                            uint64
}
