// Package sockopt holds the TCP socket settings that transport/tcp and
// xfer share; a leaf package so that xfer need not import a transport.
package sockopt

import (
	"net"
	"time"
)

// KeepAlive makes c fail once its peer stops answering: keep-alive probes
// as ka says (idle time, interval, count) find an idle connection's peer
// gone, and TCP_USER_TIMEOUT (Linux) ends a connection whose sent data, or
// keep-alive probes, stay unacknowledged for userTimeout. A live peer's
// kernel answers both even while its process is busy. userTimeout <= 0
// leaves the user timeout at the kernel's default. Failures are ignored:
// the connection then only notices a dead peer later.
func KeepAlive(c *net.TCPConn, ka net.KeepAliveConfig, userTimeout time.Duration) {
	_ = c.SetKeepAliveConfig(ka)
	if userTimeout > 0 {
		setUserTimeout(c, userTimeout)
	}
}
