//go:build !linux

package main

import (
	"fmt"
	"os"
)

// netnsHelper exists on Linux only, where the namespace tests run it.
func netnsHelper() int {
	fmt.Fprintln(os.Stderr, "the namespace tests run on Linux only")
	return 2
}
