//go:build unix

package tcp

import (
	"net"

	"golang.org/x/sys/unix"
)

// peerGone reports whether the dialer of c has closed or reset it, without
// reading anything from it: a non-blocking MSG_PEEK that finds the end of
// the stream or an error. A connection with data waiting, or none yet, is
// not gone.
func peerGone(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	var b [1]byte
	rc.Read(func(fd uintptr) bool {
		for {
			n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if err == unix.EINTR {
				continue
			}
			gone = (err == nil && n == 0) || (err != nil && err != unix.EAGAIN)
			return true
		}
	})
	return gone
}
