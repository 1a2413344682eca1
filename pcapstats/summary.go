package pcapstats

// Summary is what a capture held. Its JSON names are `crem pcap stats --json`'s and stay stable.
type Summary struct {
	Frames Frames `json:"frames"`
	CREM   CREM   `json:"crem"`
	RoCE   RoCE   `json:"roce"`
}

// Frames counts the capture's frames before any protocol above UDP is looked at.
type Frames struct {
	Total       uint64 `json:"total"`
	UDP         uint64 `json:"udp"`         // UDP datagrams decoded whole
	NotUDP      uint64 `json:"not_udp"`     // other EtherTypes and IP protocols
	Fragments   uint64 `json:"fragments"`   // IP fragments (neither CREM nor RoCEv2 is fragmented)
	Cut         uint64 `json:"cut"`         // cut short by the snap length before the UDP payload ended
	Undecodable uint64 `json:"undecodable"` // broken Ethernet, VLAN, IP or UDP headers
	OtherUDP    uint64 `json:"other_udp"`   // UDP that is neither CREM nor RoCEv2
	Dropped     uint64 `json:"dropped"`     // UDP datagrams marked dropped (TTL 1), when drops are marked
	FirstError  string `json:"first_error,omitempty"`
}

// CREM summarises the CREM messages: UDP datagrams to the CREM port.
type CREM struct {
	Port           int              `json:"port"`
	Messages       MessageCounts    `json:"messages"`
	Repair         RepairCounts     `json:"repair"`
	Blocks         uint64           `json:"blocks"` // distinct (Flow ID, Config ID, Block Start PSN)
	RepairRequests RequestCounts    `json:"repair_requests"`
	LossReports    LossTotals       `json:"loss_reports"`
	PathReports    PathTotals       `json:"path_reports"`
	Closes         CloseReasons     `json:"closes"`
	Hellos         HelloCounts      `json:"hellos"`
	Restored       RestoredEstimate `json:"restored_estimate"`
	Flows          []Flow           `json:"flows"`
	// FlowsUntracked counts the messages of flows beyond Limits.MaxFlows, and BlocksUntracked the
	// REPAIR messages of blocks beyond Limits.MaxBlocks: counted above, not per flow or block.
	FlowsUntracked  uint64 `json:"flows_untracked"`
	BlocksUntracked uint64 `json:"blocks_untracked"`
}

// MessageCounts counts CREM messages by type, and those that did not parse.
type MessageCounts struct {
	Total         uint64 `json:"total"`
	Repair        uint64 `json:"repair"`
	Hello         uint64 `json:"hello"`
	HelloAck      uint64 `json:"hello_ack"`
	ParamUpdate   uint64 `json:"param_update"`
	ParamAck      uint64 `json:"param_ack"`
	RepairRequest uint64 `json:"repair_request"`
	LossReport    uint64 `json:"loss_report"`
	PathReport    uint64 `json:"path_report"`
	Close         uint64 `json:"close"`
	// Discarded: an unknown Version or Type, which the draft discards silently. Malformed:
	// any other message that did not parse (a *wire.FieldError); FirstMalformed names the first.
	Discarded      uint64 `json:"discarded"`
	Malformed      uint64 `json:"malformed"`
	FirstMalformed string `json:"first_malformed,omitempty"`
	Dropped        uint64 `json:"dropped"` // of Total, marked dropped
}

// RepairCounts sorts the REPAIR messages.
type RepairCounts struct {
	// Ordinary: repair symbols of the first round (no RETX flag, a coding scheme, Repair
	// Session ID 0). CodedRetx: the RETX flag, with its Lost Source Bitmap and the Repair
	// Session ID of the request answered. SourceCopy: scheme 0, a source symbol sent again in
	// answer to a FALLBACK request. Info: the INFO flag, block information only.
	Ordinary   uint64 `json:"ordinary"`
	CodedRetx  uint64 `json:"coded_retx"`
	SourceCopy uint64 `json:"source_copy"`
	Info       uint64 `json:"info"`
	Last       uint64 `json:"last"` // with the LAST flag
	// SymbolOctets sums the Symbol Length of every symbol.
	SymbolOctets uint64 `json:"symbol_octets"`
	// Delivered counts the symbols (ordinary, coded retransmission, Source Copy) not marked
	// dropped: what reached the far side, if the capture is the path.
	Delivered uint64 `json:"delivered"`
}

// RequestCounts sorts the REPAIR_REQUESTs.
type RequestCounts struct {
	Total     uint64 `json:"total"`
	BlockForm uint64 `json:"block_form"` // naming one block and its Lost Source Bitmap
	RangeForm uint64 `json:"range_form"` // PSN ranges (the RANGES flag)
	Coded     uint64 `json:"coded"`      // asking for coded retransmission (no FALLBACK)
	Fallback  uint64 `json:"fallback"`   // asking for Source Copy (FALLBACK), either form
	// LostPositions sums X over block-form requests; RangePSNs the PSNs the ranges name.
	LostPositions uint64 `json:"lost_positions"`
	RangePSNs     uint64 `json:"range_psns"`
}

// LossTotals sums the LOSS_REPORTs' counters.
type LossTotals struct {
	Count            uint64 `json:"count"`
	IntervalUS       uint64 `json:"interval_us"`
	Expected         uint64 `json:"expected"`
	Received         uint64 `json:"received"`
	Restored         uint64 `json:"restored"`
	IncompleteBlocks uint64 `json:"incomplete_blocks"`
	CEMarked         uint64 `json:"ce_marked"`
	RepairsReceived  uint64 `json:"repairs_received"`
	RepairsCEMarked  uint64 `json:"repairs_ce_marked"`
}

// PathTotals sums the PATH_REPORTs.
type PathTotals struct {
	Total     uint64 `json:"total"`
	Truncated uint64 `json:"truncated"`
	// By method: Alternate Marking (1), Clustered Alternate Marking (2), node-local drop
	// accounting (3), and any other value.
	AltMark          uint64 `json:"alt_mark"`
	ClusteredAltMark uint64 `json:"clustered_alt_mark"`
	NodeDrops        uint64 `json:"node_drops"`
	OtherMethod      uint64 `json:"other_method"`
	Hops             uint64 `json:"hops"`
	LostCount        uint64 `json:"lost_count"`   // sum of the hop entries' Lost Count
	DroppedPSNs      uint64 `json:"dropped_psns"` // PSNs the hop entries name
	// Flows are the flows the reports describe (addresses and Flow Label), at most
	// MaxPathFlows; reports of further flows are counted above only.
	Flows []PathFlow `json:"flows"`
}

// MaxPathFlows bounds PathTotals.Flows, and MaxNamedPSNs the PSNs each names.
const (
	MaxPathFlows = 256
	MaxNamedPSNs = 64
)

// PathFlow is what the PATH_REPORTs said of one flow.
type PathFlow struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
	FlowLabel   uint32 `json:"flow_label"`
	Reports     uint64 `json:"reports"`
	LostCount   uint64 `json:"lost_count"`
	DroppedPSNs uint64 `json:"dropped_psns"`
	// PSNs are the first MaxNamedPSNs dropped PSNs named, in the order the reports named them.
	PSNs []uint32 `json:"psns"`
}

// CloseReasons counts CLOSE messages by reason (RULINGS C2).
type CloseReasons struct {
	Normal             uint64 `json:"normal"`
	Idle               uint64 `json:"idle"`
	ParamUnanswered    uint64 `json:"param_unanswered"`
	ResourcesExhausted uint64 `json:"resources_exhausted"`
	CircuitBreaker     uint64 `json:"circuit_breaker"`
	ProtocolError      uint64 `json:"protocol_error"`
	Other              uint64 `json:"other"`
}

// HelloCounts: HELLOs, and how many were answered by a HELLO_ACK with the same Sender Nonce.
type HelloCounts struct {
	Answered   uint64 `json:"answered"`
	Unanswered uint64 `json:"unanswered"`
}

// RestoredEstimate estimates the packets the CRFs restored from what the capture shows. It is an
// estimate, not a count: the capture does not see the CRF decode.
//
// For each block (Flow ID, Config ID, Block Start PSN) of a flow whose HELLO named its
// destination QP, Missing counts the block's present positions whose PSN never appears in the
// capture on that QP except in frames marked dropped, and Symbols the block's repair symbols
// (ordinary, coded retransmission and Source Copy) not marked dropped. The block's estimate is
// min(Missing, Symbols); Packets sums it over the blocks. A packet restored and then also
// delivered by an RDMA retransmission is not counted; a capture taken before the loss shows
// nothing missing, so its estimate is 0.
type RestoredEstimate struct {
	Packets uint64 `json:"packets"`
	Missing uint64 `json:"missing"` // present positions never delivered, over the blocks considered
	Blocks  uint64 `json:"blocks"`  // blocks considered
	// Unmapped: blocks of flows without a HELLO in the capture (no destination QP to look
	// in). Untracked: blocks on a QP whose PSNs outgrew Limits.MaxPSNs.
	Unmapped  uint64 `json:"unmapped"`
	Untracked uint64 `json:"untracked"`
}

// Flow is one CREM flow: a Flow ID and the address pairs its messages crossed.
type Flow struct {
	FlowID uint32 `json:"flow_id"`
	// Addresses are the IP address pairs of its messages, written "CSF -> CRF" (messages
	// from the CRF are turned round; CLOSE and PATH_REPORT as captured), at most 8.
	Addresses []string      `json:"addresses"`
	Hello     *FlowHello    `json:"hello,omitempty"`
	Messages  MessageCounts `json:"messages"`
	Repair    RepairCounts  `json:"repair"`
	Blocks    uint64        `json:"blocks"`
	// ConfigIDs are the Config IDs its REPAIR messages carried, ascending.
	ConfigIDs      []uint8          `json:"config_ids"`
	RepairRequests RequestCounts    `json:"repair_requests"`
	LossReports    LossTotals       `json:"loss_reports"`
	Closes         CloseReasons     `json:"closes"`
	Restored       RestoredEstimate `json:"restored_estimate"`
}

// FlowHello is the flow descriptor of the HELLO answered with the flow's Flow ID.
type FlowHello struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
	FlowKind    uint8  `json:"flow_kind"`
	FlowLabel   uint32 `json:"flow_label"`
	DestQP      uint32 `json:"dest_qp"` // the Flow Label's low 24 bits (RoCEv2)
	RDMAMTU     uint16 `json:"rdma_mtu"`
}

// RoCE summarises the RoCEv2 packets, over all QPs and per destination QP.
type RoCE struct {
	Port int `json:"port"` // 0: any UDP datagram that parses as RoCEv2
	QPCounts
	QPs []QP `json:"qps"`
	// QPsUntracked counts the packets of QPs beyond Limits.MaxQPs; PSNsUntracked the data
	// packets whose PSN could not be remembered (Limits.MaxPSNs): neither can be told a
	// retransmission.
	QPsUntracked uint64 `json:"qps_untracked"`
	// NoBTH counts datagrams to the RoCEv2 port too short for a BTH: they name no QP.
	NoBTH         uint64 `json:"no_bth"`
	PSNsUntracked uint64 `json:"psns_untracked"`
}

// QP is one destination QP's packets.
type QP struct {
	DestQP uint32 `json:"dest_qp"`
	QPCounts
}

// QPCounts are the figures of RoCEv2 packets.
type QPCounts struct {
	Packets uint64 `json:"packets"`
	// DataPackets: SEND and RDMA WRITE packets and READ responses, the packets that carry a
	// message's data and must arrive for it to complete.
	DataPackets uint64 `json:"data_packets"`
	// Retransmissions: packets that take a PSN (every request and READ response) whose PSN
	// was already seen on the QP in the capture.
	Retransmissions uint64 `json:"retransmissions"`
	ReadRequests    uint64 `json:"read_requests"`
	ReadResponses   uint64 `json:"read_responses"`
	Atomics         uint64 `json:"atomics"`
	// ACKNOWLEDGE and ATOMIC ACKNOWLEDGE by AETH syndrome: ACK, NAK (NAKSequence of them PSN
	// sequence errors), RNR NAK; ExtendedACKs those that carry a T/C AETH.
	ACKs         uint64 `json:"acks"`
	NAKs         uint64 `json:"naks"`
	NAKSequence  uint64 `json:"nak_sequence"`
	RNRNAKs      uint64 `json:"rnr_naks"`
	ExtendedACKs uint64 `json:"extended_acks"`
	CNPs         uint64 `json:"cnps"`
	// Malformed: packets whose headers do not parse (named by their BTH where it is whole).
	Malformed uint64 `json:"malformed"`
	// The ICRC is checked under the captured IP and UDP headers for packets to UDP port 4791;
	// elsewhere (--roce-port other than 4791, or 0) the sender sealed it under a header with
	// port 4791 the capture does not show, and it is left unchecked.
	ICRCOK        uint64 `json:"icrc_ok"`
	ICRCBad       uint64 `json:"icrc_bad"`
	ICRCUnchecked uint64 `json:"icrc_unchecked"`
	// Dropped: packets marked dropped. MissingPSNs: data PSNs every transmission of which in
	// the capture was marked dropped (they arrived, if at all, because a CRF restored them).
	Dropped     uint64 `json:"dropped"`
	MissingPSNs uint64 `json:"missing_psns"`
}

func (c *QPCounts) add(o *QPCounts) {
	c.Packets += o.Packets
	c.DataPackets += o.DataPackets
	c.Retransmissions += o.Retransmissions
	c.ReadRequests += o.ReadRequests
	c.ReadResponses += o.ReadResponses
	c.Atomics += o.Atomics
	c.ACKs += o.ACKs
	c.NAKs += o.NAKs
	c.NAKSequence += o.NAKSequence
	c.RNRNAKs += o.RNRNAKs
	c.ExtendedACKs += o.ExtendedACKs
	c.CNPs += o.CNPs
	c.Malformed += o.Malformed
	c.ICRCOK += o.ICRCOK
	c.ICRCBad += o.ICRCBad
	c.ICRCUnchecked += o.ICRCUnchecked
	c.Dropped += o.Dropped
	c.MissingPSNs += o.MissingPSNs
}
