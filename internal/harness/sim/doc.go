// Package sim is the project's discrete-event simulator: it runs the real protocol engines (the
// rc queue pairs, and the CREM sender and receiver functions) on a virtual clock over links built
// from package netem, far beyond what sockets on one machine can carry (400 Gbit/s, 25 ms RTT,
// messages of gigabytes), and measures message completion time, wire and repair overhead,
// retransmissions and reverse-path packets per scheme.
//
// No protocol logic lives here. A Conn owns one connection: the requester QP, the responder QP,
// an optional shim at each end (where the CREM engines sit) and the two netem links; its loop
// jumps from one deadline to the next, so a run is a pure function of its Config and seed.
// Memory is synthetic (see Regions): the requester's WRITEs repeat one period of a seeded
// pattern, and the responder's region keeps nothing but checks every octet placed in it against
// the pattern at its place, so a 1 GiB message costs the pattern's memory, not a gigabyte.
//
// A scheme may put a path reporter (package reporter) on each link at a fraction of its
// propagation delay (a pathNode): the drops of the flow's packets there are reported, and the
// PATH_REPORTs travel back to the CSF beside the flow's source. For the CREM schemes the
// connection also measures how long blocks that lost more than their ordinary repair took to
// recover (recoveryLog), learning the CSF's blocks from its own REPAIR messages.
//
// Schemes name what runs on the connection (gbn, sr-rto, sr-nack, tcaeth, and the CREM ones);
// Scenarios name presets of rate, RTT, MTU, loss model, drop rates and sizes; Sweep runs the
// cells of a scenario on all cores, deterministically for a seed, and can be cut into shards
// that Merge joins.
package sim
