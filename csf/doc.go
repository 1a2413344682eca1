// Package csf is the CREM sender function: one Sender per protected RDMA flow. It watches the
// RoCEv2 packets the RDMA sender emits, forms source blocks of k PSN positions, sends the
// blocks' repair symbols to the CREM receiver function, answers its repair requests with coded
// retransmissions or Source Copy symbols, and adapts the redundancy to the loss the receiver
// reports (draft sections Session through Congestion Considerations, RULINGS C1-C16).
//
// A Sender is a deterministic state machine in the style of quic-go's ackhandler: the driver
// passes packets, CREM messages and the current time in (Observe, ObserveReverse, Handle, Tick)
// and collects what the Sender wants sent (Drain) and when it next wants to be woken
// (NextDeadline). It never touches a socket or a clock, starts no goroutine, draws randomness
// only from an injected source, and is not safe for concurrent use.
package csf
