// Package roce encodes, decodes and checks RoCEv2 packets: the InfiniBand transport headers
// (BTH, RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, IETH, DETH), the T/C AETH fragment of the
// windowless cumulative ACK extension, the opcode table, and the invariant CRC (ICRC) for IPv4
// and IPv6.
//
// Everything here is a pure codec: no sockets, no clocks, no state. Parsers never panic on
// input, return how many octets they read, and do not allocate on success; the packet view
// aliases the caller's buffer. Packets are RoCEv2 UDP payloads: BTH, extension headers,
// payload, pad and the 4-octet ICRC.
package roce
