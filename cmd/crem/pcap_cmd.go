package main

import "fmt"

func runPcap(args []string, s stdio) int {
	fmt.Fprintln(s.err, "crem pcap: not available in this build yet")
	return 1
}
