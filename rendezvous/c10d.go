package rendezvous

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// The c10d TCPStore wire protocol, as PyTorch's TCPStore server speaks it
// (the server torchrun's agent runs on MASTER_PORT). Every integer is in the
// host's byte order, little-endian on every platform PyTorch ships for, so
// this client writes little-endian. A request is one byte naming the query,
// then its arguments: a string or byte vector is a uint64 length and the
// bytes; a list of keys is a uint64 count and the strings; a delta is an
// int64. The replies used here: a vector (uint64 length, bytes), an int64, or
// one status byte (CHECK: 0 ready, 1 not ready; WAIT: 0 when every key
// exists). SET has no reply. A query the server cannot serve (GET of a
// missing key, ADD to a value that is not an integer) makes it close the
// connection.
//
// Two numberings exist. PyTorch 1.x (Debian's python3-torch 1.13) numbers the
// queries from SET = 0 and needs no greeting. PyTorch 2.x added a VALIDATE
// query (0) in front, shifting the others by one, and a connection must start
// with VALIDATE and the magic number c10dValidateMagic (uint32); newer
// servers (the libuv backend, the default from 2.4) also answer PING (13)
// with its uint32 nonce.
const (
	c10dValidateMagic = 0x3C85F7CE

	c10dVersion1 = 1 // PyTorch 1.x numbering, no greeting
	c10dVersion2 = 2 // PyTorch 2.x: VALIDATE first, queries shifted by one

	// 1.x query numbers; 2.x adds one.
	c10dSet        = 0
	c10dGet        = 2
	c10dAdd        = 3
	c10dCheck      = 4
	c10dWait       = 5
	c10dGetNumKeys = 6

	c10dV2Validate = 0
	c10dV2Ping     = 13

	c10dReady       = 0 // CHECK's reply when every key exists
	c10dStopWaiting = 0 // WAIT's reply once every key exists

	// c10dProbeTimeout bounds each step of the version probe.
	c10dProbeTimeout = 5 * time.Second
)

// C10dStore is a Store client of a PyTorch c10d TCPStore server, such as
// the one torchrun's agent serves on MASTER_ADDR:MASTER_PORT. Every key this
// client uses is put under its prefix on the server, so that goccl's keys
// stay apart from torch's (which begin with "/").
//
// Like TCPStore it uses one connection and serializes its calls. Get and
// Wait are held by the server until their keys exist; a call's ctx deadline
// becomes the connection's, and cancelling ctx or calling Close expires it,
// so a held call returns promptly; the connection is then closed (the server
// forgets a closed connection's waits) and the next call dials a new one.
//
// The c10d server cannot refuse an Add to a value that is not a decimal
// integer (it drops the connection) nor detect an int64 overflow, so Add
// first reads the key's value and checks both here: the check is not atomic
// with the ADD, which is sound as long as only Add writes counter keys, as in
// goccl. The server knows no ranks and no job token: there is no
// RankLostError through it.
type C10dStore struct {
	addr    string
	prefix  string
	version int // c10dVersion1 or c10dVersion2, found at the first connection

	closeCtx    context.Context
	cancelClose context.CancelFunc

	mu   sync.Mutex // serializes calls; guards conn, br and buf
	conn net.Conn   // nil after a failure, until the next call redials
	br   *bufio.Reader
	buf  []byte
}

// DialC10d connects to the c10d TCPStore server at addr (host:port),
// retrying with backoff until it succeeds or ctx ends, and finds which
// protocol version the server speaks. Keys are stored on the server under
// prefix.
func DialC10d(ctx context.Context, addr, prefix string) (*C10dStore, error) {
	s := &C10dStore{addr: addr, prefix: prefix}
	s.closeCtx, s.cancelClose = context.WithCancel(context.Background())
	start := time.Now()
	bo := backoff{cur: 10 * time.Millisecond, max: 500 * time.Millisecond}
	for attempt := 1; ; attempt++ {
		c, br, version, err := c10dDetect(ctx, addr)
		if err == nil {
			s.conn, s.br, s.version = c, br, version
			return s, nil
		}
		var perr *c10dProtoError
		if errors.As(err, &perr) {
			return nil, fmt.Errorf("rendezvous: c10d store %s: %w", addr, err)
		}
		serr := ctx.Err()
		if serr == nil {
			serr = sleepCtx(ctx, nil, bo.next())
		}
		if serr != nil {
			return nil, fmt.Errorf("rendezvous: cannot reach c10d store at %s: gave up after %v (%d attempts): %w (last error: %w)",
				addr, time.Since(start).Round(time.Millisecond), attempt, serr, err)
		}
	}
}

// c10dProtoError: the server answered, but in no protocol this client knows.
type c10dProtoError struct{ msg string }

func (e *c10dProtoError) Error() string { return e.msg }

// c10dDetect connects to addr and finds the protocol version:
//
//  1. VALIDATE with the magic, then PING with a nonce whose third byte has
//     its top bit set. A 2.x server that knows PING echoes the nonce. A 1.x
//     server reads the VALIDATE as a SET whose key length, made of the magic,
//     the PING byte and the nonce's first three bytes, is over 2^63 bytes:
//     it refuses it without allocating and closes the connection.
//  2. After a close: a new connection and 1.x's GETNUMKEYS, which a 1.x
//     server answers with an int64.
//  3. After another close: VALIDATE and 2.x's GETNUMKEYS, for a 2.x server
//     without PING (not tested: no such server at hand).
func c10dDetect(ctx context.Context, addr string) (net.Conn, *bufio.Reader, int, error) {
	var nonce [4]byte
	rand.Read(nonce[:])
	nonce[2] |= 0x80
	validate := binary.LittleEndian.AppendUint32([]byte{c10dV2Validate}, c10dValidateMagic)
	steps := []struct {
		version int
		req     []byte
		check   func([]byte) bool
		n       int
	}{
		{c10dVersion2, append(append(validate, c10dV2Ping), nonce[:]...), func(b []byte) bool { return string(b) == string(nonce[:]) }, 4},
		{c10dVersion1, []byte{c10dGetNumKeys}, func(b []byte) bool { return int64(binary.LittleEndian.Uint64(b)) >= 0 }, 8},
		{c10dVersion2, append(validate, c10dGetNumKeys+1), func(b []byte) bool { return int64(binary.LittleEndian.Uint64(b)) >= 0 }, 8},
	}
	var closedBy []string
	for _, st := range steps {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, nil, 0, err
		}
		dl := time.Now().Add(c10dProbeTimeout)
		if cdl, ok := ctx.Deadline(); ok && cdl.Before(dl) {
			dl = cdl
		}
		c.SetDeadline(dl)
		stop := context.AfterFunc(ctx, func() { c.SetDeadline(longAgo) })
		br := bufio.NewReader(c)
		reply := make([]byte, st.n)
		_, err = c.Write(st.req)
		if err == nil {
			_, err = io.ReadFull(br, reply)
		}
		stop()
		switch {
		case err == nil && st.check(reply):
			c.SetDeadline(time.Time{})
			return c, br, st.version, nil
		case err == nil:
			c.Close()
			return nil, nil, 0, &c10dProtoError{fmt.Sprintf("unexpected reply %x to a version %d probe: not a c10d TCPStore?", reply, st.version)}
		}
		c.Close()
		if ctx.Err() != nil {
			return nil, nil, 0, fmt.Errorf("no answer to the version %d probe: %w", st.version, ctx.Err())
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !isConnReset(err) {
			return nil, nil, 0, &c10dProtoError{fmt.Sprintf("no answer to a version %d probe: %v (not a c10d TCPStore?)", st.version, err)}
		}
		closedBy = append(closedBy, fmt.Sprintf("version %d", st.version))
	}
	return nil, nil, 0, &c10dProtoError{fmt.Sprintf("the server closed the connection on every protocol probe (%v): not a c10d TCPStore of a known version", closedBy)}
}

func isConnReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

// Addr returns the server address this client dials.
func (s *C10dStore) Addr() string { return s.addr }

// query returns the wire number of a 1.x query for this server's version.
func (s *C10dStore) query(q byte) byte {
	if s.version == c10dVersion2 {
		return q + 1
	}
	return q
}

func appendC10dString(b []byte, str string) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(str)))
	return append(b, str...)
}

func appendC10dBytes(b []byte, v []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(v)))
	return append(b, v...)
}

// call runs one exchange: build appends the request to the buffer, read
// reads the reply. ctx and Close abort it; the connection is then dropped.
func (s *C10dStore) call(ctx context.Context, what string, build func(b []byte) []byte, read func(br *bufio.Reader) error) error {
	fail := func(err error) error {
		return fmt.Errorf("rendezvous: c10d store %s: %s: %w", s.addr, what, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeCtx.Err() != nil {
		return fail(ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if s.conn == nil {
		if err := s.redial(ctx); err != nil {
			return fail(err)
		}
	}
	s.buf = build(s.buf[:0])
	c := s.conn
	dl, _ := ctx.Deadline()
	c.SetDeadline(dl)
	expire := func() { c.SetDeadline(longAgo) }
	stopCtx := context.AfterFunc(ctx, expire)
	stopClose := context.AfterFunc(s.closeCtx, expire)
	_, err := c.Write(s.buf)
	if err == nil {
		err = read(s.br)
	}
	if cap(s.buf) > 1<<20 {
		s.buf = nil
	}
	ctxFired := !stopCtx()
	closeFired := !stopClose()
	if err != nil || ctxFired || closeFired {
		s.dropConn()
	}
	if err != nil {
		if err = callError(s.closeCtx, ctx, err); errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("the server closed the connection: %w", err)
		}
		return fail(err)
	}
	return nil
}

func (s *C10dStore) dropConn() {
	if s.conn != nil {
		s.conn.Close()
		s.conn, s.br = nil, nil
	}
}

// redial replaces a dropped connection: one attempt, bounded by ctx and
// Close, speaking the version found at the first connection.
func (s *C10dStore) redial(ctx context.Context) error {
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.closeCtx, cancel)
	defer stop()
	var d net.Dialer
	c, err := d.DialContext(dctx, "tcp", s.addr)
	if err == nil && s.version == c10dVersion2 {
		dl, _ := dctx.Deadline()
		c.SetDeadline(dl)
		_, err = c.Write(binary.LittleEndian.AppendUint32([]byte{c10dV2Validate}, c10dValidateMagic))
		c.SetDeadline(time.Time{})
		if err != nil {
			c.Close()
		}
	}
	switch {
	case err == nil:
		s.conn, s.br = c, bufio.NewReader(c)
		return nil
	case s.closeCtx.Err() != nil:
		return ErrClosed
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return fmt.Errorf("reconnect: %w", err)
}

func readStatus(br *bufio.Reader, want byte, what string) (byte, error) {
	b, err := br.ReadByte()
	if err != nil {
		return 0, err
	}
	if want != 255 && b != want {
		return b, malformed(fmt.Sprintf("%s reply %d", what, b))
	}
	return b, nil
}

// Set implements Store. SET has no reply, so a CHECK of the key follows it
// on the connection: its answer confirms the server applied the SET.
func (s *C10dStore) Set(ctx context.Context, key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := checkValue(value); err != nil {
		return err
	}
	k := s.prefix + key
	return s.call(ctx, "set "+quoteKey(key), func(b []byte) []byte {
		b = append(b, s.query(c10dSet))
		b = appendC10dString(b, k)
		b = appendC10dBytes(b, value)
		b = append(b, s.query(c10dCheck))
		b = binary.LittleEndian.AppendUint64(b, 1)
		return appendC10dString(b, k)
	}, func(br *bufio.Reader) error {
		_, err := readStatus(br, c10dReady, "check after set")
		return err
	})
}

func (s *C10dStore) appendWait(b []byte, keys []string) []byte {
	b = append(b, s.query(c10dWait))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendC10dString(b, s.prefix+k)
	}
	return b
}

// Get implements Store: a WAIT for the key, then a GET.
func (s *C10dStore) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	what := "get " + quoteKey(key)
	if err := s.wait(ctx, what, []string{key}); err != nil {
		return nil, err
	}
	var v []byte
	err := s.call(ctx, what, func(b []byte) []byte {
		b = append(b, s.query(c10dGet))
		return appendC10dString(b, s.prefix+key)
	}, func(br *bufio.Reader) (err error) {
		v, err = readC10dVector(br)
		return err
	})
	return v, err
}

func readC10dVector(br *bufio.Reader) ([]byte, error) {
	var n [8]byte
	if _, err := io.ReadFull(br, n[:]); err != nil {
		return nil, err
	}
	l := binary.LittleEndian.Uint64(n[:])
	if l > MaxValueLen {
		return nil, malformed(fmt.Sprintf("value of %d bytes over MaxValueLen", l))
	}
	v := make([]byte, l)
	if _, err := io.ReadFull(br, v); err != nil {
		return nil, err
	}
	return v, nil
}

// Wait implements Store.
func (s *C10dStore) Wait(ctx context.Context, keys ...string) error {
	if err := checkKeys(keys); err != nil {
		return err
	}
	what := "wait"
	if len(keys) > 0 {
		what = "wait " + quoteKey(keys[0])
		if len(keys) > 1 {
			what += fmt.Sprintf(" (+%d keys)", len(keys)-1)
		}
	}
	return s.wait(ctx, what, keys)
}

func (s *C10dStore) wait(ctx context.Context, what string, keys []string) error {
	if len(keys) == 0 {
		// Still fail after Close or with a done ctx, as the other stores do.
		return s.call(ctx, what, func(b []byte) []byte { return b }, func(*bufio.Reader) error { return nil })
	}
	return s.call(ctx, what, func(b []byte) []byte { return s.appendWait(b, keys) }, func(br *bufio.Reader) error {
		_, err := readStatus(br, c10dStopWaiting, "wait")
		return err
	})
}

// Add implements Store. It checks the key's current value first (see
// C10dStore), then sends ADD.
func (s *C10dStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	what := "add " + quoteKey(key)
	k := s.prefix + key
	var ready byte
	err := s.call(ctx, what, func(b []byte) []byte {
		b = append(b, s.query(c10dCheck))
		b = binary.LittleEndian.AppendUint64(b, 1)
		return appendC10dString(b, k)
	}, func(br *bufio.Reader) (err error) {
		ready, err = readStatus(br, 255, "check")
		return err
	})
	if err != nil {
		return 0, err
	}
	if ready == c10dReady {
		var old []byte
		err := s.call(ctx, what, func(b []byte) []byte {
			b = append(b, s.query(c10dGet))
			return appendC10dString(b, k)
		}, func(br *bufio.Reader) (err error) {
			old, err = readC10dVector(br)
			return err
		})
		if err != nil {
			return 0, err
		}
		if _, _, err := addCounter(key, old, true, delta); err != nil {
			return 0, fmt.Errorf("%w (c10d store %s)", err, s.addr)
		}
	}
	var n int64
	err = s.call(ctx, what, func(b []byte) []byte {
		b = append(b, s.query(c10dAdd))
		b = appendC10dString(b, k)
		return binary.LittleEndian.AppendUint64(b, uint64(delta))
	}, func(br *bufio.Reader) error {
		var r [8]byte
		if _, err := io.ReadFull(br, r[:]); err != nil {
			return err
		}
		n = int64(binary.LittleEndian.Uint64(r[:]))
		return nil
	})
	return n, err
}

// Close closes the connection. A call in flight returns promptly with an
// error wrapping ErrClosed, as do later calls. The server stays up: it
// belongs to whoever serves it (torchrun's agent).
func (s *C10dStore) Close() error {
	s.cancelClose()
	s.mu.Lock()
	s.dropConn()
	s.mu.Unlock()
	return nil
}
