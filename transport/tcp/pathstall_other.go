//go:build !linux

package tcp

import "time"

// pathStall is unknown off Linux: 0.
func pathStall(fd int) time.Duration { return 0 }
