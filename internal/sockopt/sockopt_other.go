//go:build !linux

package sockopt

import (
	"net"
	"time"
)

// setUserTimeout: TCP_USER_TIMEOUT is Linux's; keep-alive alone bounds an
// idle connection elsewhere.
func setUserTimeout(c *net.TCPConn, d time.Duration) {}
