package rendezvous

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// TCPStore is a Store client of a TCPServer. It uses one connection and
// serializes its calls with a mutex, so a Get or Wait that is held by the
// server delays this client's other calls; ranks that need concurrent calls
// open one TCPStore each.
//
// Cancellation: a call's ctx deadline becomes the connection's deadline, and
// cancelling ctx (or calling Close) expires the deadline at once, so a held
// Get or Wait returns promptly with an error wrapping ctx.Err() (or
// ErrClosed). The connection is then in an unknown state (the server may
// still answer the abandoned request later), so the client closes it, which
// also makes the server drop the held request, and the next call dials a new
// connection (one attempt, bounded by that call's ctx). A late reply can thus
// never be mistaken for the answer to a later request. A Set or Add
// interrupted this way may or may not have been applied.
type TCPStore struct {
	addr string
	opts options

	// closeCtx is cancelled by Close; it aborts the call in flight.
	closeCtx    context.Context
	cancelClose context.CancelFunc

	// instance is the server instance of the first connection; a redial
	// that reaches another fails (ErrReplaced).
	instance uint32

	mu   sync.Mutex // serializes calls; guards conn and br
	conn net.Conn   // nil after a failure, until the next call redials
	br   *bufio.Reader
	buf  []byte // request encoding buffer
}

// DialTCP connects to the TCPServer at addr, retrying with backoff (10 ms
// doubling to 500 ms) until it succeeds or ctx ends, so ranks may start before
// rank 0's server is up. The error then names addr, how long it tried, the
// last dial error and ctx's error. WithToken and WithRank configure the
// handshake; a refused token (ErrAuth) is not retried (a server that closes
// the connection during the handshake gets one more attempt).
func DialTCP(ctx context.Context, addr string, opts ...Option) (*TCPStore, error) {
	o := makeOptions(opts)
	start := time.Now()
	bo := backoff{cur: 10 * time.Millisecond, max: 500 * time.Millisecond}
	var lastErr error
	hungUp := false // the last attempt's server closed the handshake
	for attempt := 1; ; attempt++ {
		c, br, inst, err := dialOnce(ctx, addr, &o)
		if err == nil {
			return newTCPStore(addr, c, br, inst, o), nil
		}
		// A server that closes the connection in the handshake refuses the
		// token, or is being closed (rank 0 closing the store of an
		// earlier Init at this address): the next attempt tells which.
		if errors.Is(err, ErrAuth) && (hungUp || !errors.Is(err, errHungUp)) {
			return nil, fmt.Errorf("rendezvous: TCP store at %s: %w", addr, err)
		}
		hungUp = errors.Is(err, errHungUp)
		lastErr = err
		if ctx.Err() == nil {
			err = sleepCtx(ctx, nil, bo.next())
		} else {
			err = ctx.Err()
		}
		if err != nil {
			return nil, fmt.Errorf("rendezvous: cannot reach TCP store at %s: gave up after %v (%d attempts): %w (last error: %w)",
				addr, time.Since(start).Round(time.Millisecond), attempt, err, lastErr)
		}
	}
}

// dialOnce connects to addr and runs the handshake, within ctx and
// handshakeTimeout; it returns the connection and the server's instance.
func dialOnce(ctx context.Context, addr string, o *options) (net.Conn, *bufio.Reader, uint32, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, 0, err
	}
	dl := time.Now().Add(handshakeTimeout)
	if cdl, ok := ctx.Deadline(); ok && cdl.Before(dl) {
		dl = cdl
	}
	c.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(longAgo) })
	br := bufio.NewReader(c)
	inst, err := clientHandshake(c, br, addr, o)
	stop()
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		c.Close()
		return nil, nil, 0, err
	}
	c.SetDeadline(time.Time{})
	return c, br, inst, nil
}

func newTCPStore(addr string, c net.Conn, br *bufio.Reader, instance uint32, o options) *TCPStore {
	s := &TCPStore{addr: addr, opts: o, instance: instance}
	s.closeCtx, s.cancelClose = context.WithCancel(context.Background())
	s.setConn(c, br)
	return s
}

func (s *TCPStore) setConn(c net.Conn, br *bufio.Reader) {
	s.conn, s.br = c, br
}

// dropConn closes the connection, saying goodbye first so that the server
// does not take this rank for dead (best effort: on a broken connection
// the write fails harmlessly).
func (s *TCPStore) dropConn() {
	if s.conn != nil {
		if bye, err := appendRequest(nil, request{op: opBye}); err == nil {
			s.conn.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			s.conn.Write(bye)
		}
		s.conn.Close()
		s.conn, s.br = nil, nil
	}
}

// Addr returns the server address this client dials.
func (s *TCPStore) Addr() string { return s.addr }

var longAgo = time.Unix(1, 0)

// roundTrip sends req and returns the OK payload.
func (s *TCPStore) roundTrip(ctx context.Context, what string, req request) ([]byte, error) {
	fail := func(err error) error {
		return fmt.Errorf("rendezvous: TCP store %s: %s: %w", s.addr, what, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeCtx.Err() != nil {
		return nil, fail(ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fail(err)
	}
	var err error
	s.buf, err = appendRequest(s.buf[:0], req)
	if err != nil {
		return nil, err
	}
	if s.conn == nil {
		if err := s.redial(ctx); err != nil {
			return nil, fail(err)
		}
	}
	c := s.conn
	dl, _ := ctx.Deadline()
	c.SetDeadline(dl) // zero time (no deadline) when ctx has none
	expire := func() { c.SetDeadline(longAgo) }
	stopCtx := context.AfterFunc(ctx, expire)
	stopClose := context.AfterFunc(s.closeCtx, expire)

	status, payload, err := s.exchange(c)

	ctxFired := !stopCtx()
	closeFired := !stopClose()
	if err != nil || ctxFired || closeFired {
		// The connection's state is unknown (partial frame, pending reply, or
		// a deadline expired by a callback that may still be running):
		// never reuse it.
		s.dropConn()
	}
	if err != nil {
		return nil, fail(callError(s.closeCtx, ctx, err))
	}
	switch status {
	case statusLost:
		return nil, fmt.Errorf("rendezvous: TCP store %s: %s: %w", s.addr, what, decodeLost(payload))
	case statusErr:
		return nil, fmt.Errorf("rendezvous: TCP store %s: %s: server: %s", s.addr, what, payload)
	}
	return payload, nil
}

// redial replaces a connection dropped by an earlier failure: one attempt,
// bounded by ctx and by Close. It fails with ErrReplaced, and keeps no
// connection, when the server it reaches is another instance than the one
// this client first connected to: that server holds none of the job's keys
// (see the handshake).
func (s *TCPStore) redial(ctx context.Context) error {
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.closeCtx, cancel)
	defer stop()
	c, br, inst, err := dialOnce(dctx, s.addr, &s.opts)
	switch {
	case err == nil && inst != s.instance:
		s.setConn(c, br)
		s.dropConn() // with a goodbye: this rank is not dead
		return fmt.Errorf("reconnect: %w (instance %08x, this client's was %08x)", ErrReplaced, inst, s.instance)
	case err == nil:
		s.setConn(c, br)
		return nil
	case s.closeCtx.Err() != nil:
		return ErrClosed
	case ctx.Err() != nil:
		return ctx.Err()
	case deadlineDue(ctx, err):
		return context.DeadlineExceeded
	}
	return fmt.Errorf("reconnect: %w", err)
}

// deadlineDue reports whether err is a timeout because ctx's deadline has
// passed. The socket's deadline can fire just before ctx's timer: it then
// waits (at most 100 ms) for ctx to be done, so that a caller that checks
// ctx.Err() after the error finds ctx done, as the error says.
// callError is the error a client call reports when its exchange failed
// with err: ErrClosed when the client was closed, ctx's error when ctx
// ended (also when the socket deadline derived from it fired first), else
// err.
func callError(closeCtx, ctx context.Context, err error) error {
	switch {
	case closeCtx.Err() != nil:
		return ErrClosed
	case ctx.Err() != nil:
		return ctx.Err()
	case deadlineDue(ctx, err):
		return context.DeadlineExceeded
	}
	return err
}

func deadlineDue(ctx context.Context, err error) bool {
	dl, ok := ctx.Deadline()
	if !ok || time.Now().Before(dl) || !(errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded)) {
		return false
	}
	sleepCtx(ctx, nil, 100*time.Millisecond)
	return true
}

func (s *TCPStore) exchange(c net.Conn) (byte, []byte, error) {
	if _, err := c.Write(s.buf); err != nil {
		return 0, nil, err
	}
	if cap(s.buf) > 1<<20 {
		s.buf = nil // do not keep a large Set's buffer alive
	}
	return readResponse(s.br)
}

// Set implements Store.
func (s *TCPStore) Set(ctx context.Context, key string, value []byte) error {
	p, err := s.roundTrip(ctx, "set "+quoteKey(key), request{op: opSet, keys: []string{key}, value: value})
	if err == nil && len(p) != 0 {
		err = s.badReply("set")
	}
	return err
}

// Create implements Creator.
func (s *TCPStore) Create(ctx context.Context, key string, value []byte) ([]byte, error) {
	return s.roundTrip(ctx, "create "+quoteKey(key), request{op: opCreate, keys: []string{key}, value: value})
}

// Get implements Store; the server holds the request until key exists.
func (s *TCPStore) Get(ctx context.Context, key string) ([]byte, error) {
	return s.roundTrip(ctx, "get "+quoteKey(key), request{op: opGet, keys: []string{key}})
}

// Wait implements Store; the server holds the request until every key exists.
func (s *TCPStore) Wait(ctx context.Context, keys ...string) error {
	what := "wait"
	if len(keys) > 0 {
		what = fmt.Sprintf("wait %s", quoteKey(keys[0]))
		if len(keys) > 1 {
			what += fmt.Sprintf(" (+%d keys)", len(keys)-1)
		}
	}
	p, err := s.roundTrip(ctx, what, request{op: opWait, keys: keys})
	if err == nil && len(p) != 0 {
		err = s.badReply("wait")
	}
	return err
}

// Add implements Store.
func (s *TCPStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	p, err := s.roundTrip(ctx, "add "+quoteKey(key), request{op: opAdd, keys: []string{key}, delta: delta})
	if err != nil {
		return 0, err
	}
	if len(p) != 8 {
		return 0, s.badReply("add")
	}
	return int64(binary.BigEndian.Uint64(p)), nil
}

func (s *TCPStore) badReply(op string) error {
	s.mu.Lock()
	s.dropConn()
	s.mu.Unlock()
	return fmt.Errorf("rendezvous: TCP store %s: %s: %w", s.addr, op, malformed("unexpected reply payload"))
}

// Close closes the connection. A call in flight returns promptly with an
// error wrapping ErrClosed, as do later calls.
func (s *TCPStore) Close() error {
	s.cancelClose() // aborts a call in flight, which then releases mu
	s.mu.Lock()
	s.dropConn()
	s.mu.Unlock()
	return nil
}
