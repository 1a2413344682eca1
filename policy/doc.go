// Package policy holds the CREM sender's decisions that are pure arithmetic over measurements:
// the loss estimator and its congestion classification, the binomial choice of the repair count
// m with hysteresis (RULINGS C6), the repair token bucket and its CE halving (C11 b, d), and the
// circuit breaker (C11 f). Nothing here knows packets, sockets or the wall clock: every call
// takes the current time as an argument.
package policy
