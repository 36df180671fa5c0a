package rendezvous

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// TCPServer serves a Store over TCP to TCPStore clients (see DialTCP). Rank 0
// of a job runs one. It keeps the data in memory; it holds each Get or Wait
// request until its keys exist, so clients never poll.
//
// The server is defensive: frames are bounded (MaxKeyLen, MaxValueLen) and a
// malformed, oversized or out-of-protocol frame closes that client's
// connection without a reply and without logging; other clients are not
// affected.
//
// A rank's death is taken from its connection closing without a goodbye,
// and only from a connection that proved the job token (WithToken): without
// a token anybody can claim any rank, so such a close is logged and
// otherwise ignored (see the handshake in handshake.go).
type TCPServer struct {
	ln   net.Listener   // Addr's
	lns  []net.Listener // ln and any other address served (see newTCPServer)
	kv   *kv
	done chan struct{}
	opts options

	rejected atomic.Int64 // connections refused by the handshake
	lastLog  atomic.Int64 // unix nanoseconds of the last rejection logged

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	// toldN holds the connections past the handshake and how many losses
	// each has been answered (statusLost, one per lost rank); told gets a
	// token whenever that changes or one leaves.
	toldN map[net.Conn]int
	told  chan struct{}
	// toldRank is how many losses each rank has been told, so that a
	// client that reconnects (after an abandoned call) is not told again.
	toldRank map[int]int
	wg       sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// NewTCPServer listens on addr ("127.0.0.1:0", ":29500", ...) and serves in
// background goroutines until Close. WithToken makes it require the job
// token of every client; WithLog gives it a logger for refused connections;
// WithGeneration makes it hold that generation from the start.
func NewTCPServer(addr string, opts ...Option) (*TCPServer, error) {
	return newTCPServer([]string{addr}, opts...)
}

// newTCPServer is NewTCPServer listening on every address of addrs (at
// least one), the first being Addr's.
func newTCPServer(addrs []string, opts ...Option) (*TCPServer, error) {
	var lns []net.Listener
	for _, addr := range addrs {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	s := &TCPServer{
		ln:       lns[0],
		lns:      lns,
		kv:       newKV(),
		done:     make(chan struct{}),
		opts:     makeOptions(opts),
		conns:    make(map[net.Conn]struct{}),
		toldN:    make(map[net.Conn]int),
		toldRank: make(map[int]int),
		told:     make(chan struct{}, 1),
	}
	for s.opts.instance == 0 {
		s.opts.instance = rand.Uint32()
	}
	if g := s.opts.generation; g > 0 && g <= math.MaxInt64 {
		// Before any client can ask (Connect's checkGeneration), as the
		// decimal counter that Add reads.
		s.kv.set(generationKey, []byte(strconv.FormatUint(g, 10)))
	}
	for _, ln := range lns {
		s.wg.Add(1)
		go s.acceptLoop(ln)
	}
	return s, nil
}

// Addr returns the address the server listens on, as host:port (with the
// actual port when addr asked for port 0).
func (s *TCPServer) Addr() string { return s.ln.Addr().String() }

// Close stops the listener, closes every client connection (their pending
// calls fail) and waits for the server's goroutines to finish. Calling it
// again returns the first call's result.
func (s *TCPServer) Close() error {
	s.closeOnce.Do(func() {
		close(s.done)
		for _, ln := range s.lns {
			s.closeErr = errors.Join(s.closeErr, ln.Close())
		}
		s.mu.Lock()
		s.closed = true
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s.closeErr
}

func (s *TCPServer) acceptLoop(ln net.Listener) {
	defer s.wg.Done()
	bo := backoff{cur: 5 * time.Millisecond, max: time.Second}
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient (e.g. out of file descriptors): wait and retry, as
			// net/http does.
			t := time.NewTimer(bo.next())
			select {
			case <-t.C:
			case <-s.done:
				t.Stop()
				return
			}
			continue
		}
		bo.cur = 5 * time.Millisecond
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// serveConn runs one client connection. A reader goroutine decodes frames into
// reqs; this goroutine executes them one at a time and writes the replies. A
// client has at most one request outstanding: a request that arrives while a
// Get or Wait is still held is a protocol error and closes the connection, as
// does any read error (the client went away: its held request is dropped).
func (s *TCPServer) serveConn(c net.Conn) {
	br := bufio.NewReader(c)
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	rank, err := serverHandshake(c, br, &s.opts)
	if err != nil {
		select {
		case <-s.done: // Close cut the handshake short: nothing to report
		default:
			s.reject(c, err)
		}
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.wg.Done()
		return
	}
	c.SetDeadline(time.Time{})
	s.mu.Lock()
	told := 0 // losses this connection has been answered
	if rank >= 0 {
		told = s.toldRank[rank]
	}
	s.toldN[c] = told
	s.mu.Unlock()
	reqs := make(chan request)
	gone := make(chan struct{}) // closed when the reader stops
	quit := make(chan struct{}) // closed when this goroutine stops
	var bye atomic.Bool         // the client said goodbye before closing
	defer func() {
		close(quit)
		c.Close()
		<-gone // the reader has returned: c is closed, so its read failed
		select {
		case <-s.done:
		default:
			if rank >= 0 && !bye.Load() {
				s.rankGone(c, rank)
			}
		}
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.forget(c)
		s.wg.Done()
	}()
	go func() {
		defer close(gone)
		for {
			req, err := readRequest(br)
			if err != nil {
				return // EOF, network error or malformed frame: drop the client
			}
			if req.op == opBye {
				bye.Store(true)
				return
			}
			select {
			case reqs <- req:
			case <-quit:
				return
			}
		}
	}()
	for {
		var req request
		select {
		case req = <-reqs:
		case <-gone:
			return
		case <-s.done:
			return
		}
		status, payload, ok := s.handle(req, reqs, gone, told)
		if !ok {
			return
		}
		if _, err := (&net.Buffers{responseHeader(status, len(payload)), payload}).WriteTo(c); err != nil {
			return
		}
		if status == statusLost {
			told++
			s.markTold(c, rank, told)
		}
	}
}

// rankGone handles the connection c of rank closing without a goodbye. Only
// a connection that proved the job token can report a death; without a
// token the rank in the hello is a mere claim (anybody who can reach the port
// can make it), so the close is logged and the rank may still connect.
func (s *TCPServer) rankGone(c net.Conn, rank int) {
	if len(s.opts.token) == 0 {
		s.logLimited("rendezvous store: a connection from %s that said it was rank %d closed without a goodbye; "+
			"without a job token that proves nothing, so rank %d is not taken for dead", c.RemoteAddr(), rank, rank)
		return
	}
	s.kv.markLost(rank, "its connection to the store closed without a goodbye (the process died?)")
}

// markTold records that c, of rank (-1: unknown), has been answered n
// losses (statusLost).
func (s *TCPServer) markTold(c net.Conn, rank, n int) {
	s.mu.Lock()
	s.toldN[c] = n
	if rank >= 0 {
		s.toldRank[rank] = n
	}
	s.mu.Unlock()
	s.signalTold()
}

// forget drops the closed connection c from the ones Linger waits for.
func (s *TCPServer) forget(c net.Conn) {
	s.mu.Lock()
	delete(s.toldN, c)
	s.mu.Unlock()
	s.signalTold()
}

func (s *TCPServer) signalTold() {
	select {
	case s.told <- struct{}{}:
	default:
	}
}

// lingerTimeout bounds how long a serving rank keeps its store up, after a
// rank's loss, for clients that have not yet been told of it.
var lingerTimeout = 2 * time.Second

// Linger returns at once when the server has seen no rank die. Otherwise it
// keeps serving until every client connection has been answered with every
// loss (RankLostError, once per lost rank) or has closed, or until ctx ends. The serving rank's
// store (Connect) calls it before Close, since that rank fails too when
// another dies, so that the other ranks learn which rank died instead of
// finding the store gone (and blaming the serving rank).
func (s *TCPServer) Linger(ctx context.Context) {
	for {
		losses := s.kv.numLosses()
		if losses == 0 {
			return
		}
		s.mu.Lock()
		n := 0
		for _, t := range s.toldN {
			if t < losses {
				n++
			}
		}
		s.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-s.told:
		case <-ctx.Done():
			return
		case <-s.done:
			return
		}
	}
}

// handle executes req. ok is false when the connection must be closed
// instead of answered.
// told is how many losses the connection has been answered: a Get or Wait
// that has to wait fails with the next loss it has not been told of, so
// each connection learns of each lost rank once, and waits again after.
func (s *TCPServer) handle(req request, reqs <-chan request, gone <-chan struct{}, told int) (status byte, payload []byte, ok bool) {
	switch req.op {
	case opSet:
		s.kv.set(req.keys[0], req.value)
		return statusOK, nil, true
	case opCreate:
		return statusOK, s.kv.create(req.keys[0], req.value), true
	case opAdd:
		n, err := s.kv.add(req.keys[0], req.delta)
		if err != nil {
			return statusErr, errorPayload(err), true
		}
		return statusOK, binary.BigEndian.AppendUint64(nil, uint64(n)), true
	case opGet, opWait:
		var last []byte
		for _, key := range req.keys {
			for {
				v, found, set := s.kv.lookup(key)
				if found {
					last = v
					break
				}
				l, untold, next := s.kv.lossAfter(told)
				if untold {
					return statusLost, lostPayload(l.rank, l.why), true
				}
				select {
				case <-next:
				case <-set:
				case <-gone: // client went away (or sent garbage)
					return 0, nil, false
				case <-reqs: // second request while one is held
					return 0, nil, false
				case <-s.done:
					return 0, nil, false
				}
			}
		}
		if req.op == opGet {
			return statusOK, last, true
		}
		return statusOK, nil, true
	}
	return 0, nil, false // unreachable: decodeRequest accepts only known ops
}

// reject counts a connection refused by the handshake and logs it (at most
// once a second, with the count of refusals since).
func (s *TCPServer) reject(c net.Conn, err error) {
	n := s.rejected.Add(1)
	s.logLimited("rendezvous store: refused a connection from %s: %v (%d refused so far)", c.RemoteAddr(), err, n)
}

// logLimited logs through WithLog's logger, at most once a second.
func (s *TCPServer) logLimited(format string, args ...any) {
	if s.opts.logf == nil {
		return
	}
	now := time.Now().UnixNano()
	last := s.lastLog.Load()
	if now-last < int64(time.Second) || !s.lastLog.CompareAndSwap(last, now) {
		return
	}
	s.opts.logf(format, args...)
}

// Clients reports how many client connections are open (those in their
// handshake included).
func (s *TCPServer) Clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Rejected reports how many connections the handshake refused.
func (s *TCPServer) Rejected() int64 { return s.rejected.Load() }
