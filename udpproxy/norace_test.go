//go:build !race

package udpproxy

const raceEnabled = false
