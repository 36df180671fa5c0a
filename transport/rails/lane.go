package rails

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/transport"
)

// SegMax is the largest piece of a lane's part that is one message of its
// link, with failover: a moved lane resends from the first piece its peer
// had not received whole.
const SegMax = 1 << 20

const (
	// logCap is how many unacknowledged parts a lane keeps for resending.
	logCap = 256
	// retainBytes is how many bytes of unstriped messages a lane keeps
	// copies of until the peer acknowledges them (a striped message's
	// Send waits for its acknowledgement instead): the ring starts at
	// retainMin and doubles, while empty, up to this.
	retainBytes = 2 << 20
	retainMin   = 64 << 10
	// ackEvery is how many bytes a receiver takes between
	// acknowledgements it sends unasked (besides one per striped part).
	ackEvery = 512 << 10
	// moveGrace is how long a call whose link failed waits for a move
	// that nobody has announced yet (the peer's may be on its way)
	// before the failure is the link's.
	moveGrace = 2 * time.Second
	// moveTimeout bounds a move: dialing the new link and the exchange.
	moveTimeout = 30 * time.Second
)

// A lane is the traffic that striping gives rail i: part i of striped
// messages and every R-th unstriped one. It starts on rail i's link; with
// failover it may move to a new link over another rail and back. Segments
// are numbered per lane and direction, alike at both ends, so that after a
// move each side resends from the first segment the other had not
// received.
type lane struct {
	l *Link
	i int

	mu      sync.Mutex
	sub     transport.Link // the link the lane runs on
	home    int            // the rail sub runs over
	gen     int            // moves done
	moving  int            // the move under way (its gen), 0 when none
	failed  error          // a move that failed: the lane is gone
	changed chan struct{}  // closed and replaced when any of the above changes

	sendMu sync.Mutex    // held by whoever sends on sub: a call, or a move resending
	out    outLog        // what was sent and not acknowledged
	acked  atomic.Uint64 // segments the peer acknowledged it received whole
	ackc   chan struct{} // signalled when acked grows (cap 1)
	asked  atomic.Bool   // this side asked the peer for an acknowledgement

	recvMu       sync.Mutex       // held while receiving on sub, or by a move reading consumed
	consumed     atomic.Uint64    // segments received whole
	ackWanted    atomic.Bool      // the peer asked for an acknowledgement
	ackSent      uint64           // consumed in the last acknowledgement (control loop)
	unacked      int              // bytes received since the last acknowledgement was due (receiving call)
	unackedSegs  int              // segments, likewise
	backup       []byte           // a segment's bytes before a receive folds into them
	sendH, recvH transport.Header // the segments' headers (kept here: no allocation per call)
}

func newLane(l *Link, i int, sub transport.Link) *lane {
	return &lane{l: l, i: i, sub: sub, home: i, changed: make(chan struct{}), ackc: make(chan struct{}, 1)}
}

// current is the lane's link and its gen.
func (ln *lane) current() (transport.Link, int) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.sub, ln.gen
}

// signalLocked wakes whoever waits for the lane to change (mu held).
func (ln *lane) signalLocked() {
	close(ln.changed)
	ln.changed = make(chan struct{})
}

// segs is how many segments a part of n bytes is, and segment j's range.
func segs(n int) int { return max(1, (n+SegMax-1)/SegMax) }

func seg(n, j int) (lo, hi int) { return min(j*SegMax, n), min((j+1)*SegMax, n) }

// movable reports whether err, from a lane's link, may be a move's doing
// (the link was closed under the call: by this side's move, or by the
// peer's) rather than a failure of the job: not a context's, a lost rank,
// a mismatch or corruption.
func movable(err error) bool {
	var le *transport.LostError
	var me *transport.MismatchError
	return errors.Is(err, transport.ErrClosed) && !errors.As(err, &le) && !errors.As(err, &me) && !isCtxErr(err)
}

// send sends one part (all of an unstriped message, or a striped
// message's part) over the lane, segment by segment, logging it for a
// resend first; keep copies the part (an unstriped message, whose Send
// returns before it is acknowledged). Without failover it is one message
// of the lane's link.
func (ln *lane) send(ctx context.Context, h *transport.Header, part []byte, keep bool) error {
	l := ln.l
	if !l.fo {
		return ln.sub.Send(ctx, h, part)
	}
	if err := ln.room(ctx, len(part), keep); err != nil {
		return err
	}
	ln.sendMu.Lock()
	ln.out.push(h, part, keep)
	hs := &ln.sendH
	for j := range segs(len(part)) {
		lo, hi := seg(len(part), j)
		*hs = *h
		hs.Bytes = uint64(hi - lo)
		sub, gen := ln.current()
		ln.out.sent++ // from here on a move resends it, not this loop
		err := sub.Send(ctx, hs, part[lo:hi])
		if err == nil {
			continue
		}
		if isCtxErr(err) && j == 0 {
			ln.out.sent--
			ln.out.unpush() // nothing moved: the link stays as it was
			ln.sendMu.Unlock()
			return err
		}
		ln.sendMu.Unlock()
		if !movable(err) {
			return err
		}
		if werr := ln.awaitMove(ctx, "send", gen, err); werr != nil {
			return werr
		}
		// The move resent this segment and any before it the peer
		// lacked; go on with the next.
		ln.sendMu.Lock()
	}
	ln.sendMu.Unlock()
	return nil
}

// room waits until the lane's log can take a part of n bytes (kept: a
// copy of it too), asking the peer for an acknowledgement while it waits.
func (ln *lane) room(ctx context.Context, n int, keep bool) error {
	for {
		ln.out.mu.Lock() // acked and the log change together (ack)
		seen, ok := ln.acked.Load(), ln.out.fits(n, keep)
		ln.out.mu.Unlock()
		if ok {
			return nil
		}
		ln.asked.Store(true)
		ln.l.poke()
		if err := ln.l.waitAck(ctx, ln, seen+1); err != nil {
			return err
		}
	}
}

// recv receives one part into buf, segment by segment (see send). With
// failover and reduce it keeps a copy of each segment's bytes before the
// receive folds into them, so that a segment cut by a move is received
// again from scratch.
func (ln *lane) recv(ctx context.Context, h *transport.Header, buf []byte, reduce transport.ReduceFunc, striped bool) error {
	l := ln.l
	if !l.fo {
		return ln.sub.Recv(ctx, h, buf, reduce)
	}
	want := h // one segment: the caller's header, as without failover
	if segs(len(buf)) > 1 {
		want = &ln.recvH
		*want = *h
	}
	for j := range segs(len(buf)) {
		lo, hi := seg(len(buf), j)
		for {
			if want != h {
				want.Bytes = uint64(hi - lo)
			}
			if reduce != nil {
				if ln.backup == nil {
					ln.backup = make([]byte, SegMax)
				}
				copy(ln.backup, buf[lo:hi])
			}
			ln.recvMu.Lock()
			sub, gen := ln.current()
			err := sub.Recv(ctx, want, buf[lo:hi], reduce)
			if err == nil {
				ln.consumed.Add(1)
			}
			ln.recvMu.Unlock()
			if err == nil {
				break
			}
			if !movable(err) {
				return err
			}
			if werr := ln.awaitMove(ctx, "recv", gen, err); werr != nil {
				return werr
			}
			if reduce != nil {
				copy(buf[lo:hi], ln.backup[:hi-lo])
			}
		}
		ln.unacked += hi - lo
		ln.unackedSegs++
		if striped && j == segs(len(buf))-1 || ln.unacked >= ackEvery || ln.unackedSegs >= logCap/4 || ln.ackWanted.Load() {
			ln.unacked, ln.unackedSegs = 0, 0
			l.poke()
		}
	}
	if want != h {
		h.Arrival = want.Arrival
	}
	return nil
}

// awaitMove waits, after a call on gen's link failed with err, for a move
// of the lane to end: nil once it did (the call goes on over the new
// link), else the reason it will not.
func (ln *lane) awaitMove(ctx context.Context, op string, gen int, err error) error {
	grace := time.NewTimer(moveGrace)
	defer grace.Stop()
	var expired <-chan time.Time
	if dl, ok := ctx.Deadline(); ok {
		t := time.NewTimer(time.Until(dl))
		defer t.Stop()
		expired = t.C
	}
	for {
		ln.mu.Lock()
		failed, done, moving, ch := ln.failed, ln.gen > gen, ln.moving != 0, ln.changed
		ln.mu.Unlock()
		switch {
		case done:
			return nil
		case failed != nil:
			return failed
		case ln.l.peerGone():
			// The link failed with the peer's reason (a lost rank, say),
			// which may have closed this call's link under it.
			if cause := ln.l.broken.Load(); cause != nil {
				return ln.l.brokenErr(op, *cause)
			}
			return err
		}
		select {
		case <-ch:
		case <-ln.l.done:
			return err
		case <-ctx.Done():
			return ln.whileMoving(op, ctx.Err(), err)
		case <-expired:
			return ln.whileMoving(op, context.DeadlineExceeded, err)
		case <-grace.C:
			if !moving {
				return err
			}
			grace.Reset(moveGrace)
		}
	}
}

// whileMoving is the error of a call whose ctx ended (why) while it
// waited for a move after its link failed with err.
func (ln *lane) whileMoving(op string, why, err error) error {
	return &transport.PeerError{Peer: ln.l.peer, Op: op, Err: fmt.Errorf("%w (waiting for rail %s's traffic to move after: %v)", why, ln.l.rails[ln.i].Iface, err)}
}

// move moves the lane to a new link over rail, the gen-th move: it dials
// the link (both sides do, with the same lane, rail and gen), closes the
// old one, tells the peer how many segments it received whole and learns
// the same, and resends what the peer lacks.
func (ln *lane) move(rail, gen int) {
	ln.mu.Lock()
	if gen <= ln.gen || gen <= ln.moving || ln.failed != nil {
		ln.mu.Unlock()
		return
	}
	ln.moving = gen
	old, from := ln.sub, ln.home
	ln.signalLocked()
	ln.mu.Unlock()
	resent, err := ln.moveTo(old, rail, gen)
	ln.mu.Lock()
	if ln.moving == gen {
		ln.moving = 0
	}
	if err != nil && ln.gen < gen {
		ln.failed = &transport.PeerError{Peer: ln.l.peer, Op: "move", Err: fmt.Errorf("%w (rail %s's traffic could not move to rail %s: %v)",
			transport.ErrClosed, ln.l.rails[ln.i].Iface, ln.l.rails[rail].Iface, err)}
	}
	ln.signalLocked()
	ln.mu.Unlock()
	ln.l.moved(ln, from, rail, resent, err)
}

func (ln *lane) moveTo(old transport.Link, rail, gen int) (resent int, err error) {
	l := ln.l
	ctx, cancel := context.WithTimeout(context.Background(), moveTimeout)
	defer cancel()
	go func() {
		select {
		case <-l.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	old.Abort(transport.NoLostRank)
	nl, err := l.o.Dial(ctx, ln.i, rail, gen)
	if err != nil {
		return 0, err
	}
	ln.sendMu.Lock()
	defer ln.sendMu.Unlock()
	ln.recvMu.Lock()
	theirs, err := exchange(ctx, nl, gen, ln.consumed.Load())
	if err == nil {
		ln.mu.Lock()
		select {
		case <-l.done:
			err = transport.ErrClosed
		default:
			ln.sub, ln.home, ln.gen = nl, rail, gen
			ln.signalLocked()
		}
		ln.mu.Unlock()
	}
	ln.recvMu.Unlock()
	if err != nil {
		nl.Close()
		return 0, err
	}
	ln.ack(theirs)
	return ln.resend(ctx, nl, theirs)
}

// resend sends again, over nl, every logged segment from the from-th on.
func (ln *lane) resend(ctx context.Context, nl transport.Link, from uint64) (int, error) {
	ln.out.mu.Lock()
	parts, upTo := ln.out.since(from), ln.out.sent
	ln.out.mu.Unlock()
	n := 0
	for _, p := range parts {
		for j := range p.nseg {
			if s := p.seq + uint64(j); s < from || s >= upTo {
				continue
			}
			lo, hi := seg(len(p.data), j)
			h := p.h
			h.Bytes = uint64(hi - lo)
			if err := nl.Send(ctx, &h, p.data[lo:hi]); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// ack records that the peer received the lane's first n segments whole.
func (ln *lane) ack(n uint64) {
	ln.out.mu.Lock()
	if n <= ln.acked.Load() {
		ln.out.mu.Unlock()
		return
	}
	ln.out.trim(n)
	ln.acked.Store(n)
	ln.out.mu.Unlock()
	select {
	case ln.ackc <- struct{}{}:
	default:
	}
}

// resumeOp marks the message that opens a moved lane's link each way.
const resumeOp = 0xfd

// exchange sends mine (segments this side received whole) as the first
// message of nl and returns the peer's.
func exchange(ctx context.Context, nl transport.Link, gen int, mine uint64) (uint64, error) {
	h := transport.Header{Seq: uint64(gen), Op: resumeOp, Root: -1, Bytes: 8}
	var out, in [8]byte
	binary.LittleEndian.PutUint64(out[:], mine)
	errc := make(chan error, 1)
	go func() {
		hs := h
		errc <- nl.Send(ctx, &hs, out[:])
	}()
	err := nl.Recv(ctx, &h, in[:], nil)
	return binary.LittleEndian.Uint64(in[:]), errors.Join(err, <-errc)
}

// outLog is a lane's log of parts sent and not yet acknowledged, in order:
// each a range of the lane's segment numbers and its bytes (a copy in the
// ring for unstriped messages, the caller's buffer for a striped part,
// whose Send returns only once the part is acknowledged).
type outLog struct {
	mu      sync.Mutex
	ents    [logCap]logEntry
	head, n int
	next    uint64 // the next segment's number
	sent    uint64 // segments given to a link (sendMu): a move resends up to here

	ring         []byte // copies of unstriped messages, allocated in order
	rhead, rtail int    // used: [rhead, rtail), or [rhead, rend) + [0, rtail) when wrapped
	rend         int
	wrapped      bool
}

type logEntry struct {
	seq  uint64
	nseg int
	h    transport.Header
	data []byte
	kept int // bytes of the ring it holds (their start is data's)
	off  int
}

// fits reports whether a part of n bytes (kept: copied) fits now.
func (o *outLog) fits(n int, keep bool) bool {
	if o.n == logCap {
		return false
	}
	if !keep || n == 0 {
		return true
	}
	if _, ok := o.alloc(n, true); ok {
		return true
	}
	return o.empty() && len(o.ring) < retainBytes // grow makes room
}

// empty reports whether the ring holds no copy.
func (o *outLog) empty() bool { return !o.wrapped && o.rtail == 0 }

// grow gives an empty ring that cannot take n bytes a larger size: from
// retainMin, doubled up to retainBytes (a link that only ever sends small
// messages keeps a small ring).
func (o *outLog) grow(n int) {
	if _, ok := o.alloc(n, true); ok && o.ring != nil || !o.empty() {
		return
	}
	size := max(len(o.ring), retainMin)
	for size < n && size < retainBytes || size <= len(o.ring) {
		size *= 2
	}
	o.ring = make([]byte, min(size, retainBytes))
}

// push logs a part (sendMu held; room said it fits).
func (o *outLog) push(h *transport.Header, part []byte, keep bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e := logEntry{seq: o.next, nseg: segs(len(part)), h: *h, data: part}
	if keep && len(part) > 0 {
		o.grow(len(part))
		off, _ := o.alloc(len(part), false)
		e.off, e.kept = off, len(part)
		e.data = o.ring[off : off+len(part)]
		copy(e.data, part)
	}
	o.ents[(o.head+o.n)%logCap] = e
	o.n++
	o.next += uint64(e.nseg)
}

// unpush drops the last part logged (its send moved nothing).
func (o *outLog) unpush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n--
	e := &o.ents[(o.head+o.n)%logCap]
	o.next -= uint64(e.nseg)
	if e.kept > 0 {
		// It is the newest copy: give its bytes back.
		if o.wrapped && e.off == 0 {
			o.wrapped, o.rtail = false, o.rend
		} else {
			o.rtail = e.off
		}
	}
	*e = logEntry{}
}

// alloc finds n bytes in the ring (ring order); dry only looks.
func (o *outLog) alloc(n int, dry bool) (int, bool) {
	size := len(o.ring)
	if !o.wrapped {
		if o.rtail+n <= size {
			off := o.rtail
			if !dry {
				o.rtail += n
			}
			return off, true
		}
		if n <= o.rhead {
			if !dry {
				o.rend, o.wrapped, o.rtail = o.rtail, true, n
			}
			return 0, true
		}
		return 0, false
	}
	if o.rtail+n <= o.rhead {
		off := o.rtail
		if !dry {
			o.rtail += n
		}
		return off, true
	}
	return 0, false
}

// trim drops the parts whose segments are all below n.
func (o *outLog) trim(n uint64) {
	for o.n > 0 {
		e := &o.ents[o.head]
		if e.seq+uint64(e.nseg) > n {
			return
		}
		if e.kept > 0 {
			o.rhead = e.off + e.kept
			if o.wrapped && o.rhead >= o.rend {
				o.rhead, o.wrapped = 0, false
			}
			if !o.wrapped && o.rhead == o.rtail {
				o.rhead, o.rtail = 0, 0
			}
		}
		*e = logEntry{}
		o.head = (o.head + 1) % logCap
		o.n--
	}
	if o.n == 0 {
		o.rhead, o.rtail, o.wrapped = 0, 0, false
	}
}

// since copies the entries holding segments from the from-th on.
func (o *outLog) since(from uint64) []logEntry {
	var es []logEntry
	for k := range o.n {
		e := o.ents[(o.head+k)%logCap]
		if e.seq+uint64(e.nseg) > from {
			es = append(es, e)
		}
	}
	return es
}

// clear forgets every part (the link failed: callers' buffers are theirs
// again).
func (o *outLog) clear() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for o.n > 0 {
		o.ents[o.head] = logEntry{}
		o.head = (o.head + 1) % logCap
		o.n--
	}
	o.rhead, o.rtail, o.wrapped = 0, 0, false
}

// trySend sends an unstriped message if the lane's link can take it now
// (and, with failover, the log has room for its copy).
func (ln *lane) trySend(h *transport.Header, buf []byte) (bool, error) {
	if !ln.l.fo {
		return ln.sub.TrySend(h, buf)
	}
	if !ln.sendMu.TryLock() {
		return false, nil // a move is resending
	}
	defer ln.sendMu.Unlock()
	ln.out.mu.Lock()
	fits := ln.out.fits(len(buf), true)
	ln.out.mu.Unlock()
	if !fits {
		ln.asked.Store(true)
		ln.l.poke()
		return false, nil
	}
	// Logged before it moves, as send does: its acknowledgement may come
	// before TrySend returns.
	ln.out.push(h, buf, true)
	ln.out.sent++
	sub, _ := ln.current()
	ok, err := sub.TrySend(h, buf)
	if !ok {
		ln.out.sent--
		ln.out.unpush()
	}
	switch {
	case err != nil && movable(err):
		return false, nil // Send will wait for the move
	case err != nil:
		return false, err
	}
	return ok, nil
}
