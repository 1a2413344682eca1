//go:build !unix

package gateway_test

import "time"

// cpuTime is not measured where getrusage is missing: the benchmark's CPU figure reads 0.
func cpuTime() time.Duration { return 0 }
