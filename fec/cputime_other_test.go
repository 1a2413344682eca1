//go:build !unix

package fec

import "time"

// processCPU is not measured here; the cpu-ns/op metric is then left out.
func processCPU() time.Duration { return 0 }
