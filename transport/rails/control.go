package rails

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/transport"
)

// Control messages, with failover: each rail has a control link besides
// the data, over which each side sends a ping every stallPoll (so that a
// cut path shows as unacknowledged data whether or not data flows),
// acknowledgements of segments received whole, requests for one, and the
// lower rank's decisions to move a lane. Each is one message of
// ctrlBytes: kind, lane, rail, then a gen (u32) and a count (u64).
const (
	ctrlOp    = 0xfe
	ctrlBytes = 16

	msgPing   = 1
	msgAck    = 2 // lane: the count of its segments received whole
	msgAskAck = 3 // lane: the asker waits for room in its log
	msgMove   = 4 // lane, rail, gen: move the lane to a new link over rail
)

var ctrlHeader = transport.Header{Op: ctrlOp, Root: -1, Bytes: ctrlBytes}

type control struct {
	link transport.Link
	dead atomic.Bool // its reader failed: the link is gone
	h    transport.Header
	buf  [ctrlBytes]byte // the reader's
}

// deadline is a context that has only a deadline (goccl's operation
// contexts are alike), reused by the control loop so that it allocates
// nothing.
type deadline struct{ t time.Time }

func (d *deadline) Deadline() (time.Time, bool) { return d.t, true }
func (d *deadline) Done() <-chan struct{}       { return nil }
func (d *deadline) Value(any) any               { return nil }
func (d *deadline) Err() error {
	if time.Now().After(d.t) {
		return context.DeadlineExceeded
	}
	return nil
}

// poke wakes the control loop (acknowledgements or requests are due).
func (l *Link) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// peerGone reports whether every control link failed: the peer closed
// the link or is gone, so no move will come.
func (l *Link) peerGone() bool {
	if !l.fo {
		return true
	}
	for _, c := range l.ctl {
		if !c.dead.Load() {
			return false
		}
	}
	return true
}

// read handles the messages of rail i's control link until it fails.
func (l *Link) read(i int) {
	c := l.ctl[i]
	b := &c.buf
	for {
		c.h = ctrlHeader
		if err := c.link.Recv(context.Background(), &c.h, b[:], nil); err != nil {
			c.dead.Store(true)
			if l.peerGone() {
				// The peer closed the link, or is gone: its data links
				// tell this side's calls so themselves (closing them here
				// could cut short their reading of the peer's goodbye).
				l.broke(i, err)
			}
			l.poke()
			for _, ln := range l.lanes { // wake waits that may now fail
				ln.mu.Lock()
				ln.signalLocked()
				ln.mu.Unlock()
			}
			return
		}
		kind, lane, rail := b[0], int(b[1]), int(b[2])
		gen, n := int(binary.LittleEndian.Uint32(b[4:])), binary.LittleEndian.Uint64(b[8:])
		if lane >= len(l.lanes) || rail >= len(l.rails) {
			continue
		}
		ln := l.lanes[lane]
		switch kind {
		case msgAck:
			ln.ack(n)
		case msgAskAck:
			ln.ackWanted.Store(true)
			l.poke()
		case msgMove:
			go ln.move(rail, gen)
		}
	}
}

// say sends a control message over rail i's control link (control loop
// only). A cut rail takes it into its socket's buffer; a failed one is
// skipped.
func (l *Link) say(i int, kind byte, lane, rail, gen int, n uint64) {
	c := l.ctl[i]
	if c.dead.Load() {
		return
	}
	b := &l.ctlBuf
	b[0], b[1], b[2], b[3] = kind, byte(lane), byte(rail), 0
	binary.LittleEndian.PutUint32(b[4:], uint32(gen))
	binary.LittleEndian.PutUint64(b[8:], n)
	l.ctlH = ctrlHeader
	l.ctlCtx.t = time.Now().Add(time.Second)
	c.link.Send(&l.ctlCtx, &l.ctlH, b[:])
}

// loop is the control loop, with failover: pings, acknowledgements and
// requests, and watching the rails (watch).
func (l *Link) loop() {
	t := time.NewTicker(stallPoll)
	defer t.Stop()
	w := watcher{down: make([]bool, len(l.rails)), up: make([]time.Time, len(l.rails))}
	for {
		select {
		case <-l.done:
			return
		case <-t.C:
			for i := range l.ctl {
				l.say(i, msgPing, 0, 0, 0, 0)
			}
			l.watch(&w)
		case <-l.wake:
		}
		l.acks(&w)
	}
}

// acks sends the acknowledgements and requests that are due, over the
// first rail that is not down.
func (l *Link) acks(w *watcher) {
	via := l.healthy(w, -1)
	if via < 0 {
		return
	}
	for _, ln := range l.lanes {
		c := ln.consumed.Load()
		wanted := ln.ackWanted.Load()
		if c > ln.ackSent || wanted {
			l.say(via, msgAck, ln.i, 0, 0, c)
			if c > ln.ackSent {
				ln.ackWanted.Store(false)
			}
			ln.ackSent = c
		}
		if ln.asked.Swap(false) {
			l.say(via, msgAskAck, ln.i, 0, 0, 0)
		}
	}
}

// healthy is the first rail other than not that is neither down nor
// failed, or -1.
func (l *Link) healthy(w *watcher, not int) int {
	for i := range l.rails {
		if i != not && !w.down[i] && (!l.fo || !l.ctl[i].dead.Load()) {
			return i
		}
	}
	return -1
}

// watcher is what the control loop knows of the rails: which are down
// (stalled or failed) and since when the others are up again.
type watcher struct {
	down []bool
	up   []time.Time
}

// stall is how long rail i's path has gone unacknowledged: its control
// link's with failover, else its link's (when it can tell).
func (l *Link) stall(i int) time.Duration {
	link := l.rails[i].Link
	if l.fo {
		if l.ctl[i].dead.Load() {
			return time.Duration(1<<63 - 1)
		}
		link = l.ctl[i].link
	}
	if s, ok := link.(staller); ok {
		return s.PathStall()
	}
	return 0
}

// watch reports rails whose paths stall and come back; with failover the
// lower rank moves the lanes off a stalled rail, and a lane back onto its
// own rail once that has been up for StallAfter.
func (l *Link) watch(w *watcher) {
	now := time.Now()
	for i, r := range l.rails {
		switch stall := l.stall(i); {
		case !w.down[i] && stall >= l.o.StallAfter:
			w.down[i] = true
			l.stalled.Add(1)
			l.warn(fmt.Sprintf("rail %s to peer %d: nothing acknowledged for %v (path cut?); %s",
				r.Iface, l.peer, min(stall, time.Hour).Round(time.Millisecond), l.plan(w, i)))
			if l.decides() {
				for _, ln := range l.lanes {
					if to := l.healthy(w, i); to >= 0 && ln.homeIs(i) {
						l.startMove(ln, to)
					}
				}
			}
		case w.down[i] && stall < stallPoll:
			w.down[i], w.up[i] = false, now
			l.warn(fmt.Sprintf("rail %s to peer %d: acknowledging again, its path is back", r.Iface, l.peer))
		}
	}
	if !l.decides() {
		return
	}
	for i, ln := range l.lanes {
		if !w.down[i] && !w.up[i].IsZero() && now.Sub(w.up[i]) >= l.o.StallAfter && !ln.homeIs(i) {
			l.startMove(ln, i)
		}
	}
}

// plan says what becomes of a stalled rail's traffic.
func (l *Link) plan(w *watcher, i int) string {
	if !l.fo {
		return fmt.Sprintf("its data waits for it, the other rails (%s) cannot take it over", l.others(i))
	}
	if to := l.healthy(w, i); to >= 0 {
		return "its traffic moves to rail " + l.rails[to].Iface
	}
	return "no other rail is up: its traffic waits for it"
}

// decides reports whether this side decides the moves: the lower rank,
// with failover.
func (l *Link) decides() bool { return l.fo && l.self < l.peer }

// startMove moves ln to rail to (the deciding side): it tells the peer
// over that rail's control link and starts its own half.
func (l *Link) startMove(ln *lane, to int) {
	ln.mu.Lock()
	busy := ln.moving != 0 || ln.failed != nil
	gen := ln.gen + 1
	ln.mu.Unlock()
	if busy {
		return
	}
	l.say(to, msgMove, ln.i, to, gen, 0)
	go ln.move(to, gen)
}

// homeIs reports whether the lane runs over rail i (and is not moving).
func (ln *lane) homeIs(i int) bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.home == i && ln.moving == 0 && ln.failed == nil
}

// moved logs a move's end.
func (l *Link) moved(ln *lane, from, to, resent int, err error) {
	if err != nil {
		l.warn(fmt.Sprintf("rail %s's traffic to peer %d could not move from rail %s to rail %s: %v",
			l.rails[ln.i].Iface, l.peer, l.rails[from].Iface, l.rails[to].Iface, err))
		l.fail(ln.i, err, false)
		return
	}
	l.moves.Add(1)
	where := "now over rail " + l.rails[to].Iface
	if to == ln.i {
		where = "back on its own rail"
	}
	l.warn(fmt.Sprintf("rail %s's traffic to peer %d is %s (from %s; %d segments sent again)",
		l.rails[ln.i].Iface, l.peer, where, l.rails[from].Iface, resent))
}

func (l *Link) warn(msg string) { l.log(slog.LevelWarn, msg) }

func (l *Link) log(level slog.Level, msg string) {
	if l.o.Log != nil {
		l.o.Log(level, msg)
	}
}

// waitAck waits until the peer acknowledged the lane's first n segments
// (the caller's goroutine: Send's; it reuses the link's timer).
func (l *Link) waitAck(ctx context.Context, ln *lane, n uint64) error {
	if ln.acked.Load() >= n {
		return nil
	}
	var expired <-chan time.Time
	if dl, ok := ctx.Deadline(); ok {
		l.timer.Reset(time.Until(dl))
		defer l.timer.Stop()
		expired = l.timer.C
	}
	for ln.acked.Load() < n {
		select {
		case <-ln.ackc:
		case <-ctx.Done():
			return &transport.PeerError{Peer: l.peer, Op: "send", Err: ctx.Err()}
		case <-expired:
			return &transport.PeerError{Peer: l.peer, Op: "send", Err: context.DeadlineExceeded}
		case <-l.done:
			return &transport.PeerError{Peer: l.peer, Op: "send", Err: transport.ErrClosed}
		case <-l.failc:
			return l.startErr(context.Background(), "send")
		}
	}
	return nil
}
