// Package pairing learns which reverse queue pair belongs to a RoCEv2 flow, so that a CSF is
// offered only its own flow's acknowledgements (RULINGS C9: sources are kept until the RDMA
// transport has acknowledged them, and an ACK of another QP acknowledges nothing of this flow).
//
// A flow is (source address, destination address, destination QP). Its requests leave toward
// the peer; its ACKs, NAKs, ATOMIC ACKNOWLEDGEs and READ responses come back from the
// destination, addressed to the requester's QP: the flow's reverse QP. Many QPs between the
// same two hosts (NCCL, storage clients) make that QP ambiguous until it is learned. A Learner
// knows it in one of three ways:
//
//   - Configured: the operator names it (the gateway's protect rule reverse_qp); pinned.
//   - RDMA CM: a ConnectRequest and its ConnectReply seen on QP 1 name both QPs and both
//     Starting PSNs, and pair both directions of the connection at once.
//   - PSN correlation, where no CM is seen: every response passing back carries a PSN of its
//     flow's space. A reverse QP is paired with a flow only after Limits.Confirm observations
//     whose PSNs lie in that flow's recently sent range and in no other unpaired flow's range
//     between the same two hosts, each later than the one before, with no contradiction in
//     between; a reverse QP whose PSNs contradict its candidate (another flow's range, or no
//     flow's) is struck, and after Limits.Strikes strikes blocked for Limits.BlockFor. A
//     paired QP whose PSNs leave its flow's range Limits.Unpair times in a row is unpaired,
//     and so is a flow whose own PSNs jump out of their space (a QP restarted with a new
//     initial PSN): both are learned again.
//
// Until a flow is paired, Reverse offers its packets to nobody. The Learner is a pure engine:
// no sockets, no clock (now comes in), bounded tables with expiry (Expire at NextDeadline),
// and a counter for every outcome (Stats). It is not safe for concurrent use.
package pairing
