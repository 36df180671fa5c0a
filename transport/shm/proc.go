package shm

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// proc watches another process for its exit. The zero value watches nothing.
type proc struct {
	pid int

	mu    sync.Mutex
	pidfd int // -1: none (use kill(pid, 0)); closed by release
}

// watchPeer starts watching pid (<= 0: nothing).
func (l *link) watchPeer(pid int) {
	p := &l.peerProc
	p.pid, p.pidfd = pid, -1
	if pid <= 0 {
		return
	}
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case err == nil:
		p.pidfd = fd
	case errors.Is(err, unix.ESRCH):
		// No such process here: the peer lives in another pid namespace
		// (or already died; then its rings are never written and the
		// operation's deadline reports it). Do not watch a stranger.
		p.pid = 0
	}
}

// exited reports whether the watched process has exited (zombies included
// when a pidfd is available).
func (p *proc) exited() bool {
	if p.pid <= 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pidfd >= 0 {
		fds := [1]unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds[:], 0)
		return err == nil && n > 0 && fds[0].Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) != 0
	}
	return errors.Is(unix.Kill(p.pid, 0), unix.ESRCH)
}

// exitErr describes the exit for error messages.
func (p *proc) exitErr() error { return fmt.Errorf("process %d exited", p.pid) }

// release closes the pidfd.
func (p *proc) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pidfd >= 0 {
		unix.Close(p.pidfd)
		p.pidfd = -1
	}
}
