package rc

// Stats counts every outcome of a QP, the bad ones most of all. Requester counters describe
// the requests this QP sent and the responses it received; responder counters the requests it
// received and what it answered.
type Stats struct {
	// Requester.
	DataPackets            uint64 // first transmissions of requests and of READ responses
	RetransmittedPackets   uint64 // every retransmission, READ re-issues and re-sent responses included
	TimeoutRetransmissions uint64 // retransmissions a timer caused (RTO, per-packet, T7, READ retry)
	NAKRetransmissions     uint64 // retransmissions a NAK named or implied (gbn, sr)
	LossRetransmissions    uint64 // retransmissions the T/C AETH loss decision chose (T5)
	RNRRetransmissions     uint64
	Timeouts               uint64 // timer expiries that retransmitted
	AcksReceived           uint64
	NAKsReceived           uint64 // NAKs of any code, RNR NAKs included
	RNRNAKsReceived        uint64
	StaleAcks              uint64 // ACKs naming PSNs outside what is outstanding
	SendBufferStalls       uint64 // times new data waited for room in the send buffer (T8)
	ReadResponsesReceived  uint64
	DuplicateResponses     uint64
	ResponseOutOfSequence  uint64 // READ responses whose opcode cannot stand at their PSN (R27)
	RTTSamples             uint64

	// Responder.
	AckPackets          uint64 // ACKNOWLEDGE and ATOMIC ACKNOWLEDGE packets sent (NAKs excluded)
	NAKPackets          uint64 // NAKs sent, RNR NAKs included
	SeqNAKs             uint64
	RNRNAKs             uint64
	AccessNAKs          uint64 // remote access error (0x62)
	InvalidNAKs         uint64 // invalid request (0x61)
	RequestsReceived    uint64 // valid request packets accepted (duplicates excluded)
	DuplicatePackets    uint64
	DuplicateAcksHeld   uint64 // duplicates not acknowledged at once: one was, within DupAckInterval (R23)
	OutOfOrderPackets   uint64 // accepted ahead of the expected PSN (sr, tcaeth)
	PlacedOutOfOrder    uint64 // WRITE packets placed before their turn (T9)
	OutOfWindow         uint64 // dropped: too far ahead, or behind in gbn before a NAK was due
	BufferDrops         uint64 // dropped: the out-of-order buffer was full
	ReadsExecuted       uint64
	DuplicateReads      uint64
	AtomicsExecuted     uint64
	AckTriggerCount     uint64 // tcaeth ACKs sent by Condition B (count)
	AckTriggerTime      uint64 // tcaeth ACKs sent by Condition A or the T6 timer
	AckTriggerImmediate uint64 // ACKs sent at once for a duplicate or AckReq
	AckTriggerGap       uint64 // tcaeth ACKs sent at once for a packet that opened a new gap
	AckRepeats          uint64 // tcaeth ACKs repeated at an idle tail (also in AckPackets)

	// Either side.
	PacketsIn, PacketsOut uint64
	BadICRC               uint64 // dropped: the ICRC did not verify
	Malformed             uint64 // dropped: headers did not parse or broke the rules
	WrongQP               uint64 // dropped: the destination QP is not this one
	Unexpected            uint64 // dropped: a valid packet that makes no sense now
	Completions           uint64
	CompletionErrors      uint64
}

// Add returns the sum of two QPs' counters.
func (s Stats) Add(o Stats) Stats {
	s.DataPackets += o.DataPackets
	s.RetransmittedPackets += o.RetransmittedPackets
	s.TimeoutRetransmissions += o.TimeoutRetransmissions
	s.NAKRetransmissions += o.NAKRetransmissions
	s.LossRetransmissions += o.LossRetransmissions
	s.RNRRetransmissions += o.RNRRetransmissions
	s.Timeouts += o.Timeouts
	s.AcksReceived += o.AcksReceived
	s.NAKsReceived += o.NAKsReceived
	s.RNRNAKsReceived += o.RNRNAKsReceived
	s.StaleAcks += o.StaleAcks
	s.SendBufferStalls += o.SendBufferStalls
	s.ReadResponsesReceived += o.ReadResponsesReceived
	s.DuplicateResponses += o.DuplicateResponses
	s.ResponseOutOfSequence += o.ResponseOutOfSequence
	s.RTTSamples += o.RTTSamples
	s.AckPackets += o.AckPackets
	s.NAKPackets += o.NAKPackets
	s.SeqNAKs += o.SeqNAKs
	s.RNRNAKs += o.RNRNAKs
	s.AccessNAKs += o.AccessNAKs
	s.InvalidNAKs += o.InvalidNAKs
	s.RequestsReceived += o.RequestsReceived
	s.DuplicatePackets += o.DuplicatePackets
	s.DuplicateAcksHeld += o.DuplicateAcksHeld
	s.OutOfOrderPackets += o.OutOfOrderPackets
	s.PlacedOutOfOrder += o.PlacedOutOfOrder
	s.OutOfWindow += o.OutOfWindow
	s.BufferDrops += o.BufferDrops
	s.ReadsExecuted += o.ReadsExecuted
	s.DuplicateReads += o.DuplicateReads
	s.AtomicsExecuted += o.AtomicsExecuted
	s.AckTriggerCount += o.AckTriggerCount
	s.AckTriggerTime += o.AckTriggerTime
	s.AckTriggerImmediate += o.AckTriggerImmediate
	s.AckTriggerGap += o.AckTriggerGap
	s.AckRepeats += o.AckRepeats
	s.PacketsIn += o.PacketsIn
	s.PacketsOut += o.PacketsOut
	s.BadICRC += o.BadICRC
	s.Malformed += o.Malformed
	s.WrongQP += o.WrongQP
	s.Unexpected += o.Unexpected
	s.Completions += o.Completions
	s.CompletionErrors += o.CompletionErrors
	return s
}
