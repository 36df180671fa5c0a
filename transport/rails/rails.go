// Package rails makes one link to a peer out of one link per rail: a
// multi-rail host's NICs, each on its own switch and subnet (a
// rail-optimized cluster; internal/bootstrap makes a rail of each
// interface GOCCL_SOCKET_IFNAME names). Rail i of
// this rank is linked to rail i of the peer (NCCL_CROSS_NIC=0: traffic
// stays on its rail's switch); both sides must give the rails in the same
// order.
//
// Striping. A message of at least StripeMin bytes is cut into one part per
// rail, of equal size rounded up to 64 bytes (transport.ReduceFunc's rule;
// the last part takes the rest), and part i goes over rail i, all at once:
// the rails' bandwidths add up. A smaller message goes whole over one
// rail, the next rail for each such message (message k on rail k mod
// rails, counted alike on both sides), so that pipelined chunks spread too.
// Each part is a message of its rail's link with the whole message's
// header but its own Bytes: a disagreement on a message's size is reported
// by a rail as one on its part's size.
//
// Failover (Options.Control and Options.Dial given). Each rail has a
// control link too, over which both sides ping every stallPoll; a rail
// whose control link goes Options.StallAfter without an acknowledgement
// (a cut path) is down, and both sides warn, naming the rail and the peer.
// The traffic striping gives rail i, its lane, then moves: the lower rank
// tells the peer, over a working rail, that lane i moves to rail j; both
// dial a new link for it over rail j (Options.Dial), abort the old one,
// tell each other how many of the lane's segments they received whole,
// and resend what the other lacks. Once the rail has been acknowledging
// again for StallAfter, the lane moves back. For the resends each lane
// sends its parts in segments of at most SegMax bytes, numbered alike at
// both ends, keeps a copy of each unstriped message until the peer
// acknowledges it, and a striped message's Send returns only once the peer
// acknowledged every part (the caller's buffer is the copy). A receive
// that folds saves each segment's bytes first, so that a segment cut
// half-folded is received again from scratch.
//
// A rail whose link fails (an error, not a stall) fails the link: the
// other rails are closed, so that no call waits on a part that will never
// come, and the error is the failed rail's (FailedRail says which); with
// failover a call whose link was closed under it first waits a while for
// a move that explains it. Without failover a stalled rail is only
// reported: its parts wait for its path.
package rails

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/transport"
)

// StripeMin is the smallest message striped over the rails.
const StripeMin = 1 << 20

// Options configure a Link.
type Options struct {
	// Log receives the warnings about stalled rails and the moves
	// (nil: none).
	Log func(level slog.Level, msg string)
	// StallAfter is how long a rail goes unacknowledged before it is
	// reported stalled (DefaultStallAfter when 0).
	StallAfter time.Duration
	// Unit names the links in the Link's name ("rails" when ""; the
	// bootstrap stripes over several queue pairs to one peer too).
	Unit string

	// Failover, when Control and Dial are set (and there are several
	// rails): Self is this rank; Control holds a link per rail, to the
	// same peer, for the rails link's control messages only (the Link
	// owns them); Dial makes a new link for lane's traffic over rail,
	// the gen-th move of that lane. Both sides call Dial with the same
	// lane, rail and gen at about the same time.
	Self    int
	Control []transport.Link
	Dial    func(ctx context.Context, lane, rail, gen int) (transport.Link, error)
}

// DefaultStallAfter is Options.StallAfter's default: above TCP's minimum
// retransmission timeout (200 ms), so that one lost packet is not a cut.
const DefaultStallAfter = 500 * time.Millisecond

// stallPoll is how often the link looks at its rails' stalls (and, with
// failover, pings over each).
const stallPoll = 100 * time.Millisecond

// staller is a rail's link that can tell how long its path has gone
// without acknowledging data (tcp's links).
type staller interface{ PathStall() time.Duration }

// Rail is one rail's link to the peer and the local interface it runs on.
type Rail struct {
	Link  transport.Link
	Iface string // the local interface (for logs)
}

// Link is a transport.Link over one link per rail; see the package doc.
type Link struct {
	self, peer int
	rails      []Rail
	lanes      []*lane
	o          Options
	fo         bool       // failover: o.Control and o.Dial given, several rails
	ctl        []*control // with failover, one per rail
	name       string
	counters   transport.Counters

	sent, received uint64 // unstriped messages sent and received (the next one's lane)
	send, recv     []*worker
	closeOnce      sync.Once
	done           chan struct{}         // closed by Close and Abort: the workers exit
	failOnce       sync.Once             //
	failc          chan struct{}         // closed when a rail's failure broke the link
	failed         atomic.Int32          // 1 + the rail that failed first, 0 if none
	stalled        atomic.Int32          // rails reported stalled (watch)
	moves          atomic.Int32          // lane moves done
	broken         atomic.Pointer[error] // why the rails were closed after a failure

	wake   chan struct{}    // pokes the control loop (cap 1)
	ctlBuf [ctrlBytes]byte  // the control loop's message
	ctlH   transport.Header // and its header
	ctlCtx deadline         // the control loop's context
	timer  *time.Timer      // Send's, waiting for acknowledgements
}

// New returns the link over rails (at least one, all to one peer). It
// owns the rails' links, and the control links, from then on.
func New(rails []Rail, o Options) (*Link, error) {
	if len(rails) == 0 {
		return nil, errors.New("rails: no rails")
	}
	l := &Link{self: o.Self, peer: rails[0].Link.Peer(), rails: rails, o: o, done: make(chan struct{}), failc: make(chan struct{}), wake: make(chan struct{}, 1)}
	var parts []string
	for i, r := range rails {
		if p := r.Link.Peer(); p != l.peer {
			return nil, fmt.Errorf("rails: rail %d (%s) links to rank %d, rail 0 (%s) to rank %d", i, r.Iface, p, rails[0].Iface, l.peer)
		}
		parts = append(parts, r.Iface+" "+r.Link.Name())
	}
	l.fo = len(rails) > 1 && o.Control != nil && o.Dial != nil
	if l.fo {
		if len(o.Control) != len(rails) {
			return nil, fmt.Errorf("rails: %d control links for %d rails", len(o.Control), len(rails))
		}
		for i, c := range o.Control {
			if c.Peer() != l.peer {
				return nil, fmt.Errorf("rails: rail %d (%s)'s control link links to rank %d, not %d", i, rails[i].Iface, c.Peer(), l.peer)
			}
			l.ctl = append(l.ctl, &control{link: c})
		}
	}
	unit := o.Unit
	if unit == "" {
		unit = "rails"
	}
	l.name = fmt.Sprintf("%d %s [%s]", len(rails), unit, strings.Join(parts, "; "))
	l.timer = time.NewTimer(time.Hour)
	l.timer.Stop()
	if l.o.StallAfter == 0 {
		l.o.StallAfter = DefaultStallAfter
	}
	l.send = make([]*worker, len(rails))
	l.recv = make([]*worker, len(rails))
	for i := range rails {
		l.lanes = append(l.lanes, newLane(l, i, rails[i].Link))
		l.send[i], l.recv[i] = newWorker(l, i, false), newWorker(l, i, true)
	}
	for i := range l.ctl {
		go l.read(i)
	}
	if l.fo || len(rails) > 1 && o.Log != nil {
		go l.loop()
	}
	return l, nil
}

// others names the rails other than i.
func (l *Link) others(i int) string {
	var s []string
	for j, r := range l.rails {
		if j != i {
			s = append(s, r.Iface)
		}
	}
	return strings.Join(s, ", ")
}

// Stalls counts the times a rail was reported stalled.
func (l *Link) Stalls() int { return int(l.stalled.Load()) }

// Moves counts the lane moves done (with failover).
func (l *Link) Moves() int { return int(l.moves.Load()) }

// Home is the rail over which rail i's traffic runs now.
func (l *Link) Home(i int) int {
	ln := l.lanes[i]
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.home
}

// Rails is the link's rails, in order, as New got them.
func (l *Link) Rails() []Rail { return l.rails }

// FailedRail is the rail whose failure failed the link, or -1.
func (l *Link) FailedRail() int { return int(l.failed.Load()) - 1 }

func (l *Link) Peer() int                     { return l.peer }
func (l *Link) Name() string                  { return l.name }
func (l *Link) Counters() *transport.Counters { return &l.counters }

// Close closes every rail.
func (l *Link) Close() error { return l.Abort(transport.NoLostRank) }

// links is every link the Link holds: the rails', the lanes' current ones
// and the control links.
func (l *Link) links() []transport.Link {
	var ls []transport.Link
	for _, r := range l.rails {
		ls = append(ls, r.Link)
	}
	for _, ln := range l.lanes {
		sub, _ := ln.current()
		ls = append(ls, sub)
	}
	for _, c := range l.ctl {
		ls = append(ls, c.link)
	}
	return ls
}

// Abort aborts every rail, telling the peer lost.
func (l *Link) Abort(lost int) error {
	l.closeOnce.Do(func() { close(l.done) })
	var first error
	for _, r := range l.links() {
		if err := r.Abort(lost); err != nil && first == nil {
			first = err
		}
	}
	for _, ln := range l.lanes {
		ln.out.clear()
	}
	return first
}

// MarkLost marks every rail that can be (transport.LossMarker).
func (l *Link) MarkLost(lost int) {
	for _, r := range l.links() {
		if m, ok := r.(transport.LossMarker); ok {
			m.MarkLost(lost)
		}
	}
}

// WatchLoss watches every rail that can be (transport.LossWatcher) and
// calls f once, for the first loss any of them reports; with failover it
// watches the control links, and a loss reported by a rail while another
// is still working is the rail's, not the peer's.
func (l *Link) WatchLoss(f func(error)) {
	var once sync.Once
	watch := func(i int, link transport.Link) {
		if w, ok := link.(transport.LossWatcher); ok {
			w.WatchLoss(func(err error) {
				if l.fo {
					l.ctl[i].dead.Store(true)
					if !l.peerGone() {
						return
					}
				}
				once.Do(func() { f(err) })
			})
		}
	}
	for i, r := range l.rails {
		if l.fo {
			watch(i, l.ctl[i].link)
		} else {
			watch(i, r.Link)
		}
	}
}

// part is the byte range [lo, hi) of an n-byte striped message that rail
// i of k carries.
func part(n, i, k int) (lo, hi int) {
	per := (n/k + 63) &^ 63
	lo, hi = min(i*per, n), min((i+1)*per, n)
	if i == k-1 {
		hi = n
	}
	return lo, hi
}

func (l *Link) striped(n int) bool { return len(l.rails) > 1 && n >= StripeMin }

// startErr is the error of a call on a closed link, or whose ctx is done
// before it starts: it moves nothing and leaves the link as it was.
func (l *Link) startErr(ctx context.Context, op string) error {
	select {
	case <-l.done:
		return &transport.PeerError{Peer: l.peer, Op: op, Err: transport.ErrClosed}
	default:
	}
	if cause := l.broken.Load(); cause != nil {
		return l.brokenErr(op, *cause)
	}
	if err := ctx.Err(); err != nil {
		return &transport.PeerError{Peer: l.peer, Op: op, Err: err}
	}
	return nil
}

// Send sends h and buf: striped, or whole over the next rail. With
// failover a striped message's Send returns once the peer acknowledged
// every part; an unstriped one is copied for a resend until it is.
func (l *Link) Send(ctx context.Context, h *transport.Header, buf []byte) error {
	if err := l.startErr(ctx, "send"); err != nil {
		return err
	}
	if !l.striped(len(buf)) {
		i := int(l.sent % uint64(len(l.rails)))
		if err := l.lanes[i].send(ctx, h, buf, true); err != nil {
			return l.fail(i, err, isCtxErr(err))
		}
		l.sent++
	} else {
		if err := l.stripe(ctx, l.send, h, buf, nil); err != nil {
			return err
		}
		for i, ln := range l.lanes {
			if !l.fo {
				break
			}
			ln.out.mu.Lock()
			n := ln.out.next
			ln.out.mu.Unlock()
			if err := l.waitAck(ctx, ln, n); err != nil {
				return l.fail(i, err, false)
			}
		}
	}
	l.counters.AddSent(len(buf))
	return nil
}

// TrySend sends an unstriped message over its rail if that rail's link
// can take it now; a striped one never goes this way.
func (l *Link) TrySend(h *transport.Header, buf []byte) (bool, error) {
	if err := l.startErr(context.Background(), "send"); err != nil {
		return false, err
	}
	if l.striped(len(buf)) {
		return false, nil
	}
	i := int(l.sent % uint64(len(l.rails)))
	ok, err := l.lanes[i].trySend(h, buf)
	if err != nil {
		return false, l.fail(i, err, false)
	}
	if ok {
		l.sent++
		l.counters.AddSent(len(buf))
	}
	return ok, nil
}

// Recv receives the next message: its parts from every rail, or the whole
// of it from the next rail.
func (l *Link) Recv(ctx context.Context, want *transport.Header, buf []byte, reduce transport.ReduceFunc) error {
	if err := l.startErr(ctx, "recv"); err != nil {
		return err
	}
	if !l.striped(len(buf)) {
		i := int(l.received % uint64(len(l.rails)))
		if err := l.lanes[i].recv(ctx, want, buf, reduce, false); err != nil {
			return l.fail(i, err, isCtxErr(err))
		}
		l.received++
	} else {
		if err := l.stripe(ctx, l.recv, want, buf, reduce); err != nil {
			return err
		}
		want.Arrival = l.recv[0].h.Arrival // every part carries the message's header
	}
	l.counters.AddReceived(len(buf))
	return nil
}

// stripe moves buf's part i over rail i: rail 0's on the calling
// goroutine, the others' on their workers (ws), and waits for all. On a
// failure it closes every rail (no part may wait for one that will not
// come) and returns the first failed rail's error, one that is not the
// closing's where there is one.
func (l *Link) stripe(ctx context.Context, ws []*worker, h *transport.Header, buf []byte, reduce transport.ReduceFunc) error {
	j := job{ctx: ctx, h: h, buf: buf, reduce: reduce, recv: ws[0].recv}
	for _, w := range ws[1:] {
		w.jobs <- j
	}
	first, failed := -1, error(nil)
	if err := ws[0].move(j); err != nil {
		first, failed = 0, l.fail(0, err, false)
	}
	for i, w := range ws[1:] {
		var err error
		select {
		case err = <-w.res:
		case <-l.done:
			err = &transport.PeerError{Peer: l.peer, Op: j.op(), Err: transport.ErrClosed}
		}
		switch {
		case err == nil:
		case first < 0:
			first, failed = i+1, l.fail(i+1, err, false)
		case errors.Is(failed, transport.ErrClosed) && !errors.Is(err, transport.ErrClosed):
			failed = err
		}
	}
	return failed
}

// fail records that rail i failed with err (the first rail to), closes
// the other rails unless keep (a call that ended before moving anything
// leaves the link usable), and returns err.
func (l *Link) fail(i int, err error, keep bool) error {
	if keep {
		return err
	}
	l.broke(i, err)
	for _, r := range l.links() {
		r.Close()
	}
	for _, ln := range l.lanes {
		ln.out.clear()
	}
	return err
}

// broke records that rail i failed with err (the first rail to) and ends
// the waits for acknowledgements.
func (l *Link) broke(i int, err error) {
	if l.failed.CompareAndSwap(0, int32(i)+1) {
		l.broken.Store(&err)
	}
	l.failOnce.Do(func() { close(l.failc) })
}

// brokenErr is the error of a call op on the link after a rail's failure
// (cause) closed it: a lost peer stays lost; anything else is a closed link.
func (l *Link) brokenErr(op string, cause error) error {
	var pe *transport.PeerError
	if errors.Is(cause, transport.ErrPeerLost) && errors.As(cause, &pe) {
		return &transport.PeerError{Peer: l.peer, Op: op, Err: pe.Err}
	}
	return &transport.PeerError{Peer: l.peer, Op: op, Err: fmt.Errorf("%w (rail %s failed: %v)", transport.ErrClosed, l.rails[l.FailedRail()].Iface, cause)}
}

func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// job is a striped message, of which a worker's rail moves its part.
type job struct {
	ctx    context.Context
	h      *transport.Header
	buf    []byte
	reduce transport.ReduceFunc
	recv   bool
}

func (j *job) op() string {
	if j.recv {
		return "recv"
	}
	return "send"
}

// worker moves rail i's parts of striped messages: sends them, or receives
// them when recv. Rail 0's runs on the caller's goroutine; the others' have
// a goroutine each, fed through jobs.
type worker struct {
	l    *Link
	i    int
	recv bool
	jobs chan job
	res  chan error
	h    transport.Header // the part's header (owned by the running call)
}

func newWorker(l *Link, i int, recv bool) *worker {
	w := &worker{l: l, i: i, recv: recv}
	if i > 0 {
		w.jobs, w.res = make(chan job, 1), make(chan error, 1)
		go func() {
			for {
				select {
				case j := <-w.jobs:
					w.res <- w.move(j)
				case <-l.done:
					return
				}
			}
		}()
	}
	return w
}

// move moves rail w.i's part of j.
func (w *worker) move(j job) error {
	lo, hi := part(len(j.buf), w.i, len(w.l.rails))
	w.h = *j.h
	w.h.Bytes = uint64(hi - lo)
	ln := w.l.lanes[w.i]
	if w.recv {
		return ln.recv(j.ctx, &w.h, j.buf[lo:hi], j.reduce, true)
	}
	return ln.send(j.ctx, &w.h, j.buf[lo:hi], false)
}
