// Package mmsg holds the low-level pieces that gateway and udpproxy share to move UDP datagrams
// in batches with recvmmsg(2) and sendmmsg(2) on Linux: the struct mmsghdr, a batch's headers,
// iovecs, source addresses and control buffers allocated once (so a batch costs no allocation),
// the raw system calls, sockaddr <-> netip.AddrPort conversion and the TOS, traffic class and
// SO_RXQ_OVFL control messages, and UDP segmentation offload: sends of many equal datagrams in
// one message (UDP_SEGMENT, GSO) and coalesced receives (UDP_GRO). The callers keep their own
// readiness loops and error policy.
// Elsewhere the package is empty: both callers move one datagram per call there.
package mmsg
