package tcp

import (
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fdConn drives a connected TCP socket with raw system calls on a file
// descriptor that is not registered with Go's network poller.
//
// Why: while a rank polls its socket, the Go runtime of that process often
// has an idle P whose thread sleeps in epoll_pwait on the poller, and every
// message that arrives on a poller-registered socket wakes that thread, which
// then competes for the cores with the ranks themselves. On a 2-core host,
// 2-rank 8-byte AllReduce over loopback took a median 8.7-9.4 µs per
// operation with poller-registered sockets and 4.4 µs with GOMAXPROCS=1 (no
// idle P): the wake-ups were half the latency. A descriptor outside the
// poller wakes nobody.
//
// Reads and writes are non-blocking system calls; when one would block, a
// read first polls again for readSpin (yielding the core between tries, as
// pollReader does), then sleeps in poll(2) in slices of at most pollSlice,
// checking the deadline and the closed flag between slices. Close shuts the
// socket down, which wakes a poll(2) at once, and closes the descriptor when
// no call uses it any more.
type fdConn struct {
	fd            int
	local, remote net.Addr

	state    atomic.Uint64 // fdClosedBit | calls in flight
	fdClosed atomic.Bool
	rdl, wdl atomic.Int64 // read and write deadlines, Unix nanoseconds; 0: none

	iov [2]unix.Iovec // writev2's vector (one writer at a time)

	// slice replaces pollSlice when set (before any call): a test tells a
	// wake-up by Close's shutdown from the end of a slice with it.
	slice time.Duration
}

const (
	fdClosedBit = 1 << 63
	// pollSlice bounds one poll(2) sleep, so that a deadline moved by
	// SetReadDeadline (a cancelled context) is seen within it.
	pollSlice = 10 * time.Millisecond
	// writeSpin is how long a write that would block polls again before it
	// sleeps: the peer drains a loopback socket within microseconds.
	writeSpin = 20 * time.Microsecond
)

// newTCPStream takes c's socket out of Go's network poller: it duplicates the
// descriptor, closes c (which removes the original from the poller) and
// drives the duplicate. It falls back to a netStream if that fails.
func newTCPStream(c *net.TCPConn) stream {
	rc, err := c.SyscallConn()
	if err != nil {
		return newNetStream(c)
	}
	nfd, derr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || derr != nil {
		return newNetStream(c)
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return newNetStream(c)
	}
	s := &fdConn{fd: nfd, local: c.LocalAddr(), remote: c.RemoteAddr()}
	c.Close() // the socket stays open through nfd
	return s
}

func (c *fdConn) LocalAddr() net.Addr  { return c.local }
func (c *fdConn) RemoteAddr() net.Addr { return c.remote }

// enter registers a call that uses the descriptor; false once closed.
func (c *fdConn) enter() bool {
	if c.state.Add(1)&fdClosedBit != 0 {
		c.leave()
		return false
	}
	return true
}

func (c *fdConn) leave() {
	if c.state.Add(^uint64(0)) == fdClosedBit && c.fdClosed.CompareAndSwap(false, true) {
		unix.Close(c.fd)
	}
}

func (c *fdConn) closed() bool { return c.state.Load()&fdClosedBit != 0 }

// Close shuts the socket down (waking every blocked call, which then returns
// net.ErrClosed) and closes the descriptor once no call uses it.
func (c *fdConn) Close() error {
	c.state.Add(1)
	if c.state.Or(fdClosedBit)&fdClosedBit == 0 {
		unix.Shutdown(c.fd, unix.SHUT_RDWR)
	}
	c.leave()
	return nil
}

func (c *fdConn) SetReadDeadline(t time.Time) error {
	c.rdl.Store(deadlineNanos(t))
	return nil
}

func (c *fdConn) SetWriteDeadline(t time.Time) error {
	c.wdl.Store(deadlineNanos(t))
	return nil
}

func deadlineNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	if n := t.UnixNano(); n > 0 {
		return n
	}
	return 1 // aLongTimeAgo: expired
}

func (c *fdConn) opErr(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.local, Addr: c.remote, Err: err}
}

// Read reads into b, waiting for data as described on fdConn.
func (c *fdConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if !c.enter() {
		return 0, c.opErr("read", net.ErrClosed)
	}
	defer c.leave()
	var spinStart time.Time
	for i := 0; ; i++ {
		n, err := unix.Read(c.fd, b)
		switch {
		case err == nil && n > 0:
			return n, nil
		case err == unix.EINTR:
			continue
		case c.closed():
			return 0, c.opErr("read", net.ErrClosed)
		case err == nil:
			return 0, io.EOF
		case err != unix.EAGAIN:
			return 0, c.opErr("read", os.NewSyscallError("read", err))
		}
		if i == 0 {
			spinStart = time.Now()
		}
		if err := c.wait("read", unix.POLLIN, &c.rdl, readSpin, spinStart); err != nil {
			return 0, err
		}
	}
}

// Write writes all of b.
func (c *fdConn) Write(b []byte) (int, error) {
	n, err := c.writev2(b, nil)
	return int(n), err
}

// writev2 writes a then b with writev(2), looping over partial writes.
func (c *fdConn) writev2(a, b []byte) (int64, error) {
	if !c.enter() {
		return 0, c.opErr("write", net.ErrClosed)
	}
	defer c.leave()
	total := int64(len(a) + len(b))
	var done int64
	var spinStart time.Time
	for done < total {
		// Rebuild the vector from what is left of a and b.
		iov := c.iov[:0]
		if int(done) < len(a) {
			rest := a[done:]
			c.iov[0] = unix.Iovec{Base: &rest[0]}
			c.iov[0].SetLen(len(rest))
			iov = c.iov[:1]
		}
		if off := max(0, int(done)-len(a)); off < len(b) {
			rest := b[off:]
			c.iov[len(iov)] = unix.Iovec{Base: &rest[0]}
			c.iov[len(iov)].SetLen(len(rest))
			iov = c.iov[:len(iov)+1]
		}
		r, _, e := unix.Syscall(unix.SYS_WRITEV, uintptr(c.fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
		c.iov = [2]unix.Iovec{} // drop the references to a and b
		if e == 0 {
			done += int64(r)
			continue
		}
		switch {
		case e == unix.EINTR:
			continue
		case c.closed():
			return done, c.opErr("write", net.ErrClosed)
		case e != unix.EAGAIN:
			return done, c.opErr("write", os.NewSyscallError("writev", e))
		}
		if spinStart.IsZero() {
			spinStart = time.Now()
		}
		if err := c.wait("write", unix.POLLOUT, &c.wdl, writeSpin, spinStart); err != nil {
			return done, err
		}
	}
	return done, nil
}

// wait is called when a read or write of op would block: it returns at once
// while the spin phase (spin since spinStart) lasts, yielding the core to
// any other runnable thread (loopback delivery may be left to ksoftirqd,
// which a tight spin on every core would starve), else sleeps in poll(2)
// for events, at most pollSlice and not past the deadline dl. It fails on
// an expired deadline or a closed connection.
func (c *fdConn) wait(op string, events int16, dl *atomic.Int64, spin time.Duration, spinStart time.Time) error {
	if c.closed() {
		return c.opErr(op, net.ErrClosed)
	}
	now := time.Now()
	timeout := pollSlice
	if c.slice > 0 {
		timeout = c.slice
	}
	if d := dl.Load(); d != 0 {
		left := time.Duration(d - now.UnixNano())
		if left <= 0 {
			return c.opErr(op, os.ErrDeadlineExceeded)
		}
		timeout = min(timeout, left)
	}
	if now.Sub(spinStart) < spin {
		syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		return nil
	}
	fds := [1]unix.PollFd{{Fd: int32(c.fd), Events: events}}
	ms := int((timeout + time.Millisecond - 1) / time.Millisecond)
	if _, err := unix.Poll(fds[:], ms); err != nil && err != unix.EINTR {
		return c.opErr(op, os.NewSyscallError("poll", err))
	}
	return nil
}

// room reports whether the send buffer takes n more bytes now.
func (c *fdConn) room(n int) bool {
	if !c.enter() {
		return false
	}
	defer c.leave()
	return sendRoomFD(c.fd, n)
}

// control runs f on the descriptor.
func (c *fdConn) control(f func(fd uintptr)) error {
	if !c.enter() {
		return fmt.Errorf("tcp: %w", net.ErrClosed)
	}
	defer c.leave()
	f(uintptr(c.fd))
	return nil
}
