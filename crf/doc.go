// Package crf is the CREM receiver function: one Receiver per CRF endpoint, serving many
// protected flows. It answers HELLO and PARAM_UPDATE, keeps the arriving source packets of each
// flow in a bounded window, decodes blocks from the REPAIR messages the sender function sends,
// verifies every restored packet's ICRC before delivery (RULINGS C12), asks for coded
// retransmission and falls back to Source Copy and then to the RDMA transport (C7, C9), and
// reports loss once per SRTT (draft sections Session through Loss Reports).
//
// A Receiver is a deterministic state machine: the driver passes packets, CREM messages and the
// current time in (Observe, Handle, Tick) and collects the CREM messages to send (Drain), the
// packets to hand to the RDMA receiver (DrainDeliveries) and the next deadline (NextDeadline).
// Source packets pass straight through where the flow's delivery mode allows: Observe says
// whether the driver forwards the packet now or the Receiver holds it. It never touches a
// socket or a clock, draws randomness only from an injected source, and is not safe for
// concurrent use.
package crf
