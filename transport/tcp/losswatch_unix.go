//go:build unix

package tcp

import "golang.org/x/sys/unix"

// pollFd is one descriptor the loss watcher polls.
type pollFd struct {
	fd    int
	tls   bool
	ready bool // poll(2) reported something
}

// pollNow polls fds without waiting: input or the peer's half-close on
// plain connections, errors and hang-ups on all. It reports whether any is
// ready.
func pollNow(fds []pollFd) bool {
	pfds := make([]unix.PollFd, len(fds))
	for i, p := range fds {
		pfds[i].Fd = int32(p.fd)
		if !p.tls {
			pfds[i].Events = unix.POLLIN | unix.POLLRDHUP
		}
	}
	n, err := unix.Poll(pfds, 0)
	if err != nil || n <= 0 {
		return false
	}
	for i := range fds {
		fds[i].ready = pfds[i].Revents != 0
	}
	return true
}

// peek reads what is waiting on fd without taking it (MSG_PEEK), or the
// socket's pending error. With onlyErr it reads no data: the socket error
// alone (SO_ERROR).
func peek(fd int, b []byte, onlyErr bool) (int, error) {
	if onlyErr {
		v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			return 0, err
		}
		if v != 0 {
			return 0, unix.Errno(v)
		}
		return 0, unix.EAGAIN
	}
	for {
		n, _, err := unix.Recvfrom(fd, b, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		if err == unix.EINTR {
			continue
		}
		return n, err
	}
}
