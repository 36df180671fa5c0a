package tcp

import (
	"time"

	"golang.org/x/sys/unix"
)

// pathStall is how long the connection on fd has gone without an
// acknowledgement of data it sent (0 when nothing sent waits for one):
// tcp_info's last_ack_recv while unacked > 0.
func pathStall(fd int) time.Duration {
	ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil || ti.Unacked == 0 {
		return 0
	}
	return time.Duration(ti.Last_ack_recv) * time.Millisecond
}
