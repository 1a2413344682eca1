// Package soak is a randomized end-to-end workload in virtual time: the traffic a deployment
// carries, through CREM, with invariants checked after every step and every run reproducible from
// its seed (protocol notes K1-K9).
//
// One requester host and one responder host hold 16 to 24 RDMA RC queue pairs (package rc) in
// go-back-N, selective-repeat and T/C AETH modes, with initial PSNs drawn over the whole 24-bit
// space. Between them two gateways run the CREM engines: a sender function (package csf) per flow
// and direction, a receiver function (package crf) per side, CREM messages routed by Flow ID. The
// path between the gateways (package netem) loses and reorders packets differently in each phase:
// Bernoulli and Gilbert-Elliott loss, a clean path, a bad minute of 15 percent loss that trips
// the circuit breaker, and the clean path after it. The QPs move WRITE, SEND, READ and atomic
// requests of 1 octet to 1 GiB, several outstanding per QP; the large ones live in synthetic
// memory (package sim's regions), so a run needs little of it.
//
// Run runs one scenario and returns what it found; NewScenario draws the scenario of a seed. The
// tests run a few seeds; `go test ./internal/harness/soak -run TestWorkload -seeds N` (or CREM_SOAK_SEEDS=N) runs
// more, and `-seed S` replays one.
package soak
