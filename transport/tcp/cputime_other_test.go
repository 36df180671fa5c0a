//go:build !unix

package tcp

import "time"

// cpuTime is not measured here.
func cpuTime() time.Duration { return 0 }
