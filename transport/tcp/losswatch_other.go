//go:build !unix

package tcp

import "syscall"

type pollFd struct {
	fd    int
	tls   bool
	ready bool
}

// pollNow: no poll(2) here; the next call on a link finds a loss.
func pollNow(fds []pollFd) bool { return false }

func peek(fd int, b []byte, onlyErr bool) (int, error) { return 0, syscall.EAGAIN }
