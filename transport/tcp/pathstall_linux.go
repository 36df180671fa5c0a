package tcp

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// tcpInfo is the buffer pathStall reads tcp_info into.
type tcpInfo = unix.TCPInfo

// pathStall is how long the connection on fd has gone without an
// acknowledgement of data it sent (0 when nothing sent waits for one):
// tcp_info's last_ack_recv while unacked > 0. It reads into ti, so that
// polling allocates nothing (unix.GetsockoptTCPInfo allocates).
func pathStall(fd int, ti *tcpInfo) time.Duration {
	n := uint32(unsafe.Sizeof(*ti))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.IPPROTO_TCP, unix.TCP_INFO,
		uintptr(unsafe.Pointer(ti)), uintptr(unsafe.Pointer(&n)), 0)
	if errno != 0 || ti.Unacked == 0 {
		return 0
	}
	return time.Duration(ti.Last_ack_recv) * time.Millisecond
}
