// Package memlink is an in-process transport.Link over Go channels, used by
// tests to run algorithms with many ranks in one process.
package memlink

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/goccl/goccl/transport"
)

type msg struct {
	h    transport.Header
	data []byte
}

type pipe struct {
	ch     chan msg
	closed chan struct{}
	once   sync.Once
	lost   int // set before closed is closed: the rank the closer lost, or NoLostRank
	closer int // set before closed is closed: the rank that closed
}

func newPipe(depth int) *pipe {
	return &pipe{ch: make(chan msg, depth), closed: make(chan struct{}), lost: transport.NoLostRank}
}

func (p *pipe) close(closer, lost int) {
	p.once.Do(func() {
		p.lost, p.closer = lost, closer
		close(p.closed)
	})
}

// Link is one end of an in-memory connection.
type Link struct {
	counters   transport.Counters
	self, peer int
	out, in    *pipe
	inline     bool // TrySend sends when the pipe has room
	direct     bool // PeerReadable: ReadPeer reads the peer's exposed buffers
	peerLink   *Link

	mu      sync.Mutex
	exposed map[uint64][]byte // by Region.Addr
	nextID  uint64
}

// Mesh returns links[i][j], the link of rank i to rank j (nil on the diagonal),
// for n ranks. depth is how many messages a direction buffers before Send blocks.
func Mesh(n, depth int) [][]transport.Link { return mesh(n, depth, false, false) }

// MeshInline is Mesh whose links' TrySend sends at once when the receiving
// side has room, as the shared-memory and TCP links do, so that the tests
// also exercise the schedules' inline paths.
func MeshInline(n, depth int) [][]transport.Link { return mesh(n, depth, true, false) }

// MeshDirect is MeshInline whose links implement transport.PeerMemory: a
// rank reads the buffers its peer exposed, as over shared memory with Cross
// Memory Attach.
func MeshDirect(n, depth int) [][]transport.Link { return mesh(n, depth, true, true) }

func mesh(n, depth int, inline, direct bool) [][]transport.Link {
	links := make([][]transport.Link, n)
	for i := range links {
		links[i] = make([]transport.Link, n)
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			a, b := newPipe(depth), newPipe(depth)
			x := &Link{self: i, peer: j, out: a, in: b, inline: inline, direct: direct}
			y := &Link{self: j, peer: i, out: b, in: a, inline: inline, direct: direct}
			x.peerLink, y.peerLink = y, x
			links[i][j], links[j][i] = x, y
		}
	}
	return links
}

func (l *Link) Peer() int    { return l.peer }
func (l *Link) Name() string { return "mem" }

// Counters implements transport.Link.
func (l *Link) Counters() *transport.Counters { return &l.counters }

func (l *Link) Send(ctx context.Context, h *transport.Header, buf []byte) error {
	err := l.send(ctx, h, buf)
	if err == nil {
		l.counters.AddSent(len(buf))
	}
	return err
}

func (l *Link) send(ctx context.Context, h *transport.Header, buf []byte) error {
	if err := l.usable(ctx, "send"); err != nil {
		return err
	}
	m := msg{h: *h, data: append([]byte(nil), buf...)}
	select {
	case l.out.ch <- m:
		return nil
	default:
	}
	timeout, stop := deadlineTimer(ctx)
	defer stop()
	select {
	case l.out.ch <- m:
		return nil
	case <-l.out.closed:
		return l.closedErr("send")
	case <-l.in.closed:
		return l.closedErr("send")
	case <-ctx.Done():
		return l.ctxErr(ctx, "send")
	case <-timeout:
		return l.ctxErr(ctx, "send")
	}
}

// TrySend sends only on a MeshInline link whose pipe has room; on a Mesh link
// it never does, so the tests exercise the background senders.
func (l *Link) TrySend(h *transport.Header, buf []byte) (bool, error) {
	ok, err := l.trySend(h, buf)
	if ok && err == nil {
		l.counters.AddSent(len(buf))
	}
	return ok, err
}

func (l *Link) trySend(h *transport.Header, buf []byte) (bool, error) {
	if err := l.usable(context.Background(), "send"); err != nil {
		return false, err
	}
	if !l.inline {
		return false, nil
	}
	select {
	case l.out.ch <- msg{h: *h, data: append([]byte(nil), buf...)}:
		return true, nil
	default:
		return false, nil
	}
}

func (l *Link) Recv(ctx context.Context, want *transport.Header, buf []byte, reduce transport.ReduceFunc) error {
	err := l.recv(ctx, want, buf, reduce)
	if err == nil {
		l.counters.AddReceived(len(buf))
	}
	return err
}

func (l *Link) recv(ctx context.Context, want *transport.Header, buf []byte, reduce transport.ReduceFunc) error {
	if err := ctx.Err(); err != nil {
		return l.ctxErr(ctx, "recv")
	}
	var m msg
	// Messages sent before a Close are still delivered, as on real transports.
	select {
	case m = <-l.in.ch:
	default:
		timeout, stop := deadlineTimer(ctx)
		defer stop()
		select {
		case m = <-l.in.ch:
		case <-l.in.closed:
			if !l.drain(&m) {
				return l.closedErr("recv")
			}
		case <-l.out.closed:
			if !l.drain(&m) {
				return l.closedErr("recv")
			}
		case <-ctx.Done():
			return l.ctxErr(ctx, "recv")
		case <-timeout:
			return l.ctxErr(ctx, "recv")
		}
	}
	if err := transport.Check(l.peer, want, &m.h); err != nil {
		l.Close()
		return err
	}
	if want.Arrival != m.h.Arrival { // no write when equal: callers may share want with a Send
		want.Arrival = m.h.Arrival
	}
	if len(m.data) != len(buf) {
		return fmt.Errorf("memlink: got %d bytes, want %d", len(m.data), len(buf))
	}
	if reduce == nil {
		copy(buf, m.data)
		return nil
	}
	// Fold in 64-byte-aligned pieces, as real transports do.
	for off := 0; off < len(buf); off += 4096 {
		end := min(off+4096, len(buf))
		reduce(buf[off:end], m.data[off:end])
	}
	return nil
}

// usable returns the error of a send on a closed link or with a done ctx.
// (A select on a pipe with room and a closed channel could pick either.)
func (l *Link) usable(ctx context.Context, op string) error {
	select {
	case <-l.out.closed:
		return l.closedErr(op)
	case <-l.in.closed:
		return l.closedErr(op)
	default:
	}
	if ctx.Err() != nil {
		return l.ctxErr(ctx, op)
	}
	return nil
}

// deadlineTimer returns a channel that fires at ctx's deadline (nil without
// one): goccl's operation context has a deadline but no Done channel of its
// own, so a link must watch the deadline itself.
func deadlineTimer(ctx context.Context) (<-chan time.Time, func() bool) {
	dl, ok := ctx.Deadline()
	if !ok {
		return nil, func() bool { return false }
	}
	t := time.NewTimer(time.Until(dl))
	return t.C, t.Stop
}

func (l *Link) ctxErr(ctx context.Context, op string) error {
	err := ctx.Err()
	if err == nil { // the deadline timer fired a moment before ctx says so
		err = context.DeadlineExceeded
	}
	return &transport.PeerError{Peer: l.peer, Op: op, Err: err}
}

func (l *Link) Close() error { return l.Abort(transport.NoLostRank) }

// Abort closes the link, telling the peer that rank lost was lost.
func (l *Link) Abort(lost int) error {
	l.out.close(l.self, lost)
	l.in.close(l.self, lost)
	return nil
}

// drain takes a message that was sent before the link closed, if any.
func (l *Link) drain(m *msg) bool {
	select {
	case *m = <-l.in.ch:
		return true
	default:
		return false
	}
}

// closedErr is the error of a call on a closed link: a *LostError when the
// side that closed it lost a rank (other than this one).
func (l *Link) closedErr(op string) error {
	for _, p := range [2]*pipe{l.in, l.out} {
		select {
		case <-p.closed:
			if p.closer == l.peer && p.lost >= 0 && p.lost != l.self {
				return &transport.PeerError{Peer: l.peer, Op: op, Err: &transport.LostError{Rank: p.lost, Via: l.peer}}
			}
		default:
		}
	}
	return &transport.PeerError{Peer: l.peer, Op: op, Err: transport.ErrClosed}
}

var _ transport.PeerMemory = (*Link)(nil)

// PeerReadable reports whether the link was made by MeshDirect.
func (l *Link) PeerReadable() bool { return l.direct }

// Expose records buf under a fresh handle for the peer's ReadPeer. The
// handles of the last 64 exposures stay valid.
func (l *Link) Expose(buf []byte) transport.Region {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.exposed == nil {
		l.exposed = make(map[uint64][]byte)
	}
	l.nextID++
	delete(l.exposed, l.nextID-64)
	l.exposed[l.nextID] = buf
	return transport.Region{Addr: l.nextID, Len: uint64(len(buf))}
}

// ReadPeer copies from a buffer the peer exposed.
func (l *Link) ReadPeer(ctx context.Context, r transport.Region, off int, dst []byte) error {
	err := l.readPeer(ctx, r, off, dst)
	if err == nil {
		l.counters.AddReceived(len(dst))
	}
	return err
}

func (l *Link) readPeer(ctx context.Context, r transport.Region, off int, dst []byte) error {
	buf, err := l.peerRegion(ctx, "read", r, off, len(dst))
	if err == nil {
		copy(dst, buf)
	}
	return err
}

// WritePeer copies into a buffer the peer exposed.
func (l *Link) WritePeer(ctx context.Context, r transport.Region, off int, src []byte) error {
	err := l.writePeer(ctx, r, off, src)
	if err == nil {
		l.counters.AddSent(len(src))
	}
	return err
}

func (l *Link) writePeer(ctx context.Context, r transport.Region, off int, src []byte) error {
	buf, err := l.peerRegion(ctx, "write", r, off, len(src))
	if err == nil {
		copy(buf, src)
	}
	return err
}

// peerRegion returns bytes [off, off+n) of the peer's exposed region r.
func (l *Link) peerRegion(ctx context.Context, what string, r transport.Region, off, n int) ([]byte, error) {
	fail := func(err error) ([]byte, error) { return nil, &transport.PeerError{Peer: l.peer, Op: what, Err: err} }
	if !l.direct {
		return fail(fmt.Errorf("memlink: not a direct link"))
	}
	select {
	case <-l.in.closed:
		return nil, l.closedErr(what)
	case <-l.out.closed:
		return nil, l.closedErr(what)
	default:
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	p := l.peerLink
	p.mu.Lock()
	buf, ok := p.exposed[r.Addr]
	p.mu.Unlock()
	if !ok || uint64(len(buf)) != r.Len {
		return fail(fmt.Errorf("memlink: unknown region %+v", r))
	}
	if off < 0 || off+n > len(buf) {
		return fail(fmt.Errorf("memlink: %s of %d bytes at %d outside a %d-byte region", what, n, off, len(buf)))
	}
	return buf[off : off+n], nil
}
