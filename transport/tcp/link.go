package tcp

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
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
	// than stripeMin is cut into chunks dealt round-robin over the sockets
	// (chunk k on socket k mod nsocks). Smaller payloads use socket 0 only.
	chunkSize = 512 << 10
	// stripeMin is the largest payload that goes on socket 0 alone: below
	// it the hand-offs to the per-socket goroutines cost more than their
	// parallelism brings (with 512 KiB, 2 sockets did 0.7x of 1 socket on a
	// 4 MiB AllReduce over loopback).
	stripeMin = 2 << 20
	// pieceSize is how much is staged before ReduceFunc runs on it; a
	// multiple of 64 so that pieces never split an element.
	pieceSize = 128 << 10
	// trySendLimit is the largest payload TrySend always sends: the kernel
	// socket buffer absorbs it without waiting for the peer.
	trySendLimit = 64 << 10
	// trySendMax is the largest payload TrySend sends when the send buffers
	// have room for it now (see sendRoom). Sending inline saves the
	// collective a hand-off to its background sender per message: 1.3-1.7x
	// the AllReduce bandwidth at 256 KiB-4 MiB over loopback.
	trySendMax = 4 << 20
	// readBufSize is the per-socket read-ahead buffer: a small message and
	// its header arrive with one read system call.
	readBufSize = 64 << 10
)

// link is a transport.Link over TCP connections to one peer.
//
// Every connection carries data one way only: the link has nsocks
// connections on which it sends (tx) and nsocks on which it receives (rx).
// A connection used both ways makes the sending and the receiving goroutine
// take turns on the socket lock, which the kernel holds while it copies the
// data in or out: on loopback that costs 10-40% of the bandwidth of a
// simultaneous exchange of 1-64 MiB (BenchmarkExchange), up to half with
// plain blocking system calls.
//
// Frame: the encoded transport.Header (40 bytes) then Header.Bytes of payload.
// With checksums (WithChecksum) the payload is cut into chunks of chunkSize
// bytes (the last may be shorter), each followed by its CRC32C (Castagnoli,
// 4 bytes little-endian) on the socket that carries it.
// The header, and the whole payload when it is at most stripeMin bytes or
// there is a single socket per direction, go on tx socket 0. Otherwise chunk
// k of the payload goes on tx socket k mod nsocks, each socket driven by a
// persistent send goroutine (receive goroutine on the rx side) fed through
// channels, or written by the caller of TrySend.
type link struct {
	counters transport.Counters
	peer     int
	self     int
	name     string
	tx, rx   []*sock
	crc      bool // a CRC32C follows every chunk

	stall struct { // PathStall's, reused so that polling allocates nothing
		mu    sync.Mutex
		fn    func(fd uintptr)
		worst time.Duration
		ti    tcpInfo
	}

	closed    atomic.Bool
	closeOnce sync.Once
	byeOnce   sync.Once
	byeErr    error                 // brokenErr's verdict
	verdict   atomic.Pointer[error] // &byeErr once decided
	failed    atomic.Pointer[error] // why this side closed the link after a failed call (closeAfter)
	marked    atomic.Int64          // MarkLost's rank + 1, 0 if none
	done      chan struct{}         // closed by Close
	wg        sync.WaitGroup

	send, recv dir

	// Owned by the (single) sender.
	shdr [transport.HeaderSize]byte

	// Owned by the (single) receiver.
	rhdr [transport.HeaderSize]byte
	got  transport.Header
}

// sock is one connection of a link, in the link's tx or rx set.
type sock struct {
	conn    stream
	br      *bufio.Reader // rx only
	crcBuf  [4]byte       // the checksum being sent or received
	staging []byte        // rx only: pieceSize bytes, for reductions

	idx, stride int // this socket carries chunks idx, idx+stride, ...

	// Worker feed, when nsocks > 1: payloads to send (tx) or receive (rx).
	jobs   chan stripeJob
	res    chan error
	exited chan struct{}
}

// stripeJob is a socket's share of a striped payload: its chunks of buf, to
// write (tx) or to read, copied or folded in with reduce (rx).
type stripeJob struct {
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

// newLink builds the link to peer over tx (this rank sends on them) and rx
// (it receives on them), len(tx) == len(rx) >= 1.
func newLink(self, peer int, tx, rx []net.Conn, checksum bool) *link {
	n := len(tx)
	l := &link{
		self: self,
		peer: peer,
		crc:  checksum,
		tx:   make([]*sock, n),
		rx:   make([]*sock, n),
		done: make(chan struct{}),
		send: dir{start: make(chan context.Context, 1), stop: make(chan struct{})},
		recv: dir{read: true, start: make(chan context.Context, 1), stop: make(chan struct{})},
	}
	if n == 1 {
		l.name = fmt.Sprintf("tcp 1 sock each way %s", tx[0].RemoteAddr())
	} else {
		l.name = fmt.Sprintf("tcp %d socks each way %s", n, tx[0].RemoteAddr())
	}
	if _, ok := tx[0].(*tls.Conn); ok {
		l.name += " tls"
	}
	if checksum {
		l.name += " crc32c"
	}
	for i := range n {
		t := &sock{conn: newStream(tx[i]), idx: i, stride: n}
		rs := newStream(rx[i])
		r := &sock{
			conn:    rs,
			br:      bufio.NewReaderSize(rs, readBufSize),
			staging: make([]byte, pieceSize),
			idx:     i,
			stride:  n,
		}
		l.tx[i], l.rx[i] = t, r
		if n > 1 {
			for _, s := range []*sock{t, r} {
				s.jobs = make(chan stripeJob, 1)
				s.res = make(chan error, 1)
				s.exited = make(chan struct{})
			}
			l.wg.Add(2)
			go l.stripeWorker(t, &l.send)
			go l.stripeWorker(r, &l.recv)
		}
	}
	l.wg.Add(2)
	go l.watch(&l.send)
	go l.watch(&l.recv)
	return l
}

func (l *link) Peer() int    { return l.peer }
func (l *link) Name() string { return l.name }

// PathStall is how long the longest-waiting of the link's sending
// connections has gone without an acknowledgement of data it sent (0 when
// none waits): on a cut path it grows from the cut on.
func (l *link) PathStall() time.Duration {
	l.stall.mu.Lock()
	defer l.stall.mu.Unlock()
	if l.stall.fn == nil {
		l.stall.fn = func(fd uintptr) { l.stall.worst = max(l.stall.worst, pathStall(int(fd), &l.stall.ti)) }
	}
	l.stall.worst = 0
	for _, s := range l.tx {
		s.conn.control(l.stall.fn)
	}
	return l.stall.worst
}

// Counters implements transport.Link.
func (l *link) Counters() *transport.Counters { return &l.counters }

// Close closes every socket and waits for the link's goroutines. It is
// idempotent and may run concurrently with a blocked Send or Recv, which then
// fail with transport.ErrClosed.
func (l *link) Close() error { return l.Abort(transport.NoLostRank) }

// goodbye is what a closing side writes on the reverse direction of the
// connections it receives on (which carry no data otherwise) before closing
// them, so that the peer tells a deliberate close from a dead process:
//
//	0 [8] magic "GOCCLBYE"
//	8 i32 the rank the closing side lost, or -1
//	12 [4] zero
const (
	goodbyeMagic = "GOCCLBYE"
	goodbyeSize  = 16
	// goodbyeWait bounds how long a side whose connection broke waits for
	// the peer's goodbye before it calls the peer lost. It is spent only
	// when the goodbye is late: a peer whose process ended closes this
	// connection too, which ends the wait at once. 2 s covers a goodbye
	// dropped in a full queue and retransmitted (RTO >= 200 ms, behind the
	// queue): at 250 ms a relayed loss was once reported as the relay's.
	goodbyeWait = 2 * time.Second
)

// Abort is Close, telling the peer that this side lost rank lost (see
// transport.Link).
func (l *link) Abort(lost int) error {
	if lost == transport.NoLostRank {
		if m := l.marked.Load(); m != 0 {
			lost = int(m - 1)
		}
	}
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		losses.unwatch(l) // before the descriptors close
		var b [goodbyeSize]byte
		copy(b[:8], goodbyeMagic)
		binary.LittleEndian.PutUint32(b[8:], uint32(int32(lost)))
		dl := time.Now().Add(50 * time.Millisecond)
		for _, s := range l.rx {
			s.conn.SetWriteDeadline(dl)
			s.conn.Write(b[:]) // best effort: the peer may be gone
		}
		close(l.done)
		for i := range l.tx {
			l.tx[i].conn.Close()
			l.rx[i].conn.Close()
		}
	})
	l.wg.Wait()
	return nil
}

// MarkLost implements transport.LossMarker.
func (l *link) MarkLost(lost int) { l.marked.CompareAndSwap(0, int64(lost)+1) }

// closedErr is the error of a call on a closed link: the verdict on the peer
// if a broken connection closed it (brokenErr), else ErrClosed.
func (l *link) closedErr(op string) error {
	return &transport.PeerError{Peer: l.peer, Op: op, Err: l.closedCause()}
}

func (l *link) closedCause() error {
	if v := l.verdict.Load(); v != nil {
		return *v
	}
	if v := l.failed.Load(); v != nil {
		return *v
	}
	return transport.ErrClosed
}

// closeAfter closes the link because a call on it failed with err (a
// deadline, a broken stream): calls in the other direction then report err
// instead of a bare ErrClosed.
func (l *link) closeAfter(err error) {
	cause := fmt.Errorf("%w after an earlier failure: %w", transport.ErrClosed, err)
	l.failed.CompareAndSwap(nil, &cause)
	l.Close()
}

// brokenErr explains a connection of the link that broke (EOF, reset) while
// this side had not closed it: the peer's goodbye, read from the reverse
// direction of this side's sending connection, says whether the peer closed
// the link on purpose (and which rank it lost, if any); no goodbye means the
// peer's process or the path to it is gone. Decided once per link.
func (l *link) brokenErr(cause error) error {
	l.byeOnce.Do(func() {
		c := l.tx[0].conn
		c.SetReadDeadline(time.Now().Add(goodbyeWait))
		var b [goodbyeSize]byte
		_, err := io.ReadFull(c, b[:])
		switch {
		case err == nil && string(b[:8]) == goodbyeMagic:
			lost := int(int32(binary.LittleEndian.Uint32(b[8:])))
			if lost >= 0 && lost != l.self {
				l.byeErr = &transport.LostError{Rank: lost, Via: l.peer}
			} else {
				l.byeErr = fmt.Errorf("%w by the peer", transport.ErrClosed)
			}
		case errors.Is(err, net.ErrClosed) && l.closed.Load():
			// This side closed the link while it waited (a rails link
			// closes its other rails when one fails): the peer's goodbye
			// went unread, and a closed link is what the call met.
			l.byeErr = transport.ErrClosed
		default:
			l.byeErr = &transport.LostError{Rank: l.peer, Via: -1, Cause: cause}
		}
		l.verdict.Store(&l.byeErr)
	})
	return l.byeErr
}

// Send transmits h and buf; it returns once buf may be reused.
func (l *link) Send(ctx context.Context, h *transport.Header, buf []byte) error {
	err := l.sendFrame(ctx, h, buf, false)
	if err == nil {
		l.counters.AddSent(len(buf))
	}
	return err
}

// sendFrame is Send; inline writes every socket's chunks of a striped payload
// from the calling goroutine instead of handing them to the send workers
// (TrySend does, when every socket has room for its share).
func (l *link) sendFrame(ctx context.Context, h *transport.Header, buf []byte, inline bool) error {
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
	s0 := l.tx[0]
	var n int64
	switch {
	case l.crc && !l.striped(len(buf)):
		var m int
		if m, err = s0.conn.Write(l.shdr[:]); err == nil {
			err = writeChunks(s0, buf, 0, 1, true)
		}
		n = int64(m)
	case !l.striped(len(buf)):
		// One writev for header and payload.
		n, err = s0.conn.writev2(l.shdr[:], buf)
	default:
		var m int
		m, err = s0.conn.Write(l.shdr[:])
		n = int64(m)
		switch {
		case err != nil:
		case inline:
			for _, s := range l.tx[:min(len(l.tx), (len(buf)+chunkSize-1)/chunkSize)] {
				if err = writeChunks(s, buf, s.idx, s.stride, l.crc); err != nil {
					break
				}
			}
		default:
			err = l.stripe(&l.send, stripeJob{buf: buf})
		}
	}
	l.end(&l.send)
	if err != nil {
		err = l.fail("send", ctx, hasDL, err)
		if n > 0 || !isCtxErr(err) {
			// The peer saw part of a frame, or the connection broke: the
			// stream is unusable. A call that ctx ended before any byte
			// moved leaves the link usable.
			l.closeAfter(err)
		}
		return err
	}
	return nil
}

// stripe hands each socket of direction d its share of the striped payload
// j.buf and waits until all have moved it. On the first failure it
// interrupts the other sockets of d: the frame is lost anyway.
func (l *link) stripe(d *dir, j stripeJob) error {
	socks := l.tx
	if d.read {
		socks = l.rx
	}
	k := min(len(socks), (len(j.buf)+chunkSize-1)/chunkSize)
	var first error
	for i := 0; i < k; i++ {
		select {
		case socks[i].jobs <- j:
		case <-l.done:
			k = i // the workers are stopping; collect the jobs already given
			first = net.ErrClosed
		}
	}
	for i := 0; i < k; i++ {
		s := socks[i]
		var err error
		select {
		case err = <-s.res:
		case <-s.exited:
			err = net.ErrClosed
		}
		if err != nil && first == nil {
			first = err
			l.setDeadline(d, aLongTimeAgo)
			d.deadlineSet = true
		}
	}
	return first
}

// stripeWorker moves socket s's shares of striped payloads in direction d
// until the link closes.
func (l *link) stripeWorker(s *sock, d *dir) {
	defer l.wg.Done()
	defer close(s.exited)
	for {
		select {
		case j := <-s.jobs:
			if d.read {
				s.res <- l.readChunks(s, j.buf, j.reduce, s.idx, s.stride)
			} else {
				s.res <- writeChunks(s, j.buf, s.idx, s.stride, l.crc)
			}
		case <-l.done:
			return
		}
	}
}

// striped reports whether an n-byte payload is cut over several sockets.
func (l *link) striped(n int) bool { return len(l.tx) > 1 && n > stripeMin }

// writeChunks writes chunks first, first+stride, ... of buf on s, each
// followed by its CRC32C when crc is set.
func writeChunks(s *sock, buf []byte, first, stride int, crc bool) error {
	for off := first * chunkSize; off < len(buf); off += stride * chunkSize {
		chunk := buf[off:min(off+chunkSize, len(buf))]
		var err error
		if crc {
			binary.LittleEndian.PutUint32(s.crcBuf[:], crc32.Update(0, castagnoli, chunk))
			_, err = s.conn.writev2(chunk, s.crcBuf[:])
		} else {
			_, err = s.conn.Write(chunk)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// stripeShare is how many bytes of an n-byte payload tx socket i of k
// carries.
func stripeShare(n, i, k int) int {
	if n <= stripeMin || k == 1 {
		if i == 0 {
			return n
		}
		return 0
	}
	share := 0
	for off := i * chunkSize; off < n; off += k * chunkSize {
		share += min(chunkSize, n-off)
	}
	return share
}

// TrySend sends synchronously when len(buf) <= 64 KiB, which the kernel
// socket buffer absorbs, or up to trySendMax when the send buffer of every
// socket has room for its share of the frame now; otherwise it reports false
// without sending.
func (l *link) TrySend(h *transport.Header, buf []byte) (bool, error) {
	if len(buf) > trySendLimit {
		if l.closed.Load() {
			return false, l.closedErr("send")
		}
		if len(buf) > trySendMax {
			return false, nil
		}
		k := len(l.tx)
		for i := range l.tx {
			need := stripeShare(len(buf), i, k)
			if l.crc {
				need += 4 * ((need + chunkSize - 1) / chunkSize)
			}
			if i == 0 {
				need += transport.HeaderSize
			}
			if need > 0 && !l.tx[i].sendRoom(need) {
				return false, nil
			}
		}
	}
	if err := l.sendFrame(context.Background(), h, buf, true); err != nil {
		return false, err
	}
	l.counters.AddSent(len(buf))
	return true, nil
}

// Recv receives the next message into buf after checking its header against
// want. With several sockets and a reduce function, reduce runs concurrently
// on disjoint pieces of buf.
func (l *link) Recv(ctx context.Context, want *transport.Header, buf []byte, reduce transport.ReduceFunc) error {
	err := l.recvFrame(ctx, want, buf, reduce)
	if err == nil {
		l.counters.AddReceived(len(buf))
	}
	return err
}

func (l *link) recvFrame(ctx context.Context, want *transport.Header, buf []byte, reduce transport.ReduceFunc) error {
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
	s0 := l.rx[0]
	n, err := io.ReadFull(s0.br, l.rhdr[:])
	if err != nil {
		l.end(&l.recv)
		err = l.fail("recv", ctx, hasDL, err)
		if n > 0 || !isCtxErr(err) {
			l.closeAfter(err)
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
	if want.Arrival != l.got.Arrival { // no write when equal: callers may share want with a Send
		want.Arrival = l.got.Arrival
	}
	switch {
	case l.crc && !l.striped(len(buf)):
		err = l.readChunks(s0, buf, reduce, 0, 1)
	case !l.striped(len(buf)):
		err = readPayload(s0, buf, reduce)
	default:
		err = l.stripe(&l.recv, stripeJob{buf: buf, reduce: reduce})
	}
	l.end(&l.recv)
	if err != nil {
		err = l.fail("recv", ctx, hasDL, err)
		l.closeAfter(err)
		return err
	}
	return nil
}

// readChunks reads chunks first, first+stride, ... of buf from s (see
// readPayload), checking each one's CRC32C when the link has checksums.
func (l *link) readChunks(s *sock, buf []byte, reduce transport.ReduceFunc, first, stride int) error {
	for off := first * chunkSize; off < len(buf); off += stride * chunkSize {
		end := min(off+chunkSize, len(buf))
		if !l.crc {
			if err := readPayload(s, buf[off:end], reduce); err != nil {
				return err
			}
			continue
		}
		sum, err := readPayloadCRC(s, buf[off:end], reduce)
		if err != nil {
			return err
		}
		if _, err := io.ReadFull(s.br, s.crcBuf[:]); err != nil {
			return err
		}
		if sent := binary.LittleEndian.Uint32(s.crcBuf[:]); sent != sum {
			return fmt.Errorf("%w: bytes %d..%d of a %d-byte message from peer %d have CRC32C %#08x, the peer sent %#08x",
				transport.ErrCorrupt, off, end, len(buf), l.peer, sum, sent)
		}
	}
	return nil
}

// readPayloadCRC is readPayload, also returning the CRC32C of the bytes read
// (before any reduction).
func readPayloadCRC(s *sock, dst []byte, reduce transport.ReduceFunc) (uint32, error) {
	if reduce == nil {
		if _, err := io.ReadFull(s.br, dst); err != nil {
			return 0, err
		}
		return crc32.Update(0, castagnoli, dst), nil
	}
	var sum uint32
	for len(dst) > 0 {
		p := min(len(dst), pieceSize)
		if _, err := io.ReadFull(s.br, s.staging[:p]); err != nil {
			return 0, err
		}
		sum = crc32.Update(sum, castagnoli, s.staging[:p])
		reduce(dst[:p], s.staging[:p])
		dst = dst[p:]
	}
	return sum, nil
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
	if d.read {
		for _, s := range l.rx {
			s.conn.SetReadDeadline(t)
		}
	} else {
		for _, s := range l.tx {
			s.conn.SetWriteDeadline(t)
		}
	}
}

// fail turns an I/O error of op into the error the caller sees.
func (l *link) fail(op string, ctx context.Context, hasDL bool, err error) error {
	var e error
	switch {
	case l.closed.Load():
		e = l.closedCause()
	case ctx.Err() != nil:
		e = ctx.Err()
	case hasDL && errors.Is(err, os.ErrDeadlineExceeded):
		// The socket deadline (ctx's deadline) fired just before ctx's timer.
		e = context.DeadlineExceeded
	case isClosedErr(err):
		e = l.brokenErr(err)
	case isUnreachableErr(err):
		// The kernel gave up on the peer (setDeadPeerTimeout): its host,
		// or the path to it, is gone.
		cause := unreachable(err)
		l.verdict.CompareAndSwap(nil, &cause)
		e = &transport.LostError{Rank: l.peer, Via: -1, Cause: cause}
	default:
		e = err
	}
	return &transport.PeerError{Peer: l.peer, Op: op, Err: e}
}

func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// isUnreachableErr reports whether err says the peer's host stopped
// answering: the connection timed out, or the route to it is gone.
func isUnreachableErr(err error) bool {
	return errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}

func isClosedErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED)
}
