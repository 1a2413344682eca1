// Package flow holds the small types both CREM engines share: the flow descriptor a HELLO
// carries, a configuration (Config ID, scheme, k, m, T), the limits each side states, the
// datagram an engine asks its driver to send (and the bounded queue that holds them), the
// round-trip estimator of RULINGS C4, and the codec interfaces the engines call (package fec's
// encoder and decoder by default).
//
// Nothing here holds state beyond a value, touches a socket or reads a clock.
package flow
