package main

import "fmt"

func runFec(args []string, s stdio) int {
	fmt.Fprintln(s.err, "crem fec: not available in this build yet")
	return 1
}
