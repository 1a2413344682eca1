//go:build race

package testenv

// Race reports whether the race detector is on: it allocates, makes sync.Pool drop buffers at
// random and slows every goroutine several times over, so allocation counts and real-time
// margins mean nothing under it.
const Race = true
