//go:build race

package udpproxy

// raceEnabled: the race detector allocates and makes sync.Pool drop buffers at random.
const raceEnabled = true
