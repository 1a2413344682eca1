//go:build !linux

package gateway

// setup: UDP GSO and GRO exist on Linux only; elsewhere a socket moves one datagram per call.
func (s *sock) setup(offload bool) {}
