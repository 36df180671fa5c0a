package tcp

import (
	"crypto/tls"
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

// newStream is the stream over one of a link's connections: an fdConn or
// netStream over a plain TCP connection, a tlsStream over a TLS one.
func newStream(c net.Conn) stream {
	if tc, ok := c.(*tls.Conn); ok {
		return newTLSStream(tc)
	}
	return newTCPStream(c.(*net.TCPConn))
}

// rawTCP is the TCP connection under c.
func rawTCP(c net.Conn) *net.TCPConn {
	if tc, ok := c.(*tls.Conn); ok {
		return tc.NetConn().(*net.TCPConn)
	}
	return c.(*net.TCPConn)
}

// tlsStream is a stream over a TLS connection (GOCCL_TLS=1). Reads park in
// Go's network poller; small writev2 calls are coalesced into one record.
type tlsStream struct {
	*tls.Conn
	rc  syscall.RawConn
	rq  roomQuery
	buf []byte // writev2's coalescing buffer
}

// tlsCoalesce is the largest writev2 (header plus payload) copied into one
// TLS record instead of being sent as two.
const tlsCoalesce = 16 << 10

func newTLSStream(c *tls.Conn) *tlsStream {
	s := &tlsStream{Conn: c, buf: make([]byte, 0, tlsCoalesce)}
	s.rc, _ = rawTCP(c).SyscallConn()
	s.rq.init(rawTCP(c))
	return s
}

func (s *tlsStream) writev2(a, b []byte) (int64, error) {
	if len(a)+len(b) <= tlsCoalesce {
		s.buf = append(append(s.buf[:0], a...), b...)
		n, err := s.Conn.Write(s.buf)
		return int64(n), err
	}
	n, err := s.Conn.Write(a)
	if err != nil {
		return int64(n), err
	}
	m, err := s.Conn.Write(b)
	return int64(n + m), err
}

// room asks the socket for n bytes plus the records' overhead (at most
// tlsRecordOverhead per record of up to 16 KiB).
func (s *tlsStream) room(n int) bool { return s.rq.has(n + (n/tlsRecord+2)*tlsRecordOverhead) }

const (
	tlsRecord         = 16 << 10
	tlsRecordOverhead = 5 + 1 + 16 // TLS 1.3 record header, content type, AEAD tag
)

// Close closes the TCP connection without a TLS close_notify: the goodbye
// frame (see link) already says whether the close is deliberate, and
// close_notify could wait on a peer that no longer reads.
func (s *tlsStream) Close() error { return s.Conn.NetConn().Close() }

func (s *tlsStream) control(f func(fd uintptr)) error {
	if s.rc == nil {
		return syscall.EINVAL
	}
	return s.rc.Control(f)
}
