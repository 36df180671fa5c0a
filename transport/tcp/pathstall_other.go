//go:build !linux

package tcp

import "time"

type tcpInfo struct{}

// pathStall is unknown off Linux: 0.
func pathStall(fd int, ti *tcpInfo) time.Duration { return 0 }
