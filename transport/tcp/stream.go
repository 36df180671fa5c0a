package tcp

import (
	"io"
	"net"
	"syscall"
	"time"
)

// stream is one TCP connection of a link, as the link drives it. On Linux
// it is an fdConn (raw system calls on a descriptor outside Go's network
// poller, see fdconn_linux.go); elsewhere, or if that cannot be set up, a
// netStream over the *net.TCPConn.
type stream interface {
	io.Reader
	io.Writer
	// writev2 writes a then b, with one system call where it can.
	writev2(a, b []byte) (int64, error)
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
	// Close closes the connection; calls blocked on it return net.ErrClosed.
	Close() error
	LocalAddr() net.Addr
	RemoteAddr() net.Addr
	// room reports whether a write of n bytes would complete now, without
	// waiting for the peer to read (false where it cannot tell).
	room(n int) bool
	// control runs f on the connection's file descriptor.
	control(f func(fd uintptr)) error
}

// netStream is a stream over a *net.TCPConn: reads spin briefly on
// non-blocking reads (pollReader), then park in Go's network poller.
type netStream struct {
	*net.TCPConn
	r    io.Reader
	rc   syscall.RawConn
	vec  [2][]byte
	bufs net.Buffers
	rq   roomQuery
}

func newNetStream(c *net.TCPConn) *netStream {
	s := &netStream{TCPConn: c, r: newPollReader(c)}
	s.rc, _ = c.SyscallConn()
	s.rq.init(c)
	return s
}

func (s *netStream) Read(b []byte) (int, error) { return s.r.Read(b) }

func (s *netStream) writev2(a, b []byte) (int64, error) {
	s.vec[0], s.vec[1] = a, b
	s.bufs = s.vec[:]
	n, err := s.bufs.WriteTo(s.TCPConn)
	s.vec[0], s.vec[1] = nil, nil
	return n, err
}

func (s *netStream) room(n int) bool { return s.rq.has(n) }

func (s *netStream) control(f func(fd uintptr)) error {
	if s.rc == nil {
		return syscall.EINVAL
	}
	return s.rc.Control(f)
}
