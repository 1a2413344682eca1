package main

import "fmt"

func runDemo(args []string, s stdio) int {
	fmt.Fprintln(s.err, "crem demo: not available in this build yet")
	return 1
}
