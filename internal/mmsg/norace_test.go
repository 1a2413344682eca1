//go:build !race

package mmsg

const raceEnabled = false
