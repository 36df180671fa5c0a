package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goccl/goccl/transport"
)

const (
	// chunkSize is the striping unit: with several sockets, a payload larger
	// than one chunk is cut into chunks dealt round-robin over the sockets
	// (chunk k on socket k mod nsocks). Smaller payloads use socket 0 only.
	chunkSize = 512 << 10
	// pieceSize is how much is staged before ReduceFunc runs on it; a
	// multiple of 64 so that pieces never split an element.
	pieceSize = 128 << 10
	// trySendLimit is the largest payload TrySend sends: the kernel socket
	// buffer absorbs it without waiting for the peer.
	trySendLimit = 64 << 10
	// readBufSize is the per-socket read-ahead buffer: a small message and
	// its header arrive with one read system call.
	readBufSize = 64 << 10
)

// link is a transport.Link over one or more TCP connections to one peer.
//
// Frame: the encoded transport.Header (40 bytes) then Header.Bytes of payload.
// The header, and the whole payload when it fits in one chunk or there is a
// single socket, go on socket 0. Otherwise chunk k of the payload goes on
// socket k mod nsocks, each socket driven by a persistent send goroutine and
// a persistent receive goroutine fed through channels.
type link struct {
	peer  int
	name  string
	socks []*sock

	closed    atomic.Bool
	closeOnce sync.Once
	done      chan struct{} // closed by Close
	wg        sync.WaitGroup

	send, recv dir

	// Owned by the (single) sender.
	shdr  [transport.HeaderSize]byte
	svec  [2][]byte
	sbufs net.Buffers

	// Owned by the (single) receiver.
	rhdr [transport.HeaderSize]byte
	got  transport.Header
}

type sock struct {
	conn    *net.TCPConn
	br      *bufio.Reader
	staging []byte // chunkSize bytes, for reductions

	idx, stride int // this socket carries chunks idx, idx+stride, ...

	sendJobs   chan []byte
	sendRes    chan error
	sendExited chan struct{}
	recvJobs   chan recvJob
	recvRes    chan error
	recvExited chan struct{}
}

type recvJob struct {
	buf    []byte
	reduce transport.ReduceFunc
}

// dir is the per-direction deadline and cancellation state.
type dir struct {
	read        bool
	deadlineSet bool // the sockets carry a non-zero deadline for this direction
	watching    bool
	fired       bool                 // set by the watcher, read by the owner after stop
	start       chan context.Context // owner -> watcher: watch this ctx
	stop        chan struct{}        // owner -> watcher: the call is over
}

func newLink(peer int, conns []*net.TCPConn) *link {
	n := len(conns)
	l := &link{
		peer:  peer,
		socks: make([]*sock, n),
		done:  make(chan struct{}),
		send:  dir{start: make(chan context.Context, 1), stop: make(chan struct{})},
		recv:  dir{read: true, start: make(chan context.Context, 1), stop: make(chan struct{})},
	}
	if n == 1 {
		l.name = fmt.Sprintf("tcp 1 sock %s", conns[0].RemoteAddr())
	} else {
		l.name = fmt.Sprintf("tcp %d socks %s", n, conns[0].RemoteAddr())
	}
	for i, c := range conns {
		s := &sock{
			conn:    c,
			br:      bufio.NewReaderSize(c, readBufSize),
			staging: make([]byte, chunkSize),
			idx:     i,
			stride:  n,
		}
		l.socks[i] = s
		if n > 1 {
			s.sendJobs = make(chan []byte, 1)
			s.sendRes = make(chan error, 1)
			s.sendExited = make(chan struct{})
			s.recvJobs = make(chan recvJob, 1)
			s.recvRes = make(chan error, 1)
			s.recvExited = make(chan struct{})
			l.wg.Add(2)
			go l.sendWorker(s)
			go l.recvWorker(s)
		}
	}
	l.wg.Add(2)
	go l.watch(&l.send)
	go l.watch(&l.recv)
	return l
}

func (l *link) Peer() int    { return l.peer }
func (l *link) Name() string { return l.name }

// Close closes every socket and waits for the link's goroutines. It is
// idempotent and may run concurrently with a blocked Send or Recv, which then
// fail with transport.ErrClosed.
func (l *link) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		close(l.done)
		for _, s := range l.socks {
			s.conn.Close()
		}
	})
	l.wg.Wait()
	return nil
}

func (l *link) closedErr(op string) error {
	return &transport.PeerError{Peer: l.peer, Op: op, Err: transport.ErrClosed}
}

// Send transmits h and buf; it returns once buf may be reused.
func (l *link) Send(ctx context.Context, h *transport.Header, buf []byte) error {
	if l.closed.Load() {
		return l.closedErr("send")
	}
	if h.Bytes != uint64(len(buf)) {
		return fmt.Errorf("tcp: Send to peer %d: header says %d bytes, buffer has %d", l.peer, h.Bytes, len(buf))
	}
	hasDL, err := l.begin(&l.send, ctx)
	if err != nil {
		return l.fail("send", ctx, hasDL, err)
	}
	h.Encode(l.shdr[:])
	s0 := l.socks[0]
	var n int64
	if len(l.socks) == 1 || len(buf) <= chunkSize {
		// One writev for header and payload.
		l.svec[0], l.svec[1] = l.shdr[:], buf
		l.sbufs = l.svec[:]
		n, err = l.sbufs.WriteTo(s0.conn)
		l.svec[1] = nil
	} else {
		var m int
		m, err = s0.conn.Write(l.shdr[:])
		n = int64(m)
		if err == nil {
			err = l.stripeSend(buf)
		}
	}
	l.end(&l.send)
	if err != nil {
		err = l.fail("send", ctx, hasDL, err)
		if n > 0 || !isCtxErr(err) {
			// The peer saw part of a frame, or the connection broke: the
			// stream is unusable. A call that ctx ended before any byte
			// moved leaves the link usable.
			l.Close()
		}
		return err
	}
	return nil
}

func (l *link) stripeSend(buf []byte) error {
	k := min(len(l.socks), (len(buf)+chunkSize-1)/chunkSize)
	var first error
	for i := 0; i < k; i++ {
		select {
		case l.socks[i].sendJobs <- buf:
		case <-l.done:
			k = i // the workers are stopping; collect the jobs already given
			first = net.ErrClosed
		}
	}
	for i := 0; i < k; i++ {
		s := l.socks[i]
		var err error
		select {
		case err = <-s.sendRes:
		case <-s.sendExited:
			err = net.ErrClosed
		}
		if err != nil && first == nil {
			first = err
			// Unblock the other sockets: the frame is lost anyway.
			l.setDeadline(&l.send, aLongTimeAgo)
			l.send.deadlineSet = true
		}
	}
	return first
}

func (l *link) sendWorker(s *sock) {
	defer l.wg.Done()
	defer close(s.sendExited)
	for {
		select {
		case buf := <-s.sendJobs:
			var err error
			for off := s.idx * chunkSize; off < len(buf); off += s.stride * chunkSize {
				if _, err = s.conn.Write(buf[off:min(off+chunkSize, len(buf))]); err != nil {
					break
				}
			}
			s.sendRes <- err
		case <-l.done:
			return
		}
	}
}

// TrySend sends synchronously when len(buf) <= 64 KiB, which the kernel
// socket buffer absorbs, and otherwise reports false without sending.
func (l *link) TrySend(h *transport.Header, buf []byte) (bool, error) {
	if len(buf) > trySendLimit {
		return false, nil
	}
	if err := l.Send(context.Background(), h, buf); err != nil {
		return false, err
	}
	return true, nil
}

// Recv receives the next message into buf after checking its header against
// want. With several sockets and a reduce function, reduce runs concurrently
// on disjoint pieces of buf.
func (l *link) Recv(ctx context.Context, want *transport.Header, buf []byte, reduce transport.ReduceFunc) error {
	if l.closed.Load() {
		return l.closedErr("recv")
	}
	if want.Bytes != uint64(len(buf)) {
		return fmt.Errorf("tcp: Recv from peer %d: header wants %d bytes, buffer has %d", l.peer, want.Bytes, len(buf))
	}
	hasDL, err := l.begin(&l.recv, ctx)
	if err != nil {
		return l.fail("recv", ctx, hasDL, err)
	}
	s0 := l.socks[0]
	n, err := io.ReadFull(s0.br, l.rhdr[:])
	if err != nil {
		l.end(&l.recv)
		err = l.fail("recv", ctx, hasDL, err)
		if n > 0 || !isCtxErr(err) {
			l.Close()
		}
		return err
	}
	if err := l.got.Decode(l.rhdr[:]); err != nil {
		l.end(&l.recv)
		l.Close()
		return &transport.PeerError{Peer: l.peer, Op: "recv", Err: err}
	}
	if err := transport.Check(l.peer, want, &l.got); err != nil {
		// Close so that the peer fails fast instead of waiting for us.
		l.end(&l.recv)
		l.Close()
		return err
	}
	if len(l.socks) == 1 || len(buf) <= chunkSize {
		err = readPayload(s0, buf, reduce)
	} else {
		err = l.stripeRecv(buf, reduce)
	}
	l.end(&l.recv)
	if err != nil {
		err = l.fail("recv", ctx, hasDL, err)
		l.Close()
		return err
	}
	return nil
}

func (l *link) stripeRecv(buf []byte, reduce transport.ReduceFunc) error {
	k := min(len(l.socks), (len(buf)+chunkSize-1)/chunkSize)
	var first error
	for i := 0; i < k; i++ {
		select {
		case l.socks[i].recvJobs <- recvJob{buf: buf, reduce: reduce}:
		case <-l.done:
			k = i // the workers are stopping; collect the jobs already given
			first = net.ErrClosed
		}
	}
	for i := 0; i < k; i++ {
		s := l.socks[i]
		var err error
		select {
		case err = <-s.recvRes:
		case <-s.recvExited:
			err = net.ErrClosed
		}
		if err != nil && first == nil {
			first = err
			l.setDeadline(&l.recv, aLongTimeAgo)
			l.recv.deadlineSet = true
		}
	}
	return first
}

func (l *link) recvWorker(s *sock) {
	defer l.wg.Done()
	defer close(s.recvExited)
	for {
		select {
		case j := <-s.recvJobs:
			var err error
			for off := s.idx * chunkSize; off < len(j.buf); off += s.stride * chunkSize {
				if err = readPayload(s, j.buf[off:min(off+chunkSize, len(j.buf))], j.reduce); err != nil {
					break
				}
			}
			s.recvRes <- err
		case <-l.done:
			return
		}
	}
}

// readPayload reads len(dst) bytes from s into dst, or, with reduce, folds
// them into dst through the staging buffer in pieces of pieceSize (the last
// piece may be shorter).
func readPayload(s *sock, dst []byte, reduce transport.ReduceFunc) error {
	if reduce == nil {
		_, err := io.ReadFull(s.br, dst)
		return err
	}
	for len(dst) > 0 {
		p := min(len(dst), pieceSize)
		if _, err := io.ReadFull(s.br, s.staging[:p]); err != nil {
			return err
		}
		reduce(dst[:p], s.staging[:p])
		dst = dst[p:]
	}
	return nil
}

// begin applies ctx to direction d: its deadline goes on the sockets, and a
// cancellable ctx is handed to d's watcher, which interrupts blocked I/O when
// ctx is done. No allocation.
func (l *link) begin(d *dir, ctx context.Context) (hasDL bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	dl, hasDL := ctx.Deadline()
	if hasDL {
		l.setDeadline(d, dl)
		d.deadlineSet = true
	} else if d.deadlineSet {
		l.setDeadline(d, time.Time{})
		d.deadlineSet = false
	}
	if ctx.Done() != nil {
		select {
		case d.start <- ctx:
			d.watching = true
		case <-l.done:
			return hasDL, net.ErrClosed
		}
	}
	return hasDL, nil
}

// end stops d's watcher; once it returns the watcher no longer touches the
// sockets' deadlines.
func (l *link) end(d *dir) {
	if !d.watching {
		return
	}
	d.watching = false
	select {
	case d.stop <- struct{}{}:
		if d.fired {
			d.fired = false
			d.deadlineSet = true
		}
	case <-l.done:
	}
}

func (l *link) watch(d *dir) {
	defer l.wg.Done()
	for {
		var ctx context.Context
		select {
		case ctx = <-d.start:
		case <-l.done:
			return
		}
		select {
		case <-ctx.Done():
			l.setDeadline(d, aLongTimeAgo)
			d.fired = true
			select {
			case <-d.stop:
			case <-l.done:
				return
			}
		case <-d.stop:
		case <-l.done:
			return
		}
	}
}

func (l *link) setDeadline(d *dir, t time.Time) {
	for _, s := range l.socks {
		if d.read {
			s.conn.SetReadDeadline(t)
		} else {
			s.conn.SetWriteDeadline(t)
		}
	}
}

// fail turns an I/O error of op into the error the caller sees.
func (l *link) fail(op string, ctx context.Context, hasDL bool, err error) error {
	var e error
	switch {
	case l.closed.Load():
		e = transport.ErrClosed
	case ctx.Err() != nil:
		e = ctx.Err()
	case hasDL && errors.Is(err, os.ErrDeadlineExceeded):
		// The socket deadline (ctx's deadline) fired just before ctx's timer.
		e = context.DeadlineExceeded
	case isClosedErr(err):
		e = fmt.Errorf("%w (%v)", transport.ErrClosed, err)
	default:
		e = err
	}
	return &transport.PeerError{Peer: l.peer, Op: op, Err: e}
}

func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func isClosedErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED)
}
