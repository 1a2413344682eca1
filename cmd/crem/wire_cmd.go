package main

import "fmt"

func runWire(args []string, s stdio) int {
	fmt.Fprintln(s.err, "crem wire: not available in this build yet")
	return 1
}
