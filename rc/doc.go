// Package rc is a userspace RoCEv2 reliable connection (RC) queue pair: a requester and a
// responder, memory regions with R_Keys, bounds and access rights, and a verbs-like API (post
// SEND, SEND with immediate, RDMA WRITE, WRITE with immediate, RDMA READ and the two atomics;
// post receive buffers; poll completions with status).
//
// The QP is an engine in the sense of the project's architecture: it never touches a socket or
// a clock. A driver passes it received packets and the current time (Handle, Tick), collects
// the packets it wants sent (Drain) and wakes it at NextDeadline. Every packet it builds is a
// whole RoCEv2 UDP payload (BTH through ICRC) sealed under the flow's logical header (RULINGS
// C12), and every packet it accepts must carry a good ICRC under the peer's.
//
// Three reliability modes are chosen at connection setup:
//
//   - gbn: what RoCE NICs do. The responder accepts packets in order only, acknowledges with
//     coalesced ACKs, sends one NAK PSN sequence error per gap and re-acknowledges duplicates;
//     the requester goes back N from a NAK's PSN and has a retransmission timeout with a retry
//     count.
//   - sr: selective repeat in the style of IRN. The responder places out-of-order packets
//     (RULINGS T9) and NAKs each missing PSN once; the requester resends only what is named, and
//     every packet has its own retransmission timer. With NAKs off the timers alone recover;
//     the ACKs still report the runs received, so that the timers resend only what was lost.
//   - tcaeth: the windowless cumulative ACK extension (tc-aeth-draft, RULINGS T1-T9): pacing at
//     the preset rate with no window check, the receiver's batch state with the dual trigger and
//     its timer, extended ACKs carrying a T/C AETH, the sender's scoreboard and RACK-style loss
//     decision, and the fallback timeout; an ACK not followed by new data is repeated twice, so
//     that a lost last ACK does not wait for the fallback.
//
// The connection-setup exchange that agrees on these parameters is encoded by SetupMsg; the
// drivers that carry packets live in rc/udp (real sockets) and internal/harness/link (virtual time). A driver
// whose packets never leave the process may turn off the ICRC (Config.SkipICRC) and let the QP
// reuse its packet buffers (Config.ReuseBuffers). A simulator moving messages far larger than
// its memory may post WRITEs that repeat a short local buffer (SendWR.Length) into a region
// with no memory behind it, whose placements go to a Placer (RegisterPlacer).
package rc
