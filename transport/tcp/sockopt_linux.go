package tcp

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// setCongestion selects the TCP congestion control algorithm of c (name as
// in /proc/sys/net/ipv4/tcp_available_congestion_control); it fails quietly
// when the algorithm is not available or not allowed.
func setCongestion(c *net.TCPConn, name string) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = syscall.SetsockoptString(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CONGESTION, name)
	})
}

// roomQuery asks the kernel how much a socket's send buffer can take now.
type roomQuery struct {
	rc   syscall.RawConn
	fn   func(fd uintptr) // bound once: a closure per query would allocate
	need int
	ok   bool
}

func (q *roomQuery) init(c *net.TCPConn) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	q.rc = rc
	q.fn = func(fd uintptr) { q.ok = sendRoomFD(int(fd), q.need) }
}

// has reports whether a write of n bytes would complete at once.
func (q *roomQuery) has(n int) bool {
	if q.fn == nil {
		return false
	}
	q.need, q.ok = n, false
	if err := q.rc.Control(q.fn); err != nil {
		return false
	}
	return q.ok
}

// sendRoomFD reports whether socket fd's send buffer takes n more bytes now.
// SIOCOUTQ: bytes written and not yet acknowledged. The kernel accepts a
// write while its own accounting of the queue (with per-packet overhead) is
// below SO_SNDBUF (as reported: doubled); asking for half of it leaves ample
// margin for the overhead.
func sendRoomFD(fd, n int) bool {
	queued, err := unix.IoctlGetInt(fd, unix.SIOCOUTQ)
	if err != nil {
		return false
	}
	sndbuf, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF)
	if err != nil {
		return false
	}
	return queued+n <= sndbuf/2
}

// sendRoom reports whether a write of n bytes on s would complete at once,
// without waiting for the peer to read.
func (s *sock) sendRoom(n int) bool { return s.conn.room(n) }
