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
// Every outcome has a counter; Metrics exposes them all, the engines' included, for
// Prometheus.
package gateway
