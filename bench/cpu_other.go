//go:build !unix

package bench

import "time"

// cpuTime cannot be read here: client_cpu_pct is reported as 0.
func cpuTime() time.Duration { return 0 }
