package roce

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/goccl/goccl/transport"
)

// Upgrade moves a TCP connection's byte stream onto an RC queue pair of
// dom's device, as rsockets (librdmacm) carries a socket over RDMA: both
// ends call it at the same point of their protocol, exchange what the
// queue pairs need over conn, and from then on read and write the returned
// net.Conn, whose bytes go by RDMA WRITE with immediate through a link's
// registered ring (Link). conn stays open underneath as the control
// channel: the stream fails at once when it ends (the peer closed, or its
// process died). When this side (dom nil) or the peer has no device, it
// returns conn itself and fallback true: both ends go on over TCP. peer
// names the other end in errors; o's zero Timeout and RetryCnt take the
// domain's (and a timeout still zero streamTimeout), a zero SlotBytes streamSlot (a message of StreamMessage bytes
// and its header fill one slot). On error conn is closed.
func Upgrade(ctx context.Context, conn net.Conn, peer int, dom *Domain, o Options) (c net.Conn, fallback bool, err error) {
	if dom != nil {
		if o.Timeout == 0 {
			o.Timeout = dom.Timeout
		}
		if o.RetryCnt == 0 {
			o.RetryCnt = dom.RetryCnt
		}
	}
	if o.Timeout == 0 {
		o.Timeout = streamTimeout
	}
	if o.SlotBytes == 0 {
		o.SlotBytes = streamSlot
	}
	ctrl := &connLink{conn: conn, peer: peer}
	l, fallback, err := Dial(ctx, ctrl, dom, o)
	if err != nil {
		conn.Close()
		return nil, false, err
	}
	if fallback {
		return conn, true, nil
	}
	return NewStream(l.(*Link), conn), false, nil
}

// StreamMessage is the largest message a Stream's Write sends: a Read of
// at least this many bytes receives straight into the caller's buffer.
const StreamMessage = 256 << 10

// streamTimeout is an upgraded connection's default ACK timeout exponent:
// 268 ms, GOCCL_IB_TIMEOUT's default (Dial's own 67 ms gave up, after 7
// tries, on a device the race detector and a loaded machine kept from
// running for half a second).
const streamTimeout = 16

// streamSlot is the receive slot of an upgraded connection: a whole
// message and its header room, so that a message is one RDMA WRITE with
// immediate and takes one slot (with DefaultSlotBytes it would take two,
// the second for its last 64 bytes).
const streamSlot = StreamMessage + 4<<10

// Stream is a net.Conn over a Link: Write sends messages of at most
// StreamMessage bytes, Read returns their bytes in order (RecvAny).
// Deadlines end the call in progress; one that ends a message part-way
// closes the link, as on Link. One Read and one Write may run at once.
type Stream struct {
	l    *Link
	addr net.Conn // for LocalAddr and RemoteAddr

	mu     sync.Mutex
	r, w   deadline // the read and write deadlines
	closed bool

	buf     []byte // a message received but not yet read
	pending []byte // its unread part
	hdr     transport.Header
}

// NewStream makes the stream over l; addr gives the addresses it reports.
func NewStream(l *Link, addr net.Conn) *Stream {
	s := &Stream{l: l, addr: addr, buf: make([]byte, streamSlot)}
	s.r.set(time.Time{})
	s.w.set(time.Time{})
	return s
}

// Link is the link under the stream.
func (s *Stream) Link() *Link { return s.l }

// call runs f with the read (or write) deadline's context, again when
// the deadline changed while f waited (net.Conn deadlines apply to calls
// in flight: a later one extends them) and f moved nothing.
func (s *Stream) call(write bool, f func(ctx context.Context) error) error {
	for {
		d := &s.r
		if write {
			d = &s.w
		}
		s.mu.Lock()
		ctx, gen, closed := d.ctx, d.gen, s.closed
		s.mu.Unlock()
		if closed {
			return s.err(ctx, net.ErrClosed)
		}
		err := f(ctx)
		if err == nil || !ended(ctx, err) {
			return s.err(ctx, err)
		}
		s.mu.Lock()
		changed := gen != d.gen
		s.mu.Unlock()
		s.l.mu.Lock()
		gone := s.l.err != nil
		s.l.mu.Unlock()
		if !changed || gone {
			return s.err(ctx, err)
		}
	}
}

// Read implements net.Conn.
func (s *Stream) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for len(s.pending) == 0 {
		// Straight into p when the message fits, else into the stream's
		// buffer, read from there.
		var got []byte
		err := s.call(false, func(ctx context.Context) (err error) {
			got, err = s.l.RecvAny(ctx, p, s.buf)
			return err
		})
		if err != nil {
			return 0, err
		}
		if len(got) > 0 && &got[0] == &p[0] {
			return len(got), nil
		}
		s.pending = got
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// Writev writes a then b, as one message when together they fit a slot
// (a frame header and its payload: one RDMA WRITE, one slot).
func (s *Stream) Writev(a, b []byte) (int, error) {
	if len(a)+len(b) > streamSlot-hdrRoom || len(a) == 0 || len(b) == 0 {
		n, err := s.Write(a)
		if err != nil {
			return n, err
		}
		m, err := s.Write(b)
		return n + m, err
	}
	s.hdr = transport.Header{Root: -1, Bytes: uint64(len(a) + len(b))}
	if err := s.call(true, func(ctx context.Context) error { return s.l.sendv(ctx, &s.hdr, a, b) }); err != nil {
		return 0, err
	}
	return len(a) + len(b), nil
}

// Write implements net.Conn.
func (s *Stream) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		m := min(len(p)-done, StreamMessage)
		s.hdr = transport.Header{Root: -1, Bytes: uint64(m)}
		if err := s.call(true, func(ctx context.Context) error { return s.l.Send(ctx, &s.hdr, p[done:done+m]) }); err != nil {
			return done, err
		}
		done += m
	}
	return done, nil
}

// err turns a deadline's end into os.ErrDeadlineExceeded and the link's
// end into io.EOF (the peer closed) as a socket reports them.
func (s *Stream) err(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("roce: stream: %w", net.ErrClosed)
	}
	if ended(ctx, err) {
		return fmt.Errorf("%w: %v", os.ErrDeadlineExceeded, err)
	}
	if errors.Is(err, transport.ErrClosed) && !errors.Is(err, transport.ErrPeerLost) {
		s.l.mu.Lock()
		local := s.l.local
		s.l.mu.Unlock()
		if !local {
			return io.EOF
		}
	}
	return err
}

// Close implements net.Conn.
func (s *Stream) Close() error {
	s.mu.Lock()
	s.closed = true
	s.r.cancel() // calls in flight end, reporting net.ErrClosed
	s.w.cancel()
	s.mu.Unlock()
	return s.l.Close()
}

// LocalAddr implements net.Conn (the control connection's).
func (s *Stream) LocalAddr() net.Addr { return s.addr.LocalAddr() }

// RemoteAddr implements net.Conn (the control connection's).
func (s *Stream) RemoteAddr() net.Addr { return s.addr.RemoteAddr() }

// SetDeadline implements net.Conn.
func (s *Stream) SetDeadline(t time.Time) error {
	s.SetReadDeadline(t)
	return s.SetWriteDeadline(t)
}

// SetReadDeadline implements net.Conn.
func (s *Stream) SetReadDeadline(t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.r.set(t)
	return nil
}

// SetWriteDeadline implements net.Conn.
func (s *Stream) SetWriteDeadline(t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.set(t)
	return nil
}

// deadline is one direction's deadline as a context (Stream.mu guards it).
type deadline struct {
	ctx    context.Context
	cancel context.CancelFunc
	gen    int // deadlines set so far
}

// set replaces the deadline (zero: none), ending calls that wait on the
// old one (Stream.call decides whether they go on).
func (d *deadline) set(t time.Time) {
	if d.cancel != nil {
		d.cancel()
	}
	d.gen++
	if t.IsZero() {
		d.ctx, d.cancel = context.Background(), func() {}
		return
	}
	d.ctx, d.cancel = context.WithDeadline(context.Background(), t)
}

// ended reports whether err is ctx's end (the link may see the deadline
// pass before ctx's timer fires).
func ended(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// connLink is a transport.Link over a net.Conn, enough for a RoCE link's
// control channel: messages are a header (transport.HeaderSize bytes) and
// the payload; its end (EOF, reset) fails Recv with ErrClosed.
type connLink struct {
	conn     net.Conn
	peer     int
	wmu      sync.Mutex
	counters transport.Counters
}

func (c *connLink) Peer() int                                       { return c.peer }
func (c *connLink) Name() string                                    { return "tcp " + c.conn.RemoteAddr().String() }
func (c *connLink) Counters() *transport.Counters                   { return &c.counters }
func (c *connLink) Close() error                                    { return c.conn.Close() }
func (c *connLink) Abort(int) error                                 { return c.conn.Close() }
func (c *connLink) TrySend(*transport.Header, []byte) (bool, error) { return false, nil }

func (c *connLink) Send(ctx context.Context, h *transport.Header, buf []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var hb [transport.HeaderSize]byte
	h.Encode(hb[:])
	stop := c.deadline(ctx, c.conn.SetWriteDeadline)
	defer stop()
	if _, err := (&net.Buffers{hb[:], buf}).WriteTo(c.conn); err != nil {
		return &transport.PeerError{Peer: c.peer, Op: "send", Err: fmt.Errorf("%w: %v", transport.ErrClosed, err)}
	}
	return nil
}

func (c *connLink) Recv(ctx context.Context, want *transport.Header, buf []byte, _ transport.ReduceFunc) error {
	stop := c.deadline(ctx, c.conn.SetReadDeadline)
	defer stop()
	var hb [transport.HeaderSize]byte
	fail := func(err error) error {
		if ctx.Err() != nil {
			err = ctx.Err()
		} else {
			err = fmt.Errorf("%w: %v", transport.ErrClosed, err)
		}
		return &transport.PeerError{Peer: c.peer, Op: "recv", Err: err}
	}
	if _, err := io.ReadFull(c.conn, hb[:]); err != nil {
		return fail(err)
	}
	var got transport.Header
	if err := got.Decode(hb[:]); err != nil {
		c.conn.Close()
		return &transport.PeerError{Peer: c.peer, Op: "recv", Err: err}
	}
	if err := transport.Check(c.peer, want, &got); err != nil {
		c.conn.Close()
		return err
	}
	if want.Arrival != got.Arrival { // no write when equal: callers may share want with a Send
		want.Arrival = got.Arrival
	}
	if _, err := io.ReadFull(c.conn, buf); err != nil {
		return fail(err)
	}
	return nil
}

// deadline applies ctx's deadline and end to conn through set.
func (c *connLink) deadline(ctx context.Context, set func(time.Time) error) func() {
	if dl, ok := ctx.Deadline(); ok {
		set(dl)
	} else {
		set(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { set(time.Unix(1, 0)) })
	return func() { stop() }
}
