// Package udpproxy is the project's path emulator on real sockets: a userspace UDP proxy that
// puts a netem link in each direction between clients and a forward address, so that loss,
// delay, jitter, a rate-limited queue with ECN marking and reordering can be tried on loopback
// (this machine's kernel has no netem qdisc). `crem netem` runs it from the command line.
//
// Clients send to the listening address; each client (source address) gets its own upstream
// socket connected to the forward address, and what arrives on that socket goes back to that
// client from the listening address. Clients are bounded (Config.MaxClients, the one idle
// longest is evicted to make room) and closed after Config.IdleTimeout without traffic.
//
// # Driving the links
//
// The links are netem's pure state machines. Each direction has exactly one loop that owns its
// link and a real timer: readers pass it datagrams, it stamps them with a monotonic clock
// (time since Run started), calls Send, and at the link's NextDeadline calls Deliver and writes
// what comes out. Datagrams are never delivered before their time; a busy machine can only make
// them later. The i-th datagram a direction receives (counting from 0) is the one its loss model
// decides i-th, as long as no datagram before it overflowed the queue or was merged into a
// PATH_REPORT (ReportConfig.Merge), so `script:3,17` drops exactly datagrams 3 and 17 of that
// direction.
//
// On Linux, datagrams are read and written in batches with recvmmsg and sendmmsg, through
// buffers allocated once; received datagrams are copied into pooled buffers of a few size
// classes, so steady traffic allocates nothing. Elsewhere one datagram moves per system call.
//
// # ECN
//
// On Linux the proxy asks for the TOS (IP_RECVTOS; IPV6_RECVTCLASS on IPv6 sockets) of every
// received datagram and sends each datagram on with the same TOS or traffic class, per
// datagram, in an IP_TOS or IPV6_TCLASS control message. When the link's queue marks an
// ECN-capable datagram, it goes out with CE. Elsewhere the TOS is neither read nor set, and
// nothing is ECN-capable.
//
// # The drop log
//
// With Config.DropLog, each datagram a link drops produces one JSON object on a line:
//
//	{"time":"2026-11-29T20:01:02.123456789Z","t":1.234567890,"dir":"forward","index":17,
//	 "reason":"lost","len":1078,"client":"127.0.0.1:40000","tos":2,
//	 "opcode":"RDMA_WRITE_MIDDLE","qp":18,"psn":1234}
//
// (on one line). time is the wall clock, t the seconds since the proxy started, dir forward
// (client to forward address) or reverse, index the datagram's 0-based index in its direction,
// reason lost (the loss model) or overflow (the queue was full), len the UDP payload length,
// client the client's address, tos the TOS as received (when known). opcode, qp and psn appear
// when the datagram is a RoCEv2 packet (see RoCE): its opcode as package roce names it, its
// destination QP and its PSN. The log is buffered and flushed at least once a second and when
// the proxy stops, so a reader can follow it as it grows.
//
// # The capture
//
// With Config.Pcap, every datagram forwarded (when it is sent on) or dropped (when it is
// dropped) is recorded as an Ethernet/IP/UDP frame between the two ends the proxy stands
// between: the client and the forward address, whichever way it goes, with the TOS as sent.
// The source MAC address names the direction (02:63:72:65:6d:01 forward, :02 reverse); the
// destination MAC address what became of the datagram (02:63:72:65:6d:00 sent on, :d1 lost,
// :d2 queue overflow, :d3 a PATH_REPORT merged into the path reporter's own), and datagrams
// not sent on carry IPv4 TTL (IPv6 hop limit) 1 instead of 64, so Wireshark's filter
// ip.ttl == 1 shows the drops (and the merged reports).
//
// # The path reporter
//
// With Config.Report the proxy is also a CREM Path Reporter (draft, Path Reports) for the
// RoCEv2 datagrams it carries, the emulated path being the measurement domain. A flow is named
// as the path sees it: forward, the client's address to the forward address; reverse, the
// forward address to the client; Flow Label the BTH destination QP. Engine port 0 is the
// forward direction, 1 the reverse one, so the per-port rate limit is per direction. Reports go
// out on the reporter's own socket (ReportAddr, never the listening socket) to the CREM port
// of the CSF routed for the flow's source prefix, or of the flow's source address, aggregated,
// rate-limited per flow and per port and cut to the path MTU by package reporter.
//
// Method 3 (ReportConfig.Drops) reports every RoCEv2 datagram a link drops, with its PSN: a
// queue overflow with Cause congestion (1), a loss of the loss model with Cause corruption
// (2): the loss model stands for a lossy segment, whose losses are transmission errors, not
// congestion (RULINGS C1, C6(c)). Each report's Queue Delay Change is the change of the
// link's queueing delay (backlog over rate) since the flow's previous report.
//
// Method 1 (ReportConfig.Marking) measures each direction with Alternate Marking (package
// altmark): a datagram is marked with its marking period when the proxy takes it in, the
// mark kept in the proxy's own metadata and never written into the datagram; it is counted
// where it enters the link (MP1) and where it leaves it (MP2). Each settled period with loss,
// or with a change of the mean delay above the threshold, gives one PATH_REPORT method 1 with
// two hop entries (MP1 and MP2). When the proxy stops, after delivering what was in flight,
// every open period is read at once.
//
// # Merging downstream reports
//
// With ReportConfig.Merge (draft: "a Path Reporter that forwards PATH_REPORT messages from
// downstream reporters for the same CSF MAY merge their Hop Entries with its own"), every
// datagram the proxy carries, in either direction, whose first octet says CREM version 1,
// type 8 is offered to the engine when the direction takes it in, before its link: a
// PATH_REPORT addressed to the CREM port of the CSF this node reports its flow to (the
// client's address in the reverse direction, the forward address in the forward one), for a
// flow and method of which this node is gathering a report whose entries it can join (16 at
// most), is merged into it and not forwarded (DirStats.Merged); the merged report leaves
// from the reporter's socket when it is due, through the same limits. Everything else, a
// malformed PATH_REPORT included, goes into the link unchanged, in its place among the
// direction's datagrams, like any other datagram. Each outcome is counted (ReportStats:
// Offered, Merged, PassedOn, of which Malformed and OtherCSF).
//
// The engine sits behind a mutex. The reporter's loop takes it for each round of work (the
// socket is written after it lets go); a direction takes it only to offer such a datagram,
// and first applies the drops and measurements still waiting in the queue to the reporter's
// loop, in order, so that a report always finds the drops taken in before it.
package udpproxy
