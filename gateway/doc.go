// Package gateway is the data path of `crem gateway`: a daemon at the boundary of a
// long-distance segment that protects the RoCEv2 flows crossing it with CREM (the draft's
// "gateway at the boundary of a long-distance segment that protects all RDMA flows crossing
// it").
//
// One Gateway holds both halves: a CSF (package csf) for every protected flow leaving toward
// the peer gateway, and a CRF (package crf) for the flows arriving from it. It owns the
// sockets, the wall clock and the timers; the engines own every protocol rule.
//
// Flows are sharded across goroutines by a hash of their unordered address pair, so that the
// RDMA ACKs passing back meet the CSF of their flow in the same shard (C9) and no engine is
// ever touched by two goroutines. Each shard drives its engines from a channel of received
// datagrams and one timer at the engines' earliest deadline, and sends what they want sent
// in batches. In relay mode all flows run between one pair of endpoints and share one shard,
// except the RC connections a protect rule pairs with reverse_qp, which go to the shard of
// their pair.
//
// Two data-path modes exist. In relay mode RoCEv2 datagrams are sent to the gateway's relay
// address and relayed to a configured target: no privileges, works on loopback, and the ICRC
// of restored packets is checked under the flow's logical header (RULINGS C12). In tun mode
// (Linux) the gateway forwards the IP packets routed into a TUN device unchanged and injects
// restored packets under the flow's header template.
//
// Both modes move packets in batches with the kernel's offloads where it has them: in relay
// mode UDP GSO and GRO (relay.offload), runs of equal datagrams to one address leaving in one
// send and coalesced receives cut back into their datagrams, handed on in place; in tun mode
// the device's virtio header (tun.offload), super-packets cut on read and, with tun.write =
// device, a flow's consecutive packets written back as one.
//
// # One packet's way through a relay pair
//
// A RoCEv2 packet of a protected flow, from the endpoint beside gateway A to the endpoint beside
// gateway B, and the repair and acknowledgements that answer it, pass these stages. Each
// message is parsed once, by the engine that owns it; the router reads only fixed offsets.
//
//  1. A's relay socket: readLoop reads a batch (recvmmsg; with GRO, a coalesced receive is cut
//     back into its datagrams in place).
//  2. dispatch, shardFor: the shard is the flow's, from the BTH's destination QP at octets 5-7
//     (dataShard); the datagram goes on the shard's channel, or is counted as shard_full.
//  3. The shard's loop takes a batch off its channel, relayed packets before CREM messages.
//  4. Node.Local, Node.Outbound: the pairing learner sees the packet; a source packet goes to
//     its flow's CSF (senderFor makes one on the flow's first source, when a protect rule
//     covers it), whose Observe puts it in the open block.
//  5. The packet itself is queued, unchanged, for A's WAN socket toward B's data address.
//  6. shard.after: Node.Tick runs the due timers; Node.Drain hands out what the engines want
//     sent: the CSF's REPAIR (and HELLO, PARAM_UPDATE, CLOSE), for the CREM socket.
//  7. flush: each socket's queue leaves in one sendmmsg, runs of equal datagrams to one address
//     as one GSO send.
//  8. B's WAN socket, stages 1-3 again. Node.WAN, Node.Inbound: the CRF's Lookup finds the flow
//     by its addresses and destination QP; Observe keeps a copy of the source for decoding and
//     says whether to hold it (ordered delivery) or relay it at once.
//  9. B's CREM socket: a REPAIR. shardFor reads its Flow ID at octets 4-7 and finds the shard in
//     the routes (the CRF's EventFlowAssigned entered it there); Node.CREM hands it to
//     crf.Receiver.Handle, which parses it once (wire.ParseRepair).
//  10. The CRF decodes what the block lost and checks each restored packet's ICRC under the
//     flow's logical header (C12); Node.Drain hands out the restored packets (ToEndpoint) and
//     the CRF's own messages (LOSS_REPORT, REPAIR_REQUEST: ToCREM).
//  11. B's relay socket sends the restored packets to B's endpoint; B's CREM socket sends the
//     CRF's messages to A.
//  12. A's CREM socket: shardFor finds the CSF's shard by the Flow ID (the CSF's
//     EventFlowAssigned entered it); csf.Sender.Handle parses the LOSS_REPORT or
//     REPAIR_REQUEST once and answers a request with a coded retransmission (stage 6).
//  13. B's endpoint's ACK travels back as in stages 1-8; at A, Node.Inbound offers it to the
//     CSF of the flow the pairing learner paired its QP with, and the blocks it acknowledges
//     are released.
//
// HELLO and PATH_REPORT name a flow before it has a Flow ID: the router reads their addresses
// and Flow Label at fixed offsets (wire.PeekHelloFlow, wire.PeekPathReportFlow), a HELLO_ACK
// its Sender Nonce (wire.PeekHelloAckNonce), which the CSF's EventNonceSent routed. The
// engines' events (csf.Event, crf.Event) keep the routes: nothing reads the engines' own
// output, nor polls them, to learn a key.
//
// Every outcome has a counter; Metrics exposes them all, the engines' included, for
// Prometheus.
package gateway
