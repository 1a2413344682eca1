// Package netnslock keeps the tests that measure through a real kernel queue in network
// namespaces (a token bucket that must overflow, a recovery time on a 20 ms path) from running
// at the same moment in different test binaries: `go test ./...` runs packages side by side, and
// two such labs on a 2-core machine starve each other's senders, so that a bottleneck meant to
// drop sees no excess and a measured saving turns into noise. A test takes the machine-wide lock
// before it builds its lab and holds it until it ends.
package netnslock
